"""The lookup chain on the local provider: each level answers when it should, says so in
its events, and the owner ends up with exactly one working sandbox."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from structlog.testing import capture_logs

from provider_sdk.errors import (
    Conflict,
    InvalidInput,
    OperationTimeout,
    SandboxNotFound,
    Unavailable,
)
from provider_sdk.local import LocalProvider
from provider_sdk.manager import OWNER_LABEL, Binding, MemoryStore, SandboxManager, SQLiteStore
from provider_sdk.models import SandboxSpec, SandboxState

pytestmark = pytest.mark.anyio


def _level(logs: list[dict[str, Any]]) -> str:
    done = [e for e in logs if e["event"] == "sandbox.manager.acquire.complete"]
    assert len(done) == 1, logs
    return str(done[0]["level"])


async def _wait_until_gone(provider: LocalProvider, sandbox_id: str) -> None:
    with anyio.fail_after(10):
        while True:
            if sandbox_id not in {i.id for i in await provider.list()}:
                return
            await anyio.sleep(0.02)


async def test_first_acquire_creates_a_sandbox_tagged_with_the_owner(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    with capture_logs() as logs:
        sandbox = await manager.acquire("alice")
    assert _level(logs) == "create"
    assert sandbox.owner == "alice"
    assert sandbox.metadata[OWNER_LABEL] == "alice"
    assert (await sandbox.exec("echo ready")).stdout == "ready\n"
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == sandbox.id
    assert binding.provider == "local"


async def test_a_second_acquire_is_answered_by_the_cache_without_the_provider(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    first = await manager.acquire("alice")
    with capture_logs() as logs:
        second = await manager.acquire("alice")
    assert second is first
    assert _level(logs) == "cache"
    assert [e["event"] for e in logs] == ["sandbox.manager.acquire.started",
                                         "sandbox.manager.acquire.complete"]


@pytest.mark.slow
async def test_the_least_recently_used_owner_leaves_a_full_cache(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store, cache_size=2)
    alice = await manager.acquire("alice")
    await manager.acquire("bob")
    await manager.acquire("alice")  # bob is now the least recently used
    await manager.acquire("carol")
    with capture_logs() as logs:
        assert (await manager.acquire("alice")) is alice
    assert _level(logs) == "cache"
    with capture_logs() as logs:
        await manager.acquire("bob")
    assert _level(logs) == "store"


async def test_a_new_manager_on_the_same_sqlite_file_finds_the_same_sandbox(
        provider: LocalProvider, db_path: Path) -> None:
    async with SQLiteStore(db_path) as store, SandboxManager(provider, store) as manager:
        first = await manager.acquire("alice")
        await first.files.write("/home/user/notes.txt", "kept")
    # A restart: a new store object, a new manager, an empty cache.
    async with SQLiteStore(db_path) as store, SandboxManager(provider, store) as manager:
        with capture_logs() as logs:
            again = await manager.acquire("alice")
        assert _level(logs) == "store"
        assert again.id == first.id
        assert await again.files.read_text("/home/user/notes.txt") == "kept"
    assert [i.id for i in await provider.list()] == [first.id]


async def test_the_store_level_resumes_a_paused_sandbox(
        provider: LocalProvider, store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    await first.pause()
    assert (await provider.get_info(first.id)).state == SandboxState.PAUSED
    with capture_logs() as logs:
        again = await SandboxManager(provider, store).acquire("alice")
    assert _level(logs) == "store"
    assert again.id == first.id
    assert again.info.state == SandboxState.RUNNING
    assert (await again.exec("echo back")).stdout == "back\n"


async def test_a_store_hit_on_a_running_sandbox_records_its_use(
        provider: LocalProvider, store: SQLiteStore) -> None:
    """Where use is read (idle pausing on), a store hit on a binding that is not paused
    writes the use down, so no replica's idle sweep pauses a sandbox in use."""
    first = await SandboxManager(provider, store).acquire("alice")
    bound = await store.get("alice")
    assert bound is not None
    assert not bound.paused
    assert await store.put(attrs.evolve(bound, last_used=1.0)) is not None
    before = time.time()
    async with SandboxManager(provider, store, idle_pause=3600) as manager:
        with capture_logs() as logs:
            again = await manager.acquire("alice")
        assert _level(logs) == "store"
    assert again.id == first.id
    after = await store.get("alice")
    assert after is not None
    assert after.last_used >= before - 1  # the store's clock, within a second of this one
    assert not after.paused


