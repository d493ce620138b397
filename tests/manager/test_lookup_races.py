"""The lookup chain where another replica gets in the way: a binding written while this
manager waits for or holds the owner's claim, a claim taken over mid-create, a binding
rewritten under every write, a sweep pausing the sandbox; and what an acquire leaves
behind: a use lease that needs no store, a pooled sandbox the reaper leaves alone."""

from __future__ import annotations

import anyio
import attrs
import pytest
from memory_provider import MemoryProvider
from structlog.testing import capture_logs

from manager.lookup_fakes import (
    FaultyProvider,
    ScriptedStore,
    acquired_level,
    bind_as_another,
    bound_sandbox,
    two_sandboxes,
)
from provider_sdk.errors import Conflict
from provider_sdk.manager import OWNER_LABEL, MemoryStore, SandboxManager, WarmPool
from provider_sdk.manager.reaper import reap
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio


# ------------------------------------------------- someone else binds meanwhile


@pytest.mark.parametrize("order", ["lower", "higher"])
async def test_a_binding_written_while_another_holds_the_claim_is_taken(
        faulty: FaultyProvider, order: str) -> None:
    """The bound sandbox vanished and another replica holds the owner's claim while it
    repairs: the sandbox it binds is taken as soon as it is bound, before its claim is
    let go."""
    store = ScriptedStore()
    old, new = await two_sandboxes(faulty, order, **{OWNER_LABEL: "alice"})
    await bind_as_another(store, "alice", old)
    await faulty.kill(old)
    assert await store.claim("owner:alice", "another replica", 600)
    made = faulty.created
    manager = SandboxManager(faulty, store, acquire_timeout=8)
    got: list[str] = []

    async def acquire() -> None:
        got.append((await manager.acquire("alice")).id)

    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(acquire)
            with anyio.fail_after(10):
                await store.refused.wait()
            await bind_as_another(store, "alice", new)
    assert got == [new]
    assert acquired_level(logs) == "store"
    assert faulty.created == made
    claims = [e for e in logs if e["event"] == "sandbox.manager.claim.complete"]
    assert [e["waited"] for e in claims] == [True]


async def test_an_uncontended_claim_is_logged_as_not_waited_for(faulty: FaultyProvider) -> None:
    with capture_logs() as logs:
        await SandboxManager(faulty, ScriptedStore()).acquire("alice")
    claims = [e for e in logs if e["event"] == "sandbox.manager.claim.complete"]
    assert [e["waited"] for e in claims] == [False]


async def test_a_claim_taken_over_while_creating_leaves_the_owner_to_the_new_holder(
        faulty: FaultyProvider) -> None:
    """This manager's claim ran out while it created a sandbox, and another replica took
    it: it may not bind, kills what it made, and takes the binding the other writes."""
    store = ScriptedStore()
    store.taken_over = True
    theirs = await faulty.create()
    manager = SandboxManager(faulty, store, acquire_timeout=8)
    got: list[str] = []

    async def acquire() -> None:
        got.append((await manager.acquire("alice")).id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire)
        with anyio.fail_after(10):
            await store.refused.wait()
        await bind_as_another(store, "alice", theirs.id)
    assert got == [theirs.id]
    assert faulty.created == 2  # theirs, and the one made here
    assert [i.id for i in await faulty.list()] == [theirs.id]


@pytest.mark.parametrize("order", ["lower", "higher"])
async def test_a_binding_written_just_before_the_claim_is_taken_is_used(
        faulty: FaultyProvider, order: str) -> None:
    """Another replica bound the owner (and let go of its claim) between this manager's
    read of the vanished binding and its claim: its sandbox is used; none is made."""
    store = ScriptedStore()
    old, new = await two_sandboxes(faulty, order)
    await bind_as_another(store, "alice", old)
    await faulty.kill(old)

    async def rebind() -> None:
        await bind_as_another(store, "alice", new)

    store.before_claim = rebind
    made = faulty.created
    with capture_logs() as logs:
        again = await SandboxManager(faulty, store).acquire("alice")
    assert again.id == new
    assert acquired_level(logs) == "store"
    assert faulty.created == made


