"""The reaper: kill manager-tagged sandboxes that no binding holds.

Such sandboxes are left behind by races that an expired claim allowed, by bindings
dropped from a store, or by a store that was wiped. A sandbox is spared while its
owner's claim is held (a manager is creating or repairing it and has not bound it yet),
while its binding holds it, and, with ``older_than``, while it is younger than that.

Members of a :class:`~provider_sdk.manager.WarmPool` (the label ``psdk.pool``) are
reaped only when nobody runs their pool, they were never handed out (by the store's
claim, or the label ``psdk.pool.taken``), no binding holds them, and they are past their
maximum age. Where the provider cannot label a member after create
(no ``metadata.update``), only the store the member was made through can tell that it
was never handed out, so a member is reaped there only if ``store`` says it made it.
This module must not create anything.
"""

from __future__ import annotations

import datetime as dt
import time

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput
from provider_sdk.events import span
from provider_sdk.manager._claims import owner_claim
from provider_sdk.manager._pool_members import MADE_TOKEN, made_claim
from provider_sdk.manager.manager import OWNER_LABEL
from provider_sdk.manager.pool import (
    EXPIRES_LABEL,
    POOL_LABEL,
    TAKEN_LABEL,
    alive_claim,
    taken_claim,
)
from provider_sdk.manager.store import BindingStore
from provider_sdk.models import SandboxInfo
from provider_sdk.provider import SandboxProvider

__all__ = ["reap"]


async def reap(provider: SandboxProvider, store: BindingStore, *,
               owner_key: str = OWNER_LABEL,
               older_than: float | None = None, dry_run: bool = False) -> list[SandboxInfo]:
    """Kill the sandboxes tagged with ``owner_key`` that no binding in ``store`` holds,
    and the free members, past their maximum age, of warm pools nobody runs.

    Where the provider cannot label a pool member after create (no
    ``metadata.update``: Docker, E2B, Cube), a member counts as free only in the store
    its pool made it through: give the pools' store, or such members are spared.

    Args:
        provider: whose sandboxes to look at.
        store: the bindings that keep sandboxes alive.
        owner_key: the label the managers tag sandboxes with (default
            :data:`~provider_sdk.manager.OWNER_LABEL`); sandboxes without it are never
            reaped.
        older_than: spare sandboxes created less than this many seconds ago (and those
            whose creation time the provider does not report).
        dry_run: kill nothing; only say what would be killed.

    Returns:
        The sandboxes killed (or, with ``dry_run``, that would be).
    """
    if older_than is not None and (isinstance(older_than, bool) or not older_than >= 0):
        raise InvalidInput(f"older_than must be a number of seconds >= 0, got {older_than!r}")
    now = dt.datetime.now(dt.timezone.utc)
    victims: list[SandboxInfo] = []
    bound: set[str] | None = None
    async with span("manager.reap", provider.name, dry_run=dry_run) as ev:
        for info in await provider.list():
            owner = info.metadata.get(owner_key)
            pool = info.metadata.get(POOL_LABEL)
            if owner is None and pool is None:
                continue
            if older_than is not None and (
                    info.created_at is None
                    or (now - _aware(info.created_at)).total_seconds() < older_than):
                continue
            if owner is None:
                assert pool is not None
                if bound is None:
                    bound = {b.sandbox_id for b in await store.list()}
                if not await _pool_member_done(provider, store, info, pool, bound):
                    continue
            else:
                binding = await store.get(owner)
                if binding is not None and binding.sandbox_id == info.id:
                    continue
                if await store.claimed(owner_claim(owner)):
                    continue
            victims.append(info)
            if not dry_run:
                await provider.kill(info.id)
                if pool is not None:
                    await store.release(made_claim(info.id), MADE_TOKEN)
        ev["reaped"] = [i.id for i in victims]
    return victims


async def _pool_member_done(provider: SandboxProvider, store: BindingStore,
                            info: SandboxInfo, pool: str, bound: set[str]) -> bool:
    """Whether a pool member may go: free (as far as ``store`` can tell), of a pool
    nobody runs, past its age."""
    try:
        expires = float(info.metadata.get(EXPIRES_LABEL, "inf"))
    except ValueError:
        expires = 0.0
    if expires > time.time() or info.id in bound or TAKEN_LABEL in info.metadata:
        return False
    if not provider.supports(Capability.METADATA_UPDATE) \
            and not await store.claimed(made_claim(info.id)):
        return False  # another store may have handed it out
    return not (await store.claimed(alive_claim(pool))
                or await store.claimed(taken_claim(info.id)))


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)
