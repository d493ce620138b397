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
  exactly one caller wins; that claim stays until the member is too old to hand out
  anyway (it expires with the member), so the member is never handed out again (where
  labels change after create it also gets :data:`TAKEN_LABEL`);
- where labels cannot change after create, only the store a member was made through
  knows whether it was handed out: a pool records the members it makes
  (:func:`made_claim`, until a day past ``max_age``), hands out, drains and kills only
  those its store made, and drops the record of one it handed out;
- members are made only while holding the pool's refill claim (:func:`refill_claim`),
  and the refiller counts the free members first, so the pool keeps at most ``size``
  however many replicas run it (a refiller that dies mid-round can leave extras; the
  next round kills them); it makes at most ``size`` per ``interval``, and backs off
  after failed creates (``_pool_rounds``);
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

Every error that leaves a pool is a :class:`~provider_sdk.errors.SandboxError`; what
fails in its background task is counted (:attr:`WarmPool.failures`) and logged, never
raised into the application's task group.

This module owns the pool, its lifetime and its claims; the pool is composed of the
state it shares with its rounds (``_pool_state``) and the rounds themselves
(``_pool_rounds``), an object it makes and calls. It must not know any provider or
store by name, and it does not bind owners (the manager does).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import anyio
import anyio.abc
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, OperationTimeout, SandboxError
from provider_sdk.events import span
from provider_sdk.labels import check_labels
from provider_sdk.manager._clock import StoreClock
from provider_sdk.manager._errors import Failures, typed
from provider_sdk.manager._pool_members import (
    EXPIRES_LABEL,
    MADE_TOKEN,
    OWN_LABELS,
    POOL_LABEL,
    SPEC_LABEL,
    TAKEN_LABEL,
    ClaimedSandbox,
    alive_claim,
    expiry,
    made_claim,
    refill_claim,
    taken_claim,
)
from provider_sdk.manager._pool_rounds import Rounds
from provider_sdk.manager._pool_state import PoolState
from provider_sdk.manager.store import BindingStore, MemoryStore
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState, _env_map
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = ["EXPIRES_LABEL", "POOL_LABEL", "SPEC_LABEL", "TAKEN_LABEL", "ClaimedSandbox",
           "WarmPool", "alive_claim", "refill_claim", "taken_claim"]

_SETTLE = 0.2  # seconds a round waits after a claim wakes it

