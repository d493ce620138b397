"""The manager's work off the caller's path: killing sandboxes no binding needs, the
housekeeper that runs queued chores, and the sweeper that runs the idle and snapshot
rounds.

All of it is redone by the next acquire or sweep, so its errors are dropped. While the
manager runs (``async with``), chores go to its task group; outside it, they run inline.
A sandbox is killed as a duplicate only while no one holds its owner's claim and the
binding holds another.

This module must not create or bind a sandbox.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import attrs

from provider_sdk.errors import SandboxError
from provider_sdk.events import span
from provider_sdk.manager._cache import _Entry
from provider_sdk.manager._claims import owner_claim
from provider_sdk.manager.store import Binding, BindingStore
from provider_sdk.provider import SandboxProvider

__all__ = ["HousekeepingMixin"]


class HousekeepingMixin:
    """The background work of ``SandboxManager``."""

    provider: SandboxProvider
    store: BindingStore
    owner_key: str
    sweep_interval: float
    _touch_every: float
    _cache: collections.OrderedDict[str, _Entry]
    _tg: anyio.abc.TaskGroup | None
    _chores: collections.deque[Coroutine[Any, Any, Any]]
    _chores_queued: anyio.Event

    if TYPE_CHECKING:
        async def pause_idle(self) -> builtins.list[str]: ...
        async def snapshot_due(self) -> builtins.list[str]: ...
        async def _update(self, owner: str, sandbox_id: str,
                          change: Callable[[Binding], Binding]) -> Binding | None: ...

    async def _kill_duplicates(self, owner: str, keep: str) -> None:
        """Kill the owner's sandboxes other than ``keep``, unless someone holds the
        owner's claim (a creator or repairer whose sandbox is not bound yet)."""
        tagged = await self.provider.list(metadata={self.owner_key: owner})
        extra = [i.id for i in tagged if i.id != keep]
        if not extra or await self.store.claimed(owner_claim(owner)):
            return
        current = await self.store.get(owner)
        if current is None or current.sandbox_id != keep:
            return
        async with span("manager.duplicates", self.provider.name, keep, owner=owner,
                        killed=extra):
            await self._kill_all(extra)

    async def _kill_all(self, sandbox_ids: builtins.list[str]) -> None:
        for sandbox_id in sandbox_ids:
            await self._kill_quietly(sandbox_id)

    async def _kill_quietly(self, sandbox_id: str) -> None:
        with contextlib.suppress(SandboxError):
            await self.provider.kill(sandbox_id)

    async def _background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` in the manager's task group, or now when it is not running.
        Errors are dropped: it is housekeeping that the next acquire or sweep redoes."""
        if self._tg is not None:
            self._queue(work)
        else:
            await self._quietly(work)

    def _queue(self, work: Coroutine[Any, Any, Any]) -> None:
        """Hand ``work`` to the housekeeper: a caller pays an append, not a task."""
        self._chores.append(work)
        self._chores_queued.set()

    async def _housekeeper(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start each queued piece of housekeeping in a task of its own."""
        tg = self._tg
        assert tg is not None
        task_status.started()
        try:
            while True:
                await self._chores_queued.wait()
                self._chores_queued = anyio.Event()
                while self._chores:
                    tg.start_soon(self._quietly, self._chores.popleft())
        finally:  # stopping: what never started is dropped, as a cancelled task would be
            while self._chores:
                self._chores.popleft().close()

    @staticmethod
    async def _quietly(work: Awaitable[Any]) -> None:
        with contextlib.suppress(SandboxError):
            await work

    async def _sweeper(self) -> None:
        while True:
            await anyio.sleep(self.sweep_interval)
            await self._heartbeat()
            for sweep in (self.pause_idle, self.snapshot_due):
                with contextlib.suppress(Exception):
                    async with span("manager.sweep", self.provider.name,
                                    sweep=sweep.__name__):
                        await sweep()

    async def _heartbeat(self) -> None:
        """Tell the store that sandboxes running a command here are in use, so no
        replica's idle sweep pauses one in the middle of a long command."""
        now = time.time()
        for owner, entry in builtins.list(self._cache.items()):
            if entry.busy and now - entry.stored_used >= self._touch_every:
                entry.stored_used = now
                await self._quietly(self._update(owner, entry.sandbox.id,
                                                 lambda b: attrs.evolve(b, last_used=now)))
