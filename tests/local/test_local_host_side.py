"""What the host does with a local sandbox's files never follows where its code points:
a snapshot copies nothing of the host however the sandbox swaps directories meanwhile,
bubblewrap mounts through none of the sandbox's symlinks, and the walks that measure or
move its files stay inside them. Also: the devices a sandbox has are its own, and what
its agent leaves behind when it dies is ended at once. (A template sandbox's agent and
its overlay are checked with the template tests.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import anyio
import pytest

from provider_sdk import Capability, InvalidInput, SandboxError, SandboxState, VolumeMount
from provider_sdk.local import LocalProvider, _cgroups, _launch, _mountpoints, _storage, _trees
from provider_sdk.local._trees import copy_tree
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

# Inside, as the sandbox user: makes ~/w/d with a large file and, copied after it, a
# directory ".ssh"; once the host's copy opens the large file, swaps ~/w/d for a
# symlink to the host directory given, so a copy that went on by path would copy that
# directory's ".ssh" instead.
RACER = textwrap.dedent("""
    import ctypes, os, sys
    target = sys.argv[1]
    libc = ctypes.CDLL(None, use_errno=True)
    w = os.path.expanduser("~/w"); d = w + "/d"
    os.makedirs(d)
    with open(d + "/big", "wb") as f:
        f.write(os.urandom(1 << 20) * 96)
    # cp copies a directory's entries in inode order: ".ssh" must come after "big".
    while True:
        os.mkdir(d + "/.ssh")
        if os.stat(d + "/.ssh").st_ino > os.stat(d + "/big").st_ino:
            break
        os.rename(d + "/.ssh", w + "/.skip-%d" % os.stat(d + "/.ssh").st_ino)
    fd = libc.inotify_init1(0)
    assert libc.inotify_add_watch(fd, (d + "/big").encode(), 0x20) >= 0  # IN_OPEN
    open(os.path.expanduser("~/ready"), "w").close()
    os.read(fd, 4096)
    os.rename(d, w + "/d.old")
    os.symlink(target, d)
""")


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    """A host directory no sandbox may read: ``.ssh/secret`` in a root-only parent."""
    secret = tmp_path / "host-secret"
    (secret / ".ssh").mkdir(parents=True)
    (secret / ".ssh" / "secret").write_text("HOST ONLY\n")
    os.chmod(secret, 0o700)
    return secret


async def _race_a_snapshot(provider: LocalProvider, secret: Path) -> str:
    """Run the racer in a new sandbox, snapshot it while it swaps, and say what a
    sandbox made from the snapshot finds at the racer's ``.ssh``."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/home/user/racer.py", RACER)
        await sandbox.start(["/usr/bin/python3", "/home/user/racer.py", str(secret)])
        with anyio.fail_after(60):
            while not await sandbox.files.exists("/home/user/ready"):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        try:
            snapshot = await sandbox.snapshot()
        except SandboxError as failed:  # a copy the swap broke: refused, typed
            return f"refused: {failed}"
    try:
        async with provider.create(snapshot=snapshot.id) as restored:
            found = await restored.exec(["/bin/sh", "-c", "cat ~/w/d/.ssh/secret; true"])
    finally:
        await provider.delete_snapshot(snapshot.id)
    return found.stdout


