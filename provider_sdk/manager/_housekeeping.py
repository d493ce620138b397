"""The manager's work off the caller's path: killing sandboxes no binding needs, the
housekeeper that runs queued chores, and the sweeper that runs the idle and snapshot
rounds.

All of it is redone by the next acquire or sweep, so a failure is counted and logged
(:class:`~provider_sdk.manager._errors.Failures`), never raised into the application's
task group. While the manager runs (``async with``), chores go to its task group;
outside it, they run inline. A sandbox is killed as a duplicate only while this manager
holds its owner's claim and the binding holds another: a creator whose sandbox is not
bound yet holds the claim, and nobody binds while the claim is held.

This module must not create or bind a sandbox.
"""

from __future__ import annotations

import builtins
import collections
import functools
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc

from provider_sdk.events import span
from provider_sdk.manager._claims import owner_claim
from provider_sdk.manager._errors import Failures
from provider_sdk.manager.store import BindingStore
from provider_sdk.provider import SandboxProvider

__all__ = ["HousekeepingMixin"]

T = TypeVar("T")


class HousekeepingMixin:
    """The background work of ``SandboxManager``."""

    provider: SandboxProvider
    store: BindingStore
    owner_key: str
    claim_ttl: float
    sweep_interval: float
    failures: Failures
    _tg: anyio.abc.TaskGroup | None
    _chores: collections.deque[tuple[Coroutine[Any, Any, Any], str]]
    _chores_queued: anyio.Event

    if TYPE_CHECKING:
        async def pause_idle(self) -> builtins.list[str]: ...
        async def snapshot_due(self) -> builtins.list[str]: ...
        async def _let_go(self, name: str, token: str,
                          kill_first: Sequence[str] = ()) -> None: ...
        async def _holding(self, name: str, token: str, work: Callable[[], Awaitable[T]],
                           ttl: float | None = None) -> T: ...

    async def _kill_duplicates(self, owner: str, keep: str) -> None:
        """Kill the owner's sandboxes other than ``keep``, holding the owner's claim,
        while the binding holds ``keep``."""
        tagged = await self.provider.list(metadata={self.owner_key: owner})
        extra = [i.id for i in tagged if i.id != keep]
        if not extra:
            return
        token = secrets.token_hex(8)
        if not await self.store.claim(owner_claim(owner), token, self.claim_ttl):
            return  # a creator or repairer is at work: the next look does it
        try:
            current = await self.store.get(owner)
            if current is None or current.sandbox_id != keep:
                return
            async with span("manager.duplicates", self.provider.name, keep, owner=owner,
                            killed=extra):
                await self._holding(owner_claim(owner), token,
                                    functools.partial(self._kill_all, extra))
        finally:
            await self._let_go(owner_claim(owner), token)

    async def _kill_all(self, sandbox_ids: builtins.list[str]) -> None:
        for sandbox_id in sandbox_ids:
            await self._kill_quietly(sandbox_id)

    async def _kill_quietly(self, sandbox_id: str) -> None:
        await self.failures.quietly("kill", self.provider.kill(sandbox_id))

    async def _background(self, work: Coroutine[Any, Any, Any], chore: str) -> None:
        """Run ``work`` in the manager's task group, or now when it is not running.
        A failure is counted and logged: it is housekeeping that the next acquire or
        sweep redoes."""
        if self._tg is not None:
            self._queue(work, chore)
        else:
            await self.failures.quietly(chore, work)

    def _queue(self, work: Coroutine[Any, Any, Any], chore: str) -> None:
        """Hand ``work`` to the housekeeper: a caller pays an append, not a task."""
        self._chores.append((work, chore))
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
                    work, chore = self._chores.popleft()
                    tg.start_soon(self.failures.quietly, chore, work)
        finally:  # stopping: what never started is dropped, as a cancelled task would be
            while self._chores:
                self._chores.popleft()[0].close()

    async def _sweeper(self) -> None:
        while True:
            await anyio.sleep(self.sweep_interval)
            for sweep in (self.pause_idle, self.snapshot_due):
                await self.failures.quietly(sweep.__name__, self._sweep(sweep))

    async def _sweep(self, sweep: Callable[[], Awaitable[builtins.list[str]]]) -> None:
        async with span("manager.sweep", self.provider.name, sweep=sweep.__name__):
            await sweep()
