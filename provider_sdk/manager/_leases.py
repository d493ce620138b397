"""Claims held while working, and the use leases that keep idle sweeps off a sandbox in
use.

A claim (an owner's, a snapshot's) is held only as long as the work under it: a task
renews it every third of ``claim_ttl`` (:meth:`Claims.holding`), so a replica that
dies holding one frees it within ``claim_ttl`` seconds, and one that works for minutes
keeps it. Letting go of a claim (:meth:`Claims.let_go`) never holds up a caller: it
runs in the background with a deadline of its own, and a claim not released runs out.

Where the manager sweeps idle sandboxes (``idle_pause`` on a provider without
``lifecycle.auto_pause``), every use of an owner's sandbox renews the owner's *use
lease* (:func:`~provider_sdk.manager._claims.use_claim`), a claim held jointly by every
user for ``idle_pause`` and a little more, by the store's clock; a sweep pauses only a
sandbox whose lease has run out. The lease is renewed while a command runs, and the
order of the steps makes the check safe against a sweep in another replica:

- a sweep takes the owner's claim, marks the binding paused, then checks the lease;
- a command whose lease had run out takes the lease, then reads the binding; if a sweep
  marked it, it waits for the sweep's claim (so the pause is done) and resumes the
  sandbox, then runs.

One of the two always sees the other's first step, so a sweep never pauses a sandbox
under a command that started. A lease that ran out while a command ran (the store was
away longer than the lease) is noticed at its next renewal, and a sandbox a sweep paused
meanwhile is resumed, so the command goes on.

This module must not know any provider or store by name.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import attrs

from provider_sdk.errors import SandboxNotFound
from provider_sdk.events import span
from provider_sdk.manager._chores import Chores
from provider_sdk.manager._claims import USE_TOKEN, owner_claim, use_claim
from provider_sdk.manager._shared import Shared
from provider_sdk.manager.store import Binding
from provider_sdk.models import SandboxState
from provider_sdk.retry import Attempts, Backoff

__all__ = ["Claims", "Leases"]

T = TypeVar("T")

_RELEASE_BOUND = 5.0
"""Seconds a claim's release in the background may take (it runs out anyway)."""
_INLINE_RELEASE_BOUND = 0.25
"""Seconds a release may hold a caller, where there is no background to hand it to."""
_KILLS_BOUND = 60.0
"""Seconds more a release in the background may take to kill what goes before it."""
_WAIT_BACKOFF = Backoff(initial=0.01, factor=1.5, cap=0.25)
_USES_KEPT = 4096
"""How many owners' use this process keeps before it forgets the idle ones."""


@attrs.define
class _Use:
    """What this process knows of the use of one owner's sandbox (monotonic times)."""

    sandbox_id: str
    busy: int = 0
    used: float = -math.inf
    """When it was last used here."""
    stored: float = -math.inf
    """When its use was last written to the binding (``last_used``)."""
    renewed: float = -math.inf
    """When the use lease was last renewed from here."""
    until: float = -math.inf
    """Until when the lease surely holds: the last renewal's start plus its time."""


