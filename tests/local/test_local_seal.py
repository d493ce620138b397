"""The local sandbox's seal: the seccomp filter, no nested user namespaces, no host path
and no descriptor to a host file visible inside."""

from __future__ import annotations

import json
import os
import platform
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from provider_sdk import Capability, ConfigError, VolumeMount
from provider_sdk.local import LocalProvider, _bwrap, _ids, _launch, _seccomp, _users
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

NR = {"x86_64": {"clone": 56, "clone3": 435, "keyctl": 250, "add_key": 248,
                 "personality": 135},
      "aarch64": {"clone": 220, "clone3": 435, "keyctl": 219, "add_key": 217,
                  "personality": 92}}[platform.machine()]

PROBE = textwrap.dedent("""
    import ctypes, json, os, signal
    libc = ctypes.CDLL(None, use_errno=True)
    NR = json.loads(os.environ["NR"])
    out = {}

    def call(name, fn):
        ctypes.set_errno(0)
        result = fn()
        out[name] = [result, ctypes.get_errno()]

    call("unshare_newuser", lambda: libc.unshare(0x10000000))

    def clone_newuser():
        pid = libc.syscall(NR["clone"], 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        return pid

    call("clone_newuser", clone_newuser)
    call("clone3", lambda: libc.syscall(NR["clone3"], 0, 0))
    call("keyctl", lambda: libc.syscall(NR["keyctl"], 0, -3, 0))  # GET_KEYRING_ID
    call("add_key", lambda: libc.syscall(NR["add_key"], b"user", b"k", b"v", 1, -3))
    call("personality", lambda: libc.syscall(NR["personality"], 0x0400000))
    pid = os.fork()  # fork stays allowed
    if pid == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps(out))
""")


def _host_pid(meta: dict[str, object], pid: int) -> int:
    """The host pid of the process that is ``pid`` in a local sandbox (its record's
    launch names the sandbox's PID namespace)."""
    launch = meta["launch"]
    assert isinstance(launch, dict)
    found = [host for host in _launch.namespace_pids(_launch.Launched(**launch))
             if (Path(f"/proc/{host}/status").read_text().split("NSpid:")[1]
                 .splitlines()[0].split()[-1]) == str(pid)]
    assert len(found) == 1, found
    return found[0]


