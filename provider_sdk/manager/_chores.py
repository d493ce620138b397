"""The manager's chores: work off the caller's path, handed to the housekeeper.

While the manager runs (``async with``), a chore is appended to a queue that the
housekeeper, a task in the manager's task group, starts in a task of its own: a caller
pays an append, not a task. Outside it, chores run inline. Every chore is redone by the
next acquire or sweep, so a failure is counted and logged
(:class:`~provider_sdk.manager._errors.Failures`), never raised into the application's
task group.

This module must not talk to a store or a provider itself.
"""

from __future__ import annotations

import collections
from collections.abc import Coroutine
from typing import Any

import anyio
import anyio.abc

from provider_sdk.manager._errors import Failures

__all__ = ["Chores"]


class Chores:
    """The queue of a ``SandboxManager``'s chores, and the housekeeper that runs them."""

    def __init__(self, failures: Failures) -> None:
        self._failures = failures
        self._tg: anyio.abc.TaskGroup | None = None
        self._waiting: collections.deque[tuple[Coroutine[Any, Any, Any], str]] = \
            collections.deque()
        self._queued: anyio.Event  # made when the manager starts, in its event loop

    @property
    def running(self) -> bool:
        """Whether chores go to the manager's task group (it runs)."""
        return self._tg is not None

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Hand chores to ``tg`` from now on: start the housekeeper in it."""
        self._tg = tg
        self._queued = anyio.Event()
        await tg.start(self._housekeeper)

    def stopped(self) -> None:
        """The manager's task group is gone: chores run inline again."""
        self._tg = None

    async def background(self, work: Coroutine[Any, Any, Any], chore: str) -> None:
        """Run ``work`` in the manager's task group, or now when it is not running.
        A failure is counted and logged: it is housekeeping that the next acquire or
        sweep redoes."""
        if self._tg is not None:
            self.queue(work, chore)
        else:
            await self._failures.quietly(chore, work)

    def queue(self, work: Coroutine[Any, Any, Any], chore: str) -> None:
        """Hand ``work`` to the housekeeper: a caller pays an append, not a task."""
        self._waiting.append((work, chore))
        self._queued.set()

    async def _housekeeper(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start each queued piece of housekeeping in a task of its own."""
        tg = self._tg
        assert tg is not None
        task_status.started()
        try:
            while True:
                await self._queued.wait()
                self._queued = anyio.Event()
                while self._waiting:
                    work, chore = self._waiting.popleft()
                    tg.start_soon(self._failures.quietly, chore, work)
        finally:  # stopping: what never started is dropped, as a cancelled task would be
            while self._waiting:
                self._waiting.popleft()[0].close()
