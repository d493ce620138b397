"""Background tasks a long-lived object owns, in one anyio task group.

A provider that keeps work going between calls (the output of a background process, a
lease it renews) starts it with :meth:`TaskOwner.start_soon` instead of a free-standing
task: every such task runs in the owner's task group, and :meth:`TaskOwner.aclose`
(called from the provider's ``aclose``) cancels them all and returns once each has
finished its cleanup.

A provider is opened in one task and closed in another as often as not (the sync
facade runs each call as a task of its own; ``open_provider`` may be used without
``async with``), while a task group must be left in the task that entered it. So the
group lives in a host task of its own, started on :meth:`~TaskOwner.open` or with the
first task, which enters the group, waits for the close, then cancels the group and
leaves it. That host is the one task started outside a task group (a system task on
trio, a loop task on asyncio); it ends when the owner is closed or the event loop ends.

A task that raises is logged and ends alone: it takes neither its siblings nor the
owner down, as a lost stream of one process must not stop the others.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import attrs
import structlog

__all__ = ["OwnedTask", "TaskOwner"]

logger = structlog.get_logger("provider_sdk")


class TaskOwner:
    """The task group of one long-lived object (a provider), usable from any task of
    the event loop it was opened in.

    Args:
        name: who owns the tasks (the provider's name), for the log of a task that fails.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._group: anyio.abc.TaskGroup | None = None
        self._closing: anyio.Event | None = None
        self._closed: anyio.Event | None = None
        self._opening: anyio.Event | None = None
        self._host: object = None
        """Holds the host task (asyncio keeps only weak references to its tasks)."""

    def __repr__(self) -> str:
        return f"<TaskOwner {self.name!r} {'open' if self._group else 'closed'}>"

    async def open(self) -> None:
        """Open the group now (it also opens with the first task). Safe to call twice."""
        if self._group is not None:
            return
        if self._opening is not None:  # another task is opening it
            await self._opening.wait()
            return
        self._opening = ready = anyio.Event()
        closing, closed = anyio.Event(), anyio.Event()

        async def host() -> None:
            try:
                async with anyio.create_task_group() as group:
                    self._group, self._closing, self._closed = group, closing, closed
                    ready.set()
                    await closing.wait()
                    group.cancel_scope.cancel()
            finally:
                if self._closed is closed:
                    self._group = self._closing = self._closed = None
                    self._host = None
                ready.set()
                closed.set()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # anyio's other backend
            importlib.import_module("trio").lowlevel.spawn_system_task(host)
        else:
            self._host = loop.create_task(host())
        try:
            await ready.wait()
        finally:
            self._opening = None

    async def start_soon(self, func: Callable[..., Awaitable[Any]],
                         *args: Any) -> anyio.CancelScope:
        """Run ``func(*args)`` in the group (opened first if need be); cancelling the
        returned scope cancels that task alone."""
        await self.open()
        assert self._group is not None
        scope = anyio.CancelScope()
        self._group.start_soon(self._run, scope, func, args)
        return scope

    async def start(self, func: Callable[..., Awaitable[Any]], *args: Any) -> OwnedTask:
        """Run ``func(*args)`` in the group, as :meth:`start_soon` does; the handle
        returned also stops it and tells when it has ended."""
        ended = anyio.Event()

        async def run() -> None:
            try:
                await func(*args)
            finally:
                ended.set()

        return OwnedTask(await self.start_soon(run), ended)

    async def _run(self, scope: anyio.CancelScope, func: Callable[..., Awaitable[Any]],
                   args: tuple[Any, ...]) -> None:
        try:
            with scope:
                await func(*args)
        except Exception:
            logger.exception("provider.background_task.failed", provider=self.name,
                             task=getattr(func, "__qualname__", repr(func)))

    async def aclose(self) -> None:
        """Cancel every task and wait until each has finished its cleanup. The owner may
        be opened again afterwards. Safe to call twice."""
        closing, closed = self._closing, self._closed
        if closing is None or closed is None:
            return
        closing.set()
        with anyio.CancelScope(shield=True):
            await closed.wait()


@attrs.frozen
class OwnedTask:
    """One task of a :class:`TaskOwner`'s, started with :meth:`TaskOwner.start`."""

    scope: anyio.CancelScope
    """Cancelling it cancels this task alone."""
    ended: anyio.Event
    """Set once the task has ended, its cleanup included, whichever way it ended."""

    async def stop(self, *, grace: float = 0.0, wait: float = 5.0) -> None:
        """Give the task ``grace`` seconds to end by itself, then cancel it, and wait
        (shielded, at most ``wait`` seconds) for its cleanup."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(grace):
                await self.ended.wait()
            self.scope.cancel()
            with anyio.move_on_after(wait):
                await self.ended.wait()
