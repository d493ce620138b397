"""Contract: named volumes (``volumes``, ``volumes.shared``, ``volumes.read_only``)."""

from __future__ import annotations

import secrets

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import Conflict, InvalidInput, PermissionDenied, VolumeNotFound
from provider_sdk.models import VolumeMount
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

_MOUNT = "/mnt/psdk-volume"


class VolumeContract(ContractBase):
    """Volumes: create, get, list, delete; shared writes; data outlives sandboxes;
    read-only mounts; errors."""

    @requires(Capability.VOLUMES)
    async def test_create_volume_then_get_it(self, factory: Factory) -> None:
        """A created volume is found by name, with the same id."""
        volume = await factory.volume()
        found = await factory.provider.get_volume(volume.name)
        assert (found.id, found.name, found.provider) == (
            volume.id, volume.name, factory.provider.name)

    @requires(Capability.VOLUMES)
    async def test_list_volumes_includes_a_new_volume(self, factory: Factory) -> None:
        """A created volume is listed."""
        volume = await factory.volume()
        assert volume.name in {v.name for v in await factory.provider.list_volumes()}

    @requires(Capability.VOLUMES)
    async def test_create_existing_volume_raises_conflict(self, factory: Factory) -> None:
        """Creating a volume whose name is taken raises Conflict."""
        volume = await factory.volume()
        with pytest.raises(Conflict):
            await factory.provider.create_volume(volume.name)

    @requires(Capability.VOLUMES)
    async def test_a_volume_name_with_a_control_character_is_refused(
            self, factory: Factory) -> None:
        """A name ending in a newline, or holding a tab or NUL, is ``InvalidInput`` for
        every volume call, and no volume is made of it."""
        base = f"psdk-contract-{secrets.token_hex(4)}"
        for name in (f"{base}\n", f"{base}\tx", f"{base}\0"):
            with pytest.raises(InvalidInput):
                await factory.provider.create_volume(name)
            with pytest.raises(InvalidInput):
                await factory.provider.get_volume(name)
        assert not [v for v in await factory.provider.list_volumes()
                    if v.name.startswith(base)]

    @requires(Capability.VOLUMES_SHARED)
    async def test_volume_writes_are_seen_by_another_sandbox(self, factory: Factory) -> None:
        """Two sandboxes mounting one volume see each other's writes, both ways."""
        volume = await factory.volume()
        mount = (VolumeMount(volume=volume.name, path=_MOUNT),)
        first = await factory.sandbox(volumes=mount)
        second = await factory.sandbox(volumes=mount)
        await first.files.write(f"{_MOUNT}/from-first.bin", b"\x00one\xff")
        assert await second.files.read(f"{_MOUNT}/from-first.bin") == b"\x00one\xff"
        result = await second.exec(["sh", "-c", f"echo two > {_MOUNT}/from-second.txt"])
        assert result.exit_code == 0, result.stderr
        assert (await first.exec(["cat", f"{_MOUNT}/from-second.txt"])).stdout == "two\n"

    @requires(Capability.VOLUMES)
    async def test_volume_data_outlives_the_sandboxes(self, factory: Factory) -> None:
        """Data two killed sandboxes wrote is there for a third."""
        volume = await factory.volume()
        mount = (VolumeMount(volume=volume.name, path=_MOUNT),)
        for name in ("one", "two"):
            writer = await factory.sandbox(volumes=mount)
            await writer.files.write(f"{_MOUNT}/{name}.txt", name)
            await writer.kill()
        reader = await factory.sandbox(volumes=mount)
        assert await reader.files.read_text(f"{_MOUNT}/one.txt") == "one"
        assert await reader.files.read_text(f"{_MOUNT}/two.txt") == "two"

    @requires(Capability.VOLUMES_READ_ONLY)
    async def test_read_only_mount_is_readable(self, factory: Factory) -> None:
        """A read-only mount shows the volume's data."""
        volume = await factory.volume()
        writer = await factory.sandbox(volumes=[VolumeMount(volume=volume.name, path=_MOUNT)])
        await writer.files.write(f"{_MOUNT}/seed.txt", "seed")
        await writer.kill()
        reader = await factory.sandbox(
            volumes=[VolumeMount(volume=volume.name, path=_MOUNT, read_only=True)])
        assert await reader.files.read_text(f"{_MOUNT}/seed.txt") == "seed"

    @requires(Capability.VOLUMES_READ_ONLY)
    async def test_read_only_mount_refuses_file_writes(self, factory: Factory) -> None:
        """``files.write`` into a read-only mount raises PermissionDenied."""
        volume = await factory.volume()
        sandbox = await factory.sandbox(
            volumes=[VolumeMount(volume=volume.name, path=_MOUNT, read_only=True)])
        with pytest.raises(PermissionDenied):
            await sandbox.files.write(f"{_MOUNT}/refused.txt", b"x")

    @requires(Capability.VOLUMES_READ_ONLY)
    async def test_read_only_mount_refuses_command_writes(self, factory: Factory) -> None:
        """A command writing into a read-only mount fails with a non-zero exit."""
        volume = await factory.volume()
        sandbox = await factory.sandbox(
            volumes=[VolumeMount(volume=volume.name, path=_MOUNT, read_only=True)])
        result = await sandbox.exec(["sh", "-c", f"echo x > {_MOUNT}/refused.txt"])
        assert result.exit_code != 0
        assert not await sandbox.files.exists(f"{_MOUNT}/refused.txt")

    @requires(Capability.VOLUMES)
    async def test_delete_volume_removes_it(self, factory: Factory) -> None:
        """A deleted volume is no longer found or listed."""
        volume = await factory.volume()
        await factory.provider.delete_volume(volume.name)
        with pytest.raises(VolumeNotFound):
            await factory.provider.get_volume(volume.name)
        assert volume.name not in {v.name for v in await factory.provider.list_volumes()}

    @requires(Capability.VOLUMES)
    async def test_delete_volume_in_use_raises_conflict(self, factory: Factory) -> None:
        """A volume a running sandbox mounts cannot be deleted; its data stays."""
        volume = await factory.volume()
        sandbox = await factory.sandbox(volumes=[VolumeMount(volume=volume.name, path=_MOUNT)])
        await sandbox.files.write(f"{_MOUNT}/kept.txt", b"kept")
        with pytest.raises(Conflict):
            await factory.provider.delete_volume(volume.name)
        assert await sandbox.files.read(f"{_MOUNT}/kept.txt") == b"kept"

    @requires(Capability.VOLUMES)
    async def test_unknown_volume_raises_volume_not_found(self, factory: Factory) -> None:
        """Getting an unknown volume raises VolumeNotFound carrying the provider."""
        with pytest.raises(VolumeNotFound) as caught:
            await factory.provider.get_volume(f"psdk-missing-{secrets.token_hex(6)}")
        assert caught.value.provider == factory.provider.name

    @requires(Capability.VOLUMES)
    async def test_delete_unknown_volume_raises_volume_not_found(
            self, factory: Factory) -> None:
        """Deleting an unknown volume raises VolumeNotFound."""
        with pytest.raises(VolumeNotFound):
            await factory.provider.delete_volume(f"psdk-missing-{secrets.token_hex(6)}")

    @requires(Capability.VOLUMES)
    async def test_mounting_an_unknown_volume_raises_volume_not_found(
            self, factory: Factory) -> None:
        """Creating a sandbox that mounts an unknown volume raises VolumeNotFound."""
        mount = VolumeMount(volume=f"psdk-missing-{secrets.token_hex(6)}", path=_MOUNT)
        with pytest.raises(VolumeNotFound):
            await factory.sandbox(volumes=[mount])
