"""Host ids of local sandboxes run as root: each sandbox a slot of unprivileged host ids
of its own, recorded host-wide; files moved between slots where they must be; and what
that keeps a command from doing to the host (write a sysctl, change a device node) or to
another sandbox (use up a per-user kernel counter)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import anyio
import pytest

from provider_sdk import Capability, SandboxNotRunning, SandboxState, VolumeMount
from provider_sdk.local import LocalProvider, _ids, _launch, _mounts
from provider_sdk.provider import ProcessOutput

pytestmark = pytest.mark.anyio

USER = 1000


# ------------------------------------------------------------------ the registry


@pytest.fixture
def small(tmp_path: Path) -> _ids.Registry:
    """A registry of four slots (two a sandbox may hold) in a directory of its own."""
    return _ids.Registry(_ids.IdRange(0x4000_0000, 4 * _ids.SLOT_SIZE), tmp_path / "ids")


def test_slots_are_handed_out_once_and_freed(small: _ids.Registry, tmp_path: Path) -> None:
    """Two sandboxes get the two slots a sandbox may hold (never the shared one or the
    probe's); a third finds none (ENOSPC); a released slot is handed out again."""
    one, two, three = (tmp_path / name for name in ("a", "b", "c"))
    for directory in (one, two, three):
        directory.mkdir()
    first, second = small.claim(one), small.claim(two)
    assert {first, second} == {small.ids.base(1), small.ids.base(2)}
    with pytest.raises(OSError, match="every one of the 2 id ranges"):
        small.claim(three)
    small.release(first, two)  # not its holder: nothing happens
    assert small.holder(first) == str(one)
    small.release(first, one)
    assert small.claim(three) == first


def test_a_slot_whose_sandbox_is_gone_is_free(small: _ids.Registry, tmp_path: Path) -> None:
    """A slot recorded for a directory that no longer exists (a home deleted with its
    sandboxes) is handed out again."""
    gone, new = tmp_path / "gone", tmp_path / "new"
    gone.mkdir()
    new.mkdir()
    first = small.claim(gone)
    second = small.claim(tmp_path)
    gone.rmdir()
    assert small.claim(new) == first
    assert small.holder(second) == str(tmp_path)


def test_a_sandbox_gets_its_recorded_slot_back_unless_taken(small: _ids.Registry,
                                                             tmp_path: Path) -> None:
    """Asking for the slot a record names gives it back while it is free or the
    sandbox's own; taken by another sandbox, another slot is given; a first id that is
    no slot (another range's) gets a slot of this range."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    held = small.claim(mine)
    assert small.claim(mine, held) == held
    small.release(held, mine)
    assert small.claim(mine, held) == held
    small.release(held, mine)
    taken = small.claim(other, held)
    assert taken == held
    moved = small.claim(mine, held)
    assert moved != held
    assert small.ids.slot(moved) is not None
    small.release(moved, mine)
    assert small.ids.slot(small.claim(mine, 12345)) is not None


def _etc(tmp_path: Path, subuid: str = "", subgid: str | None = None) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir(parents=True)
    (etc / "subuid").write_text(subuid)
    (etc / "subgid").write_text(subuid if subgid is None else subgid)
    return etc


def test_the_range_comes_from_the_subordinate_files(tmp_path: Path) -> None:
    """A ``psdk`` entry in both subordinate files is the range; without one the default
    range is used."""
    start, count = 0x5000_0000, 16 * _ids.SLOT_SIZE
    given = _ids.host_range.__wrapped__(_etc(tmp_path, f"someone:100000:65536\n"
                                                       f"psdk:{start}:{count}\n"))
    assert (given.start, given.count, given.slots) == (start, count, 16)
    default = _ids.host_range.__wrapped__(_etc(tmp_path / "none"))
    assert (default.start, default.count) == (_ids.DEFAULT_START, _ids.DEFAULT_COUNT)


@pytest.mark.parametrize(("subuid", "subgid", "why"), [
    ("psdk:1879048192:268304384\n", "psdk:1879048192:65536\n", "different ranges"),
    ("other:1879048192:65536\n", None, "overlaps 'other'"),
    ("psdk:0:268304384\n", None, "must lie above 65535"),
    ("psdk:1879048192:65536\n", None, "at least"),
])
def test_a_range_that_cannot_be_used_is_refused(tmp_path: Path, subuid: str,
                                                subgid: str | None, why: str) -> None:
    """Subordinate files that disagree, a range another entry overlaps, or one that
    holds root or too few ids: ``RangeError`` saying which."""
    with pytest.raises(_ids.RangeError, match=why):
        _ids.host_range.__wrapped__(_etc(tmp_path, subuid, subgid))


def test_a_range_holding_a_host_account_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A range that holds the id of one of this host's accounts or groups (from every
    source the C library reads: a directory service's high ids too) is refused,
    naming it."""
    start = _ids.DEFAULT_START
    monkeypatch.setattr(_ids, "_accounts", lambda: [("user 'directory-user'", start + 5)])
    with pytest.raises(_ids.RangeError, match="holds the id of host user 'directory-user'"):
        _ids.host_range.__wrapped__(_etc(tmp_path))


def test_shifting_moves_only_the_slots_ids_and_never_follows_a_link(tmp_path: Path) -> None:
    """``rebase`` moves ids of one slot to another's, ``legacy`` an earlier version's
    (the host's root as the user, its agent id as root); a symlink is changed itself,
    not what it points to."""
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root")
    tree = tmp_path / "tree"
    (tree / "dir").mkdir(parents=True)
    (tree / "dir" / "file").write_text("x")
    outside = tmp_path / "outside"
    outside.write_text("host")
    (tree / "link").symlink_to(outside)
    old, new = 0x7001_0000, 0x7005_0000
    os.lchown(tree, old, old)
    os.lchown(tree / "dir", old + USER, old + USER)
    os.lchown(tree / "dir" / "file", old + USER, 4321)
    os.lchown(tree / "link", old + USER, old + USER)
    _ids.shift_tree(tree, _ids.rebase(old, new))
    owners = {p.name: (os.lstat(p).st_uid, os.lstat(p).st_gid)
              for p in (tree, tree / "dir", tree / "dir" / "file", tree / "link")}
    assert owners == {"tree": (new, new), "dir": (new + USER, new + USER),
                      "file": (new + USER, 4321), "link": (new + USER, new + USER)}
    assert os.stat(outside).st_uid == 0
    os.lchown(tree / "dir" / "file", 0, _ids.LEGACY_AGENT_ID)
    _ids.shift_tree(tree / "dir", _ids.legacy(new))
    assert (os.lstat(tree / "dir" / "file").st_uid, os.lstat(tree / "dir" / "file").st_gid) \
        == (new + USER, new)


# ------------------------------------------------------------------ sandboxes


@pytest.fixture
def rooted(provider: LocalProvider) -> LocalProvider:
    """The provider, where sandboxes have host ids of their own (root here)."""
    if not provider.supports(Capability.SEAL_IDS):
        pytest.skip("sandboxes have host ids of their own only where the host runs as root")
    return provider


def _record(provider: LocalProvider, sandbox_id: str) -> dict[str, object]:
    meta: dict[str, object] = json.loads(
        (provider.home / "sandboxes" / sandbox_id / "meta.json").read_text())
    return meta


def _ids_of(provider: LocalProvider, sandbox_id: str) -> int:
    ids = _record(provider, sandbox_id)["ids"]
    assert isinstance(ids, int)
    return ids


def _write_record(provider: LocalProvider, sandbox_id: str, meta: dict[str, object]) -> None:
    (provider.home / "sandboxes" / sandbox_id / "meta.json").write_text(json.dumps(meta))


async def test_a_command_cannot_write_a_host_sysctl(rooted: LocalProvider) -> None:
    """Writing a sysctl (its own value back, so nothing changes if it were allowed)
    fails inside, and the host's values stay."""
    names = ("kernel/printk_ratelimit", "kernel/core_pattern", "fs/inotify/max_user_instances")
    sysctls = [anyio.Path(f"/proc/sys/{n}") for n in names]
    before = [await path.read_text() for path in sysctls]
    script = 'for n in "$@"; do { echo "$(cat /proc/sys/$n)" > /proc/sys/$n; } 2>/dev/null ' \
             '&& echo "WROTE $n"; done; true'
    async with rooted.create() as sandbox:
        result = await sandbox.exec(["/bin/bash", "-c", script, "psdk", *names])
    assert result.stdout == "", result.stdout
    assert [await path.read_text() for path in sysctls] == before


async def test_a_command_cannot_change_a_host_device_node(rooted: LocalProvider) -> None:
    """``chmod``, ``touch -d`` and ``chown`` of the host's ``/dev/full`` (bound in) all
    fail inside, and the host's node keeps its mode and times."""
    before = os.stat("/dev/full")
    async with rooted.create() as sandbox:
        result = await sandbox.exec(["/bin/bash", "-c",
                                     "chmod 0600 /dev/full && echo chmod; "
                                     "touch -d 2001-01-01 /dev/full && echo touch; "
                                     "chown 1000 /dev/full && echo chown; "
                                     "echo data > /dev/full || echo write refused; true"])
    after = os.stat("/dev/full")
    assert result.stdout == "write refused\n", result.stdout
    assert (stat.S_IMODE(after.st_mode), after.st_mtime_ns, after.st_uid) == \
        (stat.S_IMODE(before.st_mode), before.st_mtime_ns, before.st_uid)


async def test_commands_hold_no_capability_of_any_kind(rooted: LocalProvider) -> None:
    """A command and what it starts hold no capability: effective, permitted,
    inheritable and ambient sets are empty (a file granting inheritable ones gives
    nothing)."""
    script = "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status; sleep 5 & " \
             "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/$!/status; kill $!"
    async with rooted.create() as sandbox:
        result = await sandbox.exec(["/bin/bash", "-c", script])
    sets = [line.split(":")[1].strip() for line in result.stdout.splitlines()]
    assert sets == ["0" * 16] * 8, result.stdout


async def test_a_sandboxs_files_are_its_slots_on_the_host(rooted: LocalProvider) -> None:
    """The root, the user's files and a new file in /tmp are owned on the host by the
    sandbox's slot (its uid 0 and 1000 there), never by the host's root."""
    async with rooted.create() as sandbox:
        await sandbox.exec(["/bin/sh", "-c", "echo x > ~/mine; echo x > /tmp/mine"])
        base = _ids_of(rooted, sandbox.id)
        root = rooted.home / "sandboxes" / sandbox.id / "root"
        owners = {path: os.lstat(root / path).st_uid
                  for path in (".", "home/user", "home/user/mine", "tmp/mine", "tmp")}
    assert owners == {".": base, "home/user": base + USER, "home/user/mine": base + USER,
                      "tmp/mine": base + USER, "tmp": base}
    assert _ids.host_range().slot(base) is not None


async def test_the_slot_is_recorded_while_the_sandbox_lives(rooted: LocalProvider) -> None:
    """The host-wide registry names the sandbox's directory for its slot while it
    lives, and frees the slot when it is killed."""
    registry = _ids.Registry(_ids.host_range())
    sandbox = await rooted.create()
    base = _ids_of(rooted, sandbox.id)
    assert registry.holder(base) == str(rooted.home / "sandboxes" / sandbox.id)
    await sandbox.kill()
    assert registry.holder(base) is None


def _staged_for(base: int) -> list[str]:
    """Staging directories, and mounts in them, that belong to the slot at ``base``."""
    root = _mounts.STAGING_ROOT
    found = [str(p) for p in (root.iterdir() if root.is_dir() else ())
             if p.stat().st_uid == base]
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(line.split()[4])
        if point.is_relative_to(root) and str(point.parents[0]) in found:
            found.append(f"mount {point}")
    return found


async def test_nothing_staged_is_left_on_the_host(rooted: LocalProvider) -> None:
    """Once a sandbox answers, the mounts staged for its bubblewrap (its root, a
    volume) are detached from the host and their directory removed (bubblewrap keeps
    its own copies)."""
    await rooted.create_volume("staged")
    try:
        async with rooted.create(volumes=[VolumeMount(volume="staged", path="/data")]) \
                as sandbox:
            result = await sandbox.exec(["sh", "-c", "echo x > /data/f; cat /data/f; ls /"])
            left = await anyio.to_thread.run_sync(_staged_for, _ids_of(rooted, sandbox.id))
    finally:
        await rooted.delete_volume("staged")
    assert result.stdout.startswith("x\n"), result
    assert "home" in result.stdout.split()
    assert left == []


async def test_per_user_kernel_counters_are_each_sandboxs_own(rooted: LocalProvider) -> None:
    """A sandbox that takes every inotify instance its user may have leaves another
    sandbox its own: the kernel counts them per user, and no two sandboxes share one."""
    hog = ("import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\n"
           "while libc.inotify_init() >= 0:\n    n += 1\n"
           "print(n, ctypes.get_errno(), flush=True)\ntime.sleep(60)\n")
    one = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "print(libc.inotify_init() >= 0, ctypes.get_errno())\n")
    async with rooted.create() as first, rooted.create() as second:
        process = await first.start(["/usr/bin/python3", "-c", hog])
        with anyio.fail_after(30):
            async for event in process.events():
                if isinstance(event, ProcessOutput):
                    taken, errno = event.data.decode().split()
                    break
        assert int(taken) > 0
        assert int(errno) == 24  # EMFILE: every instance taken
        result = await second.exec(["/usr/bin/python3", "-c", one])
        await process.kill()
    assert result.stdout.split()[0] == "True", result.stdout


