"""The snapshot and idle policies: :class:`SnapshotPolicy`, and what each does to one
bound sandbox.

A snapshot, once taken, is recorded in the owner's binding even if the manager is
stopping, and the owner's snapshots past the policy's ``keep`` are deleted. A sandbox is
paused only while the pauser holds the owner's claim, after it marked the binding paused
and then found the owner's use lease run out (the order ``_leases`` relies on). The
rounds over every binding, :meth:`SandboxManager.snapshot_due` and
:meth:`SandboxManager.pause_idle`, are the manager's own, and take the claims.

This module must not know any provider or store by name.
"""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

import anyio
import attrs

from provider_sdk.errors import InvalidInput, SandboxNotFound, SnapshotNotFound
from provider_sdk.events import span
from provider_sdk.manager._cache import Cache
from provider_sdk.manager._claims import use_claim
from provider_sdk.manager._leases import Leases
from provider_sdk.manager._shared import Shared
from provider_sdk.manager.store import Binding
from provider_sdk.models import SandboxState, Snapshot
from provider_sdk.sandbox import Sandbox

__all__ = ["Policies", "SnapshotPolicy"]


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidInput(f"{attribute.name} must be a positive number, got {value!r}")


def _at_least_one(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{attribute.name} must be an integer >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class SnapshotPolicy:
    """Snapshot each bound sandbox every ``every`` seconds of use; keep the newest ``keep``.

    A sandbox not used since its last snapshot is not snapshotted again. When a bound
    sandbox has vanished (its host restarted) or broke, ``acquire`` recreates it from
    the newest snapshot, so its files come back.
    """

    every: float = attrs.field(validator=_positive)
    """Seconds between snapshots of a sandbox."""
    keep: int = attrs.field(default=3, validator=_at_least_one)
    """How many snapshots to keep per owner; older ones are deleted."""


class Policies:
    """What a ``SandboxManager``'s snapshot and idle policies do to one bound sandbox.
    A paused sandbox's handle is suspected in ``cache``; a sandbox ``leases`` knows in
    use here is not paused."""

    def __init__(self, shared: Shared, cache: Cache, leases: Leases, *,
                 snapshots: SnapshotPolicy | None) -> None:
        self._shared = shared
        self._cache = cache
        self._leases = leases
        self.snapshots = snapshots

    async def pause_bound(self, binding: Binding) -> bool:
        """Pause the bound sandbox if its use lease has run out; the caller holds the
        owner's claim. Marks the binding first, then looks at the lease (see
        ``_leases``); whether it paused it."""
        update = self._shared.update
        marked = await update(binding.owner, binding.sandbox_id,
                              lambda b: attrs.evolve(b, paused=True))
        if marked is None:
            return False
        if await self._shared.store.claimed(use_claim(binding.owner)) \
                or self._leases.in_use_here(binding.owner, binding.sandbox_id):
            await update(binding.owner, binding.sandbox_id,
                         lambda b: attrs.evolve(b, paused=False))
            return False
        provider = self._shared.provider
        async with span("manager.pause", provider.name, binding.sandbox_id,
                        owner=binding.owner):
            try:
                sandbox = await provider.connect(binding.sandbox_id, resume=False)
                if sandbox.info.state == SandboxState.RUNNING:
                    await sandbox.pause()
            except SandboxNotFound:
                return False  # the next acquire recovers it
            self._cache.suspect(binding.owner, binding.sandbox_id)
        return True

    async def snapshot(self, binding: Binding) -> Snapshot:
        provider = self._shared.provider
        async with span("manager.snapshot", provider.name, binding.sandbox_id,
                        owner=binding.owner) as ev:
            sandbox = await provider.connect(binding.sandbox_id, resume=False)
            # Once started, a snapshot is recorded even if the manager is stopping:
            # an unrecorded one would be nobody's, and never deleted.
            with anyio.CancelScope(shield=True):
                snap = await self._take_snapshot(binding, sandbox, ev)
        return snap

    async def _take_snapshot(self, binding: Binding, sandbox: Sandbox,
                             ev: dict[str, Any]) -> Snapshot:
        """Snapshot, record it in the binding, delete those past the policy's ``keep``."""
        snap = await sandbox.snapshot()
        ev["snapshot_id"] = snap.id
        keep = self.snapshots.keep if self.snapshots is not None else None
        pruned: builtins.list[str] = []
        now = await self._shared.clock.now()

        def record(b: Binding) -> Binding:
            snaps = (*b.snapshots, snap.id)
            cut = len(snaps) - keep if keep is not None and len(snaps) > keep else 0
            pruned[:] = snaps[:cut]
            return attrs.evolve(b, snapshots=snaps[cut:], snapshot_at=now)

        if await self._shared.update(binding.owner, binding.sandbox_id, record) is None:
            pruned[:] = [snap.id]  # rebound meanwhile: this snapshot is nobody's
        await self.delete_snapshots(pruned)
        return snap

    async def delete_snapshots(self, snapshot_ids: tuple[str, ...] | builtins.list[str]
                               ) -> None:
        for snapshot_id in snapshot_ids:
            with contextlib.suppress(SnapshotNotFound):
                await self._shared.provider.delete_snapshot(snapshot_id)