async def test_a_snapshots_copy_reaches_nothing_of_the_host(
        provider: LocalProvider, host_secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the sandbox's processes left running during the copy (as a host without a
    freezer would, were they not stopped), a directory swapped for a symlink to a host
    directory mid-copy leads the copy nowhere: nothing of that directory is in the
    snapshot."""
    if not provider.supports(Capability.SEAL_HOST):
        pytest.skip("the copy is confined where sandboxes are isolated as root")
    monkeypatch.setattr(_storage.LocalStorage, "_still",
                        lambda self, sandbox_id, meta: contextlib.nullcontext())
    assert "HOST ONLY" not in await _race_a_snapshot(provider, host_secret)


async def test_a_snapshot_stops_the_sandbox_without_a_freezer(
        provider: LocalProvider, host_secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a cgroup freezer, every process of the sandbox is stopped while its files
    are copied, so even an unconfined copy sees them still: the racer swaps only after."""
    if not provider.supports(Capability.SEAL_HOST):
        pytest.skip("the copy is confined where sandboxes are isolated as root")
    monkeypatch.setattr(_cgroups.Cgroup, "available", staticmethod(lambda: False))
    monkeypatch.setattr(_storage, "copy_confined",
                        lambda src, dst, bwrap: copy_tree(src, dst))
    unfrozen = LocalProvider(home=provider.home)
    assert "HOST ONLY" not in await _race_a_snapshot(unfrozen, host_secret)


async def test_bubblewrap_mounts_through_no_symlink_of_the_sandbox(
        provider: LocalProvider, tmp_path: Path) -> None:
    """A sandbox that leaves a symlink to a host directory on the way to where a volume
    is mounted cannot start with it (a snapshot of it carries the symlink): the start
    is refused, saying why, and nothing is made on the host."""
    if not provider.supports(Capability.VOLUMES):
        pytest.skip("volumes need bubblewrap")
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    await provider.create_volume("through")
    try:
        async with provider.create() as sandbox:
            await sandbox.exec(["ln", "-s", f"/oldroot{outside}", "/home/user/data"])
            snapshot = await sandbox.snapshot()
        with pytest.raises(SandboxError, match="/home/user/data is not a directory"):
            await provider.create(snapshot=snapshot.id, volumes=[
                VolumeMount(volume="through", path="/home/user/data/made")])
        await provider.delete_snapshot(snapshot.id)
    finally:
        await provider.delete_volume("through")
    assert list(outside.iterdir()) == []


def test_mount_points_are_checked_through_every_layer(tmp_path: Path) -> None:
    """The check walks the sandbox's own layer over a template's: a symlink of its own
    on the way is refused, one where a file is bound over is removed, a whiteout or a
    missing directory is left for bubblewrap to make, and a template's symlink is
    trusted, but refused on the way to a volume."""
    own, template = tmp_path / "own", tmp_path / "template"
    for layer in (own, template):
        (layer / "etc").mkdir(parents=True)
    (template / "etc" / "hosts").write_text("template")
    (own / "etc" / "hosts").symlink_to("/oldroot/etc/passwd")
    (template / "var").mkdir()
    (template / "var" / "run").symlink_to("/run")
    (own / "home").symlink_to("/oldroot/tmp")
    os.mknod(own / "gone", 0o600 | 0o020000, 0)  # a whiteout: a char device 0/0
    check = _mountpoints.check
    layers = [own, template]
    check(layers, directories=["/etc/psdk", "/gone/x"], files=["/etc/hosts"], volumes=[],
          provider="local", sandbox_id="t")
    assert not os.path.lexists(own / "etc" / "hosts")
    check(layers, directories=["/var/run/x"], files=[], volumes=[], provider="local",
          sandbox_id="t")
    with pytest.raises(SandboxError, match="its own /home is not a directory"):
        check(layers, directories=[], files=[], volumes=["/home/user/data"],
              provider="local", sandbox_id="t")
    with pytest.raises(SandboxError, match="the template's /var/run is not a directory"):
        check(layers, directories=[], files=[], volumes=["/var/run/data"], provider="local",
              sandbox_id="t")


def test_walks_never_follow_a_symlink(tmp_path: Path) -> None:
    """``walk`` (behind the disk use metrics report and the moves between id slots)
    lists a symlink as itself and never descends through it."""
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "file").write_bytes(b"x" * 10000)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "big").write_bytes(b"y" * 200000)
    (root / "link").symlink_to(elsewhere)
    names = sorted(name for _fd, name, _st in _trees.walk(root))
    assert names == ["dir", "file", "link"]
    assert _trees.disk_usage(root) < 100000