async def test_a_snapshot_restored_belongs_to_the_new_sandbox(rooted: LocalProvider) -> None:
    """A sandbox made from a snapshot of another owns the files it got: its user owns
    them inside and may change them; on the host they are its slot's."""
    async with rooted.create() as first:
        await first.exec(["/bin/sh", "-c", "echo kept > ~/kept"])
        snap = await first.snapshot()
        async with rooted.create(snapshot=snap.id) as second:
            result = await second.exec(["/bin/sh", "-c",
                                        "stat -c %u:%g ~/kept; echo more >> ~/kept && cat ~/kept"])
            base, before = _ids_of(rooted, second.id), _ids_of(rooted, first.id)
            host = os.lstat(rooted.home / "sandboxes" / second.id / "root/home/user/kept")
    await rooted.delete_snapshot(snap.id)
    assert result.stdout == "1000:1000\nkept\nmore\n", result
    assert base != before
    assert (host.st_uid, host.st_gid) == (base + USER, base + USER)


async def test_a_volume_is_its_users_in_every_sandbox(rooted: LocalProvider) -> None:
    """Two sandboxes (two slots) that mount one volume each see the other's files as
    their own user's and may change them; on the host the files are the shared slot's."""
    await rooted.create_volume("shared-ids")
    mount = [VolumeMount(volume="shared-ids", path="/data")]
    try:
        async with rooted.create(volumes=mount) as first, \
                rooted.create(volumes=mount) as second:
            await first.exec(["/bin/sh", "-c", "echo one > /data/f"])
            result = await second.exec(["/bin/sh", "-c",
                                        "stat -c %u:%g /data/f; echo two >> /data/f && "
                                        "cat /data/f"])
            assert _ids_of(rooted, first.id) != _ids_of(rooted, second.id)
        data = Path((await rooted.get_volume("shared-ids")).extra["path"])
        host = os.lstat(data / "f")
    finally:
        await rooted.delete_volume("shared-ids")
    assert result.stdout == "1000:1000\none\ntwo\n", result
    storage = _ids.host_range().storage
    assert (host.st_uid, host.st_gid) == (storage + USER, storage + USER)