async def _python(sandbox: Sandbox, code: str, **env: str) -> str:
    result = await sandbox.exec(["/usr/bin/python3", "-c", code], env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_filter_is_a_valid_program_for_both_architectures() -> None:
    """The program is whole sock_filter records, starts with the architecture check and
    ends every path in a return (its last instruction is one)."""
    code = _seccomp.program()
    assert len(code) % 8 == 0
    assert len(code) // 8 < 4096
    first = int.from_bytes(code[:2], "little" if sys.byteorder == "little" else "big")
    assert first == 0x20  # ld [arch]
    assert int.from_bytes(code[-8:-6], sys.byteorder) == 0x06  # ret


async def test_isolated_provider_declares_the_syscall_seal(home: Path) -> None:
    """seal.syscalls is declared where the filter applies, not on unisolated sandboxes."""
    assert LocalProvider(home=home).supports(Capability.SEAL_SYSCALLS)
    assert not LocalProvider(home=home, unisolated=True).supports(Capability.SEAL_SYSCALLS)


async def test_nested_user_namespaces_are_refused(provider: LocalProvider) -> None:
    """unshare -U/-Ur, unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER) all fail with
    EPERM; clone3 is ENOSYS (libc falls back to clone); key rings and personality
    changes are denied; fork still works."""
    async with provider.create() as sandbox:
        ur = await sandbox.exec("unshare -Ur true")
        u = await sandbox.exec("unshare -U true")
        found = json.loads(await _python(sandbox, PROBE, NR=json.dumps(NR)))
    assert ur.exit_code != 0, ur
    assert u.exit_code != 0, u
    assert found["unshare_newuser"] == [-1, 1]
    assert found["clone_newuser"] == [-1, 1]
    assert found["clone3"] == [-1, 38]
    assert found["keyctl"] == [-1, 1]
    assert found["add_key"] == [-1, 1]
    assert found["personality"] == [-1, 1]
    assert found["fork"] == 7


MODES = textwrap.dedent("""
    import ctypes, json, os, stat
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}

    def call(name, fn):
        try:
            fn()
            out[name] = 0
        except OSError as exc:
            out[name] = exc.errno

    def syscall(name, *args):
        ctypes.set_errno(0)
        out[name] = [libc.syscall(*args), ctypes.get_errno()]

    open("plain", "w").close()
    call("chmod_4755", lambda: os.chmod("plain", 0o4755))
    call("chmod_2755", lambda: os.chmod("plain", 0o2755))
    call("chmod_1777", lambda: os.chmod("plain", 0o1777))
    call("chmod_0755", lambda: os.chmod("plain", 0o755))
    fd = os.open("plain", os.O_RDONLY)
    call("fchmod_4755", lambda: os.fchmod(fd, 0o4755))
    call("create_4755", lambda: os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o4755)))
    out["made_exists"] = os.path.exists("made")
    call("create_0600", lambda: os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o600)))
    # Without O_CREAT the mode is not looked at, whatever it holds.
    call("open_with_mode", lambda: os.close(os.open("plain", os.O_RDONLY, 0o6777)))
    call("mknod_fifo_4600", lambda: os.mknod("fifo", 0o4600 | stat.S_IFIFO))
    syscall("fchmodat2", 452, -100, b"plain", 0o2755, 0)
    syscall("io_uring_setup", 425, 1, 0)
    syscall("openat2", 437, -100, b"plain", 0, 0)
    out["mode"] = oct(stat.S_IMODE(os.stat("plain").st_mode))
    print(json.dumps(out))
""")


async def test_setuid_and_setgid_modes_are_refused(provider: LocalProvider) -> None:
    """No file made or changed inside gets the setuid or setgid bit (EPERM), through
    chmod, fchmod, fchmodat2, an O_CREAT open or mknod; other modes (sticky included)
    still work, an open without O_CREAT ignores its mode; io_uring is refused and
    openat2 is ENOSYS, so neither goes round the check."""
    async with provider.create() as sandbox:
        found = json.loads(await _python(sandbox, MODES))
        shell = await sandbox.exec("cp /bin/true t && chmod u+s t; echo $?; stat -c %a t")
    assert found["chmod_4755"] == found["chmod_2755"] == found["fchmod_4755"] == 1, found
    assert found["create_4755"] == 1, found
    assert not found["made_exists"], found
    assert found["mknod_fifo_4600"] == 1, found
    assert found["fchmodat2"] == [-1, 1], found
    assert (found["chmod_1777"], found["chmod_0755"], found["create_0600"],
            found["open_with_mode"]) == (0, 0, 0, 0), found
    assert found["mode"] == "0o755", found
    assert found["io_uring_setup"] == [-1, 1], found
    assert found["openat2"] == [-1, 38], found
    assert shell.stdout.split() == ["1", "755"], shell


async def test_ordinary_tools_still_work_under_the_filter(provider: LocalProvider) -> None:
    """bash, coreutils, Python (threads, subprocesses) and background processes."""
    async with provider.create() as sandbox:
        result = await sandbox.exec(
            "set -e; sleep 0.2 & wait; echo a > f; cp f g; sort g | wc -l; "
            "python3 -c 'import subprocess, threading; t = threading.Thread(target=print); "
            "t.start(); t.join(); print(subprocess.run([\"true\"]).returncode)'")
        process = await sandbox.start("sleep 0.2; echo background")
        done = await process.wait()
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["1", "0"]
    assert done.stdout == "background\n"


SCAN = textwrap.dedent("""
    import json, os
    found = {"cmdline": {}, "environ": {}, "fds": {}, "mountinfo": open(
        "/proc/self/mountinfo").read()}
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for name in ("cmdline", "environ"):
            try:
                found[name][pid] = open(f"/proc/{pid}/{name}", "rb").read().decode(
                    errors="replace")
            except OSError:
                pass
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(link)
                st = os.stat(link)
            except OSError:
                continue
            try:
                named = os.stat(target)
                same = (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino)
            except OSError:
                same = False
            found["fds"][f"{pid}/{fd}"] = [target, same]
    print(json.dumps(found))
""")


def _host_paths(provider: LocalProvider, sandbox_id: str) -> list[str]:
    directory = provider.home / "sandboxes" / sandbox_id
    return [str(provider.home), str(_bwrap.AGENT_SOURCE.parent), str(directory / "agent.sock")]


async def test_no_host_path_in_command_lines_environments_or_etc(
        provider: LocalProvider) -> None:
    """No process inside shows a host path (the home, the agent's source directory, the
    socket) in its command line or environment; /etc and the agent's files come from
    no host path of the home; the mount table names the home nowhere when the root is
    its own (quota) filesystem, else only in the root bind's root field, which
    bubblewrap cannot hide."""
    async with provider.create() as sandbox:
        found = json.loads(await _python(sandbox, SCAN))
    paths = _host_paths(provider, sandbox.id)
    assert "1" in found["cmdline"]
    assert "2" in found["cmdline"]
    for kind in ("cmdline", "environ"):
        for pid, text in found[kind].items():
            for path in paths:
                assert path not in text, (kind, pid, path, text)
    naming = [line for line in found["mountinfo"].splitlines()
              if any(path in line for path in paths)]
    if provider.supports("limits.disk"):
        assert naming == []
    else:
        assert len(naming) == 1, naming
        assert naming[0].split()[4] == "/", naming
    assert str(provider.home / "base") not in found["mountinfo"]


async def test_no_process_inside_holds_a_host_file(provider: LocalProvider) -> None:
    """Every descriptor readable inside is a pipe, socket or anonymous inode, or is the
    file its link names inside (so no host file, like the agent's old log, is held)."""
    async with provider.create() as sandbox:
        found = json.loads(await _python(sandbox, SCAN))
    # The agent (pid 2) is not dumpable: its descriptors are not even listable inside;
    # where it runs as a user of its own, bubblewrap's init (pid 1) runs as that user
    # too, out of the commands' reach.
    listed_init = any(key.startswith("1/") for key in found["fds"])
    assert listed_init != provider.supports(Capability.EXEC_CONTAINED), found["fds"]
    assert not any(key.startswith("2/") for key in found["fds"]), found["fds"]
    assert found["fds"], "no descriptor was visible to check"
    for key, (target, same) in found["fds"].items():
        anonymous = target.startswith(("pipe:", "socket:", "anon_inode:"))
        assert anonymous or same, (key, target)


async def test_commands_run_apart_from_the_agent_and_init(provider: LocalProvider) -> None:
    """Where the agent runs as a user of its own, a command is the sandbox user with no
    capability, the agent and init are uid 0 inside (the first host id of the sandbox's
    own slot, the command the 1001st), and the command can neither signal nor read
    them."""
    if not provider.supports(Capability.EXEC_CONTAINED):
        pytest.skip("the agent runs as the sandbox user here (not root, or no setpriv)")
    script = ("id -u; grep CapEff /proc/self/status | tr -d '\t'; "
              "for p in 1 2; do grep ^Uid: /proc/$p/status | tr -s '\t' ' '; "
              "kill -0 $p 2>/dev/null && echo signalled $p; "
              "cat /proc/$p/environ >/dev/null 2>&1 && echo read $p; done; true")
    async with provider.create() as sandbox:
        result = await sandbox.exec(script)
        meta = json.loads((provider.home / "sandboxes" / sandbox.id / "meta.json")
                          .read_text())
        agent = meta["launch"]["agent_pid"]
        status = await anyio.Path(f"/proc/{agent}/status").read_text()
        host_uid = status.split("Uid:")[1].split()[0]
        started = await sandbox.start(["sleep", "30"])
        status = await anyio.Path(f"/proc/{_host_pid(meta, started.pid)}/status").read_text()
        command_uid = status.split("Uid:")[1].split()[0]
    assert result.stdout.splitlines() == [
        "1000", "CapEff:0000000000000000", "Uid: 0 0 0 0", "Uid: 0 0 0 0"], result
    assert int(host_uid) == meta["ids"] >= _ids.host_range().start + _ids.SLOT_SIZE
    assert int(command_uid) == meta["ids"] + 1000


async def test_root_refuses_sandboxes_it_cannot_give_ids_of_their_own(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as root where the host does not let a sandbox's id make and use a user
    namespace (here its commands fail at once), the provider declares neither
    ``exec.contained`` nor ``seal.host`` and refuses to create a sandbox, saying why,
    rather than map its user to the host's root; where it does, both are declared."""
    if os.geteuid() != 0:
        pytest.skip("sandboxes have host ids of their own only where the host runs as root")
    _users._probe.cache_clear()
    try:
        assert LocalProvider(home=home).supports(Capability.EXEC_CONTAINED)
        _users._probe.cache_clear()
        monkeypatch.setattr(_users, "as_agent", lambda base: ["/bin/false", "--"])
        provider = LocalProvider(home=home)
        assert not provider.supports(Capability.EXEC_CONTAINED)
        assert not provider.supports(Capability.SEAL_HOST)
        with pytest.raises(ConfigError, match=r"host ids of its own.*user namespace"):
            await provider.create()
        assert await provider.list() == []
    finally:
        _users._probe.cache_clear()


async def test_a_volume_shows_no_home_path_in_the_mount_table(
        provider: LocalProvider) -> None:
    """Where mounting is possible a volume is a filesystem of its own: the sandbox's
    mount table shows a device for it, not its directory in the home; what the sandbox
    writes there is at the volume's path on the host."""
    if not provider.supports(Capability.LIMITS_DISK):
        pytest.skip("volumes are plain directories where loop mounts are not possible")
    volume = await provider.create_volume("sealed")
    try:
        async with provider.create(volumes=[VolumeMount(volume="sealed", path="/data")]) \
                as sandbox:
            found = json.loads(await _python(sandbox, SCAN))
            await sandbox.files.write("/data/f", b"written inside")
        assert (Path(volume.extra["path"]) / "f").read_bytes() == b"written inside"
        assert volume.extra["disk_mb"] > 0
    finally:
        await provider.delete_volume("sealed")
    mounted = [line for line in found["mountinfo"].splitlines() if " /data " in line]
    assert len(mounted) == 1, mounted
    assert mounted[0].split()[3] == "/", mounted
    assert str(provider.home) not in found["mountinfo"]
    assert not await anyio.Path(volume.extra["path"]).exists()


async def test_agent_output_is_not_writable_from_inside(provider: LocalProvider) -> None:
    """Writing to the agent's and bubblewrap's stdout and stderr from inside reaches no
    file on the host (they are a pipe, closed by the host once the sandbox started)."""
    async with provider.create() as sandbox:
        await sandbox.exec("for f in /proc/1/fd/1 /proc/1/fd/2 /proc/2/fd/1 /proc/2/fd/2; do "
                           "head -c 1048576 /dev/zero >> $f; done")
        directory = provider.home / "sandboxes" / sandbox.id
        # disk.img holds the sandbox's own filesystem (its root), where it may write.
        outside_root = [f for f in directory.iterdir()
                        if f.is_file() and f.name != "disk.img"]
        assert outside_root
        assert sum(f.stat().st_size for f in outside_root) < 1 << 20


def test_start_up_output_is_bounded_and_marked() -> None:
    """What bubblewrap or the agent printed while starting is quoted in errors at most
    OUTPUT_QUOTED bytes, said to come from inside the sandbox."""
    read, write = os.pipe()
    os.write(write, b"x" * 10000 + b"\nforged: all is well\n")
    os.close(write)
    try:
        text = _launch.quote_output(read)
    finally:
        os.close(read)
    assert "from inside the sandbox" in text
    assert "last bytes" in text
    assert len(text) < _launch.OUTPUT_QUOTED + 200


async def test_the_agents_modules_are_copied_in_where_no_command_may_change_them(
        provider: LocalProvider) -> None:
    """The agent and each module it imports (the file operations answering here among
    them) are in /etc/psdk beside the agent's configuration and nothing else, and a
    command can neither write, replace nor remove them."""
    shipped = {_bwrap.SANDBOX_AGENT: _bwrap.AGENT_SOURCE,
               _bwrap.SANDBOX_PROCS: _bwrap.PROCS_SOURCE,
               _bwrap.SANDBOX_FILEOPS: _bwrap.FILEOPS_SOURCE,
               _bwrap.SANDBOX_SPAWNER: _bwrap.SPAWNER_SOURCE}
    assert all(source.is_file() for source in shipped.values())
    async with provider.create() as sandbox:
        entries = {entry.path: entry for entry in await sandbox.files.list("/etc/psdk")}
        assert set(entries) == {*shipped, _bwrap.SANDBOX_CONFIG}
        for inside, source in shipped.items():
            assert entries[inside].size == source.stat().st_size, inside
            for change in ('echo x >> "$1"', 'rm -f "$1"', 'mv "$1" "$1.moved"'):
                refused = await sandbox.exec(["sh", "-c", change, "sh", inside])
                assert refused.exit_code != 0, (change, inside)
            assert (await sandbox.files.stat(inside)).size == source.stat().st_size