async def test_a_sandboxs_devices_are_its_own(provider: LocalProvider) -> None:
    """Setting the times of /dev/null to now (what any writer may do) inside changes
    the sandbox's own node, not the host's."""
    if not provider.supports(Capability.SEAL_KNOBS):
        pytest.skip("own device nodes are made where the host runs as root")
    before = os.stat("/dev/null")
    async with provider.create() as sandbox:
        result = await sandbox.exec(["/bin/sh", "-c", "touch /dev/null /dev/zero && "
                                     "echo ok > /dev/null && head -c 3 /dev/zero | wc -c"])
    after = os.stat("/dev/null")
    assert result.stdout == "3\n", result
    assert (after.st_atime_ns, after.st_mtime_ns) == (before.st_atime_ns, before.st_mtime_ns)


def test_volume_targets_are_plain_paths_off_the_sandboxs_own_places() -> None:
    """A volume's mount path must be plain (no '.', '..', '//' or '/'), off the
    sandbox's own mounts (its processes, devices, the agent and what starts it: on,
    under or over them), and no volume may be mounted inside another."""
    check = _mountpoints.check_volume_targets
    check(["/data", "/home/user/work", "/etc/app"], provider="local")
    for bad, why in [("/", "plain absolute"), ("/home/user/../../etc/psdk", "plain"),
                     ("/data/./x", "plain"), ("//data", "plain"), ("/etc/psdk", "own"),
                     ("/etc/psdk/x", "own"), ("/etc", "own"), ("/.psdk/host", "own"),
                     ("/proc/self", "own"), ("/dev", "own"), ("/etc/ld.so.preload", "own")]:
        with pytest.raises(InvalidInput, match=why):
            check([bad], provider="local")
    with pytest.raises(InvalidInput, match="inside the other"):
        check(["/data", "/data/sub/inner"], provider="local")
    with pytest.raises(InvalidInput, match="inside the other"):
        check(["/data", "/data"], provider="local")


async def test_a_volume_is_not_mounted_over_the_agent(provider: LocalProvider) -> None:
    """Asking for a volume at the agent's directory, or inside another volume, is
    refused before anything is made."""
    if not provider.supports(Capability.VOLUMES):
        pytest.skip("volumes need bubblewrap")
    await provider.create_volume("over")
    try:
        with pytest.raises(InvalidInput, match="/etc/psdk is the sandbox's own"):
            await provider.create(volumes=[VolumeMount(volume="over", path="/etc/psdk")])
        with pytest.raises(InvalidInput, match="inside the other"):
            await provider.create(volumes=[VolumeMount(volume="over", path="/data"),
                                           VolumeMount(volume="over", path="/data/in")])
        assert await provider.list() == []
    finally:
        await provider.delete_volume("over")


def test_measuring_gives_up_on_a_tree_that_will_not_hold_still(tmp_path: Path) -> None:
    """Disk use counts a file once however many names it has, and a walk that cannot
    finish in time (a tree that keeps changing) says it has no figure."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "file").write_bytes(b"z" * 65536)
    for index in range(50):
        os.link(root / "file", root / f"name-{index}")
    one = os.stat(root / "file").st_blocks * 512
    assert _trees.disk_usage(root) == one
    assert _trees.disk_usage(root, within=-1) is None


def test_a_walk_too_deep_is_an_error_not_a_part(tmp_path: Path) -> None:
    """A tree nested deeper than a walk goes raises (``ELOOP``) rather than be walked
    in part: moving a sandbox's files between ids must not skip some unsaid."""
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(_trees.MAX_DEPTH + 2):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    try:
        with pytest.raises(OSError, match="nested deeper"):
            for _entry in _trees.walk(deep):
                pass
    finally:  # rm walks by descriptors; pytest's clean-up would recurse too deep
        subprocess.run(["rm", "-rf", "--", str(deep)], check=True)


