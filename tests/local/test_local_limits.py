"""The local provider's limits without being asked: memory (with OOM kills reported),
/dev/shm, processes, and a disk quota on each sandbox's writable layer."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from local_fixtures import provider_in, tmpfs

from provider_sdk import CommandTimeout, Resources, UnsupportedCapability, disks
from provider_sdk.capabilities import Capability
from provider_sdk.local import LocalProvider, _bwrap, _cgroups, _disk
from provider_sdk.local._control import DEFAULT_MEMORY_MB

pytestmark = pytest.mark.anyio

ALLOCATE = textwrap.dedent("""
    import sys
    chunks = []
    for _ in range(int(sys.argv[1])):
        chunks.append(bytearray(16 << 20))  # touched: bytearray zero-fills
    print("allocated", flush=True)
""")


def needs_cgroups() -> None:
    if not _cgroups.Cgroup.available():
        pytest.skip("cgroup v1 controllers are not writable here")


def needs_quota() -> None:
    if not disks.available():
        pytest.skip("disk quotas need root and loop devices")


def allocate(mib: int) -> list[str]:
    return ["/usr/bin/python3", "-c", ALLOCATE, str(mib // 16)]


def _oom_killed_in(memcg: Path) -> None:
    """Run a process in the memory cgroup ``memcg`` (limited to 16 MiB) that the kernel
    kills for it."""
    (memcg / "memory.limit_in_bytes").write_text(str(16 << 20))
    if (memcg / "memory.memsw.limit_in_bytes").exists():
        (memcg / "memory.memsw.limit_in_bytes").write_text(str(16 << 20))
    hog = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(1); "
                            "b = b'x' * (256 << 20)"], stdin=subprocess.PIPE)
    (memcg / "cgroup.procs").write_text(str(hog.pid))
    assert hog.stdin is not None
    hog.stdin.write(b"x")
    hog.stdin.close()
    assert hog.wait(timeout=60) == -9


def test_oom_kills_counts_the_sandbox_cgroup_and_those_below_it() -> None:
    """What an exec compares to tell an OOM kill: kills in the sandbox's memory cgroup,
    and in one made below it, each counted."""
    needs_cgroups()
    cgroup = _cgroups.Cgroup(f"psdk-test-oom-{os.getpid()}")
    cgroup.create(Resources(memory_mb=64))
    below = cgroup.path("memory") / "below"
    try:
        assert cgroup.oom_kills() == 0
        _oom_killed_in(cgroup.path("memory"))
        assert cgroup.oom_kills() == 1
        below.mkdir()
        _oom_killed_in(below)
        assert cgroup.oom_kills() == 2
    finally:
        with contextlib.suppress(FileNotFoundError):
            below.rmdir()
        cgroup.destroy()


@pytest.fixture
def tmpfs_home(home: Path) -> Iterator[Path]:
    """A home on a 256 MiB tmpfs of its own, so disk use is measured exactly."""
    needs_quota()
    with tmpfs(home, "256m") as mounted_home:
        yield mounted_home


@pytest.fixture
async def small_provider(tmpfs_home: Path) -> AsyncIterator[LocalProvider]:
    async with provider_in(tmpfs_home) as provider:
        yield provider


def mounted(path: Path) -> bool:
    return os.path.ismount(path)


def used(path: Path) -> int:
    stats = os.statvfs(path)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


async def test_defaults_are_applied_declared_and_reported(provider: LocalProvider) -> None:
    """With no resources asked for, an isolated sandbox gets the default memory limit
    (swap included) and disk quota, declared as capabilities and shown by info() and
    metrics(); /dev/shm is a bounded tmpfs."""
    needs_cgroups()
    needs_quota()
    assert {Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS,
            Capability.LIMITS_DISK} <= provider.capabilities
    async with provider.create() as sandbox:
        info = await provider.get_info(sandbox.id)
        metrics = await sandbox.metrics()
        cgroup = provider._shared.cgroup(sandbox.id)
        memsw = cgroup.path("memory") / "memory.memsw.limit_in_bytes"
        df = await sandbox.exec("df -k / /dev/shm | tail -n 2")
    assert info.resources.memory_mb == DEFAULT_MEMORY_MB == 2048
    assert info.resources.disk_mb == _disk.DEFAULT_DISK_MB
    assert metrics.memory_limit_bytes == 2048 << 20
    if memsw.exists():
        assert int(memsw.read_text()) == 2048 << 20
    root_kb, shm_kb = (int(line.split()[1]) for line in df.stdout.splitlines())
    assert 3 << 20 < root_kb <= 4 << 20  # 4 GiB less the filesystem's own metadata
    assert shm_kb == _bwrap.SHM_MB << 10


async def test_unisolated_sandboxes_declare_no_limits(home: Path) -> None:
    """Without bubblewrap nothing is contained, so no limit is promised, and a disk
    quota is refused before anything is made."""
    provider = LocalProvider(home=home, unisolated=True)
    assert not {Capability.LIMITS_MEMORY, Capability.LIMITS_DISK} & provider.capabilities
    with pytest.raises(UnsupportedCapability, match="disk"):
        await provider.create(resources=Resources(disk_mb=100))
    assert await provider.list() == []


async def test_the_default_memory_limit_stops_a_large_allocation(provider: LocalProvider) -> None:
    """Past 2 GiB in a sandbox nobody gave a limit, the allocation is OOM-killed and the
    result says so (the host keeps its memory)."""
    needs_cgroups()
    async with provider.create() as sandbox:
        result = await sandbox.exec(allocate(3072), timeout=120)
    assert result.exit_code == -9
    assert result.oom_killed
    assert "allocated" not in result.stdout


async def test_oom_kill_is_reported_even_when_the_last_process_succeeds(
        provider: LocalProvider) -> None:
    """A command killed for memory says so; so does a pipeline whose killed process is
    not the last; a command that fits does not."""
    needs_cgroups()
    async with provider.create(resources=Resources(memory_mb=128)) as sandbox:
        killed = await sandbox.exec(allocate(512), timeout=60)
        piped = await sandbox.exec(["/bin/sh", "-c", f"/usr/bin/python3 -c '{ALLOCATE}' 32 | cat"],
                                   timeout=60)
        fits = await sandbox.exec(allocate(32), timeout=60)
    assert killed.exit_code == -9
    assert killed.oom_killed
    assert piped.exit_code == 0
    assert piped.oom_killed
    assert fits.exit_code == 0
    assert fits.stdout == "allocated\n"
    assert not fits.oom_killed


async def test_a_timeout_after_an_oom_kill_says_so(provider: LocalProvider) -> None:
    """The partial result of a CommandTimeout reports an OOM kill during the call."""
    needs_cgroups()
    script = f"/usr/bin/python3 -c '{ALLOCATE}' 32; sleep 60"
    async with provider.create(resources=Resources(memory_mb=128)) as sandbox:
        with pytest.raises(CommandTimeout) as raised:
            await sandbox.exec(["/bin/sh", "-c", script], timeout=3)
    assert raised.value.result.oom_killed


async def test_dev_shm_fills_at_its_bound(provider: LocalProvider) -> None:
    """/dev/shm is a tmpfs of SHM_MB: writing past it fails inside."""
    async with provider.create() as sandbox:
        result = await sandbox.exec(
            "dd if=/dev/zero of=/dev/shm/fill bs=1M count=200 2>&1; stat -c %s /dev/shm/fill")
    assert "No space left on device" in result.stdout
    assert int(result.stdout.split()[-1]) <= _bwrap.SHM_MB << 20


async def test_writes_past_the_disk_quota_fail_inside_and_spare_the_host(
        small_provider: LocalProvider, tmpfs_home: Path) -> None:
    """Past disk_mb, writes (to the root and to /tmp alike) fail with ENOSPC inside,
    and the home's filesystem grows by no more than the quota."""
    async with small_provider.create(resources=Resources(disk_mb=64)) as sandbox:
        before = used(tmpfs_home)
        result = await sandbox.exec(
            "dd if=/dev/zero of=/home/user/fill bs=1M count=200 2>&1;"
            " head -c 8M /dev/zero > /tmp/more || echo tmp-full", timeout=120)
        after = used(tmpfs_home)
        info = await sandbox.refresh()
    assert "No space left on device" in result.stdout
    assert result.stdout.rstrip().endswith("tmp-full")
    assert after - before <= 64 << 20
    assert info.resources.disk_mb == 64


