"""``SandboxManager``: one resident sandbox per owner, found fast, never duplicated.

``acquire(owner)`` walks the lookup chain and stops at the first level that answers:

1. ``cache``: this process's LRU cache. No I/O: an entry is trusted until a command
   through its handle fails on the data plane, or the manager paused it.
2. ``store``: the binding store, then ``provider.connect`` (which resumes a paused
   sandbox) and a data-plane health probe.
3. ``list``: ``provider.list(metadata={owner_key: owner})``: a sandbox a manager made
   whose binding was lost (a store wiped, a crash between create and bind) is reused,
   the binding healed, and any extra sandboxes of the owner killed in the background.
4. ``pool``, ``create`` (or ``snapshot``): a member of the manager's
   :class:`~provider_sdk.manager.WarmPool` when it has one free, else a new sandbox
   tagged with the owner, started from the owner's latest snapshot when the bound one
   vanished or broke.

The tag is a label of the manager's own, :data:`OWNER_LABEL` (``psdk.manager.owner``),
not the ``owner`` label people put on sandboxes they make by hand: the manager adopts,
kills as a duplicate, releases and reaps only sandboxes a manager made (or the one a
binding holds). Bindings stored before the label existed keep working unchanged: the
binding, not the label, is what binds a sandbox.

Levels 3 and 4, and replacing a broken sandbox, run only while holding the owner's
claim in the store, so concurrent acquires in other tasks, processes or replicas wait
for the binding instead of creating their own. Every wait is bounded: the caller gets a
working sandbox or a typed error within its deadline, whatever the store does, and
nothing else the manager does raises into the application: what fails in the
background is counted (:attr:`SandboxManager.failures`) and logged.

This module owns the binding logic: the class, its settings and lifetime, ``acquire``
and the owner's other operations, and what handles ask of it (``_HandleLink``, the
handle's ``ManagerLink``). The manager is composed of its parts, objects it makes
and wires together, each given what it needs (what they all share, the provider, the
store and its clock, is ``_shared``): ``_cache`` (level 1), ``_lookup`` (levels 2 to
4), ``_leases`` (claims held while working, use leases), ``_policies`` (snapshots and
idle pause of one sandbox), ``_chores`` and ``_housekeeping`` (work off the caller's
path); claim names, the owner check and the per-owner lock are in ``_claims``. It must
not know any provider or store by name.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import math
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import anyio
import anyio.abc
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import Conflict, InvalidInput, OperationTimeout, SandboxNotFound
from provider_sdk.events import span
from provider_sdk.labels import check_labels
from provider_sdk.manager._cache import Cache
from provider_sdk.manager._chores import Chores
from provider_sdk.manager._claims import (
    USE_TOKEN,
    _OwnerLock,
    check_owner,
    owner_claim,
    use_claim,
)
from provider_sdk.manager._clock import StoreClock
from provider_sdk.manager._errors import Failures, translated, typed
from provider_sdk.manager._housekeeping import Housekeeping
from provider_sdk.manager._leases import Claims, Leases
from provider_sdk.manager._lookup import Lookup
from provider_sdk.manager._policies import Policies, SnapshotPolicy
from provider_sdk.manager._shared import Shared
from provider_sdk.manager.handle import ManagedSandbox
from provider_sdk.manager.pool import WarmPool
from provider_sdk.manager.store import Binding, BindingStore, default_store_path
from provider_sdk.models import Lifecycle, SandboxInfo, SandboxSpec, Snapshot
from provider_sdk.provider import SandboxProvider
from provider_sdk.retry import Attempts, Backoff
from provider_sdk.sandbox import Sandbox

__all__ = ["OWNER_LABEL", "SandboxManager", "SnapshotPolicy", "owner_claim"]

T = TypeVar("T")

_RELEASE_BACKOFF = Backoff(initial=0.01, factor=1.5, cap=0.25)
"""Pauses between tries of the owner's claim a release waits for."""

OWNER_LABEL = "psdk.manager.owner"
"""The label a :class:`SandboxManager` tags each sandbox it makes with, holding the
owner: ``psdk ls --label psdk.manager.owner=alice`` shows alice's managed sandbox."""


