"""The reaper: kill manager-tagged sandboxes that no binding holds, the free members of
warm pools nobody runs once they are too old, and the provider's broken records.

Tagged sandboxes are left behind by races that an expired claim allowed, by bindings
dropped from a store, by a store that was wiped, or by a replica that died between a
create and its binding. The reaper takes the owner's claim before it looks at the
binding and kills, so nothing binds the sandbox meanwhile (a manager binds only while
holding that claim, and its write is fenced by it): a sandbox that is bound, or that a
manager is creating or repairing, is never killed. With ``older_than``, younger ones are
spared too. A label that is not an owner (no manager writes one) marks no manager's
sandbox: it is left alone.

Members of a :class:`~provider_sdk.manager.WarmPool` (the label ``psdk.pool``) are
reaped only when nobody runs their pool, they were never handed out (by the store's
claim, or the label ``psdk.pool.taken``), no binding holds them, and they are past their
maximum age; the member's taken claim is held while it is killed, so no pool hands it
out meanwhile. A member whose taker died before handing it out is reaped once its taken
claim runs out (shortly after the member's maximum age). Where the provider cannot label
a member after create (no ``metadata.update``), only the store the member was made
through can tell that it was never handed out, so a member is reaped there only if
``store`` says it made it.

Broken records (state ``error`` with ``extra["broken"]``: a record a provider cannot
read, or one left half made by a creator that died) are removed, as ``psdk reap`` does.
This module must not create anything.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets

import anyio

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, SandboxError, SandboxNotFound
from provider_sdk.events import span
from provider_sdk.manager._claims import check_owner, owner_claim
from provider_sdk.manager._errors import typed
from provider_sdk.manager._pool_members import MADE_TOKEN, expiry, made_claim
from provider_sdk.manager.manager import OWNER_LABEL
from provider_sdk.manager.pool import POOL_LABEL, TAKEN_LABEL, alive_claim, taken_claim
from provider_sdk.manager.store import BindingStore
from provider_sdk.models import SandboxInfo, broken_reason
from provider_sdk.provider import SandboxProvider

__all__ = ["reap"]

_CLAIM_TTL = 60.0  # seconds the reaper's claim on one sandbox lasts if it dies holding it
_RELEASE_BOUND = 5.0


async def reap(provider: SandboxProvider, store: BindingStore, *,
               owner_key: str = OWNER_LABEL, older_than: float | None = None,
               dry_run: bool = False, broken: bool = True) -> list[SandboxInfo]:
    """Kill the sandboxes tagged with ``owner_key`` that no binding in ``store`` holds,
    the free members, past their maximum age, of warm pools nobody runs, and (with
    ``broken``) the provider's broken records.

    Where the provider cannot label a pool member after create (no
    ``metadata.update``: Docker, E2B, Cube), a member counts as free only in the store
    its pool made it through: give the pools' store, or such members are spared. A
    sandbox whose kill fails is left for the next run.

    Args:
        provider: whose sandboxes to look at.
        store: the bindings that keep sandboxes alive: exactly the store the managers
            use (its file, key prefix or table).
        owner_key: the label the managers tag sandboxes with (default
            :data:`~provider_sdk.manager.OWNER_LABEL`); sandboxes without it are never
            reaped.
        older_than: spare sandboxes created less than this many seconds ago (and those
            whose creation time the provider does not report).
        dry_run: kill nothing; only say what would be killed.
        broken: remove broken records too.

    Returns:
        The sandboxes killed (or, with ``dry_run``, that would be), broken records
        included.

    Raises:
        InvalidInput: ``older_than`` is negative.
        SandboxError: the provider or the store failed.
    """
    if older_than is not None and (isinstance(older_than, bool) or not older_than >= 0):
        raise InvalidInput(f"older_than must be a number of seconds >= 0, got {older_than!r}")
    victims: list[SandboxInfo] = []
    with typed("reap", provider.name):
        async with span("manager.reap", provider.name, dry_run=dry_run) as ev:
            now = dt.datetime.now(dt.timezone.utc)
            reaper = _Reaper(provider, store, dry_run)
            for info in await provider.list():
                if older_than is not None and not _older(info, now, older_than):
                    continue
                if await reaper.doomed(info, owner_key, broken):
                    victims.append(info)
            ev["reaped"] = [i.id for i in victims]
            ev["failed"] = reaper.failed
    return victims


class _Reaper:
    """One run of :func:`reap`: what it has read of the store, and its kills."""

    def __init__(self, provider: SandboxProvider, store: BindingStore, dry_run: bool) -> None:
        self.provider = provider
        self.store = store
        self.dry_run = dry_run
        self.token = secrets.token_hex(8)
        self.failed: list[str] = []
        """The sandboxes whose kill failed (left for the next run)."""
        self._bound: set[str] | None = None
        self._now: float | None = None

    async def doomed(self, info: SandboxInfo, owner_key: str, broken: bool) -> bool:
        """Kill ``info`` if it is to go (unless dry); whether it is."""
        if broken_reason(info) is not None:
            return broken and await self._kill(info.id)
        owner = info.metadata.get(owner_key)
        if owner is not None:
            try:
                check_owner(owner)
            except InvalidInput:
                return False  # no manager wrote that label
            return await self._owned(info, owner)
        pool = info.metadata.get(POOL_LABEL)
        return pool is not None and await self._member(info, pool)

    async def _owned(self, info: SandboxInfo, owner: str) -> bool:
        """An owner's sandbox goes if, holding the owner's claim, no binding holds it."""
        name = owner_claim(owner)
        if not await self.store.claim(name, self.token, _CLAIM_TTL):
            return False  # a manager creates, repairs or releases it now
        try:
            binding = await self.store.get(owner)
            if binding is not None and binding.sandbox_id == info.id:
                return False
            return await self._kill(info.id)
        finally:
            await self._release(name)

    async def _member(self, info: SandboxInfo, pool: str) -> bool:
        """A pool's member goes if it is free (as far as the store can tell), of a pool
        nobody runs, past its age; its taken claim is held while it is killed."""
        if self._now is None:
            self._now = await self.store.time()
        if expiry(info) > self._now or TAKEN_LABEL in info.metadata:
            return False
        if self._bound is None:
            self._bound = {b.sandbox_id for b in await self.store.list()}
        if info.id in self._bound:
            return False
        if not self.provider.supports(Capability.METADATA_UPDATE) \
                and not await self.store.claimed(made_claim(info.id)):
            return False  # another store may have handed it out
        if await self.store.claimed(alive_claim(pool)):
            return False  # its pool runs: the pool's rounds replace it
        name = taken_claim(info.id)
        if not await self.store.claim(name, self.token, _CLAIM_TTL):
            return False  # handed out, or being handed out
        try:
            if not await self._kill(info.id):
                return False
            if not self.dry_run:
                await self.store.release(made_claim(info.id), MADE_TOKEN)
            return True
        finally:
            await self._release(name)

    async def _kill(self, sandbox_id: str) -> bool:
        """Kill (unless dry); whether it is gone (or would be)."""
        if self.dry_run:
            return True
        try:
            await self.provider.kill(sandbox_id)
        except SandboxNotFound:
            pass  # gone already
        except Exception:  # a provider's error, or the host's (a busy cgroup)
            self.failed.append(sandbox_id)
            return False
        return True

    async def _release(self, name: str) -> None:
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _RELEASE_BOUND), \
                contextlib.suppress(SandboxError):  # else it runs out
            await self.store.release(name, self.token)


def _older(info: SandboxInfo, now: dt.datetime, seconds: float) -> bool:
    """Whether ``info`` is known to be at least ``seconds`` old."""
    created = info.created_at
    if created is None:
        return False
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    return (now - created).total_seconds() >= seconds
