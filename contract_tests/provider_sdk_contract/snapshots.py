"""Contract: filesystem snapshots (``snapshot.filesystem``)."""

from __future__ import annotations

import secrets

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import SnapshotNotFound
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

# Under the working directory: the user's files, which every backend's snapshot keeps.
_FILE = "psdk-snap/data.bin"


class SnapshotContract(ContractBase):
    """Snapshots: what they capture, sandboxes made from them, list, delete, errors."""

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_snapshot_says_it_captures_the_filesystem(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """A snapshot names its provider and source sandbox, and captures ``filesystem``."""
        snap = await factory.snapshot(sandbox)
        assert snap.id
        assert "filesystem" in snap.captures
        assert (snap.provider, snap.sandbox_id) == (sandbox.provider.name, sandbox.id)

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_sandbox_created_from_a_snapshot_has_its_files(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """A new sandbox created with ``SandboxSpec(snapshot=...)`` has the files."""
        data = secrets.token_bytes(4096)
        await sandbox.files.write(_FILE, data)
        snap = await factory.snapshot(sandbox)
        restored = await factory.sandbox(snapshot=snap.id)
        assert restored.id != sandbox.id
        assert await restored.files.read(_FILE) == data

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_snapshot_does_not_change_with_its_source(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """Writes to the source after the snapshot do not reach sandboxes made from it."""
        await sandbox.files.write(_FILE, b"before")
        snap = await factory.snapshot(sandbox)
        await sandbox.files.write(_FILE, b"after the snapshot")
        restored = await factory.sandbox(snapshot=snap.id)
        assert await restored.files.read(_FILE) == b"before"

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_sandbox_from_a_snapshot_is_independent(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """Writes in a sandbox made from a snapshot do not reach the source."""
        await sandbox.files.write(_FILE, b"source")
        restored = await factory.sandbox(snapshot=(await factory.snapshot(sandbox)).id)
        await restored.files.write(_FILE, b"restored")
        assert await sandbox.files.read(_FILE) == b"source"

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_list_snapshots_includes_a_new_snapshot(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """A new snapshot is listed, also when listing only its sandbox's snapshots."""
        snap = await factory.snapshot(sandbox)
        assert snap.id in {s.id for s in await factory.provider.list_snapshots()}
        mine = await factory.provider.list_snapshots(sandbox_id=sandbox.id)
        assert snap.id in {s.id for s in mine}
        assert {s.sandbox_id for s in mine} == {sandbox.id}

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_delete_snapshot_removes_it(self, sandbox: Sandbox, factory: Factory) -> None:
        """A deleted snapshot is no longer listed."""
        snap = await factory.snapshot(sandbox)
        await factory.provider.delete_snapshot(snap.id)
        assert snap.id not in {s.id for s in await factory.provider.list_snapshots()}

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_delete_unknown_snapshot_raises_snapshot_not_found(
            self, factory: Factory) -> None:
        """Deleting an unknown snapshot id raises SnapshotNotFound carrying the provider."""
        with pytest.raises(SnapshotNotFound) as caught:
            await factory.provider.delete_snapshot(f"psdk-missing-{secrets.token_hex(6)}")
        assert caught.value.provider == factory.provider.name

    @requires(Capability.SNAPSHOT_FILESYSTEM)
    async def test_create_from_unknown_snapshot_raises_snapshot_not_found(
            self, factory: Factory) -> None:
        """Creating a sandbox from an unknown snapshot id raises SnapshotNotFound."""
        with pytest.raises(SnapshotNotFound):
            await factory.sandbox(snapshot=f"psdk-missing-{secrets.token_hex(6)}")