@pytest.mark.parametrize("order", ["lower", "higher"])
async def test_a_binding_written_during_the_tag_level_wins(faulty: FaultyProvider,
                                                           order: str) -> None:
    """Another replica binds the owner (its claim had run out) while this one looks for
    the owner's sandboxes by tag: the owner gets the bound sandbox, not the one found."""
    store = ScriptedStore()
    tagged, theirs = await two_sandboxes(faulty, order)
    await (await faulty.connect(tagged)).set_metadata({OWNER_LABEL: "alice"})

    async def rebind() -> None:
        await bind_as_another(store, "alice", theirs)

    faulty.during_list = rebind
    again = await SandboxManager(faulty, store).acquire("alice")
    assert again.id == theirs
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == theirs


@pytest.mark.parametrize("order", ["lower", "higher"])
async def test_a_binding_written_during_a_create_wins(faulty: FaultyProvider, order: str) -> None:
    """Another replica binds the owner (its claim had run out) while this one creates a
    sandbox: the owner gets the bound sandbox, and the one made here is killed."""
    store = ScriptedStore()
    theirs: list[str] = []

    async def rebind(made: str) -> None:
        while not theirs:  # one whose id sorts below or above the one made here
            other = (await faulty.create()).id
            if (other < made) == (order == "lower"):
                theirs.append(other)
            else:
                await faulty.kill(other)
        await bind_as_another(store, "alice", theirs[0])

    faulty.after_create = rebind
    async with SandboxManager(faulty, store) as manager:
        again = await manager.acquire("alice")
    assert again.id == theirs[0]
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == theirs[0]
    assert [i.id for i in await faulty.list()] == theirs


async def test_a_binding_rewritten_under_nineteen_writes_in_a_row_is_still_repaired(
        faulty: FaultyProvider) -> None:
    """Other replicas touching the binding make a fenced write fail; it is tried again
    (20 times in all) before the acquire gives up with ``Conflict``."""
    store = ScriptedStore()
    first = await bound_sandbox(faulty, store)
    await faulty.kill(first)
    store.touched = 19
    again = await SandboxManager(faulty, store).acquire("alice")
    assert again.id != first
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == again.id
    assert store.touched == 0
    await faulty.kill(again.id)
    store.touched = 20
    with pytest.raises(Conflict, match="keeps changing"):
        await SandboxManager(faulty, store).acquire("alice")


async def test_an_environment_set_while_the_sandbox_is_replaced_is_kept(
        faulty: FaultyProvider) -> None:
    store = ScriptedStore()
    first = await SandboxManager(faulty, store).acquire("alice")
    await first.set_env(STAGE="one")
    await faulty.kill(first.id)

    async def set_env_elsewhere() -> None:  # another replica's set_env, meanwhile
        current = await store.get("alice")
        assert current is not None
        assert await store.put(attrs.evolve(current, env={"STAGE": "two"})) is not None

    faulty.before_create = set_env_elsewhere
    again = await SandboxManager(faulty, store).acquire("alice")
    assert again.id != first.id
    assert (await again.exec("echo $STAGE")).stdout == "two\n"
    binding = await store.get("alice")
    assert binding is not None
    assert dict(binding.env) == {"STAGE": "two"}


async def test_an_acquire_waits_for_a_sweep_pausing_the_sandbox(faulty: FaultyProvider) -> None:
    """Where idle sandboxes are swept, a sweep holds the owner's claim while it pauses
    one: an acquire of a binding marked paused waits for it to finish, then resumes."""
    store = ScriptedStore()
    first = await SandboxManager(faulty, store).acquire("alice")
    await first.pause()
    current = await store.get("alice")
    assert current is not None
    assert await store.put(attrs.evolve(current, paused=True)) is not None
    assert await store.claim("owner:alice", "a sweep", 600)
    manager = SandboxManager(faulty, store, idle_pause=3600)
    got: list[str] = []

    async def acquire() -> None:
        got.append((await manager.acquire("alice")).id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire)
        with anyio.fail_after(10):
            await store.refused.wait()
        assert got == []
        assert (await faulty.get_info(first.id)).state == SandboxState.PAUSED
        await store.release("owner:alice", "a sweep")
    assert got == [first.id]
    assert (await faulty.get_info(first.id)).state == SandboxState.RUNNING