class Claims:
    """Claims a ``SandboxManager`` holds while working: renewed while the work goes on,
    let go of off the caller's path (a chore while the manager runs)."""

    def __init__(self, shared: Shared, chores: Chores) -> None:
        self._shared = shared
        self._chores = chores

    async def holding(self, name: str, token: str, work: Callable[[], Awaitable[T]],
                      ttl: float | None = None) -> T:
        """Run ``work`` while renewing the claim ``name`` (which ``token`` holds) for
        ``ttl`` (default ``claim_ttl``) every third of that. The claim is not released
        here."""
        outcome: list[T] = []
        failed: list[Exception] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renewing, name, token, ttl or self._shared.claim_ttl)
            try:
                outcome.append(await work())
            except Exception as exc:  # raised below, not as the task group's
                failed.append(exc)
            tg.cancel_scope.cancel()
        if failed:
            raise failed[0]
        return outcome[0]

    async def _renewing(self, name: str, token: str, ttl: float) -> None:
        period = ttl / 3
        while True:
            await anyio.sleep(period)
            with anyio.move_on_after(period):
                await self._shared.failures.quietly(
                    "renew claim", self._shared.store.claim(name, token, ttl))

    async def let_go(self, name: str, token: str, kill_first: Sequence[str] = ()) -> None:
        """Release a claim ``token`` may hold, off the caller's path: in the background
        while the manager runs, else for at most a quarter of a second. The sandboxes in
        ``kill_first`` (made or found under the claim, and nobody's) are killed before,
        still under the claim, so nobody adopts one meanwhile."""
        ids = tuple(kill_first)
        if self._chores.running:
            bound = _RELEASE_BOUND + (_KILLS_BOUND if ids else 0.0)
            self._chores.queue(self._release_bounded(name, token, ids, bound),
                               "release claim")
        else:
            await self._release_bounded(name, token, ids, _INLINE_RELEASE_BOUND)

    async def _release_bounded(self, name: str, token: str, kill_first: tuple[str, ...],
                               bound: float) -> None:
        failures = self._shared.failures
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + bound):
            if kill_first:  # the claim is renewed while they go
                await failures.quietly("kill", self.holding(
                    name, token, functools.partial(self._kill_each, kill_first)))
            await failures.quietly("release claim", self._shared.store.release(name, token))

    async def _kill_each(self, sandbox_ids: tuple[str, ...]) -> None:
        for sandbox_id in sandbox_ids:
            await self._shared.failures.quietly("kill",
                                                self._shared.provider.kill(sandbox_id))

    async def wait_claimed_by_nobody(self, owner: str) -> None:
        """Wait until nobody else holds the owner's claim (for at most ``claim_ttl``:
        a holder that died lets it run out), taking and dropping it once."""
        token = secrets.token_hex(8)
        with anyio.move_on_after(self._shared.claim_ttl):
            async for _ in Attempts(_WAIT_BACKOFF):
                if await self._shared.store.claim(owner_claim(owner), token,
                                                  self._shared.claim_ttl):
                    break
        await self.let_go(owner_claim(owner), token)