async def test_a_quota_survives_a_host_restart(provider: LocalProvider) -> None:
    """With its processes gone and its image unmounted (as after a reboot), resume
    mounts the image again: the files are back and the quota still holds."""
    needs_quota()
    async with provider.create(resources=Resources(disk_mb=64)) as sandbox:
        await sandbox.files.write("/home/user/kept.txt", b"kept")
        directory = provider._shared.home.sandbox(sandbox.id)
        provider._sandboxes.stop_processes(sandbox.id, provider._sandboxes.read(sandbox.id))
        _disk.unmount_all(directory)
        assert not mounted(directory / "root")
        await sandbox.resume()
        assert mounted(directory / "root")
        assert await sandbox.files.read("/home/user/kept.txt") == b"kept"
        df = await sandbox.exec("df -k / | tail -n 1")
    assert int(df.stdout.split()[1]) <= 64 << 10
    assert not directory.exists()  # killed: unmounted and removed


async def test_snapshots_copy_the_files_out_of_the_quota(provider: LocalProvider) -> None:
    """A snapshot of a quota'd sandbox is its files; a sandbox made from it has them
    in a quota'd layer of its own."""
    needs_quota()
    async with provider.create(resources=Resources(disk_mb=64)) as sandbox:
        await sandbox.files.write("/home/user/note.txt", b"hello")
        snapshot = await sandbox.snapshot()
    async with provider.create(snapshot=snapshot.id) as copy:
        assert await copy.files.read("/home/user/note.txt") == b"hello"
        assert (await copy.refresh()).resources.disk_mb == _disk.DEFAULT_DISK_MB
        assert mounted(provider._shared.home.sandbox(copy.id) / "root")
    await provider.delete_snapshot(snapshot.id)