Finish = Callable[[], Coroutine[Any, Any, None]]
"""What completes a member's hand-out once its taker recorded it (a manager: bound it)."""


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
            pool (a claim starts one shortly after). The pool makes ``size`` members
            per ``interval`` at most (in bursts of up to twice ``size``); after failed
            creates it makes none for ``interval``, then twice that, and so on (up to
            five minutes, and at least as long as a ``RateLimited`` error asks).
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
        self.failures = Failures("pool", provider.name)
        """Failures of the background task (rounds, creates, kills), counted by what
        failed; each is also logged as ``sandbox.pool.background.failed``."""
        self._tg: anyio.abc.TaskGroup | None = None
        self._wake: anyio.Event | None = None
        self._round_done: anyio.Event | None = None  # made in the event loop, on start
        self._state = PoolState(
            provider=provider, store=self.store, name=name, size=size,
            max_age=self.max_age, paused=paused, interval=self.interval,
            claim_ttl=self.claim_ttl, token=secrets.token_hex(8), failures=self.failures,
            clock=StoreClock(self.store), spec=self._checked(spec or SandboxSpec()))
        self._rounds = Rounds(self._state, starting=starting)

    @property
    def spec(self) -> SandboxSpec:
        """The spec members are made for (:meth:`set_spec` changes it)."""
        return self._state.spec

    @spec.setter
    def spec(self, spec: SandboxSpec) -> None:
        self._state.spec = spec

    @property
    def _free(self) -> dict[str, SandboxInfo]:
        """The free members this process knows of, as last seen, oldest first."""
        return self._state.free

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
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + 5):
            await self.failures.quietly("release claim",
                                        self.store.release(alive_claim(self.name),
                                                           self._state.token))

    @property
    def running(self) -> bool:
        """Whether the background task runs."""
        return self._tg is not None

    async def wait_filled(self, timeout: float | None = None) -> None:
        """Wait until this process knows of ``size`` free members.

        Raises:
            RuntimeError: the pool is not running.
            OperationTimeout: not within ``timeout`` seconds (a ``TimeoutError``).
        """
        with anyio.move_on_after(timeout) as scope:
            while len(self._free) < self.size:
                if self._tg is None or self._round_done is None:
                    raise RuntimeError("the WarmPool is not running")
                await self._round_done.wait()
        if scope.cancelled_caught:
            raise OperationTimeout(f"the pool {self.name!r} was not filled within "
                                   f"{timeout:g}s ({len(self._free)} of {self.size} free)",
                                   provider=self.provider.name)

    async def check(self) -> None:
        """One round of the background task, now: drain members of another spec or
        template build, replace dead and expired ones, kill extras, and refill (within
        the pool's rate, and not while it backs off after failed creates).

        Raises:
            SandboxError: the provider or the store failed (any other error too, as a
                :class:`~provider_sdk.errors.SandboxError`).
        """
        with typed("pool round", self.provider.name):
            await self._rounds.round()

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
            SandboxError: the provider or the store failed (as for ``create``).
        """
        checked = _env_map(env)
        labels = self._claim_labels(metadata)
        sandbox = await self.take(metadata=labels)
        if sandbox is None:
            with typed("pool claim", self.provider.name):
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
        taken = await self._take_for(metadata)
        if taken is None:
            return None
        sandbox, finish = taken
        with typed("pool claim", self.provider.name, sandbox.id):
            await finish()
        return sandbox

    async def _take_for(self, metadata: Mapping[str, str] | None
                        ) -> tuple[Sandbox, Finish] | None:
        """:meth:`take`, less the last step of the hand-out, which is returned for the
        taker to run once it has recorded the member as its own (a manager: once it
        bound it). A taker that dies before leaves the member to be killed once it is
        too old, not to run on unowned."""
        labels = self._claim_labels(metadata)
        with typed("pool claim", self.provider.name):
            async with span("pool.claim", self.provider.name, pool=self.name) as ev:
                taken = await self._take(labels)
                ev["hit"] = taken is not None
                if taken is not None:
                    ev["sandbox_id"] = taken[0].id
        return taken

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

    async def _take(self, labels: Mapping[str, str]) -> tuple[Sandbox, Finish] | None:
        while self._free:
            sandbox = await self._take_one()
            if sandbox is None:
                return None
            marks = dict(labels)
            if self.provider.supports(Capability.METADATA_UPDATE):  # the store may forget
                marks[TAKEN_LABEL] = f"{await self._now():.3f}"
            if marks:
                try:
                    await sandbox.set_metadata(marks, reread=False)  # its labels are ours
                except SandboxError:
                    await self._discard(sandbox.id)
                    continue
                except BaseException:
                    await self._discard(sandbox.id)
                    raise
            return sandbox, self._finisher(sandbox.id)
        self._refill_soon()
        return None

    def _finisher(self, sandbox_id: str) -> Finish:
        """The last step of a hand-out: where the provider cannot label the member, the
        pool's store forgets that it made it, so no pool or reaper takes it for free
        once its taken claim runs out."""
        async def finish() -> None:
            if not self.provider.supports(Capability.METADATA_UPDATE):
                await self.store.release(made_claim(sandbox_id), MADE_TOKEN)

        return finish

    async def _take_one(self) -> Sandbox | None:
        while self._free:
            sandbox_id = next(iter(self._free))
            info = self._free.pop(sandbox_id)
            now = await self._now()
            if sandbox_id in self._state.taken or expiry(info) <= now:
                continue  # the next round replaces it
            # The claim lasts as long as the member may be handed out, and as long again
            # as a hand-out may take (its check, and a round's claim): it expires with
            # the member, and a taker that dies leaves it to the next round or reap.
            life = min(expiry(info) - now, self.max_age) + self.check_timeout + self.claim_ttl
            if not await self.store.claim(taken_claim(sandbox_id), secrets.token_hex(8),
                                          life):
                continue  # another caller's now
            self._state.taken.add(sandbox_id)
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

    async def _now(self) -> float:
        """The store's time (as estimated), without a round trip once it is known."""
        clock = self._state.clock
        cached = clock.cached()
        return cached if cached is not None else await clock.now()

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
            self._tg.start_soon(self._rounds.kill_quietly, sandbox_id)
        else:
            await self._rounds.kill_quietly(sandbox_id)

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
        """Kill every free member of the pool (in any replica's view); returns how many.

        Raises:
            SandboxError: the provider or the store failed.
        """
        self._free.clear()
        killed = 0
        with typed("pool drain", self.provider.name):
            bound = {b.sandbox_id for b in await self.store.list()}
            for info in await self.provider.list(metadata={POOL_LABEL: self.name}):
                if info.id not in self._state.taken and info.id not in bound \
                        and TAKEN_LABEL not in info.metadata \
                        and await self._state.made_here(info.id) \
                        and await self._rounds.kill_free(info.id):
                    killed += 1
        return killed

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

    def _refill_soon(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _maintain(self) -> None:
        while True:
            await self.failures.quietly("round", self._rounds.round())
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