async def test_a_running_sandbox_of_an_earlier_version_must_start_again(
        rooted: LocalProvider) -> None:
    """A sandbox still running as an earlier version started it (no ``ids`` in its
    record: its user was the host's root) is reported as ``error`` and refuses
    commands, saying why, until ``resume()`` starts it again with a slot of its own."""
    async with rooted.create() as sandbox:
        meta = _record(rooted, sandbox.id)
        meta.pop("ids")
        _write_record(rooted, sandbox.id, meta)
        assert (await sandbox.refresh()).state == SandboxState.ERROR
        with pytest.raises(SandboxNotRunning, match="earlier version"):
            await sandbox.exec(["true"])
        await sandbox.resume()
        result = await sandbox.exec(["id", "-u"])
        assert result.stdout == "1000\n"
        assert _ids.host_range().slot(_ids_of(rooted, sandbox.id)) is not None


async def _stopped_with(sandbox_id: str, rooted: LocalProvider, made: str) -> dict[str, object]:
    """Write ``made`` into the user's home of a running sandbox, then end its processes
    from the host (as a host restart would); its record."""
    sandbox = await rooted.connect(sandbox_id)
    await sandbox.exec(["/bin/sh", "-c", f"echo {made} > ~/{made}"])
    meta = _record(rooted, sandbox_id)
    launch = meta["launch"]
    assert isinstance(launch, dict)
    _launch.kill(_launch.Launched(**launch))
    return meta


