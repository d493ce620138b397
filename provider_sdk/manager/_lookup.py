"""Levels 2 to 4 of :meth:`SandboxManager.acquire`'s lookup chain: the bound sandbox,
a sandbox found by the owner's tag, a new one.

Level 2 connects to the bound sandbox and waits, within ``health_timeout``, for its
data plane to answer (a connect or a first probe that hangs is cut there too). Levels 3
and 4 run only while holding the owner's claim, renewed while they work: reuse a live
sandbox tagged with the owner and heal the binding, or create one (from the owner's
newest snapshot when the bound one vanished or broke); the owner's other sandboxes are
killed in the background. The binding is written fenced by the claim, so a creator
whose claim ran out (its renewals did not reach the store in time) cannot bind: it
kills what it made and takes the binding someone else wrote, or tries again. Every
store call here can be cancelled, and the claim is let go in the background, so a
caller's deadline holds whatever the store does.

This module must not know any provider or store by name, and leaves the cache to
``acquire``.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
from collections.abc import Callable, Mapping

import anyio
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    Conflict,
    RateLimited,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    SnapshotNotFound,
    Unavailable,
)
from provider_sdk.events import span
from provider_sdk.manager._chores import Chores
from provider_sdk.manager._claims import USE_TOKEN, owner_claim, use_claim
from provider_sdk.manager._housekeeping import Housekeeping
from provider_sdk.manager._leases import Claims, Leases
from provider_sdk.manager._shared import Shared
from provider_sdk.manager.handle import ManagedSandbox
from provider_sdk.manager.pool import Finish, WarmPool
from provider_sdk.manager.store import Binding
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState
from provider_sdk.retry import Attempts, Backoff
from provider_sdk.sandbox import Sandbox

__all__ = ["Lookup"]

_DEAD = frozenset({SandboxState.KILLED, SandboxState.ERROR})
_HEALTH_BACKOFF = Backoff(initial=0.05, factor=2, cap=1.0)
"""Pauses between health probes of a sandbox that answered busy or unavailable."""
_CLAIM_BACKOFF = Backoff(initial=0.01, factor=1.5, cap=0.5)
"""Pauses between tries of an owner's claim that someone else holds."""
_PREFERENCE = {SandboxState.RUNNING: 0, SandboxState.PAUSED: 1, SandboxState.PAUSING: 1}


