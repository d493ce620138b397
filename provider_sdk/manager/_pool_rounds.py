"""A :class:`~provider_sdk.manager.WarmPool`'s rounds: look at the members, kill the ones
to go, and make the missing ones, within the pool's own rate.

A round (:meth:`RoundsMixin.check`) drains members made for another spec or template
build, kills dead, expired and extra free members, and makes the missing ones while
holding the pool's refill claim. Making is paced twice over:

- a budget: ``size`` members per ``interval``, however often claims wake the round,
  with room for a burst of twice ``size`` (the first fill, and a full pool claimed at
  once), so a pool never makes sandboxes faster than its own rate for long (claims
  beyond it go to the callers' own creates, as misses);
- a backoff: after a round whose creates failed, no member is made for ``interval``,
  then twice that, and so on up to :data:`BACKOFF_CAP` (and never before a
  ``RateLimited`` error's ``retry_after``); one success ends it.

A free member is killed only while holding its taken claim, and never one a binding
holds (a manager may have bound it and died before finishing its hand-out).

This module must not know any provider or store by name.
"""

from __future__ import annotations

import contextlib
import math
import random
import secrets
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import RateLimited, SandboxError, SandboxNotFound
from provider_sdk.events import span
from provider_sdk.manager._clock import StoreClock
from provider_sdk.manager._errors import Failures, typed
from provider_sdk.manager._pool_members import (
    EXPIRES_LABEL,
    LIVE,
    MADE_TOKEN,
    POOL_LABEL,
    SPEC_LABEL,
    TAKEN_LABEL,
    alive_claim,
    created_time,
    expiry,
    fingerprint,
    made_claim,
    refill_claim,
    taken_claim,
)
from provider_sdk.manager.store import BindingStore
from provider_sdk.models import SandboxInfo, SandboxSpec
from provider_sdk.provider import SandboxProvider

__all__ = ["BACKOFF_CAP", "MADE_GRACE", "RoundsMixin"]

_KILL_BOUND = 60.0  # seconds a kill of a member may hold the pool
BACKOFF_CAP = 300.0
"""Most seconds a pool waits between rounds that make members, after failed creates."""
MADE_GRACE = 86400.0
"""Seconds a member's record in its pool's store (:func:`made_claim`) outlives its
``max_age``: time for a pool round or the reaper to kill it if it was never handed out."""


