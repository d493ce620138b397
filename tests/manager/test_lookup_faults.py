"""The lookup chain where the backend gets in the way: a sandbox that answers busy, a
connect that says it is not running or reports a state, a sandbox gone or broken among
those found by tag. The local provider runs the sandboxes; the faults are added around
it (``lookup_fakes.py``)."""

from __future__ import annotations

import itertools
import json

import anyio
import pytest
from structlog.testing import capture_logs

from manager.lookup_fakes import (
    FaultyProvider,
    ScriptedStore,
    acquired_level,
    bound_sandbox,
)
from provider_sdk.errors import (
    Conflict,
    RateLimited,
    SandboxNotFound,
    SandboxNotRunning,
    Unavailable,
)
from provider_sdk.manager import OWNER_LABEL, Binding, SandboxManager
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio


# ---------------------------------------------------------------- level 2: probes


async def test_a_busy_sandbox_is_probed_again_no_sooner_than_it_asked(
        faulty: FaultyProvider) -> None:
    """A probe answered with a ``Retry-After`` waits that long before the next, the
    first probe's answer and a later one's alike."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.busy[bound] = [RateLimited("busy", retry_after=0.6, provider="local")
                          for _ in range(2)]
    again = await SandboxManager(faulty, store, health_timeout=15).acquire("alice")
    assert again.id == bound
    first, second, third = faulty.probes[bound]
    assert second - first >= 0.6
    assert third - second >= 0.6


@pytest.mark.parametrize("state", [SandboxState.RUNNING, SandboxState.UNKNOWN])
async def test_a_store_hit_on_a_sandbox_not_stopped_resumes_nothing(
        faulty: FaultyProvider, state: SandboxState) -> None:
    """Only a stopped sandbox is restarted: a running one, or one in a state the backend
    cannot name, is probed as it is."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    if state == SandboxState.UNKNOWN:
        faulty.states[bound] = SandboxState.UNKNOWN
    with capture_logs() as logs:
        again = await SandboxManager(faulty, store).acquire("alice")
    assert acquired_level(logs) == "store"
    assert again.id == bound
    assert faulty.resumed == []


async def test_a_store_hit_on_a_stopped_sandbox_restarts_it(faulty: FaultyProvider) -> None:
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.states[bound] = SandboxState.STOPPED
    again = await SandboxManager(faulty, store).acquire("alice")
    assert again.id == bound
    assert faulty.resumed == [bound]


async def test_a_store_hit_writes_nothing_where_no_one_reads_the_use(
        faulty: FaultyProvider) -> None:
    """Without idle pausing or snapshots, a store hit on a binding not marked paused
    leaves the binding as it is (no write per acquire)."""
    store = ScriptedStore()
    await bound_sandbox(faulty, store)
    before = await store.get("alice")
    await SandboxManager(faulty, store).acquire("alice")
    assert await store.get("alice") == before


@pytest.mark.parametrize("other", ["docker", "memory"])
async def test_an_owner_bound_by_another_provider_is_a_conflict_whatever_its_name(
        faulty: FaultyProvider, other: str) -> None:
    store = ScriptedStore()
    await store.put(Binding(owner="alice", sandbox_id="elsewhere", provider=other))
    with pytest.raises(Conflict, match=other):
        await SandboxManager(faulty, store).acquire("alice")
    assert faulty.created == 0


async def test_a_store_hit_takes_no_claim_where_idle_sandboxes_are_swept(
        faulty: FaultyProvider) -> None:
    """A binding not marked paused is used at once, even while another replica holds the
    owner's claim (repairing or pausing another owner's sandbox is no reason to wait)."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    assert await store.claim("owner:alice", "another replica", 600)
    manager = SandboxManager(faulty, store, idle_pause=3600)
    with anyio.fail_after(5):
        again = await manager.acquire("alice")
    assert again.id == bound
    assert not store.refused.is_set()


async def test_a_connect_that_says_killed_replaces_the_sandbox_at_once(
        faulty: FaultyProvider) -> None:
    """A sandbox the backend reports killed (the state as read from its answer) is gone:
    it is replaced even where broken sandboxes are not."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.refused[bound] = SandboxNotRunning("not running", state=json.loads('"killed"'),
                                              provider="local", sandbox_id=bound)
    manager = SandboxManager(faulty, store, replace_unhealthy=False, health_timeout=30)
    with anyio.fail_after(20), capture_logs() as logs:
        again = await manager.acquire("alice")
    assert acquired_level(logs) == "create"
    assert again.id != bound
    outcomes = [e.get("outcome") for e in logs if e["event"] == "sandbox.manager.store.failed"]
    assert outcomes == ["vanished"]