class _Lost(Exception):
    """The binding is no good: its sandbox vanished (``vanished``) or broke."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Rebound(Exception):
    """Someone else bound the owner while we repaired it (our claim had expired)."""

    def __init__(self, binding: Binding) -> None:
        super().__init__(binding.sandbox_id)
        self.binding = binding


class _ClaimLost(Exception):
    """Our claim ran out and someone else holds it: we may not bind."""


class Lookup:
    """The lookup chain's levels 2 to 4, for a ``SandboxManager``.

    Args:
        shared: the manager's provider, store and clock.
        chores: where work off the caller's path goes.
        claims: the claims held while working.
        leases: the use leases (taken before the binding is read).
        housekeeping: what kills the owner's duplicates.
        managed: makes the handle of an owner's sandbox, with its environment.
        owner_key, spec, pool, health_timeout, replace_unhealthy: the manager's.
    """

    def __init__(self, shared: Shared, chores: Chores, claims: Claims, leases: Leases,
                 housekeeping: Housekeeping, *,
                 managed: Callable[[Sandbox, str, Mapping[str, str]], ManagedSandbox],
                 owner_key: str, spec: SandboxSpec, pool: WarmPool | None,
                 health_timeout: float, replace_unhealthy: bool) -> None:
        self._shared = shared
        self._chores = chores
        self._claims = claims
        self._leases = leases
        self._housekeeping = housekeeping
        self._managed = managed
        self.provider = shared.provider
        self.store = shared.store
        self.owner_key = owner_key
        self.spec = spec
        self.pool = pool
        self.health_timeout = health_timeout
        self.replace_unhealthy = replace_unhealthy

    async def lookup(self, owner: str) -> tuple[ManagedSandbox, str]:
        """Levels 2 to 4 of the chain; returns the sandbox and the level that answered."""
        leased = await self._take_use_lease(owner)
        binding = await self.store.get(owner)
        tried: Binding | None = None  # the binding last found broken
        while True:
            if binding is not None and (tried is None or binding.sandbox_id != tried.sandbox_id):
                try:
                    if binding.paused and self._leases.sweep_idle:
                        await self._claims.wait_claimed_by_nobody(owner)  # a sweep may be pausing
                    sandbox = await self._open_bound(binding)
                except _Lost:
                    tried = binding
                else:
                    self._leased(owner, sandbox.id, leased)
                    await self._after_store_hit(binding, sandbox)
                    return sandbox, "store"
            token = secrets.token_hex(8)
            maybe_held = True  # a claim call cut short may have taken it
            doomed: list[str] = []  # killed under the claim, before it is let go
            try:
                newer = await self._claim_or_newer(owner, token, tried)
                if newer is not None:  # someone else bound a sandbox meanwhile: try theirs
                    maybe_held = False
                    binding = newer
                    continue
                current = await self.store.get(owner)
                if current is not None and (tried is None
                                            or current.sandbox_id != tried.sandbox_id):
                    binding = current  # bound between our read and our claim
                    continue
                repair = functools.partial(self._repair, owner, current, token, doomed)
                found, level = await self._claims.holding(owner_claim(owner), token, repair)
                self._leased(owner, found.id, leased)
                return found, level
            except _Rebound as rebound:  # theirs wins; ours was killed or is a duplicate
                binding, tried = rebound.binding, None
                continue
            except _ClaimLost:  # someone else creates now: wait for their binding
                binding = await self.store.get(owner)
                continue
            finally:
                if maybe_held:
                    await self._claims.let_go(owner_claim(owner), token, doomed)

    async def _take_use_lease(self, owner: str) -> float | None:
        """Where idle sandboxes are swept, renew the owner's use lease before the binding
        is read (the order ``_leases`` relies on); when it was asked for."""
        if not self._leases.sweep_idle:
            return None
        start = time.monotonic()
        await self.store.claim(use_claim(owner), USE_TOKEN, self._leases.lease_ttl)
        return start

    def _leased(self, owner: str, sandbox_id: str, leased: float | None) -> None:
        """Record the lease :meth:`_take_use_lease` renewed, for the sandbox acquired."""
        if leased is None:
            return
        use = self._leases.use_of(owner, sandbox_id)
        use.renewed = max(use.renewed, leased)
        use.until = max(use.until, leased + self._leases.lease_ttl)

    async def _open_bound(self, binding: Binding) -> ManagedSandbox:
        """Level 2: connect to the bound sandbox and probe it; ``_Lost`` if it is gone
        or broken."""
        if binding.provider != self.provider.name:
            raise Conflict(f"owner {binding.owner!r} is bound to sandbox "
                           f"{binding.sandbox_id} of provider {binding.provider!r}",
                           provider=self.provider.name)
        async with span("manager.store", self.provider.name, binding.sandbox_id,
                        owner=binding.owner) as ev:
            try:
                sandbox = await self._connect_healthy(binding.sandbox_id)
            except _Lost as lost:
                ev["outcome"] = lost.reason
                raise
            ev["outcome"] = "healthy"
        return self._managed(sandbox, binding.owner, binding.env)

    async def _connect_healthy(self, sandbox_id: str) -> Sandbox:
        """Connect (resuming), then wait for the data plane to answer, all within
        ``health_timeout``. ``_Lost("vanished")``/``_Lost("unhealthy")`` otherwise."""
        last: SandboxError | None = None
        with anyio.move_on_after(self.health_timeout):
            try:
                sandbox = await self._open(sandbox_id)
                try:  # the common case: the first probe answers
                    await sandbox.files.stat("/")
                    return sandbox
                except (RateLimited, Unavailable) as exc:  # e.g. the post-resume 504 window
                    last = exc
                probes = Attempts(_HEALTH_BACKOFF, pause_first=True)
                probes.at_least(_retry_after(last))
                async for _ in probes:
                    try:
                        await sandbox.files.stat("/")
                        return sandbox
                    except (RateLimited, Unavailable) as exc:
                        last = exc
                        probes.at_least(_retry_after(exc))
            except SandboxNotFound:
                raise _Lost("vanished") from None
            except SandboxNotRunning as exc:
                if exc.state == "killed":
                    raise _Lost("vanished") from None
                last = exc
            except RateLimited:
                raise  # connect was refused: the control plane is busy, not the sandbox
            except Unavailable as exc:
                last = exc
        if not self.replace_unhealthy:
            raise Unavailable(f"sandbox {sandbox_id} does not answer after "
                              f"{self.health_timeout:g}s ({last or 'timed out'})",
                              provider=self.provider.name, sandbox_id=sandbox_id)
        raise _Lost("unhealthy")

    async def _open(self, sandbox_id: str) -> Sandbox:
        """Connect, resuming a paused sandbox and restarting a stopped one."""
        sandbox = await self.provider.connect(sandbox_id, resume=True)
        if sandbox.info.state == SandboxState.STOPPED and self.provider.supports(Capability.PAUSE):
            await sandbox.resume()  # its processes are gone: restart from its files
        return sandbox

    async def _after_store_hit(self, binding: Binding, sandbox: ManagedSandbox) -> None:
        if binding.paused or self._leases.touch_every != math.inf:
            now = self._shared.clock.cached() or await self._shared.clock.now()
            await self._shared.update(binding.owner, binding.sandbox_id,
                                      lambda b: attrs.evolve(b, paused=False,
                                                             last_used=max(b.last_used, now)))
        # Races elsewhere (an expired claim, a store restored from backup) leave extra
        # sandboxes: look for them off the caller's path.
        await self._chores.background(
            self._housekeeping.kill_duplicates(binding.owner, sandbox.id), "duplicates")

    async def _claim_or_newer(self, owner: str, token: str,
                              tried: Binding | None) -> Binding | None:
        """Take the owner's claim (``None``), or return a binding someone else wrote
        while we waited. Bounded by the caller's deadline."""
        waited = False
        async with span("manager.claim", self.provider.name, owner=owner) as ev:
            async for _ in Attempts(_CLAIM_BACKOFF):
                if await self.store.claim(owner_claim(owner), token, self._shared.claim_ttl):
                    ev["waited"] = waited
                    return None
                waited = True
                current = await self.store.get(owner)
                if current is not None and (tried is None
                                            or current.sandbox_id != tried.sandbox_id):
                    ev["waited"] = waited
                    return current
        raise AssertionError("unreachable: the claim is waited for without limit")

    async def _repair(self, owner: str, broken: Binding | None, token: str,
                      doomed: list[str]) -> tuple[ManagedSandbox, str]:
        """Levels 3 and 4, holding the owner's claim. The owner's other sandboxes, and
        one it made that it could not bind, go into ``doomed``, to be killed before the
        claim is let go."""
        async with span("manager.list", self.provider.name, owner=owner) as ev:
            tagged = await self.provider.list(metadata={self.owner_key: owner})
            ev["found"] = len(tagged)
        bad = {broken.sandbox_id} if broken is not None else set()
        candidates = sorted(
            (i for i in tagged if i.state not in _DEAD and i.id not in bad),
            key=lambda i: (_PREFERENCE.get(i.state, 2), _created(i), i.id))
        for info in candidates:
            try:
                sandbox = await self._connect_healthy(info.id)
            except _Lost:
                continue
            bound = await self._bind(owner, sandbox.id, broken, token)
            if bound.sandbox_id != sandbox.id:
                raise _Rebound(bound)
            doomed += sorted({i.id for i in tagged if i.id != sandbox.id} | bad)
            return self._managed(sandbox, owner, bound.env), "list"
        stale = sorted({i.id for i in tagged} | bad)
        sandbox, level, handed_out = await self._create(owner, broken)
        try:
            bound = await self._bind(owner, sandbox.id, broken, token)
            if bound.sandbox_id != sandbox.id:
                raise _Rebound(bound)
        except BaseException:
            doomed.append(sandbox.id)
            raise
        if handed_out is not None:
            await self._chores.background(handed_out(), "pool hand-out")
        doomed += stale
        return self._managed(sandbox, owner, bound.env), level

    async def _create(self, owner: str, broken: Binding | None
                      ) -> tuple[Sandbox, str, Finish | None]:
        """Level 4: a new sandbox tagged with the owner, from its newest usable snapshot
        when it had one, else a free member of the pool when there is one (tagged with
        the owner where the provider holds ``metadata.update``; what finishes its
        hand-out once it is bound comes with it)."""
        spec = attrs.evolve(self.spec, metadata={**self.spec.metadata, self.owner_key: owner})
        for snapshot_id in reversed(broken.snapshots if broken is not None else ()):
            async with span("manager.create", self.provider.name, owner=owner,
                            snapshot_id=snapshot_id) as ev:
                try:
                    sandbox = await self.provider.create(attrs.evolve(spec,
                                                                      snapshot=snapshot_id))
                except SnapshotNotFound:
                    ev["outcome"] = "snapshot missing"
                    continue
                ev["sandbox_id"] = sandbox.id
            return sandbox, "snapshot", None
        if self.pool is not None:
            # Tagged with the owner where labels change after create, so that the list
            # level finds it if its binding is lost; elsewhere its binding alone binds it.
            tag = {self.owner_key: owner} \
                if self.pool.provider.supports(Capability.METADATA_UPDATE) else None
            pooled = await self.pool._take_for(tag)
            if pooled is not None:
                return pooled[0], "pool", pooled[1]
        async with span("manager.create", self.provider.name, owner=owner) as ev:
            sandbox = await self.provider.create(spec)
            ev["sandbox_id"] = sandbox.id
        return sandbox, "create", None

    async def _bind(self, owner: str, sandbox_id: str, broken: Binding | None,
                    token: str) -> Binding:
        """Bind ``owner`` to ``sandbox_id``, keeping its env and snapshots, fenced by
        our claim. If someone else bound the owner to another sandbox meanwhile, return
        their binding; ``_ClaimLost`` if someone else holds the claim now."""
        fence = (owner_claim(owner), token)
        now = await self._shared.clock.now()
        for _ in range(20):
            current = await self.store.get(owner)
            if current is not None and current.sandbox_id not in (
                    sandbox_id, broken.sandbox_id if broken is not None else None):
                return current
            base = current or broken
            binding = Binding(
                owner=owner, sandbox_id=sandbox_id, provider=self.provider.name,
                env=base.env if base else {}, snapshots=base.snapshots if base else (),
                snapshot_at=base.snapshot_at if base else None, last_used=now,
                version=current.version if current else 0)
            stored = await self.store.put(binding, fence=fence)
            if stored is not None:
                return stored
            # A newer version, or our claim ran out: take it again if nobody else has.
            if not await self.store.claim(*fence, self._shared.claim_ttl):
                raise _ClaimLost
        raise Conflict(f"could not bind owner {owner!r}: the binding keeps changing",
                       provider=self.provider.name, sandbox_id=sandbox_id)


def _created(info: SandboxInfo) -> float:
    return info.created_at.timestamp() if info.created_at is not None else math.inf


def _retry_after(exc: SandboxError | None) -> float | None:
    """The least pause a busy backend asked for (``Retry-After``), if any."""
    return exc.retry_after if isinstance(exc, RateLimited) else None