async def test_files_of_an_earlier_version_move_to_the_sandboxs_slot(
        rooted: LocalProvider) -> None:
    """A stopped sandbox whose files an earlier version left (its user's as the host's
    root, its root's as that version's agent id) starts with them moved to its slot."""
    async with rooted.create() as sandbox:
        meta = await _stopped_with(sandbox.id, rooted, "old")
        root = rooted.home / "sandboxes" / sandbox.id / "root"
        base = _ids_of(rooted, sandbox.id)
        for path in (root / "home" / "user", root / "home" / "user" / "old"):
            os.lchown(path, 0, 0)
        os.lchown(root, _ids.LEGACY_AGENT_ID, _ids.LEGACY_AGENT_ID)
        meta.pop("ids")
        _write_record(rooted, sandbox.id, meta)
        _ids.Registry(_ids.host_range()).release(base, root.parent)
        await sandbox.resume()
        result = await sandbox.exec(["/bin/sh", "-c",
                                     "stat -c %u ~/old / ; echo new >> ~/old && cat ~/old"])
        now = _ids_of(rooted, sandbox.id)
        assert os.lstat(root / "home" / "user" / "old").st_uid == now + USER
    assert result.stdout == "1000\n0\nold\nnew\n", result


async def test_files_move_when_the_slot_was_taken_meanwhile(rooted: LocalProvider,
                                                            tmp_path: Path) -> None:
    """A stopped sandbox whose slot another holds when it starts again gets a free one,
    and its files move with it: its user still owns them inside."""
    async with rooted.create() as sandbox:
        await _stopped_with(sandbox.id, rooted, "mine")
        base = _ids_of(rooted, sandbox.id)
        registry = _ids.Registry(_ids.host_range())
        directory = rooted.home / "sandboxes" / sandbox.id
        registry.release(base, directory)
        squatter = tmp_path / "squatter"
        squatter.mkdir()
        assert registry.claim(squatter, base) == base
        try:
            await sandbox.resume()
            result = await sandbox.exec(["/bin/sh", "-c", "stat -c %u ~/mine; cat ~/mine"])
            now = _ids_of(rooted, sandbox.id)
            owner = os.lstat(directory / "root" / "home" / "user" / "mine").st_uid
        finally:
            registry.release(base, squatter)
    assert now != base
    assert result.stdout == "1000\nmine\n"
    assert owner == now + USER


async def test_a_listing_removes_what_a_dead_start_staged(rooted: LocalProvider,
                                                          tmp_path: Path) -> None:
    """A staging directory a process left when it died starting a sandbox (its mount
    still there) is detached and removed by the next listing; one of a live process (a
    start under way) is left alone, however old it looks: a clock that jumps ahead, or
    a start that takes long, must not end another process's start."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "kept").write_text("not to be deleted")
    gone = await anyio.run_process(["/bin/sh", "-c", "echo $$"])
    dead = _mounts.Staging(_mounts.STAGING_ROOT / f"{int(gone.stdout)}-0123456789abcdef")
    dead.path.mkdir(mode=0o700)
    live = _mounts.Staging.open(0)
    for staging in (dead, live):
        staging.bind("root", source)
        os.utime(staging.path, (1, 1))  # both look decades old
    try:
        await rooted.list()
        mounts = await anyio.Path("/proc/self/mountinfo").read_text()
        assert not await anyio.Path(dead.path).exists()
        assert f" {dead.path}/" not in mounts
        assert await anyio.Path(live.path / "root" / "kept").exists()
        assert (source / "kept").read_text() == "not to be deleted"
    finally:
        live.close()
        dead.close()
