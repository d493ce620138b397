"""Bounded directories: on an Engine without storage quotas (overlay2 on ext4, as the
main Engine here), ``/tmp``, ``/home``, ``/root`` and the working directory of a sandbox
live on a filesystem of its own, of ``disk_mb`` MiB, made on the Engine's host.

A write past it fails with ENOSPC inside and as ``QuotaExceeded`` through the files API;
the image's files are there; a snapshot carries their files (deletions included); and a
killed sandbox leaves no volume, mount or image file behind.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
from provider_sdk_docker import DockerProvider
from provider_sdk_docker._bounded import BOUNDED, carried, dirs_for

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.models import Resources, VolumeMount

pytestmark = pytest.mark.anyio

DISK_MB = 48


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def provider(tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DockerProvider]:
    monkeypatch.setenv("PSDK_DOCKER_DISKS", str(tmp_path / "disks"))
    provider = DockerProvider(disk_mb=DISK_MB)
    if provider.disk_quota or provider._shared.bounded is None:
        reason = "the Engine has storage quotas, or this process cannot mount disks"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI's main Engine (overlay2 on ext4, as root) must "
                        "bound directories")
        pytest.skip(reason)
    yield provider
    await provider.aclose()


@pytest.fixture
def engine() -> docker.APIClient:
    return docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                            or "unix:///var/run/docker.sock", version="auto")


def test_the_bounded_directories_follow_the_working_directory_and_volumes() -> None:
    assert dirs_for(None, []) == BOUNDED
    assert dirs_for("/", []) == BOUNDED
    assert dirs_for("/work/", []) == (*BOUNDED, "/work")
    assert dirs_for("/home/user", []) == BOUNDED, "inside /home: bounded with it"
    assert dirs_for("/tmpx", []) == (*BOUNDED, "/tmpx")
    assert dirs_for("/work", ["/tmp/", "/work"]) == ("/home", "/root")


def test_a_snapshot_label_that_is_not_ours_carries_nothing() -> None:
    assert carried(None) is None
    assert carried({"psdk.snapshot.carried": "{not json"}) is None
    assert carried({"psdk.snapshot.carried": '{"dirs": {}}'}) is None
    assert carried({"psdk.snapshot.carried": '{"snapshot": "s", "dirs": {"/tmp": "/x"}}'}) \
        == ("s", {"/tmp": "/x"})


async def test_writes_past_the_bound_fail_and_the_sandbox_stays_usable(
        provider: DockerProvider) -> None:
    assert not provider.supports(Capability.LIMITS_DISK), \
        "only some directories are bounded: limits.disk is not promised"
    sandbox = await provider.create(cwd="/work")
    try:
        assert sandbox.info.resources.disk_mb == DISK_MB
        assert sandbox.info.extra["bounded_dirs"] == [*BOUNDED, "/work"]
        with pytest.raises(errors.QuotaExceeded):
            await sandbox.files.write("/work/big", bytes((DISK_MB + 16) << 20))
        assert not await sandbox.files.exists("/work/big"), "the failed write left a file"
        # One budget for all of them, enforced inside too.
        filled = await sandbox.exec(f"head -c {DISK_MB + 16}M /dev/zero > /tmp/fill",
                                    timeout=60)
        assert filled.exit_code != 0, filled
        assert "No space left" in filled.stderr, filled
        more = await sandbox.exec("head -c 4M /dev/zero > /root/more", timeout=30)
        assert more.exit_code != 0, "the bound is shared by every bounded directory"
        assert (await sandbox.metrics()).disk_bytes >= (DISK_MB - 16) << 20
        await sandbox.exec("rm /tmp/fill")
        await sandbox.files.write("/work/after", b"ok")
        assert await sandbox.files.read("/work/after") == b"ok"
    finally:
        await sandbox.kill()


async def test_the_images_files_and_modes_are_there(provider: DockerProvider) -> None:
    sandbox = await provider.create(resources=Resources(disk_mb=32))
    try:
        assert sandbox.info.resources.disk_mb == 32
        found = await sandbox.exec("stat -c %a /tmp /root; test -f /root/.bashrc && echo yes;"
                                   " df -m /tmp | tail -1")
        lines = found.stdout.split("\n")
        assert lines[:3] == ["1777", "700", "yes"], found
        assert int(lines[3].split()[1]) <= 32, f"the filesystem is not the sandbox's: {lines}"
    finally:
        await sandbox.kill()


async def test_a_volume_on_a_bounded_path_is_left_as_the_volume(
        provider: DockerProvider) -> None:
    volume = await provider.create_volume("psdk-test-bounded-vol")
    try:
        sandbox = await provider.create(volumes=[VolumeMount(volume=volume.name,
                                                             path="/tmp")])
        try:
            assert "/tmp" not in sandbox.info.extra["bounded_dirs"]
            await sandbox.exec("echo v > /tmp/in-volume")
        finally:
            await sandbox.kill()
    finally:
        await provider.delete_volume(volume.name)


async def test_a_snapshot_carries_the_bounded_directories(
        provider: DockerProvider) -> None:
    source = await provider.create(cwd="/work")
    made = [source]
    snapshots = []
    try:
        await source.exec("mkdir -p /work/src /tmp/cache && echo one > /work/src/a && "
                          "echo two > /tmp/cache/b && rm /root/.profile && "
                          "chmod 1777 /work/src")
        snapshot = await source.snapshot()
        snapshots.append(snapshot)
        await source.exec("echo changed > /work/src/a")
        copy = await provider.create(snapshot=snapshot.id)
        made.append(copy)
        assert copy.info.extra["bounded_dirs"] == [*BOUNDED, "/work"]
        seen = await copy.exec("cat /work/src/a /tmp/cache/b; stat -c %a /work/src /tmp; "
                               "ls -A /root; pwd")
        assert seen.stdout.splitlines() == ["one", "two", "1777", "1777", ".bashrc",
                                           "/work"], seen
        # A snapshot of the copy carries its own files (a chain of two).
        await copy.exec("echo three > /work/src/c && rm /tmp/cache/b")
        second = await copy.snapshot()
        snapshots.append(second)
        third = await provider.create(snapshot=second.id)
        made.append(third)
        seen = await third.exec("ls /work/src /tmp/cache")
        assert seen.stdout.split() == ["/tmp/cache:", "/work/src:", "a", "c"], seen
    finally:
        for sandbox in made:
            await sandbox.kill()
        for snap in snapshots:
            await provider.delete_snapshot(snap.id)


async def test_a_killed_sandbox_leaves_nothing_behind(provider: DockerProvider,
                                                      engine: docker.APIClient) -> None:
    sandbox = await provider.create()
    directory = provider._shared.bounded.root / sandbox.id  # type: ignore[union-attr]
    assert _on_host(directory) == ["disk.img", "mounted"]
    await sandbox.kill()
    assert _on_host(directory) == []
    left = engine.volumes(filters={"name": f"psdk-{sandbox.id}-bounded"})["Volumes"]
    assert not left, left


def _on_host(directory: Path) -> list[str]:
    """What a sandbox's disk left on this host: its files, and ``mounted`` if mounted."""
    files = sorted(p.name for p in directory.iterdir() if p.is_file()) \
        if directory.exists() else []
    mounted = str(directory) in Path("/proc/self/mounts").read_text()
    return files + (["mounted"] if mounted else [])