class Leases:
    """What a ``SandboxManager``'s process knows of the use of its owners' sandboxes,
    and their use leases.

    Args:
        idle_pause: the manager's ``idle_pause``.
        sweep_idle: whether the manager sweeps idle sandboxes itself (and so keeps use
            leases).
        records_use: whether the use is written to the bindings (the snapshot policy
            reads it).
        touch_every: how often a use is renewed or written (``math.inf``: never read).
    """

    def __init__(self, shared: Shared, chores: Chores, claims: Claims, *,
                 idle_pause: float | None, sweep_idle: bool, records_use: bool,
                 touch_every: float) -> None:
        self._shared = shared
        self._chores = chores
        self._claims = claims
        self.idle_pause = idle_pause
        self.sweep_idle = sweep_idle
        self.records_use = records_use
        self.touch_every = touch_every
        self._uses: dict[str, _Use] = {}

    @property
    def lease_ttl(self) -> float:
        """How long a use lease lasts after a renewal: renewals come at most every
        ``touch_every``, so a sandbox is paused between ``idle_pause`` and about a
        half more after its last use."""
        return (self.idle_pause or 0.0) + 2 * self.touch_every

    @property
    def tracks_use(self) -> bool:
        """Whether anything reads what this process knows of use: the idle sweeps'
        leases, or the snapshot policy's ``last_used``."""
        return self.touch_every != math.inf

    def use_of(self, owner: str, sandbox_id: str) -> _Use:
        use = self._uses.get(owner)
        if use is None or use.sandbox_id != sandbox_id:
            if len(self._uses) >= _USES_KEPT:
                self._forget_idle_uses()
            use = self._uses[owner] = _Use(sandbox_id=sandbox_id)
        return use

    def drop(self, owner: str) -> None:
        """Forget what this process knows of the owner's use."""
        self._uses.pop(owner, None)

    def _forget_idle_uses(self) -> None:
        """Drop what nothing needs any more: uses not running, whose lease has run out
        and whose use was written to the store (or is not read)."""
        now = time.monotonic()
        for owner, use in list(self._uses.items()):
            if not use.busy and use.until < now and (
                    not self.records_use or use.used <= use.stored):
                del self._uses[owner]

    def note_use(self, owner: str, sandbox_id: str) -> None:
        """An acquire or a command: renew the lease in the background when due."""
        if not self.tracks_use:
            return
        use = self.use_of(owner, sandbox_id)
        now = use.used = time.monotonic()
        if self.sweep_idle and self._chores.running \
                and now - use.renewed >= self.touch_every:
            use.renewed = now  # one renewal on its way is enough
            self._chores.queue(self._keep_use(owner, use), "renew use")

    async def using(self, owner: str, sandbox_id: str, call: Callable[[], Awaitable[T]],
                    resume: Callable[[], Awaitable[object]]) -> T:
        """Run ``call`` (a command, a file operation) as a use of the owner's sandbox:
        under a use lease where the manager sweeps idle sandboxes, renewed while it runs
        (see the module's docstring); ``resume`` resumes the sandbox if a sweep paused it
        before the call could start."""
        if not self.tracks_use:
            return await call()
        use = self.use_of(owner, sandbox_id)
        use.busy += 1
        use.used = time.monotonic()
        try:
            if not self.sweep_idle:
                return await call()
            if use.until <= time.monotonic():  # run out, or never taken: take it, look
                # A store that does not answer holds the call up for a claim's time at
                # most: the command runs then, and its timeout still bounds it.
                with anyio.move_on_after(self._shared.claim_ttl):
                    await self._keep_use(owner, use, resume=resume)
            elif time.monotonic() - use.renewed >= self.touch_every:
                self.note_use(owner, sandbox_id)
            if self._chores.running:  # the manager's keeper renews it while it runs
                return await call()
            return await self._claims.holding(use_claim(owner), USE_TOKEN, call,
                                              self.lease_ttl)
        finally:
            use.busy -= 1
            use.used = time.monotonic()

    async def _keep_use(self, owner: str, use: _Use,
                        resume: Callable[[], Awaitable[object]] | None = None) -> None:
        """Renew the use lease; if it had run out, read the binding, and resume the
        sandbox if a sweep paused it (after the sweep is done)."""
        store, provider = self._shared.store, self._shared.provider
        start = time.monotonic()
        use.renewed = start
        held = use.until > start
        await store.claim(use_claim(owner), USE_TOKEN, self.lease_ttl)
        use.until = max(use.until, start + self.lease_ttl)
        if held:
            return
        binding = await store.get(owner)
        if binding is None or binding.sandbox_id != use.sandbox_id or not binding.paused:
            return
        # A sweep pausing it holds the claim.
        await self._claims.wait_claimed_by_nobody(owner)
        async with span("manager.resume", provider.name, use.sandbox_id, owner=owner):
            try:
                sandbox = await provider.connect(use.sandbox_id, resume=False)
                if sandbox.info.state in (SandboxState.PAUSED, SandboxState.PAUSING):
                    await (resume() if resume is not None else sandbox.resume())
            except SandboxNotFound:
                return  # the next acquire replaces it
        now = await self._shared.clock.now()
        await self._shared.update(owner, use.sandbox_id,
                                  lambda b: attrs.evolve(b, paused=False, last_used=now))

    def used_here(self, binding: Binding) -> float:
        """When this process last used the bound sandbox, on the store's clock (as
        estimated; 0 if it has not, or the offset is not known yet)."""
        use = self._uses.get(binding.owner)
        now = self._shared.clock.cached()
        if use is None or use.sandbox_id != binding.sandbox_id or now is None \
                or use.used == -math.inf:
            return 0.0
        return now - (time.monotonic() - use.used)

    def in_use_here(self, owner: str, sandbox_id: str) -> bool:
        """Whether this process uses the sandbox now, or holds its lease."""
        use = self._uses.get(owner)
        return use is not None and use.sandbox_id == sandbox_id and (
            use.busy > 0 or use.until > time.monotonic())

    async def keeper(self) -> None:
        """The manager's background loop: renew the leases of sandboxes in use, and
        write their use to the bindings (for the snapshot policy) when due."""
        failures = self._shared.failures
        while True:
            await anyio.sleep(self.touch_every / 2)
            now = time.monotonic()
            for owner, use in list(self._uses.items()):
                if self.sweep_idle and (use.busy or use.used > use.renewed) \
                        and now - use.renewed >= self.touch_every:
                    use.renewed = now
                    await failures.quietly("renew use", self._keep_use(owner, use))
                if self.records_use and use.used > use.stored \
                        and now - use.stored >= self.touch_every:
                    use.stored = now
                    await failures.quietly("record use", self._record_use(owner, use))
            self._forget_idle_uses()

    async def _record_use(self, owner: str, use: _Use) -> None:
        used = await self._shared.clock.now() - (time.monotonic() - use.used)
        await self._shared.update(owner, use.sandbox_id,
                                  lambda b: attrs.evolve(b, last_used=max(b.last_used, used)))