@pytest.mark.parametrize("level", ["create", "store"])
async def test_a_first_command_after_an_acquire_runs_without_the_store(
        faulty: FaultyProvider, level: str) -> None:
    """The acquire renewed the owner's use lease: the command right after it needs no
    store, so a store that has just gone away does not fail it."""
    store = ScriptedStore()
    if level == "store":
        await bound_sandbox(faulty, store)
    manager = SandboxManager(faulty, store, idle_pause=3600)
    with capture_logs() as logs:
        sandbox = await manager.acquire("alice")
    assert acquired_level(logs) == level
    store.down = True
    assert (await sandbox.exec("echo ok")).stdout == "ok\n"


async def test_a_pooled_sandbox_an_owner_took_is_never_reaped_as_a_free_member(
        memory: object) -> None:
    """Where labels cannot change after create, the pool's store forgets a member once a
    manager bound it: the reaper never takes it for a free member, even past the pool's
    maximum age, once its hand-out's claim has run out and its binding is gone."""
    provider, store = MemoryProvider(), MemoryStore()
    async with WarmPool(provider, size=1, store=store, max_age=1.0, interval=60,
                        check_timeout=0.2, claim_ttl=0.2) as pool, \
            SandboxManager(provider, store, pool=pool) as manager:
        await pool.wait_filled(30)
        with capture_logs() as logs:
            sandbox = await manager.acquire("alice")
        assert acquired_level(logs) == "pool"
    assert await store.delete("alice")
    await anyio.sleep(1.5)  # past max_age and the hand-out's claim
    assert await reap(provider, store) == []
    assert (await sandbox.exec("echo mine")).stdout == "mine\n"


async def test_an_acquire_keeps_another_replicas_idle_sweep_off_the_sandbox(
        faulty: FaultyProvider) -> None:
    """The acquire renews the owner's use lease in the store, so a sweep in another
    replica, which cannot know of this one's use, leaves the sandbox running."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    here = SandboxManager(faulty, store, idle_pause=3600)
    assert (await here.acquire("alice")).id == bound
    elsewhere = SandboxManager(faulty, store, idle_pause=3600)
    assert await elsewhere.pause_idle() == []
    assert (await faulty.get_info(bound)).state == SandboxState.RUNNING


async def test_a_broken_sandbox_is_waited_for_once_per_acquire_even_if_the_claim_is_lost(
        faulty: FaultyProvider) -> None:
    """The bound sandbox does not answer; this manager's claim is taken over while it
    creates the replacement, and the binding it reads again is still the broken one:
    that one is not probed (and waited for) a second time."""
    store = ScriptedStore()
    bound = await bound_sandbox(faulty, store)
    faulty.busy_for[bound] = 600
    store.taken_over = True
    theirs = await faulty.create()
    manager = SandboxManager(faulty, store, health_timeout=0.5, acquire_timeout=15)
    got: list[str] = []

    async def acquire() -> None:
        got.append((await manager.acquire("alice")).id)

    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(acquire)
            with anyio.fail_after(10):
                # Lost it, then waits for the new holder.
                while len(store.refusals) < 2:  # noqa: ASYNC110 (a poll of a counter)
                    await anyio.sleep(0.01)
            await bind_as_another(store, "alice", theirs.id)
    assert got == [theirs.id]
    outcomes = [e.get("outcome") for e in logs if e["event"] == "sandbox.manager.store.failed"]
    assert outcomes == ["unhealthy"]