async def _busy(provider: LocalProvider, sandbox: Sandbox) -> _launch.Launched:
    """Start processes in ``sandbox`` that would run on (one in a session of its own);
    its launch, the agent's pid in it."""
    await sandbox.start(["/bin/sh", "-c", "setsid sleep 300 & sleep 300"])
    meta = json.loads((provider.home / "sandboxes" / sandbox.id / "meta.json").read_text())
    launched = _launch.Launched(**meta["launch"])
    assert launched.agent_pid is not None
    return launched


def _only_init(launched: _launch.Launched) -> bool:
    """Whether nothing of the sandbox but its init (or nothing at all) is left."""
    return all(pid == launched.init_pid for pid in _launch.namespace_pids(launched))


async def test_the_sandbox_empties_itself_when_its_agent_dies(
        provider: LocalProvider) -> None:
    """With the agent killed, its spawner ends every other process of the sandbox by
    itself (nobody needs to look at the sandbox's state); its init then ends too."""
    async with provider.create() as sandbox:
        launched = await _busy(provider, sandbox)
        assert launched.agent_pid is not None
        os.kill(launched.agent_pid, signal.SIGKILL)
        with anyio.fail_after(10):
            while not _only_init(launched):  # noqa: ASYNC110 - another process's state
                await anyio.sleep(0.05)


async def test_leftovers_of_a_dead_agent_are_ended_when_the_state_is_read(
        provider: LocalProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the spawner go with the agent (the kernel may kill both for memory), a
    read of the sandbox's state ends what is left of it: it is ``error`` or
    ``stopped``, never running with nothing to contain it, and resumes."""
    async with provider.create() as sandbox:
        launched = await _busy(provider, sandbox)
        assert launched.agent_pid is not None
        agent_uid = _uid(launched.agent_pid)
        served = [pid for pid in _launch.namespace_pids(launched)  # the agent, the spawner
                  if pid != launched.init_pid and _uid(pid) == agent_uid]
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # both at once: no one cleans up
            for pid in served:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        with anyio.fail_after(10):
            while (await sandbox.refresh()).state not in (  # noqa: ASYNC110
                    SandboxState.ERROR, SandboxState.STOPPED):
                await anyio.sleep(0.05)
            while not _only_init(launched):
                await sandbox.refresh()
                await anyio.sleep(0.05)
        await sandbox.resume()
        assert (await sandbox.exec(["echo", "back"])).stdout == "back\n"


async def test_a_state_read_racing_a_kill_that_removes_the_cgroup_ends_leftovers(
        provider: LocalProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill in another process removes the sandbox's cgroups while a read of its state
    ends a dead agent's leftovers (the freezer's file is gone): the read ends them with
    signals, and no untyped error reaches the caller (a listing raised
    ``FileNotFoundError``)."""
    async with provider.create() as sandbox:
        launched = await _busy(provider, sandbox)
        assert launched.agent_pid is not None
        agent_uid = _uid(launched.agent_pid)
        served = [pid for pid in _launch.namespace_pids(launched)
                  if pid != launched.init_pid and _uid(pid) == agent_uid]

        def removed(group: _cgroups.Cgroup, frozen: bool) -> None:
            raise FileNotFoundError(2, "No such file or directory",
                                    str(group.path("freezer") / "freezer.state"))

        monkeypatch.setattr(_cgroups.Cgroup, "freeze", removed)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in served:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        with anyio.fail_after(10):
            while sandbox.id in {i.id for i in await provider.list()  # noqa: ASYNC110
                                 if i.state == SandboxState.RUNNING}:
                await anyio.sleep(0.05)  # polls the listing: there is no event to wait on
            while not _only_init(launched):
                await provider.list()
                await anyio.sleep(0.05)
        monkeypatch.undo()


def _uid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[0])
    except OSError:
        return None
