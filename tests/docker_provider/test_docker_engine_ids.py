"""What the Docker Engine gives a sandbox of the host's ids and knobs, checked by the
contract's own walks: the provider declares neither ``seal.ids`` nor ``seal.knobs``,
and these tests say why (and fail if the Engine starts giving more, so the declaration
and the security page can follow)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import docker
import pytest
from provider_sdk_contract import hostile_host
from provider_sdk_docker import DockerProvider

from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with DockerProvider() as provider, provider.create() as made:
        yield made


def _remapped() -> bool:
    """Whether the Engine runs containers in a user namespace of its own
    (``--userns-remap``)."""
    client = docker.from_env()
    try:
        return any("name=userns" in option
                   for option in client.info().get("SecurityOptions", []))
    finally:
        client.close()


def test_the_provider_declares_neither_seal_ids_nor_seal_knobs() -> None:
    """The Engine maps a container's root to the host's, and its root may write what
    the host's root may of ``/proc``: neither promise holds."""
    declared = DockerProvider.capabilities
    assert Capability.SEAL_IDS not in declared
    assert Capability.SEAL_KNOBS not in declared


async def test_the_engine_maps_the_containers_root_to_the_hosts(sandbox: Sandbox) -> None:
    """Without ``--userns-remap`` on the daemon, every id inside is the same host id:
    ``uid_map`` is the identity, root included."""
    if _remapped():
        pytest.skip("this Engine runs with --userns-remap")
    result = await sandbox.exec(["/bin/sh", "-c", hostile_host.MAPS_SCRIPT])
    uid_map, _, gid_map = result.stdout.partition("--\n")
    assert uid_map.split() == ["0", "0", "4294967295"], result.stdout
    assert gid_map.split() == ["0", "0", "4294967295"], result.stdout


async def test_the_engine_keeps_every_sysctl_read_only(sandbox: Sandbox) -> None:
    """The Engine mounts ``/proc/sys`` read-only: no sysctl is writable, even to the
    container's root."""
    result = await sandbox.exec(["/bin/bash", "-c", hostile_host.SYSCTLS_SCRIPT], timeout=120)
    writable = [line for line in result.stdout.splitlines() if line.startswith("WRITABLE")]
    assert writable == []
    assert int(result.stdout.split("checked ")[-1]) > 100


async def test_the_engines_devices_are_the_standard_ones(sandbox: Sandbox) -> None:
    """The container has the standard device nodes only (its own, on its own /dev)."""
    result = await sandbox.exec(["/bin/bash", "-c", hostile_host.DEVICES_SCRIPT], timeout=120)
    devices = [line.split() for line in result.stdout.splitlines() if line.startswith("DEVICE")]
    assert devices, result.stdout
    odd = [path for _, path, major, minor in devices
           if (int(major), int(minor)) not in hostile_host.STANDARD_DEVICES
           and int(major) not in range(136, 144)]
    assert odd == []
