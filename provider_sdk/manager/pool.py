"""``WarmPool``: sandboxes made ahead of time, handed out at once.

A pool keeps ``size`` ready sandboxes (*members*) for one :class:`SandboxSpec`: running,
or paused where the provider keeps memory across a pause (``pause.memory``). ``claim``
hands one out; the pool's background task makes a new one in its place, replaces
members that died or grew older than ``max_age``, and drains members made for another
spec or an earlier build of the template. ::

    async with WarmPool(provider, SandboxSpec(template="python"), size=4) as pool:
        sandbox = await pool.claim(env={"USER_ID": "alice"})
        await sandbox.exec("python -V")

Several pools, in other tasks, processes or application replicas, form one pool when
they share a ``name``, a provider and a binding store (and agree on the spec):

- members carry the labels :data:`POOL_LABEL` (the pool's name), :data:`SPEC_LABEL`
  (a fingerprint of the spec and its template) and :data:`EXPIRES_LABEL` (when it is
  too old to hand out);
- a member is handed out by taking its claim in the store (:func:`taken_claim`), which
  exactly one caller wins; that claim stays, so the member is never handed out again
  (where labels change after create it also gets :data:`TAKEN_LABEL`);
- where labels cannot change after create, only the store a member was made through
  knows whether it was handed out: a pool records the members it makes
  (:func:`made_claim`) and hands out, drains and kills only those its store made;
- members are made only while holding the pool's refill claim (:func:`refill_claim`),
  and the refiller counts the free members first, so the pool keeps at most ``size``
  however many replicas run it (a refiller that dies mid-round can leave extras; the
  next round kills them);
- a running pool holds its :func:`alive_claim`; the reaper
  (:func:`~provider_sdk.manager.reap`) kills free members of a pool nobody runs once
  they are past ``max_age``, and never a member that was handed out.

A claim gives the caller's identity: the environment of the handle it returns, and,
where the provider changes labels after create (``metadata.update``), the caller's
labels on the member (``claim(metadata=...)``; a
:class:`~provider_sdk.manager.SandboxManager` gives its owner label this way, so a
pooled sandbox whose binding is lost is found again by owner). Elsewhere a claim with
labels is refused (:class:`~provider_sdk.errors.UnsupportedCapability` naming
``metadata.update``), and members carry only the labels of the pool's spec and its own.

A member's own code (what the spec's template starts) runs before anyone claims it, and
may be hostile: a claim hands a member out only once it answered a first command within
``check_timeout``, kills it otherwise, and never resets what its code did.

This module owns the pool; it must not know any provider or store by name, and it does
not bind owners (the manager does).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, SandboxError, SandboxNotFound
from provider_sdk.events import span
from provider_sdk.labels import check_labels
from provider_sdk.manager._pool_members import (
    EXPIRES_LABEL,
    LIVE,
    MADE_TOKEN,
    OWN_LABELS,
    POOL_LABEL,
    SPEC_LABEL,
    TAKEN_LABEL,
    TAKEN_TTL,
    ClaimedSandbox,
    alive_claim,
    created_time,
    expiry,
    fingerprint,
    made_claim,
    refill_claim,
    taken_claim,
)
from provider_sdk.manager.store import BindingStore, MemoryStore
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState, _env_map
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = ["EXPIRES_LABEL", "POOL_LABEL", "SPEC_LABEL", "TAKEN_LABEL", "ClaimedSandbox",
           "WarmPool", "alive_claim", "refill_claim", "taken_claim"]

_SETTLE = 0.2  # seconds a round waits after a claim wakes it
_KILL_BOUND = 60.0  # seconds a kill of a member may hold the pool


class _HandedOut(Exception):
    """A member a claim took turned out to be handed out already."""


class WarmPool:
    """Keeps ``size`` ready sandboxes for ``spec`` and hands them out at once.

    Use it with ``async with``: that runs the background task that fills the pool.
    Leaving the block stops it and leaves the free members for the next run (or another
    replica); :meth:`drain` kills them.

    Args:
        provider: the provider that runs the members.
        spec: how members are made; it must not set the pool's labels.
        size: how many free members to keep, at most, across every replica.
        store: where claims live; share one (SQLite, Redis, PostgreSQL) between
            processes and replicas that run the same pool. Default: this process's
            memory. Where the provider cannot label members after create, a pool
            touches only the members made through its store, and leaves the others.
        name: the pool's name; pools that share it, the provider and the store are one.
        max_age: seconds after which a member is no longer handed out, but replaced.
        paused: keep members paused (needs ``pause.memory``, so what the template
            started keeps running once resumed); ``claim`` resumes one.
        interval: seconds between the background rounds that check and refill the
            pool (a claim starts one shortly after).
        starting: how many members the pool makes at once.
        claim_ttl: seconds the refill claim lasts if its holder dies holding it.
        check_on_claim: before handing a member out, ask the provider for its state
            and run a first command (``true``) in it: a member that is not running or
            does not answer within ``check_timeout`` (its own code killed, stopped or
            starved what serves it) is discarded, killed, and the next one tried. Off,
            a member the last round saw running is handed out at once, whatever its
            code did since; one that died then fails its first call with
            :class:`~provider_sdk.errors.SandboxNotFound` or
            :class:`~provider_sdk.errors.SandboxNotRunning`. Paused members are always
            resumed through the provider.
        check_timeout: seconds a claim gives one member to resume and answer before
            it discards it.
    """

    def __init__(self, provider: SandboxProvider, spec: SandboxSpec | None = None, *,
                 size: int, store: BindingStore | None = None, name: str = "default",
                 max_age: float = 3600.0, paused: bool = False, interval: float = 5.0,
                 starting: int = 2, claim_ttl: float = 120.0,
                 check_on_claim: bool = True, check_timeout: float = 10.0) -> None:
        for field, count in (("size", size), ("starting", starting)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidInput(f"{field} must be an integer >= 1, got {count!r}")
        for field, value in (("max_age", max_age), ("interval", interval),
                             ("claim_ttl", claim_ttl), ("check_timeout", check_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value < float("inf"):
                raise InvalidInput(f"{field} must be a positive number, got {value!r}")
        check_labels({POOL_LABEL: name}, field="name", internal=provider.internal_labels,
                     provider=provider.name)
        if not name:
            raise InvalidInput("name must be a non-empty string")
        if paused:
            provider.require(Capability.PAUSE_MEMORY, detail="WarmPool(paused=True)")
        self.provider = provider
        self.store: BindingStore = store if store is not None else MemoryStore()
        self.name = name
        self.size = size
        self.max_age = float(max_age)
        self.paused = paused
        self.interval = float(interval)
        self.claim_ttl = float(claim_ttl)
        self.check_on_claim = bool(check_on_claim)
        self.check_timeout = float(check_timeout)
        self._token = secrets.token_hex(8)
        self._free: dict[str, SandboxInfo] = {}  # as last seen, oldest first
        self._taken: set[str] = set()  # members seen handed out (that never changes)
        self._limiter = anyio.CapacityLimiter(starting)
        self._tg: anyio.abc.TaskGroup | None = None
        self._wake: anyio.Event | None = None
        self._round_done: anyio.Event | None = None  # made in the event loop, on start
        self.spec = self._checked(spec or SandboxSpec())

    def __repr__(self) -> str:
        return (f"<WarmPool {self.name!r} provider={self.provider.name!r} size={self.size} "
                f"free={len(self._free)}>")

    # ------------------------------------------------------------- lifetime

    async def __aenter__(self) -> WarmPool:
        if self._tg is not None:
            raise RuntimeError("this WarmPool is already running")
        self._wake = anyio.Event()
        self._round_done = anyio.Event()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._maintain)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the background task (after the members being made are ready); free
        members stay."""
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
        self._wake = None
        with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
            await self.store.release(alive_claim(self.name), self._token)

    @property
    def running(self) -> bool:
        """Whether the background task runs."""
        return self._tg is not None

    async def wait_filled(self, timeout: float | None = None) -> None:
        """Wait until this process knows of ``size`` free members.

        Raises:
            RuntimeError: the pool is not running.
            TimeoutError: not within ``timeout`` seconds.
        """
        with anyio.fail_after(timeout):
            while len(self._free) < self.size:
                if self._tg is None or self._round_done is None:
                    raise RuntimeError("the WarmPool is not running")
                await self._round_done.wait()

    # --------------------------------------------------------------- claims

    async def claim(self, *, metadata: Mapping[str, str] | None = None,
                    env: Mapping[str, str] | None = None) -> ClaimedSandbox:
        """A sandbox for the caller: a free member if there is one that answers (a
        *hit*), else a new one made now (a *miss*). ``env`` applies under every
        command's own.
        ``metadata`` labels the sandbox (``metadata.update`` for a member, without
        reading its labels first: until it is handed out they are the pool's; a miss is
        made with them), over the labels of the pool's spec.

        Raises:
            InvalidInput: a name in ``env`` is not a variable name, or a value holds NUL;
                a label breaks the label rules or is one of the pool's own.
            UnsupportedCapability: ``metadata`` is given and the provider does not
                hold ``metadata.update``.
        """
        checked = _env_map(env)
        labels = self._claim_labels(metadata)
        sandbox = await self.take(metadata=labels)
        if sandbox is None:
            sandbox = await self.provider.create(attrs.evolve(
                self.spec, metadata={**self.spec.metadata, **labels}))
        return ClaimedSandbox(self.provider, sandbox.info, env=checked)

    async def take(self, *, metadata: Mapping[str, str] | None = None) -> Sandbox | None:
        """Hand out a free member (running, and answering with ``check_on_claim``), or
        ``None`` when there is none at hand.

        Exactly one caller, in any process sharing the store, gets a given member. Each
        call counts as a hit or a miss in the ``psdk.pool.claims`` metric. ``metadata``
        is set on the member before it is handed out, as in :meth:`claim`; a member
        that cannot take it is killed and the next one tried.
        """
        labels = self._claim_labels(metadata)
        async with span("pool.claim", self.provider.name, pool=self.name) as ev:
            sandbox = await self._take(labels)
            ev["hit"] = sandbox is not None
            if sandbox is not None:
                ev["sandbox_id"] = sandbox.id
        return sandbox

    def _claim_labels(self, metadata: Mapping[str, str] | None) -> dict[str, str]:
        """The labels a claim gives, checked; refused where they cannot be set."""
        labels = dict(metadata or {})
        if not labels:
            return labels
        self.provider.require(Capability.METADATA_UPDATE,
                              detail="WarmPool.claim(metadata=...)")
        for label in OWN_LABELS:
            if label in labels:
                raise InvalidInput(f"metadata must not set {label!r}: the pool tags its "
                                   "members with it", provider=self.provider.name)
        check_labels(labels, internal=self.provider.internal_labels,
                     provider=self.provider.name)
        return labels

    async def _take(self, labels: Mapping[str, str]) -> Sandbox | None:
        while self._free:
            sandbox = await self._take_one()
            if sandbox is None:
                return None
            marks = dict(labels)
            if self.provider.supports(Capability.METADATA_UPDATE):  # the store may forget
                marks[TAKEN_LABEL] = f"{time.time():.3f}"
            if not marks:
                return sandbox
            try:
                await sandbox.set_metadata(marks, reread=False)  # its labels are ours
            except SandboxError:
                await self._discard(sandbox.id)
                continue
            except BaseException:
                await self._discard(sandbox.id)
                raise
            return sandbox
        self._refill_soon()
        return None

    async def _take_one(self) -> Sandbox | None:
        while self._free:
            sandbox_id = next(iter(self._free))
            info = self._free.pop(sandbox_id)
            if sandbox_id in self._taken or expiry(info) <= time.time():
                continue  # the next round replaces it
            if not await self.store.claim(taken_claim(sandbox_id), secrets.token_hex(8),
                                          TAKEN_TTL):
                self._taken.add(sandbox_id)
                continue
            self._taken.add(sandbox_id)
            self._refill_soon()
            if info.state == SandboxState.RUNNING and not self.check_on_claim:
                # Seen running by the last round: no round trip before the caller's own.
                return Sandbox(self.provider, info)
            try:
                sandbox = await self._ready(sandbox_id)
            except _HandedOut:
                continue  # through another store, since the last round: its caller's
            except BaseException:  # the caller gave up: the member is nobody's
                await self._discard(sandbox_id)
                raise
            if sandbox is not None:
                return sandbox
            await self._discard(sandbox_id)
        self._refill_soon()
        return None

    async def _ready(self, sandbox_id: str) -> Sandbox | None:
        """The member taken, resumed if paused and, with ``check_on_claim``, answering
        a first command, within ``check_timeout``; ``None`` if it is not.

        Raises:
            _HandedOut: it carries :data:`TAKEN_LABEL` now (handed out through another
                store since the last round); it is left as it is.
        """
        with anyio.move_on_after(self.check_timeout):
            try:
                sandbox = await self.provider.connect(sandbox_id, resume=False)
                if TAKEN_LABEL in sandbox.info.metadata:
                    raise _HandedOut
                if sandbox.info.state in (SandboxState.PAUSED, SandboxState.PAUSING):
                    await sandbox.resume()
                if sandbox.info.state != SandboxState.RUNNING:
                    return None
                if self.check_on_claim and not (await sandbox.exec(
                        ["true"], timeout=self.check_timeout)).ok:
                    return None
            except SandboxError:
                return None
            return sandbox
        return None

    async def _discard(self, sandbox_id: str) -> None:
        """Kill a member taken but not handed out: in the background while the pool
        runs, so the caller does not wait for it (even when cancelled)."""
        if self._tg is not None:
            self._tg.start_soon(self._kill_quietly, sandbox_id)
        else:
            await self._kill_quietly(sandbox_id)

    @property
    def free(self) -> int:
        """How many free members this process knows of now."""
        return len(self._free)

    # ----------------------------------------------------------- the others

    async def set_spec(self, spec: SandboxSpec) -> None:
        """Make members for ``spec`` from now on; the next round drains the others."""
        self.spec = self._checked(spec)
        self._free.clear()
        self._refill_soon()

    async def drain(self) -> int:
        """Kill every free member of the pool (in any replica's view); returns how many."""
        self._free.clear()
        killed = 0
        for info in await self.provider.list(metadata={POOL_LABEL: self.name}):
            if info.id not in self._taken and TAKEN_LABEL not in info.metadata \
                    and await self._made_here(info.id) and await self._kill_free(info.id):
                killed += 1
        return killed

    async def check(self) -> None:
        """One round of the background task, now: drain members of another spec or
        template build, replace dead and expired ones, kill extras, and refill."""
        async with span("pool.refill", self.provider.name, pool=self.name) as ev:
            await self.store.claim(alive_claim(self.name), self._token,
                                   max(3 * self.interval, self.claim_ttl))
            fingerprint = await self._fingerprint()
            killed = await self._survey(fingerprint)
            ev.update(made=0)
            if len(self._free) < self.size and await self.store.claim(
                    refill_claim(self.name), self._token, self.claim_ttl):
                try:
                    # Count again under the claim: another replica may have just refilled.
                    killed += await self._survey(fingerprint)
                    ev["made"] = await self._make(self.size - len(self._free), fingerprint)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.store.release(refill_claim(self.name), self._token)
            ev.update(free=len(self._free), killed=killed)

    # -------------------------------------------------------------- internals

    def _checked(self, spec: SandboxSpec) -> SandboxSpec:
        for label in OWN_LABELS:
            if label in spec.metadata:
                raise InvalidInput(f"spec.metadata must not set {label!r}: the pool "
                                   "tags its members with it", provider=self.provider.name)
        check_labels({**spec.metadata, POOL_LABEL: self.name, SPEC_LABEL: "0" * 16,
                      EXPIRES_LABEL: "0" * 16, TAKEN_LABEL: "0" * 16},
                     internal=self.provider.internal_labels,
                     provider=self.provider.name)
        return spec

    async def _survey(self, fingerprint: str) -> int:
        """List the members, kill the free ones that are dead, of another fingerprint,
        expired or beyond ``size``, and remember the rest; returns how many it killed."""
        now = time.time()
        members = await self.provider.list(metadata={POOL_LABEL: self.name})
        self._taken &= {i.id for i in members}
        free: list[SandboxInfo] = []
        doomed: list[str] = []
        for info in members:
            if info.id in self._taken:
                continue
            if TAKEN_LABEL in info.metadata:
                self._taken.add(info.id)
                continue
            if not await self._made_here(info.id):
                continue  # its store may have handed it out: not this pool's to touch
            if await self.store.claimed(taken_claim(info.id)):
                self._taken.add(info.id)
                continue
            if (info.state not in LIVE or info.metadata.get(SPEC_LABEL) != fingerprint
                    or expiry(info) <= now):
                doomed.append(info.id)
            else:
                free.append(info)
        free.sort(key=lambda i: (created_time(i), i.id))
        doomed += [i.id for i in free[self.size:]]
        killed = 0
        for sandbox_id in doomed:
            killed += await self._kill_free(sandbox_id)
        self._free = {i.id: i for i in free[:self.size] if i.id not in self._taken}
        return killed

    async def _made_here(self, sandbox_id: str) -> bool:
        """Whether this pool's store can tell if the member was handed out: always
        where the provider labels members as it hands them out (``metadata.update``),
        elsewhere only if the member was made through this store (:func:`made_claim`).
        A member it cannot tell about is never handed out, drained or killed."""
        return self.provider.supports(Capability.METADATA_UPDATE) \
            or await self.store.claimed(made_claim(sandbox_id))

    def _refill_soon(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _maintain(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.check()
            done, self._round_done = self._round_done, anyio.Event()
            if done is not None:
                done.set()
            assert self._wake is not None
            with anyio.move_on_after(self.interval):
                await self._wake.wait()
                # Let the claimer's first calls go before the refill's create, and
                # gather a burst of claims into one round.
                await anyio.sleep(_SETTLE)
            self._wake = anyio.Event()

    async def _make(self, count: int, fingerprint: str) -> int:
        """Make ``count`` members, at most ``starting`` at once; returns how many.

        Making one is shielded from cancellation: a pool that stops waits for the
        members being made, which stay as free members, instead of leaving half-made
        sandboxes behind."""
        made = 0

        async def one() -> None:
            nonlocal made
            async with self._limiter:
                with anyio.CancelScope(shield=True):
                    info = await self._make_one(fingerprint)
                if info is not None:
                    self._free[info.id] = info
                    made += 1
                    await self.store.claim(refill_claim(self.name), self._token,
                                           self.claim_ttl)

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        return made

    async def _make_one(self, fingerprint: str) -> SandboxInfo | None:
        expires = time.time() + self.max_age
        spec = attrs.evolve(self.spec, metadata={
            **self.spec.metadata, POOL_LABEL: self.name, SPEC_LABEL: fingerprint,
            EXPIRES_LABEL: f"{expires:.3f}"})
        try:
            sandbox = await self.provider.create(spec)
        except SandboxError:
            return None
        try:
            if not self.provider.supports(Capability.METADATA_UPDATE):
                await self.store.claim(made_claim(sandbox.id), MADE_TOKEN, TAKEN_TTL)
            # A first command warms what the provider sets up on first use (a
            # connection, a login shell's files); what it says does not matter.
            with contextlib.suppress(SandboxError):
                await sandbox.exec(["true"], timeout=30)
            if self.paused:
                await sandbox.pause()
        except SandboxError:
            await self._kill_quietly(sandbox.id)
            return None
        return sandbox.info

    async def _kill_free(self, sandbox_id: str) -> bool:
        """Kill a free member, unless someone takes it first; whether it did."""
        self._free.pop(sandbox_id, None)
        token = secrets.token_hex(8)
        if not await self.store.claim(taken_claim(sandbox_id), token, self.claim_ttl):
            self._taken.add(sandbox_id)
            return False
        gone = False
        try:
            gone = await self._kill_quietly(sandbox_id)
        finally:
            with anyio.CancelScope(shield=True):
                if gone:  # else the next round tries again
                    await self.store.release(made_claim(sandbox_id), MADE_TOKEN)
                await self.store.release(taken_claim(sandbox_id), token)
        return True

    async def _kill_quietly(self, sandbox_id: str) -> bool:
        """Kill a sandbox, ignoring errors, even when cancelled (for a while); whether
        it is gone."""
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _KILL_BOUND):
            try:
                await self.provider.kill(sandbox_id)
            except SandboxNotFound:
                return True
            except SandboxError:
                return False
            return True
        return False

    async def _fingerprint(self) -> str:
        """The spec's fingerprint, with the id and content of the template it names
        where the provider lists templates, so a rebuilt template drains the pool."""
        template: Any = None
        if self.spec.template is not None and self.provider.supports(
                Capability.TEMPLATES_BUILD):
            with contextlib.suppress(SandboxError):
                found = [t for t in await self.provider.list_templates()
                         if self.spec.template in (t.id, t.name)]
                if found:
                    newest = max(found, key=lambda t: (t.created_at is not None,
                                                       t.created_at, t.id))
                    template = [newest.id, newest.content_hash]
        return fingerprint(self.spec, template)