class SandboxManager:
    """One resident sandbox per owner, over any provider and any binding store.

    Use it with ``async with`` (or call :meth:`aclose`): that runs the background work,
    which is killing duplicates, pausing idle sandboxes and taking scheduled snapshots.
    ``acquire`` works outside the block too, doing that work inline.

    Args:
        provider: the provider that runs the sandboxes.
        store: where bindings live; default: a :class:`~provider_sdk.manager.SQLiteStore`
            at :func:`~provider_sdk.manager.default_store_path`. The manager does not
            close a store it was given.
        owner_key: the label that tags a sandbox with its owner, and marks it as a
            manager's (default :data:`OWNER_LABEL`). Managers that share a store and a
            provider must agree on it; give one of your own only to keep apart managers
            that must not adopt each other's sandboxes.
        spec: how new sandboxes are made; ``owner_key`` is added to its metadata.
        snapshots: take scheduled snapshots (needs ``snapshot.filesystem``).
        idle_pause: pause a sandbox after this many seconds without an acquire or a
            command (and at most half as long again), and resume it on the next acquire
            (needs ``pause``). A provider that pauses idle sandboxes itself
            (``lifecycle.auto_pause``) is asked to; elsewhere the running manager
            sweeps. Replicas that share a store must agree on it.
        cache_size: how many owners' handles this process keeps (least recently used
            go first).
        acquire_timeout: seconds an ``acquire`` (or a ``release``) may take in all,
            waits for another creator and for the store included, before
            :class:`~provider_sdk.errors.OperationTimeout`; ``acquire(timeout=...)``
            gives one call its own.
        health_timeout: seconds to connect to a bound sandbox and get an answer from
            its data plane, retrying ``Unavailable``, before it counts as broken (a
            connect or a first probe that hangs included).
        replace_unhealthy: replace a broken sandbox (from its latest snapshot); if
            ``False``, ``acquire`` raises :class:`~provider_sdk.errors.Unavailable`.
        claim_ttl: seconds a claim outlives the process that held it (it is renewed
            every third of that while its work goes on): how long an owner whose
            creator died waits before another replica may create.
        sweep_interval: seconds between background sweeps (idle pause, snapshots);
            default: a quarter of the shortest of ``idle_pause`` and
            ``snapshots.every``, at most 30.
        pool: a :class:`~provider_sdk.manager.WarmPool` of the same provider that a new
            owner's sandbox is taken from (level ``pool``) while it has free members;
            give it the manager's store. The caller runs it (``async with``). A
            pooled sandbox is tagged with its owner on claim where the provider holds
            ``metadata.update``, so level ``list`` finds it if its binding is lost;
            elsewhere it is not tagged, and its binding alone binds it.
    """

    def __init__(
        self,
        provider: SandboxProvider,
        store: BindingStore | None = None,
        *,
        owner_key: str = OWNER_LABEL,
        spec: SandboxSpec | None = None,
        snapshots: SnapshotPolicy | None = None,
        idle_pause: float | None = None,
        cache_size: int = 1024,
        acquire_timeout: float = 300.0,
        health_timeout: float = 30.0,
        replace_unhealthy: bool = True,
        claim_ttl: float = 10.0,
        sweep_interval: float | None = None,
        pool: WarmPool | None = None,
    ) -> None:
        if not isinstance(owner_key, str) or not owner_key:
            raise InvalidInput(f"owner_key must be a non-empty string, got {owner_key!r}")
        check_labels({owner_key: ""}, field="owner_key", internal=provider.internal_labels,
                     provider=provider.name)
        for name, value in (("acquire_timeout", acquire_timeout),
                            ("health_timeout", health_timeout), ("claim_ttl", claim_ttl),
                            ("idle_pause", idle_pause), ("sweep_interval", sweep_interval)):
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise InvalidInput(f"{name} must be a positive number, got {value!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise InvalidInput(f"cache_size must be an integer >= 1, got {cache_size!r}")
        spec = spec or SandboxSpec()
        if owner_key in spec.metadata:
            raise InvalidInput(f"spec.metadata must not set {owner_key!r}: the manager "
                               "tags each sandbox with its owner")
        if snapshots is not None:
            provider.require(Capability.SNAPSHOT_FILESYSTEM, detail="SnapshotPolicy")
        if pool is not None and pool.provider.name != provider.name:
            raise InvalidInput(f"pool: its provider is {pool.provider.name!r}, the "
                               f"manager's {provider.name!r}")
        self.pool = pool
        sweep_idle = False
        if idle_pause is not None:
            if provider.supports(Capability.LIFECYCLE_AUTO_PAUSE):
                spec = attrs.evolve(spec, lifecycle=Lifecycle(
                    idle_timeout=idle_pause, on_idle="pause",
                    auto_resume=provider.supports(Capability.LIFECYCLE_AUTO_RESUME)))
            else:
                provider.require(Capability.PAUSE, detail="idle_pause")
                sweep_idle = True
        self.provider = provider
        self._own_store = store is None
        if store is None:
            from provider_sdk.manager.sqlite_store import SQLiteStore

            store = SQLiteStore(default_store_path())
        self.store: BindingStore = store
        self.owner_key = owner_key
        self.spec = spec
        self.snapshots = snapshots
        self.idle_pause = idle_pause
        self.cache_size = cache_size
        self.acquire_timeout = float(acquire_timeout)
        self.health_timeout = float(health_timeout)
        self.replace_unhealthy = replace_unhealthy
        self.claim_ttl = float(claim_ttl)
        periods = [p for p in (idle_pause if sweep_idle else None,
                               snapshots.every if snapshots else None) if p is not None]
        self.sweep_interval = float(sweep_interval or min([*periods, 120.0]) / 4)
        self.failures = Failures("manager", provider.name)
        """Failures of background work (kills of duplicates, sweeps, renewals), counted
        by what failed; each is also logged as ``sandbox.manager.background.failed``."""
        self._locks: dict[str, anyio.Event | None] = {}  # owners held (see _OwnerLock)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        # The parts, each given what it needs; they call each other through these.
        shared = self._shared = Shared(provider=provider, store=store,
                                       clock=StoreClock(store), failures=self.failures,
                                       claim_ttl=self.claim_ttl)
        self._chores = Chores(self.failures)
        self._claims = Claims(shared, self._chores)
        self._cache = Cache(cache_size)
        self._leases = Leases(
            shared, self._chores, self._claims, idle_pause=idle_pause,
            sweep_idle=sweep_idle, records_use=snapshots is not None,
            # How often a handle's use is written to the store and its lease renewed
            # (only when something reads them).
            touch_every=(min(periods) / 4) if periods else math.inf)
        self._policies = Policies(shared, self._cache, self._leases, snapshots=snapshots)
        self._housekeeping = Housekeeping(
            shared, self._claims, owner_key=owner_key, sweep_interval=self.sweep_interval,
            sweeps=(self.pause_idle, self.snapshot_due))
        self._link = _HandleLink(shared=shared, cache=self._cache, leases=self._leases)
        self._lookup = Lookup(
            shared, self._chores, self._claims, self._leases, self._housekeeping,
            managed=self._managed, owner_key=owner_key, spec=spec, pool=pool,
            health_timeout=self.health_timeout, replace_unhealthy=replace_unhealthy)

    def __repr__(self) -> str:
        return (f"<SandboxManager provider={self.provider.name!r} store={self.store!r} "
                f"owner_key={self.owner_key!r}>")

    # ------------------------------------------------------------- lifetime

    async def __aenter__(self) -> SandboxManager:
        if self._stack is not None:
            raise RuntimeError("this SandboxManager is already running")
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(self._stopped)
        self._stack = stack
        await self._chores.start(self._tg)
        if self._leases.sweep_idle or self.snapshots is not None:
            self._tg.start_soon(self._housekeeping.sweeper)
            self._tg.start_soon(self._leases.keeper)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _stopped(self) -> None:
        self._tg = None
        self._chores.stopped()

    async def aclose(self) -> None:
        """Stop the background work (letting kills in flight finish) and close a store
        the manager opened itself. Sandboxes keep running. Safe to call twice."""
        stack, self._stack = self._stack, None
        if stack is not None:
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            await stack.aclose()
        if self._own_store:
            await self.store.aclose()

    # --------------------------------------------------------------- acquire

    async def acquire(self, owner: str, *, timeout: float | None = None) -> ManagedSandbox:
        """The owner's sandbox: cached, bound, found by its tag, or new.

        ``timeout`` (default ``acquire_timeout``) bounds the whole call, whatever the
        store and the provider do: it returns or raises within it (and a fraction of a
        second).

        Raises:
            InvalidInput: ``owner`` is not an owner (see ``check_owner``: 1 to 256
                characters, no control character or lone surrogate), or ``timeout`` is
                not a positive number.
            OperationTimeout: no working sandbox within the timeout.
            Unavailable: the store cannot be reached, or the bound sandbox is broken
                and ``replace_unhealthy`` is off.
            Conflict: the owner is bound to a sandbox of another provider.
        """
        check_owner(owner)
        limit = self.acquire_timeout if timeout is None else _positive("timeout", timeout)
        entry = self._cache.get(owner)
        if entry is not None and not entry.suspect:
            self._cache.touch(owner)
            self._leases.note_use(owner, entry.sandbox.id)
            async with span("manager.acquire", self.provider.name, entry.sandbox.id,
                            owner=owner, level="cache"):
                return entry.sandbox
        async with span("manager.acquire", self.provider.name, owner=owner) as ev:
            with anyio.move_on_after(limit) as scope, typed("acquire", self.provider.name):
                async with self._owner_lock(owner):
                    entry = self._cache.get(owner)
                    if entry is not None and not entry.suspect:  # another task found it
                        ev.update(sandbox_id=entry.sandbox.id, level="cache")
                        self._leases.note_use(owner, entry.sandbox.id)
                        return entry.sandbox
                    sandbox, level = await self._lookup.lookup(owner)
                    ev.update(sandbox_id=sandbox.id, level=level)
                    self._cache.remember(sandbox)
                    self._leases.note_use(owner, sandbox.id)
                    return sandbox
            assert scope.cancelled_caught
            raise OperationTimeout(f"no working sandbox for owner {owner!r} within "
                                   f"{limit:g}s", provider=self.provider.name)

    # ------------------------------------------------------------ the others

    async def release(self, owner: str) -> None:
        """Drop the owner's binding and kill its sandboxes (every one tagged with it)
        and the snapshots the manager took of them.

        Raises:
            InvalidInput: ``owner`` is not an owner.
            OperationTimeout: not done within ``acquire_timeout``.
            Unavailable: the store cannot be reached.
            SandboxError: a sandbox could not be killed (the others were, and the
                binding is dropped).
        """
        check_owner(owner)
        async with span("manager.release", self.provider.name, owner=owner) as ev:
            with anyio.move_on_after(self.acquire_timeout) as scope, \
                    typed("release", self.provider.name):
                async with self._owner_lock(owner):
                    self._cache.drop(owner)
                    self._leases.drop(owner)
                    token = secrets.token_hex(8)
                    try:
                        async for _ in Attempts(_RELEASE_BACKOFF):
                            if await self.store.claim(owner_claim(owner), token,
                                                      self.claim_ttl):
                                break
                        ev["killed"] = await self._claims.holding(
                            owner_claim(owner), token, lambda: self._release_held(owner))
                    finally:
                        await self._claims.let_go(owner_claim(owner), token)
            if scope.cancelled_caught:
                raise OperationTimeout(f"could not release owner {owner!r} within "
                                       f"{self.acquire_timeout:g}s",
                                       provider=self.provider.name)

    async def _release_held(self, owner: str) -> int:
        """Kill the owner's sandboxes and snapshots, drop its binding and its use lease;
        how many sandboxes. The caller holds the owner's claim."""
        binding = await self.store.get(owner)
        tagged = await self.provider.list(metadata={self.owner_key: owner})
        ids = {i.id for i in tagged}
        if binding is not None and binding.provider == self.provider.name:
            ids.add(binding.sandbox_id)
        failed: list[tuple[str, Exception]] = []
        for sandbox_id in sorted(ids):
            try:
                await self.provider.kill(sandbox_id)
            except SandboxNotFound:
                pass
            except Exception as exc:  # the others still go, and so does the binding
                failed.append((sandbox_id, exc))
        if binding is not None:
            await self._policies.delete_snapshots(binding.snapshots)
            await self.store.delete(owner)
        await self.store.release(use_claim(owner), USE_TOKEN)
        if failed:
            stuck, error = failed[0]
            raise translated(error, f"release of owner {owner!r}: {len(failed)} of its "
                             f"sandboxes could not be killed (the binding is dropped: "
                             f"another release, or the reaper, kills them)",
                             self.provider.name, stuck) from error
        return len(ids)

    async def binding(self, owner: str) -> Binding | None:
        """The owner's binding as the store has it, or ``None``."""
        check_owner(owner)
        with typed("binding", self.provider.name):
            return await self.store.get(owner)

    def forget(self, owner: str) -> None:
        """Drop the owner's cached handle; the next ``acquire`` asks the store."""
        self._cache.drop(check_owner(owner))

    async def snapshot(self, owner: str) -> Snapshot:
        """Snapshot the owner's sandbox now and record it (the policy's ``keep``
        applies; without a policy, every snapshot is kept).

        Raises:
            SandboxNotFound: no sandbox is bound to the owner.
        """
        check_owner(owner)
        with typed("snapshot", self.provider.name):
            binding = await self.store.get(owner)
            if binding is None:
                raise SandboxNotFound(f"no sandbox is bound to owner {owner!r}",
                                      provider=self.provider.name)
            return await self._policies.snapshot(binding)

    async def snapshot_due(self) -> builtins.list[str]:
        """One round of the snapshot policy: snapshot every bound sandbox used since
        its last snapshot more than ``every`` seconds ago (by the store's clock).
        Returns the owners done.

        Several replicas may run it at once: a claim per owner makes one do the work.
        """
        if self.snapshots is None:
            return []
        with typed("snapshot_due", self.provider.name):
            done = []
            now = await self._shared.clock.now()
            for binding in await self.store.list():
                if binding.provider != self.provider.name:
                    continue
                used = max(binding.last_used, self._leases.used_here(binding))
                if binding.snapshot_at is not None and (
                        now - binding.snapshot_at < self.snapshots.every
                        or used <= binding.snapshot_at):
                    continue
                name, token = f"snapshot:{binding.owner}", secrets.token_hex(8)
                if not await self.store.claim(name, token, self.claim_ttl):
                    continue
                try:
                    if await self._claims.holding(
                            name, token, functools.partial(self._snapshot_if_due, binding)):
                        done.append(binding.owner)
                finally:
                    await self._claims.let_go(name, token)
            return done

    async def _snapshot_if_due(self, binding: Binding) -> bool:
        current = await self.store.get(binding.owner)
        if current is None or current.snapshot_at != binding.snapshot_at:
            return False  # another replica just did it
        try:
            await self._policies.snapshot(current)
        except SandboxNotFound:
            return False
        return True

    async def pause_idle(self) -> builtins.list[str]:
        """One round of the idle policy: pause every bound sandbox whose use lease has
        run out (unused for ``idle_pause`` seconds, by the store's clock, and no command
        running through any replica's handle). Returns the owners paused."""
        if not self._leases.sweep_idle or self.idle_pause is None:
            return []
        with typed("pause_idle", self.provider.name):
            paused = []
            for binding in await self.store.list():
                if binding.provider != self.provider.name or binding.paused \
                        or self._leases.in_use_here(binding.owner, binding.sandbox_id) \
                        or await self.store.claimed(use_claim(binding.owner)):
                    continue
                name, token = owner_claim(binding.owner), secrets.token_hex(8)
                if not await self.store.claim(name, token, self.claim_ttl):
                    continue  # being acquired or repaired right now
                try:
                    if await self._claims.holding(
                            name, token, functools.partial(self._policies.pause_bound,
                                                           binding)):
                        paused.append(binding.owner)
                finally:
                    await self._claims.let_go(name, token)
            return paused

    # -------------------------------------------------------------- internals

    def _managed(self, sandbox: Sandbox, owner: str, env: Mapping[str, str]) -> ManagedSandbox:
        return ManagedSandbox(self.provider, sandbox.info, manager=self._link, owner=owner,
                              env=env)

    def _owner_lock(self, owner: str) -> _OwnerLock:
        """One task per owner at a time in this process."""
        return _OwnerLock(self._locks, owner)


@attrs.frozen(kw_only=True)
class _HandleLink:
    """What a :class:`~provider_sdk.manager.handle.ManagedSandbox` asks of the manager
    that made it: the :class:`~provider_sdk.manager.handle.ManagerLink` interface,
    answered by the manager's parts."""

    shared: Shared
    cache: Cache
    leases: Leases

    async def change_env(self, sandbox: ManagedSandbox, *, set_: Mapping[str, str],
                         unset: tuple[str, ...]) -> dict[str, str]:
        def change(b: Binding) -> Binding:
            env = {k: v for k, v in {**b.env, **set_}.items() if k not in unset}
            return attrs.evolve(b, env=env)

        with typed("set_env", self.shared.provider.name, sandbox.id):
            stored = await self.shared.update(sandbox.owner, sandbox.id, change)
        if stored is None:
            raise Conflict(f"owner {sandbox.owner!r} is no longer bound to this sandbox",
                           provider=self.shared.provider.name, sandbox_id=sandbox.id)
        return dict(stored.env)

    async def resume(self, sandbox: ManagedSandbox) -> SandboxInfo:
        provider = self.shared.provider
        with typed("resume", provider.name, sandbox.id):
            async with span("manager.resume", provider.name, sandbox.id, owner=sandbox.owner):
                info = await Sandbox.resume(sandbox)
            now = await self.shared.clock.now()
            await self.shared.update(sandbox.owner, sandbox.id,
                                     lambda b: attrs.evolve(b, paused=False, last_used=now))
        return info

    async def using(self, sandbox: ManagedSandbox, call: Callable[[], Awaitable[T]]) -> T:
        return await self.leases.using(sandbox.owner, sandbox.id, call,
                                       lambda: Sandbox.resume(sandbox))

    def suspect(self, owner: str, sandbox_id: str) -> None:
        self.cache.suspect(owner, sandbox_id)

    def forget(self, owner: str, sandbox_id: str) -> None:
        self.cache.forget(owner, sandbox_id)


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidInput(f"{name} must be a positive number, got {value!r}")
    return float(value)