@pytest.mark.parametrize("state", ["error", "stopped"])
async def test_a_connect_that_says_broken_is_not_taken_for_gone(faulty: FaultyProvider,
                                                                 state: str) -> None:
    """Any other state the backend gives is a broken sandbox, not a vanished one: kept
    where broken sandboxes are not replaced, with the backend's answer in the error."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.refused[bound] = SandboxNotRunning(f"sandbox is {state}", state=state,
                                              provider="local", sandbox_id=bound)
    manager = SandboxManager(faulty, store, replace_unhealthy=False, health_timeout=30)
    with anyio.fail_after(20), pytest.raises(Unavailable) as caught:
        await manager.acquire("alice")
    assert caught.value.sandbox_id == bound
    assert f"sandbox is {state}" in str(caught.value)
    assert faulty.created == 1  # the first acquire's: nothing replaced it
    assert (await store.get("alice")) is not None


# ---------------------------------------------------------------- level 3: the tag


@pytest.mark.parametrize("state", [SandboxState.PAUSED, SandboxState.PAUSING])
async def test_the_tag_level_prefers_a_running_sandbox_to_an_older_paused_one(
        faulty: FaultyProvider, state: SandboxState) -> None:
    older = await faulty.create(metadata={OWNER_LABEL: "alice"})
    if state == SandboxState.PAUSED:
        await older.pause()
    else:
        faulty.states[older.id] = SandboxState.PAUSING
    newer = await faulty.create(metadata={OWNER_LABEL: "alice"})
    with capture_logs() as logs:
        chosen = await SandboxManager(faulty, ScriptedStore()).acquire("alice")
    assert acquired_level(logs) == "list"
    assert chosen.id == newer.id


@pytest.mark.parametrize("state", [SandboxState.PAUSED, SandboxState.PAUSING])
async def test_the_tag_level_prefers_a_paused_sandbox_to_an_older_stopped_one(
        faulty: FaultyProvider, state: SandboxState) -> None:
    older = await faulty.create(metadata={OWNER_LABEL: "alice"})
    faulty.states[older.id] = SandboxState.STOPPED
    newer = await faulty.create(metadata={OWNER_LABEL: "alice"})
    if state == SandboxState.PAUSED:
        await newer.pause()
    else:
        faulty.states[newer.id] = SandboxState.PAUSING
    with capture_logs() as logs:
        chosen = await SandboxManager(faulty, ScriptedStore()).acquire("alice")
    assert acquired_level(logs) == "list"
    assert chosen.id == newer.id


async def test_the_tag_level_keeps_the_oldest_running_sandbox_whatever_the_ids(
        faulty: FaultyProvider) -> None:
    older = await faulty.create(metadata={OWNER_LABEL: "alice"})
    while True:  # a newer one whose id sorts first
        newer = await faulty.create(metadata={OWNER_LABEL: "alice"})
        if newer.id < older.id:
            break
        await faulty.kill(newer.id)
    chosen = await SandboxManager(faulty, ScriptedStore()).acquire("alice")
    assert chosen.id == older.id
    assert [i.id for i in await faulty.list()] == [older.id]


async def test_a_broken_sandbox_found_by_tag_is_replaced_and_killed(
        faulty: FaultyProvider) -> None:
    broken = await faulty.create(metadata={OWNER_LABEL: "alice"})
    faulty.busy_for[broken.id] = 600
    with capture_logs() as logs:
        again = await SandboxManager(faulty, ScriptedStore(), health_timeout=0.3).acquire("alice")
    assert acquired_level(logs) == "create"
    assert [i.id for i in await faulty.list()] == [again.id]


async def test_the_tag_level_goes_on_to_the_next_sandbox_when_one_is_gone(
        faulty: FaultyProvider) -> None:
    gone = await faulty.create(metadata={OWNER_LABEL: "alice"})
    kept = await faulty.create(metadata={OWNER_LABEL: "alice"})
    faulty.refused[gone.id] = SandboxNotFound("gone", provider="local", sandbox_id=gone.id)
    made = faulty.created
    with capture_logs() as logs:
        chosen = await SandboxManager(faulty, ScriptedStore()).acquire("alice")
    assert acquired_level(logs) == "list"
    assert chosen.id == kept.id
    assert faulty.created == made


async def test_a_replacement_starts_from_the_newest_snapshot_still_there(
        faulty: FaultyProvider) -> None:
    """The owner's newest snapshot is gone: its sandbox comes back from the one before,
    not empty."""
    store = ScriptedStore()
    manager = SandboxManager(faulty, store)
    first = await manager.acquire("alice")
    await first.files.write("/home/user/work.txt", "kept")
    await manager.snapshot("alice")
    newest = await manager.snapshot("alice")
    await faulty.delete_snapshot(newest.id)
    await faulty.kill(first.id)
    with capture_logs() as logs:
        again = await SandboxManager(faulty, store).acquire("alice")
    assert acquired_level(logs) == "snapshot"
    assert await again.files.read_text("/home/user/work.txt") == "kept"


# ------------------------------------------------ level 2: the pace of the probes


async def test_a_busy_sandbox_is_probed_again_at_least_every_second(
        faulty: FaultyProvider) -> None:
    """Between the probes of a sandbox that keeps answering busy, the pauses grow to a
    second and no more: once it answers, the acquire follows within about a second."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.busy_for[bound] = 3.4
    manager = SandboxManager(faulty, store, health_timeout=15)
    again = await manager.acquire("alice")
    assert again.id == bound
    probes = faulty.probes[bound]
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert probes[-1] - probes[0] >= 3.4
    assert max(gaps) < 1.8, gaps  # the cap is 1 s; room for a loaded machine
    assert max(gaps) > 0.7, gaps  # the pauses grew


