"""What the lookup chain's fault tests put around the local provider and the store:
a provider whose data plane answers busy, whose connect refuses or reports a state,
that runs a hook during a create or a list; a store where another replica holds or
takes over the owner's claim, rewrites the binding, or goes away. Used by
``test_lookup_faults.py`` and ``test_lookup_races.py``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from provider_sdk.errors import (
    SandboxError,
    Unavailable,
)
from provider_sdk.local import LocalProvider
from provider_sdk.manager import Binding, MemoryStore, SandboxManager
from provider_sdk.models import FileInfo, SandboxInfo, SandboxSpec, SandboxState

__all__ = ["FaultyProvider", "Hook", "ScriptedStore", "acquired_level", "bind_as_another",
           "bound_sandbox", "faulty_in", "two_sandboxes"]

Hook = Callable[[], Awaitable[None]]


class FaultyProvider(LocalProvider):
    """A local provider whose data plane answers ``busy`` (the errors, one per probe)
    or is unavailable for ``busy_for`` seconds after its first probe; whose connect
    raises ``refused`` for a sandbox; whose connect and list report the
    sandboxes in ``states`` in the state given there (the backend's word); that
    counts resumes and creates and runs ``before_create``, ``after_create`` (given the
    new sandbox's id) and ``during_list`` once."""

    def __init__(self, home: Path) -> None:
        super().__init__(home=home)
        self.probes: dict[str, list[float]] = {}
        self.busy: dict[str, list[SandboxError]] = {}
        self.busy_for: dict[str, float] = {}
        self.refused: dict[str, SandboxError] = {}
        self.states: dict[str, SandboxState] = {}
        self.resumed: list[str] = []
        self.created = 0
        self.before_create: Hook | None = None
        self.after_create: Callable[[str], Awaitable[None]] | None = None
        self.during_list: Hook | None = None

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        times = self.probes.setdefault(sandbox_id, [])
        times.append(time.monotonic())
        if self.busy.get(sandbox_id):
            raise self.busy[sandbox_id].pop(0)
        if time.monotonic() < times[0] + self.busy_for.get(sandbox_id, 0.0):
            raise Unavailable("busy", provider=self.name, sandbox_id=sandbox_id)
        return await super()._stat(sandbox_id, path)

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        if sandbox_id in self.refused:
            raise self.refused[sandbox_id]
        info = await super()._info(sandbox_id)
        return attrs.evolve(info, state=self.states.get(sandbox_id, info.state))

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> list[SandboxInfo]:
        if self.during_list is not None:
            hook, self.during_list = self.during_list, None
            await hook()
        found = await super()._list(metadata=metadata, state=state)
        return [attrs.evolve(i, state=self.states.get(i.id, i.state)) for i in found]

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        self.resumed.append(sandbox_id)
        return await super()._resume(sandbox_id)

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        self.created += 1
        if self.before_create is not None:
            hook, self.before_create = self.before_create, None
            await hook()
        info = await super()._create(spec)
        if self.after_create is not None:
            then, self.after_create = self.after_create, None
            await then(info.id)
        return info


class ScriptedStore(MemoryStore):
    """A store whose owner claims someone else may hold (``refused`` is set at the first
    refusal, and ``refusals`` has the time of each), that runs ``before_claim`` once
    before an owner's claim is taken, whose next ``touched`` fenced writes each find the
    binding just rewritten by another replica, whose next fenced write finds the claim
    taken over by another replica when ``taken_over``, and that fails every call while
    ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = anyio.Event()
        self.refusals: list[float] = []
        self.before_claim: Hook | None = None
        self.touched = 0
        self.taken_over = False
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("the store is down", provider="memory-store")

    async def claim(self, name: str, token: str, ttl: float) -> bool:
        self._check()
        if name.startswith("owner:") and self.before_claim is not None:
            hook, self.before_claim = self.before_claim, None
            await hook()
        taken = await super().claim(name, token, ttl)
        if not taken and name.startswith("owner:"):
            self.refusals.append(time.monotonic())
            self.refused.set()
        return taken

    async def get(self, owner: str) -> Binding | None:
        self._check()
        found = await super().get(owner)
        if found is None:
            return None
        # Read anew each time, as from a database: no string shared with an earlier read.
        return attrs.evolve(found, sandbox_id="".join(list(found.sandbox_id)))

    async def put(self, binding: Binding, *,
                  fence: tuple[str, str] | None = None) -> Binding | None:
        self._check()
        current = await super().get(binding.owner)
        if fence is not None and self.taken_over:  # our claim ran out; another took it
            self.taken_over = False
            await super().release(*fence)
            assert await super().claim(fence[0], "another replica", 600)
        if fence is not None and self.touched and current is not None:
            self.touched -= 1
            assert await super().put(attrs.evolve(current, last_used=time.time()))
        return await super().put(binding, fence=fence)


@contextlib.asynccontextmanager
async def faulty_in(home: Path) -> AsyncIterator[FaultyProvider]:
    """A :class:`FaultyProvider` in ``home``; its sandboxes are killed afterwards."""
    provider = FaultyProvider(home)
    try:
        yield provider
    finally:
        provider.refused.clear()
        for info in await provider.list():
            await provider.kill(info.id)


def acquired_level(logs: list[dict[str, Any]]) -> str:
    """The level that answered the one acquire in ``logs``."""
    done = [e for e in logs if e["event"] == "sandbox.manager.acquire.complete"]
    assert len(done) == 1, logs
    return str(done[0]["level"])


async def bind_as_another(store: MemoryStore, owner: str, sandbox_id: str,
                          **fields: Any) -> Binding:
    """Bind ``owner`` as another replica would: over whatever binding there is."""
    current = await store.get(owner)
    stored = await store.put(Binding(owner=owner, sandbox_id=sandbox_id, provider="local",
                                     version=current.version if current else 0, **fields))
    assert stored is not None
    return stored


async def two_sandboxes(provider: LocalProvider, order: str, **tags: str) -> tuple[str, str]:
    """Two sandboxes (tagged ``tags``), the first with the lower id when ``order`` is
    ``"lower"``, else the higher: which one sorts first must not matter."""
    one, two = sorted([(await provider.create(metadata=tags)).id for _ in range(2)])
    return (one, two) if order == "lower" else (two, one)


async def bound_sandbox(provider: LocalProvider, store: MemoryStore) -> str:
    """Acquire ``alice``'s sandbox once (a create), as an earlier manager would."""
    sandbox = await SandboxManager(provider, store).acquire("alice")
    return sandbox.id
