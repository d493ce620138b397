"""A :class:`~provider_sdk.manager.WarmPool`'s rounds: look at the members, kill the ones
to go, and make the missing ones, within the pool's own rate.

A round (:meth:`WarmPool.check <provider_sdk.manager.WarmPool.check>`) drains members
made for another spec or template build, kills dead, expired and extra free members,
and makes the missing ones while holding the pool's refill claim. Making is paced twice over:

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
from typing import Any

import anyio
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import RateLimited, SandboxError, SandboxNotFound
from provider_sdk.events import span
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
from provider_sdk.manager._pool_state import PoolState
from provider_sdk.models import SandboxInfo

__all__ = ["BACKOFF_CAP", "MADE_GRACE", "Rounds"]

_KILL_BOUND = 60.0  # seconds a kill of a member may hold the pool
BACKOFF_CAP = 300.0
"""Most seconds a pool waits between rounds that make members, after failed creates."""
MADE_GRACE = 86400.0
"""Seconds a member's record in its pool's store (:func:`made_claim`) outlives its
``max_age``: time for a pool round or the reaper to kill it if it was never handed out."""


class Rounds:
    """The rounds of a ``WarmPool``, over the state it shares with the pool; makes at
    most ``starting`` members at once."""

    def __init__(self, state: PoolState, *, starting: int) -> None:
        self._state = state
        self._limiter = anyio.CapacityLimiter(starting)
        self._budget = 2.0 * state.size
        self._budget_at = time.monotonic()
        self._failed_rounds = 0
        self._not_before = 0.0

    async def round(self) -> None:
        """One round: see :meth:`WarmPool.check <provider_sdk.manager.WarmPool.check>`."""
        state = self._state
        async with span("pool.refill", state.provider.name, pool=state.name) as ev:
            await state.store.claim(alive_claim(state.name), state.token,
                                    max(3 * state.interval, state.claim_ttl))
            fingerprint = await self._fingerprint()
            killed = await self._survey(fingerprint)
            ev.update(made=0)
            wanted = min(state.size - len(state.free), self._allowance())
            if wanted > 0 and time.monotonic() >= self._not_before and await state.store.claim(
                    refill_claim(state.name), state.token, state.claim_ttl):
                try:
                    # Count again under the claim: another replica may have just refilled.
                    killed += await self._survey(fingerprint)
                    wanted = min(state.size - len(state.free), self._allowance())
                    if wanted > 0:
                        ev["made"] = await self._make(wanted, fingerprint)
                finally:
                    with anyio.CancelScope(shield=True, deadline=anyio.current_time() + 5):
                        await state.failures.quietly(
                            "release claim", state.store.release(refill_claim(state.name),
                                                                 state.token))
            ev.update(free=len(state.free), killed=killed)

    # ------------------------------------------------------------------ pace

    def _allowance(self) -> int:
        """How many members the budget allows now (``size`` per ``interval``, at most
        twice ``size`` saved up)."""
        now = time.monotonic()
        size, interval = self._state.size, self._state.interval
        self._budget = min(2.0 * size, self._budget + (now - self._budget_at) * size / interval)
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
        delay = min(BACKOFF_CAP, self._state.interval * 2 ** (self._failed_rounds - 1))
        delay -= delay * 0.25 * random.random()  # replicas that failed together part
        asked = max((f.retry_after or 0.0 for f in failures if isinstance(f, RateLimited)),
                    default=0.0)
        self._not_before = time.monotonic() + max(delay, asked)

    # ---------------------------------------------------------------- survey

    async def _survey(self, fingerprint: str) -> int:
        """List the members, kill the free ones that are dead, of another fingerprint,
        expired or beyond ``size``, and remember the rest; returns how many it killed."""
        state = self._state
        now = await state.clock.now()
        members = await state.provider.list(metadata={POOL_LABEL: state.name})
        state.taken &= {i.id for i in members}
        free: list[SandboxInfo] = []
        doomed: list[str] = []
        for info in members:
            if info.id in state.taken:
                continue  # handed out from here
            if TAKEN_LABEL in info.metadata:
                state.taken.add(info.id)
                continue
            if not await state.made_here(info.id):
                continue  # its store may have handed it out: not this pool's to touch
            if await state.store.claimed(taken_claim(info.id)):
                continue  # being handed out, or its taker died: free once the claim ends
            if (info.state not in LIVE or info.metadata.get(SPEC_LABEL) != fingerprint
                    or expiry(info) <= now):
                doomed.append(info.id)
            else:
                free.append(info)
        free.sort(key=lambda i: (created_time(i), i.id))
        doomed += [i.id for i in free[state.size:]]
        killed = 0
        if doomed:
            bound = {b.sandbox_id for b in await state.store.list()}
            for sandbox_id in doomed:
                if sandbox_id in bound:  # handed to an owner whose manager died after
                    state.taken.add(sandbox_id)  # binding it, before it finished
                    continue
                killed += await self.kill_free(sandbox_id)
        state.free = {i.id: i for i in free[:state.size] if i.id not in state.taken}
        return killed

    # ------------------------------------------------------------------ make

    async def _make(self, count: int, fingerprint: str) -> int:
        """Make ``count`` members, at most ``starting`` at once; returns how many.

        Making one is shielded from cancellation: a pool that stops waits for the
        members being made, which stay as free members, instead of leaving half-made
        sandboxes behind."""
        state = self._state
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
                        state.failures.report("create", exc)
                        return
                    except Exception as exc:
                        failures.append(SandboxError(f"{type(exc).__name__}: {exc}"))
                        state.failures.report("create", exc)
                        return
                state.free[info.id] = info
                made += 1
                await state.failures.quietly("renew claim", state.store.claim(
                    refill_claim(state.name), state.token, state.claim_ttl))

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        self._paced(made, failures)
        return made

    async def _make_one(self, fingerprint: str) -> SandboxInfo:
        state = self._state
        expires = await state.clock.now() + state.max_age
        spec = attrs.evolve(state.spec, metadata={
            **state.spec.metadata, POOL_LABEL: state.name, SPEC_LABEL: fingerprint,
            EXPIRES_LABEL: f"{expires:.3f}"})
        sandbox = await state.provider.create(spec)
        try:
            if not state.provider.supports(Capability.METADATA_UPDATE):
                await state.store.claim(made_claim(sandbox.id), MADE_TOKEN,
                                        state.max_age + MADE_GRACE)
            # A first command warms what the provider sets up on first use (a
            # connection, a login shell's files); what it says does not matter.
            with contextlib.suppress(SandboxError):
                await sandbox.exec(["true"], timeout=30)
            if state.paused:
                await sandbox.pause()
        except BaseException:
            await self.kill_quietly(sandbox.id)
            raise
        return sandbox.info

    # ------------------------------------------------------------------ kill

    async def kill_free(self, sandbox_id: str) -> bool:
        """Kill a free member, unless someone takes it first; whether it did."""
        state = self._state
        state.free.pop(sandbox_id, None)
        token = secrets.token_hex(8)
        if not await state.store.claim(taken_claim(sandbox_id), token, state.claim_ttl):
            return False  # taken meanwhile
        gone = False
        try:
            gone = await self.kill_quietly(sandbox_id)
        finally:
            with anyio.CancelScope(shield=True, deadline=anyio.current_time() + 5):
                if gone:  # else the next round tries again
                    await state.failures.quietly("release claim", state.store.release(
                        made_claim(sandbox_id), MADE_TOKEN))
                await state.failures.quietly("release claim", state.store.release(
                    taken_claim(sandbox_id), token))
        return True

    async def kill_quietly(self, sandbox_id: str) -> bool:
        """Kill a sandbox, ignoring errors (counted), even when cancelled (for a
        while); whether it is gone."""
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _KILL_BOUND):
            try:
                await self._state.provider.kill(sandbox_id)
            except SandboxNotFound:
                return True
            except Exception as exc:
                self._state.failures.report("kill", exc)
                return False
            return True
        return False

    async def _fingerprint(self) -> str:
        """The spec's fingerprint, with the id and content of the template it names
        where the provider lists templates, so a rebuilt template drains the pool."""
        state = self._state
        template: Any = None
        if state.spec.template is not None and state.provider.supports(
                Capability.TEMPLATES_BUILD):
            with contextlib.suppress(SandboxError):
                found = [t for t in await state.provider.list_templates()
                         if state.spec.template in (t.id, t.name)]
                if found:
                    newest = max(found, key=lambda t: (t.created_at is not None,
                                                       t.created_at, t.id))
                    template = [newest.id, newest.content_hash]
        return fingerprint(state.spec, template)