async def test_a_sandbox_busy_for_a_moment_is_probed_again_at_once(faulty: FaultyProvider) -> None:
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.busy[bound] = [Unavailable("busy", provider="local", sandbox_id=bound)]
    again = await SandboxManager(faulty, store, health_timeout=15).acquire("alice")
    assert again.id == bound
    first, second = faulty.probes[bound]
    assert second - first < 0.8  # 50 ms; room for a loaded machine


async def test_a_claim_held_elsewhere_is_tried_again_soon_then_every_half_second(
        faulty: FaultyProvider) -> None:
    """An acquire that waits for another replica's claim tries it again within
    milliseconds at first (most claims are held briefly), the pauses growing to half a
    second and no more: it takes the claim within about half a second of its release.
    (The bound sandbox vanished: each try also reads the binding, which stays the
    broken one.)"""
    store = ScriptedStore()
    await faulty.kill(await bound_sandbox(faulty, store))
    assert await store.claim("owner:alice", "another replica", 600)
    manager = SandboxManager(faulty, store, acquire_timeout=30)
    got: list[str] = []

    async def acquire() -> None:
        got.append((await manager.acquire("alice")).id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire)
        with anyio.fail_after(10):
            await store.refused.wait()
        await anyio.sleep(5)  # another replica's long repair
        await store.release("owner:alice", "another replica")
    assert len(got) == 1
    tries = store.refusals
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[0] < 0.4, gaps  # 10 ms; room for a loaded machine
    assert 0.3 < max(gaps) < 1.2, gaps  # the cap is 0.5 s; room for a loaded machine
