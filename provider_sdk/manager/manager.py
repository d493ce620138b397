"""``SandboxManager``: one resident sandbox per owner, found fast, never duplicated.

``acquire(owner)`` walks the lookup chain and stops at the first level that answers:

1. ``cache``: this process's LRU cache. No I/O: an entry is trusted until a command
   through its handle fails on the data plane, or the manager paused it.
2. ``store``: the binding store, then ``provider.connect`` (which resumes a paused
   sandbox) and a data-plane health probe.
3. ``list``: ``provider.list(metadata={owner_key: owner})``: a sandbox whose binding
   was lost (a store wiped, a crash between create and bind) is reused, the binding
   healed, and any extra sandboxes of the owner killed in the background.
4. ``create`` (or ``snapshot``): a new sandbox tagged with the owner, started from the
   owner's latest snapshot when the bound one vanished or broke.

Levels 3 and 4, and replacing a broken sandbox, run only while holding the owner's
claim in the store, so concurrent acquires in other tasks, processes or replicas wait
for the binding instead of creating their own. Every wait is bounded: the caller gets a
working sandbox or a typed error.

This module owns the binding logic; it must not know any provider or store by name.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any

import anyio
import anyio.abc
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import (
    Conflict,
    InvalidInput,
    OperationTimeout,
    RateLimited,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    SnapshotNotFound,
    Unavailable,
)
from provider_sdk.events import span
from provider_sdk.manager.handle import ManagedSandbox
from provider_sdk.manager.store import Binding, BindingStore, default_store_path
from provider_sdk.models import Lifecycle, SandboxInfo, SandboxSpec, SandboxState, Snapshot
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = ["SandboxManager", "SnapshotPolicy", "owner_claim"]

_DEAD = frozenset({SandboxState.KILLED, SandboxState.ERROR})
_PREFERENCE = {SandboxState.RUNNING: 0, SandboxState.PAUSED: 1, SandboxState.PAUSING: 1}


def owner_claim(owner: str) -> str:
    """The name of the claim a manager holds while it creates or repairs ``owner``'s
    sandbox (the reaper leaves sandboxes of a claimed owner alone)."""
    return f"owner:{owner}"


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


@attrs.define
class _Entry:
    """A cached handle and what this process knows about its use."""

    sandbox: ManagedSandbox
    last_used: float
    stored_used: float
    suspect: bool = False
    busy: int = 0


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
        owner_key: the metadata key that tags a sandbox with its owner.
        spec: how new sandboxes are made; ``owner_key`` is added to its metadata.
        snapshots: take scheduled snapshots (needs ``snapshot.filesystem``).
        idle_pause: pause a sandbox after this many seconds without an acquire or a
            command, and resume it on the next acquire (needs ``pause``). A provider
            that pauses idle sandboxes itself (``lifecycle.auto_pause``) is asked to.
        cache_size: how many owners' handles this process keeps (least recently used
            go first).
        acquire_timeout: seconds an ``acquire`` may take in all, waits for another
            creator included, before :class:`~provider_sdk.errors.OperationTimeout`.
        health_timeout: seconds to connect to a bound sandbox and get an answer from
            its data plane, retrying ``Unavailable``, before it counts as broken. The
            first try is bounded by ``acquire_timeout`` alone (a store hit arms no
            timer of its own); retries stop ``health_timeout`` after it began.
        replace_unhealthy: replace a broken sandbox (from its latest snapshot); if
            ``False``, ``acquire`` raises :class:`~provider_sdk.errors.Unavailable`.
        claim_ttl: seconds a creator's claim lasts if its process dies holding it.
        sweep_interval: seconds between background sweeps (idle pause, snapshots);
            default: a quarter of the shortest of ``idle_pause`` and
            ``snapshots.every``, at most 30.
    """

    def __init__(
        self,
        provider: SandboxProvider,
        store: BindingStore | None = None,
        *,
        owner_key: str = "owner",
        spec: SandboxSpec | None = None,
        snapshots: SnapshotPolicy | None = None,
        idle_pause: float | None = None,
        cache_size: int = 1024,
        acquire_timeout: float = 300.0,
        health_timeout: float = 30.0,
        replace_unhealthy: bool = True,
        claim_ttl: float = 300.0,
        sweep_interval: float | None = None,
    ) -> None:
        if not isinstance(owner_key, str) or not owner_key:
            raise InvalidInput(f"owner_key must be a non-empty string, got {owner_key!r}")
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
        self._sweep_idle = False
        if idle_pause is not None:
            if provider.supports(Capability.LIFECYCLE_AUTO_PAUSE):
                spec = attrs.evolve(spec, lifecycle=Lifecycle(
                    idle_timeout=idle_pause, on_idle="pause",
                    auto_resume=provider.supports(Capability.LIFECYCLE_AUTO_RESUME)))
            else:
                provider.require(Capability.PAUSE, detail="idle_pause")
                self._sweep_idle = True
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
        periods = [p for p in (idle_pause if self._sweep_idle else None,
                               snapshots.every if snapshots else None) if p is not None]
        self.sweep_interval = float(sweep_interval or min([*periods, 120.0]) / 4)
        # How often a handle's use is written to the store (only when something reads it).
        self._touch_every = (min(periods) / 4) if periods else math.inf
        self._cache: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._locks: dict[str, anyio.Event | None] = {}  # owners held (see _OwnerLock)
        self._tg: anyio.abc.TaskGroup | None = None
        self._chores: collections.deque[Coroutine[Any, Any, Any]] = collections.deque()
        self._chores_queued: anyio.Event  # made when the manager starts, in its event loop
        self._stack: contextlib.AsyncExitStack | None = None

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
        self._chores_queued = anyio.Event()
        await self._tg.start(self._housekeeper)
        if self._sweep_idle or self.snapshots is not None:
            self._tg.start_soon(self._sweeper)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _stopped(self) -> None:
        self._tg = None

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

    async def acquire(self, owner: str) -> ManagedSandbox:
        """The owner's sandbox: cached, bound, found by its tag, or new.

        Raises:
            InvalidInput: ``owner`` is not a non-empty string without NUL bytes.
            OperationTimeout: no working sandbox within ``acquire_timeout``.
            Unavailable: the store cannot be reached, or the bound sandbox is broken
                and ``replace_unhealthy`` is off.
            Conflict: the owner is bound to a sandbox of another provider.
        """
        _check_owner(owner)
        entry = self._cache.get(owner)
        if entry is not None and not entry.suspect:
            self._cache.move_to_end(owner)
            self._used(owner, entry)
            async with span("manager.acquire", self.provider.name, entry.sandbox.id,
                            owner=owner, level="cache"):
                return entry.sandbox
        async with span("manager.acquire", self.provider.name, owner=owner) as ev:
            with anyio.move_on_after(self.acquire_timeout) as scope:
                async with self._owner_lock(owner):
                    entry = self._cache.get(owner)
                    if entry is not None and not entry.suspect:  # another task found it
                        ev.update(sandbox_id=entry.sandbox.id, level="cache")
                        return entry.sandbox
                    sandbox, level = await self._lookup(owner)
                    ev.update(sandbox_id=sandbox.id, level=level)
                    self._remember(sandbox)
                    return sandbox
            assert scope.cancelled_caught
            raise OperationTimeout(f"no working sandbox for owner {owner!r} within "
                                   f"{self.acquire_timeout:g}s", provider=self.provider.name)

    async def _lookup(self, owner: str) -> tuple[ManagedSandbox, str]:
        """Levels 2 to 4 of the chain; returns the sandbox and the level that answered."""
        binding = await self.store.get(owner)
        tried: Binding | None = None  # the binding last found broken
        while True:
            if binding is not None and (tried is None or binding.sandbox_id != tried.sandbox_id):
                try:
                    sandbox = await self._open_bound(binding)
                except _Lost:
                    tried = binding
                else:
                    await self._after_store_hit(binding, sandbox)
                    return sandbox, "store"
            token = secrets.token_hex(8)
            newer = await self._claim_or_newer(owner, token, tried)
            if newer is not None:  # someone else bound a sandbox meanwhile: try theirs
                binding = newer
                continue
            try:
                current = await self.store.get(owner)
                if current is not None and (tried is None
                                            or current.sandbox_id != tried.sandbox_id):
                    binding = current  # bound between our read and our claim
                    continue
                return await self._repair(owner, current, token)
            except _Rebound as rebound:  # theirs wins; ours was killed or is a duplicate
                binding, tried = rebound.binding, None
                continue
            finally:
                with anyio.CancelScope(shield=True):
                    await self.store.release(owner_claim(owner), token)

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
        """Connect (resuming), then wait for the data plane to answer, within
        ``health_timeout``. ``_Lost("vanished")``/``_Lost("unhealthy")`` otherwise."""
        deadline = anyio.current_time() + self.health_timeout
        last: SandboxError | None = None
        try:
            sandbox = await self._open(sandbox_id)
            try:  # the common case: the first probe answers, and no timer was armed
                await sandbox.files.stat("/")
                return sandbox
            except (RateLimited, Unavailable) as exc:  # e.g. the post-resume 504 window
                last = exc
            with anyio.CancelScope(deadline=deadline):
                delay = 0.05
                while True:
                    retry_after = last.retry_after if isinstance(last, RateLimited) else None
                    await anyio.sleep(retry_after or delay)
                    delay = min(delay * 2, 1.0)
                    try:
                        await sandbox.files.stat("/")
                        return sandbox
                    except (RateLimited, Unavailable) as exc:
                        last = exc
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
        if binding.paused or self._touch_every != math.inf:
            now = time.time()
            await self._update(binding.owner, binding.sandbox_id,
                               lambda b: attrs.evolve(b, paused=False, last_used=now))
        # Races elsewhere (an expired claim, a store restored from backup) leave extra
        # sandboxes: look for them off the caller's path.
        await self._background(self._kill_duplicates(binding.owner, sandbox.id))

    async def _claim_or_newer(self, owner: str, token: str,
                              tried: Binding | None) -> Binding | None:
        """Take the owner's claim (``None``), or return a binding someone else wrote
        while we waited. Bounded by the caller's ``acquire_timeout``."""
        delay = 0.01
        waited = False
        async with span("manager.claim", self.provider.name, owner=owner) as ev:
            while True:
                if await self.store.claim(owner_claim(owner), token, self.claim_ttl):
                    ev["waited"] = waited
                    return None
                waited = True
                current = await self.store.get(owner)
                if current is not None and (tried is None
                                            or current.sandbox_id != tried.sandbox_id):
                    ev["waited"] = waited
                    return current
                await anyio.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    async def _repair(self, owner: str, broken: Binding | None,
                      token: str) -> tuple[ManagedSandbox, str]:
        """Levels 3 and 4, holding the owner's claim."""
        # The chain has already spent time; keep our claim alive while we work.
        await self.store.claim(owner_claim(owner), token, self.claim_ttl)
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
            bound = await self._bind(owner, sandbox.id, broken)
            if bound.sandbox_id != sandbox.id:
                raise _Rebound(bound)
            others = {i.id for i in tagged if i.id != sandbox.id} | bad
            await self._background(self._kill_all(sorted(others)))
            return self._managed(sandbox, owner, bound.env), "list"
        stale = sorted({i.id for i in tagged} | bad)
        sandbox, level = await self._create(owner, broken)
        try:
            bound = await self._bind(owner, sandbox.id, broken)
            if bound.sandbox_id != sandbox.id:
                raise _Rebound(bound)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._kill_quietly(sandbox.id)
            raise
        await self._background(self._kill_all(stale))
        return self._managed(sandbox, owner, bound.env), level

    async def _create(self, owner: str, broken: Binding | None) -> tuple[Sandbox, str]:
        """Level 4: a new sandbox tagged with the owner, from its newest usable snapshot
        when it had one."""
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
            return sandbox, "snapshot"
        async with span("manager.create", self.provider.name, owner=owner) as ev:
            sandbox = await self.provider.create(spec)
            ev["sandbox_id"] = sandbox.id
        return sandbox, "create"

    async def _bind(self, owner: str, sandbox_id: str, broken: Binding | None) -> Binding:
        """Bind ``owner`` to ``sandbox_id``, keeping its env and snapshots. If someone
        else bound the owner to another sandbox meanwhile, return their binding."""
        now = time.time()
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
            stored = await self.store.put(binding)
            if stored is not None:
                return stored
        raise Conflict(f"could not bind owner {owner!r}: the binding keeps changing",
                       provider=self.provider.name, sandbox_id=sandbox_id)

    # ------------------------------------------------------------ the others

    async def release(self, owner: str) -> None:
        """Drop the owner's binding and kill its sandboxes (every one tagged with it)
        and the snapshots the manager took of them."""
        _check_owner(owner)
        async with span("manager.release", self.provider.name, owner=owner) as ev:
            with anyio.move_on_after(self.acquire_timeout) as scope:
                async with self._owner_lock(owner):
                    self._cache.pop(owner, None)
                    token = secrets.token_hex(8)
                    while True:
                        if await self.store.claim(owner_claim(owner), token, self.claim_ttl):
                            break
                        await anyio.sleep(0.05)
                    try:
                        binding = await self.store.get(owner)
                        tagged = await self.provider.list(metadata={self.owner_key: owner})
                        ids = {i.id for i in tagged}
                        if binding is not None and binding.provider == self.provider.name:
                            ids.add(binding.sandbox_id)
                        await self._kill_all(sorted(ids))
                        if binding is not None:
                            await self._delete_snapshots(binding.snapshots)
                            await self.store.delete(owner)
                        ev["killed"] = len(ids)
                    finally:
                        with anyio.CancelScope(shield=True):
                            await self.store.release(owner_claim(owner), token)
            if scope.cancelled_caught:
                raise OperationTimeout(f"could not release owner {owner!r} within "
                                       f"{self.acquire_timeout:g}s",
                                       provider=self.provider.name)

    async def binding(self, owner: str) -> Binding | None:
        """The owner's binding as the store has it, or ``None``."""
        _check_owner(owner)
        return await self.store.get(owner)

    def forget(self, owner: str) -> None:
        """Drop the owner's cached handle; the next ``acquire`` asks the store."""
        self._cache.pop(owner, None)

    async def snapshot(self, owner: str) -> Snapshot:
        """Snapshot the owner's sandbox now and record it (the policy's ``keep``
        applies; without a policy, every snapshot is kept).

        Raises:
            SandboxNotFound: no sandbox is bound to the owner.
        """
        _check_owner(owner)
        binding = await self.store.get(owner)
        if binding is None:
            raise SandboxNotFound(f"no sandbox is bound to owner {owner!r}",
                                  provider=self.provider.name)
        return await self._snapshot(binding)

    async def snapshot_due(self) -> builtins.list[str]:
        """One round of the snapshot policy: snapshot every bound sandbox used since
        its last snapshot more than ``every`` seconds ago. Returns the owners done.

        Several replicas may run it at once: a claim per owner makes one do the work.
        """
        if self.snapshots is None:
            return []
        done = []
        now = time.time()
        for binding in await self.store.list():
            if binding.provider != self.provider.name:
                continue
            used = max(binding.last_used, self._local_use(binding))
            if binding.snapshot_at is not None and (
                    now - binding.snapshot_at < self.snapshots.every
                    or used <= binding.snapshot_at):
                continue
            name, token = f"snapshot:{binding.owner}", secrets.token_hex(8)
            if not await self.store.claim(name, token, self.claim_ttl):
                continue
            try:
                current = await self.store.get(binding.owner)
                if current is None or current.snapshot_at != binding.snapshot_at:
                    continue  # another replica just did it
                with contextlib.suppress(SandboxNotFound):
                    await self._snapshot(current)
                    done.append(binding.owner)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.store.release(name, token)
        return done

    async def pause_idle(self) -> builtins.list[str]:
        """One round of the idle policy: pause every bound sandbox unused for
        ``idle_pause`` seconds. Returns the owners paused."""
        if not self._sweep_idle or self.idle_pause is None:
            return []
        paused = []
        for binding in await self.store.list():
            if binding.provider != self.provider.name or binding.paused:
                continue
            entry = self._cache.get(binding.owner)
            if entry is not None and entry.busy:
                continue
            if time.time() - max(binding.last_used, self._local_use(binding)) \
                    < self.idle_pause:
                continue
            name, token = owner_claim(binding.owner), secrets.token_hex(8)
            if not await self.store.claim(name, token, self.claim_ttl):
                continue  # being acquired or repaired right now
            try:
                if await self._pause_bound(binding):
                    paused.append(binding.owner)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.store.release(name, token)
        return paused

    async def _pause_bound(self, binding: Binding) -> bool:
        current = await self.store.get(binding.owner)
        if (current is None or current.sandbox_id != binding.sandbox_id or current.paused
                or current.last_used > binding.last_used):
            return False
        entry = self._cache.get(binding.owner)
        if entry is not None and (entry.busy or (
                entry.last_used > binding.last_used
                and time.time() - entry.last_used < (self.idle_pause or 0))):
            return False
        async with span("manager.pause", self.provider.name, binding.sandbox_id,
                        owner=binding.owner):
            try:
                sandbox = await self.provider.connect(binding.sandbox_id, resume=False)
                if sandbox.info.state == SandboxState.RUNNING:
                    await sandbox.pause()
            except SandboxNotFound:
                return False  # the next acquire recovers it
            self._suspect(binding.owner, binding.sandbox_id)
            await self._update(binding.owner, binding.sandbox_id,
                               lambda b: attrs.evolve(b, paused=True))
        return True

    # ----------------------------------------------------- helpers for handles

    async def _change_env(self, sandbox: ManagedSandbox, *, set_: Mapping[str, str],
                          unset: tuple[str, ...]) -> dict[str, str]:
        def change(b: Binding) -> Binding:
            env = {k: v for k, v in {**b.env, **set_}.items() if k not in unset}
            return attrs.evolve(b, env=env)

        stored = await self._update(sandbox.owner, sandbox.id, change)
        if stored is None:
            raise Conflict(f"owner {sandbox.owner!r} is no longer bound to this sandbox",
                           provider=self.provider.name, sandbox_id=sandbox.id)
        return dict(stored.env)

    async def _resume(self, sandbox: ManagedSandbox) -> SandboxInfo:
        async with span("manager.resume", self.provider.name, sandbox.id, owner=sandbox.owner):
            info = await Sandbox.resume(sandbox)
        now = time.time()
        await self._update(sandbox.owner, sandbox.id,
                           lambda b: attrs.evolve(b, paused=False, last_used=now))
        return info

    @contextlib.contextmanager
    def _in_use(self, sandbox: ManagedSandbox) -> Iterator[None]:
        entry = self._cache.get(sandbox.owner)
        if entry is None or entry.sandbox is not sandbox:
            yield
            return
        entry.busy += 1
        self._used(sandbox.owner, entry)
        try:
            yield
        finally:
            entry.busy -= 1
            entry.last_used = time.time()

    def _suspect(self, owner: str, sandbox_id: str) -> None:
        entry = self._cache.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            entry.suspect = True

    def _forget(self, owner: str, sandbox_id: str) -> None:
        entry = self._cache.get(owner)
        if entry is not None and entry.sandbox.id == sandbox_id:
            del self._cache[owner]

    # -------------------------------------------------------------- internals

    def _managed(self, sandbox: Sandbox, owner: str, env: Mapping[str, str]) -> ManagedSandbox:
        return ManagedSandbox(self.provider, sandbox.info, manager=self, owner=owner, env=env)

    def _remember(self, sandbox: ManagedSandbox) -> None:
        now = time.time()
        self._cache[sandbox.owner] = _Entry(sandbox=sandbox, last_used=now, stored_used=now)
        self._cache.move_to_end(sandbox.owner)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _used(self, owner: str, entry: _Entry) -> None:
        now = time.time()
        entry.last_used = now
        if now - entry.stored_used >= self._touch_every and self._tg is not None:
            entry.stored_used = now
            self._queue(self._update(owner, entry.sandbox.id,
                                     lambda b: attrs.evolve(b, last_used=now)))

    def _local_use(self, binding: Binding) -> float:
        entry = self._cache.get(binding.owner)
        if entry is None or entry.sandbox.id != binding.sandbox_id:
            return 0.0
        return entry.last_used

    async def _update(self, owner: str, sandbox_id: str,
                      change: Callable[[Binding], Binding]) -> Binding | None:
        """Apply ``change`` to the owner's binding while it binds ``sandbox_id``
        (compare-and-set, retried); ``None`` if it is gone or bound elsewhere."""
        for _ in range(20):
            current = await self.store.get(owner)
            if current is None or current.sandbox_id != sandbox_id:
                return None
            stored = await self.store.put(change(current))
            if stored is not None:
                return stored
        raise Conflict(f"owner {owner!r}: the binding keeps changing",
                       provider=self.provider.name, sandbox_id=sandbox_id)

    async def _snapshot(self, binding: Binding) -> Snapshot:
        async with span("manager.snapshot", self.provider.name, binding.sandbox_id,
                        owner=binding.owner) as ev:
            sandbox = await self.provider.connect(binding.sandbox_id, resume=False)
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
        now = time.time()

        def record(b: Binding) -> Binding:
            snaps = (*b.snapshots, snap.id)
            cut = len(snaps) - keep if keep is not None and len(snaps) > keep else 0
            pruned[:] = snaps[:cut]
            return attrs.evolve(b, snapshots=snaps[cut:], snapshot_at=now)

        if await self._update(binding.owner, binding.sandbox_id, record) is None:
            pruned[:] = [snap.id]  # rebound meanwhile: this snapshot is nobody's
        await self._delete_snapshots(pruned)
        return snap

    async def _delete_snapshots(self, snapshot_ids: tuple[str, ...] | builtins.list[str]
                                ) -> None:
        for snapshot_id in snapshot_ids:
            with contextlib.suppress(SnapshotNotFound):
                await self.provider.delete_snapshot(snapshot_id)

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

    def _owner_lock(self, owner: str) -> _OwnerLock:
        """One task per owner at a time in this process."""
        return _OwnerLock(self._locks, owner)


class _OwnerLock:
    """Holds ``owner``'s key in ``locks`` while inside. Uncontended it neither yields
    to the event loop nor makes an event (a store hit stays as cheap as its work);
    a task that has to wait puts an event there for the holder to set."""

    __slots__ = ("locks", "owner")

    def __init__(self, locks: dict[str, anyio.Event | None], owner: str) -> None:
        self.locks = locks
        self.owner = owner

    async def __aenter__(self) -> None:
        while self.owner in self.locks:
            waiting = self.locks[self.owner]
            if waiting is None:
                waiting = self.locks[self.owner] = anyio.Event()
            await waiting.wait()
        self.locks[self.owner] = None

    async def __aexit__(self, *exc_info: object) -> None:
        waiting = self.locks.pop(self.owner)
        if waiting is not None:
            waiting.set()


def _created(info: SandboxInfo) -> float:
    return info.created_at.timestamp() if info.created_at is not None else math.inf


def _check_owner(owner: str) -> None:
    if not isinstance(owner, str) or not owner or "\0" in owner:
        raise InvalidInput(f"owner must be a non-empty string without NUL bytes, "
                           f"got {owner!r}")