class RoundsMixin:
    """The rounds of ``WarmPool``."""

    provider: SandboxProvider
    store: BindingStore
    name: str
    spec: SandboxSpec
    size: int
    max_age: float
    paused: bool
    interval: float
    claim_ttl: float
    failures: Failures
    _token: str
    _free: dict[str, SandboxInfo]
    _taken: set[str]
    _limiter: anyio.CapacityLimiter
    _clock: StoreClock
    _budget: float
    _budget_at: float
    _failed_rounds: int
    _not_before: float

    if TYPE_CHECKING:
        async def _made_here(self, sandbox_id: str) -> bool: ...

    async def check(self) -> None:
        """One round of the background task, now: drain members of another spec or
        template build, replace dead and expired ones, kill extras, and refill (within
        the pool's rate, and not while it backs off after failed creates).

        Raises:
            SandboxError: the provider or the store failed (any other error too, as a
                :class:`~provider_sdk.errors.SandboxError`).
        """
        with typed("pool round", self.provider.name):
            await self._round()

    async def _round(self) -> None:
        async with span("pool.refill", self.provider.name, pool=self.name) as ev:
            await self.store.claim(alive_claim(self.name), self._token,
                                   max(3 * self.interval, self.claim_ttl))
            fingerprint = await self._fingerprint()
            killed = await self._survey(fingerprint)
            ev.update(made=0)
            wanted = min(self.size - len(self._free), self._allowance())
            if wanted > 0 and time.monotonic() >= self._not_before and await self.store.claim(
                    refill_claim(self.name), self._token, self.claim_ttl):
                try:
                    # Count again under the claim: another replica may have just refilled.
                    killed += await self._survey(fingerprint)
                    wanted = min(self.size - len(self._free), self._allowance())
                    if wanted > 0:
                        ev["made"] = await self._make(wanted, fingerprint)
                finally:
                    with anyio.CancelScope(shield=True, deadline=anyio.current_time() + 5):
                        await self.failures.quietly(
                            "release claim", self.store.release(refill_claim(self.name),
                                                                self._token))
            ev.update(free=len(self._free), killed=killed)

    # ------------------------------------------------------------------ pace

    def _allowance(self) -> int:
        """How many members the budget allows now (``size`` per ``interval``, at most
        twice ``size`` saved up)."""
        now = time.monotonic()
        self._budget = min(2.0 * self.size,
                           self._budget + (now - self._budget_at) * self.size / self.interval)
        self._budget_at = now
        return math.floor(self._budget)

    def _paced(self, made: int, failures: list[SandboxError]) -> None:
        """After a round's creates: spend the budget, and back off if any failed."""
        self._budget -= made + len(failures)
        if not failures:
            if made:
                self._failed_rounds = 0
            return
        if made:
            self._failed_rounds = 0
        self._failed_rounds += 1
        delay = min(BACKOFF_CAP, self.interval * 2 ** (self._failed_rounds - 1))
        delay -= delay * 0.25 * random.random()  # replicas that failed together part
        asked = max((f.retry_after or 0.0 for f in failures if isinstance(f, RateLimited)),
                    default=0.0)
        self._not_before = time.monotonic() + max(delay, asked)

    # ---------------------------------------------------------------- survey

    async def _survey(self, fingerprint: str) -> int:
        """List the members, kill the free ones that are dead, of another fingerprint,
        expired or beyond ``size``, and remember the rest; returns how many it killed."""
        now = await self._clock.now()
        members = await self.provider.list(metadata={POOL_LABEL: self.name})
        self._taken &= {i.id for i in members}
        free: list[SandboxInfo] = []
        doomed: list[str] = []
        for info in members:
            if info.id in self._taken:
                continue  # handed out from here
            if TAKEN_LABEL in info.metadata:
                self._taken.add(info.id)
                continue
            if not await self._made_here(info.id):
                continue  # its store may have handed it out: not this pool's to touch
            if await self.store.claimed(taken_claim(info.id)):
                continue  # being handed out, or its taker died: free once the claim ends
            if (info.state not in LIVE or info.metadata.get(SPEC_LABEL) != fingerprint
                    or expiry(info) <= now):
                doomed.append(info.id)
            else:
                free.append(info)
        free.sort(key=lambda i: (created_time(i), i.id))
        doomed += [i.id for i in free[self.size:]]
        killed = 0
        if doomed:
            bound = {b.sandbox_id for b in await self.store.list()}
            for sandbox_id in doomed:
                if sandbox_id in bound:  # handed to an owner whose manager died after
                    self._taken.add(sandbox_id)  # binding it, before it finished
                    continue
                killed += await self._kill_free(sandbox_id)
        self._free = {i.id: i for i in free[:self.size] if i.id not in self._taken}
        return killed

    # ------------------------------------------------------------------ make

    async def _make(self, count: int, fingerprint: str) -> int:
        """Make ``count`` members, at most ``starting`` at once; returns how many.

        Making one is shielded from cancellation: a pool that stops waits for the
        members being made, which stay as free members, instead of leaving half-made
        sandboxes behind."""
        made = 0
        failures: list[SandboxError] = []

        async def one() -> None:
            nonlocal made
            async with self._limiter:
                with anyio.CancelScope(shield=True):
                    try:
                        info = await self._make_one(fingerprint)
                    except SandboxError as exc:
                        failures.append(exc)
                        self.failures.report("create", exc)
                        return
                    except Exception as exc:
                        failures.append(SandboxError(f"{type(exc).__name__}: {exc}"))
                        self.failures.report("create", exc)
                        return
                self._free[info.id] = info
                made += 1
                await self.failures.quietly("renew claim", self.store.claim(
                    refill_claim(self.name), self._token, self.claim_ttl))

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        self._paced(made, failures)
        return made

    async def _make_one(self, fingerprint: str) -> SandboxInfo:
        expires = await self._clock.now() + self.max_age
        spec = attrs.evolve(self.spec, metadata={
            **self.spec.metadata, POOL_LABEL: self.name, SPEC_LABEL: fingerprint,
            EXPIRES_LABEL: f"{expires:.3f}"})
        sandbox = await self.provider.create(spec)
        try:
            if not self.provider.supports(Capability.METADATA_UPDATE):
                await self.store.claim(made_claim(sandbox.id), MADE_TOKEN,
                                       self.max_age + MADE_GRACE)
            # A first command warms what the provider sets up on first use (a
            # connection, a login shell's files); what it says does not matter.
            with contextlib.suppress(SandboxError):
                await sandbox.exec(["true"], timeout=30)
            if self.paused:
                await sandbox.pause()
        except BaseException:
            await self._kill_quietly(sandbox.id)
            raise
        return sandbox.info

    # ------------------------------------------------------------------ kill

    async def _kill_free(self, sandbox_id: str) -> bool:
        """Kill a free member, unless someone takes it first; whether it did."""
        self._free.pop(sandbox_id, None)
        token = secrets.token_hex(8)
        if not await self.store.claim(taken_claim(sandbox_id), token, self.claim_ttl):
            return False  # taken meanwhile
        gone = False
        try:
            gone = await self._kill_quietly(sandbox_id)
        finally:
            with anyio.CancelScope(shield=True, deadline=anyio.current_time() + 5):
                if gone:  # else the next round tries again
                    await self.failures.quietly("release claim", self.store.release(
                        made_claim(sandbox_id), MADE_TOKEN))
                await self.failures.quietly("release claim", self.store.release(
                    taken_claim(sandbox_id), token))
        return True

    async def _kill_quietly(self, sandbox_id: str) -> bool:
        """Kill a sandbox, ignoring errors (counted), even when cancelled (for a
        while); whether it is gone."""
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _KILL_BOUND):
            try:
                await self.provider.kill(sandbox_id)
            except SandboxNotFound:
                return True
            except Exception as exc:
                self.failures.report("kill", exc)
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
