"""Scheduled snapshots: taken of used sandboxes, pruned to ``keep``, and used to bring a
vanished sandbox's files back."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from provider_sdk.errors import InvalidInput, SandboxNotFound
from provider_sdk.local import LocalProvider
from provider_sdk.manager import MemoryStore, SandboxManager, SnapshotPolicy, SQLiteStore

pytestmark = pytest.mark.anyio


def _level(logs: list[dict[str, Any]]) -> str:
    done = [e for e in logs if e["event"] == "sandbox.manager.acquire.complete"]
    assert len(done) == 1, logs
    return str(done[0]["level"])


async def test_a_due_sandbox_is_snapshotted_and_only_the_newest_are_kept(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store, snapshots=SnapshotPolicy(every=0.05, keep=2))
    sandbox = await manager.acquire("alice")
    taken: list[str] = []
    for _ in range(3):
        await anyio.sleep(0.06)
        await sandbox.exec("true")
        assert await manager.snapshot_due() == ["alice"]
        binding = await store.get("alice")
        assert binding is not None
        taken.append(binding.snapshots[-1])
    binding = await store.get("alice")
    assert binding is not None
    assert binding.snapshots == tuple(taken[-2:])
    assert {s.id for s in await provider.list_snapshots()} == set(taken[-2:])


async def test_a_sandbox_unused_since_its_snapshot_is_not_snapshotted_again(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store, snapshots=SnapshotPolicy(every=0.05))
    await manager.acquire("alice")
    assert await manager.snapshot_due() == ["alice"]
    manager.forget("alice")  # nothing in this process uses it any more
    await anyio.sleep(0.1)
    assert await manager.snapshot_due() == []
    assert len(await provider.list_snapshots()) == 1


async def test_the_running_manager_takes_snapshots_by_itself(
        provider: LocalProvider, store: SQLiteStore) -> None:
    async with SandboxManager(provider, store, snapshots=SnapshotPolicy(every=0.2),
                              sweep_interval=0.05) as manager:
        await manager.acquire("alice")
        with anyio.fail_after(10):
            while True:
                binding = await store.get("alice")
                assert binding is not None
                if binding.snapshots:
                    break
                await anyio.sleep(0.05)
    binding = await store.get("alice")  # the sweeper may have taken more meanwhile
    assert binding is not None
    assert {s.id for s in await provider.list_snapshots()} == set(binding.snapshots)


async def test_use_in_one_replica_makes_the_sandbox_due_for_anothers_round(
        provider: LocalProvider, store: SQLiteStore) -> None:
    policy = SnapshotPolicy(every=0.4)
    other = SandboxManager(provider, store, snapshots=policy)  # never uses the sandbox
    # This replica's own sweeps are far off: only what it writes of its use counts.
    async with SandboxManager(provider, store, snapshots=policy,
                              sweep_interval=3600) as user:
        sandbox = await user.acquire("alice")
        assert await other.snapshot_due() == ["alice"]  # never snapshotted yet
        await sandbox.exec("true")  # used after that snapshot, here only
        with anyio.fail_after(10):  # once its use is written and the policy's time is up
            while True:
                if await other.snapshot_due() == ["alice"]:
                    break
                await anyio.sleep(0.05)
    assert len(await provider.list_snapshots()) == 2


async def test_a_vanished_sandbox_comes_back_from_its_latest_snapshot(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store, snapshots=SnapshotPolicy(every=3600))
    first = await manager.acquire("alice")
    await first.files.write("/home/user/work.txt", "before the snapshot")
    await manager.snapshot("alice")
    await first.files.write("/home/user/later.txt", "after it")
    await provider.kill(first.id)  # the host restarted and lost the sandbox
    with capture_logs() as logs:
        again = await SandboxManager(provider, store).acquire("alice")
    assert _level(logs) == "snapshot"
    assert again.id != first.id
    assert await again.files.read_text("/home/user/work.txt") == "before the snapshot"
    assert not await again.files.exists("/home/user/later.txt")
    binding = await store.get("alice")
    assert binding is not None
    assert binding.sandbox_id == again.id
    assert len(binding.snapshots) == 1  # the snapshots stay the owner's


async def test_a_deleted_snapshot_falls_back_to_a_fresh_sandbox(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    first = await manager.acquire("alice")
    snap = await manager.snapshot("alice")
    await provider.delete_snapshot(snap.id)
    await provider.kill(first.id)
    with capture_logs() as logs:
        again = await SandboxManager(provider, store).acquire("alice")
    assert _level(logs) == "create"
    assert (await again.exec("true")).ok


async def test_release_deletes_the_owners_snapshots(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    await manager.acquire("alice")
    await manager.snapshot("alice")
    await manager.release("alice")
    assert await provider.list_snapshots() == []


async def test_snapshot_of_an_unbound_owner_is_not_found(provider: LocalProvider) -> None:
    with pytest.raises(SandboxNotFound, match="alice"):
        await SandboxManager(provider, MemoryStore()).snapshot("alice")


@pytest.mark.parametrize(("every", "keep"), [(0, 1), (-1, 1), (10, 0), (10, 1.5)])
def test_a_malformed_policy_is_invalid_input(every: float, keep: Any) -> None:
    with pytest.raises(InvalidInput):
        SnapshotPolicy(every=every, keep=keep)

