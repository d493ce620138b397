"""The manager's work off the caller's path: killing sandboxes no binding needs, and the
sweeper that runs the idle and snapshot rounds.

All of it is redone by the next acquire or sweep, so a failure is counted and logged
(:class:`~provider_sdk.manager._errors.Failures`), never raised into the application's
task group; the queue it runs through is ``_chores``. A sandbox is killed as a duplicate
only while this manager holds its owner's claim and the binding holds another: a creator
whose sandbox is not bound yet holds the claim, and nobody binds while the claim is held.

This module must not create or bind a sandbox.
"""

from __future__ import annotations

import builtins
import functools
import secrets
from collections.abc import Awaitable, Callable, Sequence

import anyio

from provider_sdk.events import span
from provider_sdk.manager._claims import owner_claim
from provider_sdk.manager._leases import Claims
from provider_sdk.manager._shared import Shared

__all__ = ["Housekeeping", "Sweep"]

Sweep = Callable[[], Awaitable[builtins.list[str]]]
"""One round of a policy over every binding (the manager's ``pause_idle``,
``snapshot_due``); returns the owners done."""


class Housekeeping:
    """The background work of a ``SandboxManager``: duplicates killed, and ``sweeps``
    run every ``sweep_interval`` seconds."""

    def __init__(self, shared: Shared, claims: Claims, *, owner_key: str,
                 sweep_interval: float, sweeps: Sequence[Sweep]) -> None:
        self._shared = shared
        self._claims = claims
        self.owner_key = owner_key
        self.sweep_interval = sweep_interval
        self._sweeps = tuple(sweeps)

    async def kill_duplicates(self, owner: str, keep: str) -> None:
        """Kill the owner's sandboxes other than ``keep``, holding the owner's claim,
        while the binding holds ``keep``."""
        provider, store = self._shared.provider, self._shared.store
        tagged = await provider.list(metadata={self.owner_key: owner})
        extra = [i.id for i in tagged if i.id != keep]
        if not extra:
            return
        token = secrets.token_hex(8)
        if not await store.claim(owner_claim(owner), token, self._shared.claim_ttl):
            return  # a creator or repairer is at work: the next look does it
        try:
            current = await store.get(owner)
            if current is None or current.sandbox_id != keep:
                return
            async with span("manager.duplicates", provider.name, keep, owner=owner,
                            killed=extra):
                await self._claims.holding(owner_claim(owner), token,
                                           functools.partial(self._kill_all, extra))
        finally:
            await self._claims.let_go(owner_claim(owner), token)

    async def _kill_all(self, sandbox_ids: builtins.list[str]) -> None:
        for sandbox_id in sandbox_ids:
            await self._kill_quietly(sandbox_id)

    async def _kill_quietly(self, sandbox_id: str) -> None:
        await self._shared.failures.quietly("kill", self._shared.provider.kill(sandbox_id))

    async def sweeper(self) -> None:
        """The manager's background loop: every sweep, every ``sweep_interval``."""
        while True:
            await anyio.sleep(self.sweep_interval)
            for sweep in self._sweeps:
                await self._shared.failures.quietly(sweep.__name__, self._sweep(sweep))

    async def _sweep(self, sweep: Sweep) -> None:
        async with span("manager.sweep", self._shared.provider.name, sweep=sweep.__name__):
            await sweep()