async def test_a_store_hit_on_a_paused_binding_records_the_resume(
        provider: LocalProvider, store: SQLiteStore) -> None:
    """Where use is not read (no idle pausing, no snapshots), a store hit on a binding
    marked paused still writes down that it runs again, with its use."""
    first = await SandboxManager(provider, store).acquire("alice")
    await first.pause()
    bound = await store.get("alice")
    assert bound is not None
    assert await store.put(attrs.evolve(bound, paused=True, last_used=1.0)) is not None
    before = time.time()
    again = await SandboxManager(provider, store).acquire("alice")
    assert again.id == first.id
    after = await store.get("alice")
    assert after is not None
    assert not after.paused
    assert after.last_used >= before - 1  # the store's clock, within a second of this one


async def test_a_lost_binding_is_healed_from_the_owner_tag(
        provider: LocalProvider, store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    await store.delete("alice")
    with capture_logs() as logs:
        again = await SandboxManager(provider, store).acquire("alice")
    assert _level(logs) == "list"
    assert again.id == first.id
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == first.id
    assert [i.id for i in await provider.list()] == [first.id]


@pytest.mark.slow
async def test_duplicates_found_by_tag_are_reduced_to_the_oldest_running_one(
        provider: LocalProvider, store: SQLiteStore) -> None:
    oldest = await provider.create(metadata={OWNER_LABEL: "alice"})
    paused = await provider.create(metadata={OWNER_LABEL: "alice"})
    await paused.pause()
    newest = await provider.create(metadata={OWNER_LABEL: "alice"})
    bystander = await provider.create(metadata={OWNER_LABEL: "bob"})
    with capture_logs() as logs:
        chosen = await SandboxManager(provider, store).acquire("alice")
    assert _level(logs) == "list"
    assert chosen.id == oldest.id
    left = {i.id for i in await provider.list()}
    assert left == {oldest.id, bystander.id}
    assert newest.id not in left
    assert paused.id not in left


async def test_duplicates_next_to_a_bound_sandbox_are_killed_in_the_background(
        provider: LocalProvider, store: SQLiteStore) -> None:
    bound = await SandboxManager(provider, store).acquire("alice")
    extra = await provider.create(metadata={OWNER_LABEL: "alice"})  # a race elsewhere
    async with SandboxManager(provider, store) as manager:
        with capture_logs() as logs:
            again = await manager.acquire("alice")
            assert again.id == bound.id
            await _wait_until_gone(provider, extra.id)
    killed = [e for e in logs if e["event"] == "sandbox.manager.duplicates.started"]
    assert killed
    assert killed[0]["killed"] == [extra.id]
    assert [i.id for i in await provider.list()] == [bound.id]


@pytest.mark.slow
async def test_a_vanished_sandbox_is_replaced_by_a_new_one(
        provider: LocalProvider, store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    await provider.kill(first.id)  # its host lost it
    with capture_logs() as logs:
        again = await SandboxManager(provider, store).acquire("alice")
    assert _level(logs) == "create"
    outcomes = [e.get("outcome") for e in logs if e["event"] == "sandbox.manager.store.failed"]
    assert outcomes == ["vanished"]
    assert again.id != first.id
    assert (await again.exec("true")).ok
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == again.id


def _break_data_plane(provider: LocalProvider, sandbox_id: str) -> None:
    """The control plane still says running; the data plane no longer answers."""
    (provider.home / "sandboxes" / sandbox_id / "agent.sock").unlink()


@pytest.mark.slow
async def test_an_unhealthy_sandbox_is_replaced_and_killed(
        provider: LocalProvider, store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    _break_data_plane(provider, first.id)
    assert (await provider.get_info(first.id)).state == SandboxState.RUNNING
    with capture_logs() as logs:
        again = await SandboxManager(provider, store, health_timeout=0.5).acquire("alice")
    assert _level(logs) == "create"
    outcomes = [e.get("outcome") for e in logs if e["event"] == "sandbox.manager.store.failed"]
    assert outcomes == ["unhealthy"]
    assert again.id != first.id
    assert (await again.exec("echo fine")).stdout == "fine\n"
    assert [i.id for i in await provider.list()] == [again.id]


async def test_without_replace_unhealthy_a_broken_sandbox_is_a_typed_error(
        provider: LocalProvider, store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    _break_data_plane(provider, first.id)
    manager = SandboxManager(provider, store, health_timeout=0.3, replace_unhealthy=False)
    with pytest.raises(Unavailable) as info:
        await manager.acquire("alice")
    assert info.value.sandbox_id == first.id
    assert [i.id for i in await provider.list()] == [first.id]  # nothing was replaced


async def test_a_data_plane_failure_makes_the_next_acquire_walk_the_chain_again(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store, health_timeout=0.5)
    first = await manager.acquire("alice")
    _break_data_plane(provider, first.id)
    with pytest.raises(Unavailable):
        await first.exec("true")
    with capture_logs() as logs:
        again = await manager.acquire("alice")
    assert _level(logs) == "create"
    assert again.id != first.id
    assert (await again.exec("true")).ok


async def test_a_killed_handle_is_replaced_on_the_next_acquire(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    first = await manager.acquire("alice")
    await first.kill()
    again = await manager.acquire("alice")
    assert again.id != first.id
    with pytest.raises(SandboxNotFound):
        await provider.get_info(first.id)


async def test_many_tasks_acquiring_one_owner_get_one_sandbox(
        provider: LocalProvider) -> None:
    manager = SandboxManager(provider, MemoryStore())
    ids: list[str] = []

    async def acquire(owner: str) -> None:
        ids.append((await manager.acquire(owner)).id)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(acquire, f"user-{i % 2}")
    assert len(set(ids)) == 2
    assert len(await provider.list()) == 2


class _ExpiringClaims(MemoryStore):
    """Claims that never exclude anyone: every claim has (as if) expired at once, and
    the last claimer holds it."""

    async def claim(self, name: str, token: str, ttl: float) -> bool:
        self._claims.pop(name, None)
        return await super().claim(name, token, ttl)


async def test_when_claims_fail_the_first_binding_wins_and_the_other_sandbox_dies(
        provider: LocalProvider) -> None:
    store = _ExpiringClaims()
    first, second = SandboxManager(provider, store), SandboxManager(provider, store)
    got: list[str] = []

    async def acquire(manager: SandboxManager) -> None:
        got.append((await manager.acquire("alice")).id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire, first)
        tg.start_soon(acquire, second)
    binding = await store.get("alice")
    assert binding is not None
    assert got == [binding.sandbox_id] * 2
    assert [i.id for i in await provider.list()] == [binding.sandbox_id]


async def test_release_kills_the_sandbox_and_drops_the_binding(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    sandbox = await manager.acquire("alice")
    await provider.create(metadata={OWNER_LABEL: "alice"})  # a duplicate goes too
    await manager.release("alice")
    assert await store.get("alice") is None
    assert await provider.list() == []
    again = await manager.acquire("alice")
    assert again.id != sandbox.id


async def test_async_with_does_not_kill_a_managed_sandbox(
        provider: LocalProvider, store: SQLiteStore) -> None:
    async with await SandboxManager(provider, store).acquire("alice") as sandbox:
        pass
    assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING


async def test_an_acquire_waiting_on_a_stuck_creator_times_out(
        provider: LocalProvider, store: SQLiteStore) -> None:
    assert await store.claim("owner:alice", "a creator that hung", 600)
    manager = SandboxManager(provider, store, acquire_timeout=0.5)
    with anyio.fail_after(5), pytest.raises(OperationTimeout, match="alice"):
        await manager.acquire("alice")
    assert await provider.list() == []


async def test_an_owner_bound_on_another_provider_is_a_conflict(
        provider: LocalProvider, store: SQLiteStore) -> None:
    await store.put(Binding(owner="alice", sandbox_id="elsewhere", provider="e2b"))
    with pytest.raises(Conflict, match="e2b"):
        await SandboxManager(provider, store).acquire("alice")


@pytest.mark.parametrize("owner", ["", "a\0b", 42])
async def test_a_malformed_owner_is_invalid_input(provider: LocalProvider,
                                                  owner: Any) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        await SandboxManager(provider, MemoryStore()).acquire(owner)


async def test_a_spec_that_sets_the_owner_key_is_refused(provider: LocalProvider) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        SandboxManager(provider, MemoryStore(), spec=SandboxSpec(metadata={OWNER_LABEL: "x"}))
