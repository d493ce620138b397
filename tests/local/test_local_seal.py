"""The local sandbox's seal: the seccomp filter, no nested user namespaces, no host path
and no descriptor to a host file visible inside."""

from __future__ import annotations

import json
import os
import platform
import sys
import textwrap
from pathlib import Path

import pytest

from provider_sdk import Capability
from provider_sdk.local import LocalProvider, _launch, _seccomp
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
    return [str(provider.home), str(_launch.AGENT_SOURCE.parent), str(directory / "agent.sock")]


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
    # The agent (pid 2) is not dumpable: its descriptors are not even listable inside.
    assert any(key.startswith("1/") for key in found["fds"]), found["fds"]
    assert not any(key.startswith("2/") for key in found["fds"]), found["fds"]
    for key, (target, same) in found["fds"].items():
        anonymous = target.startswith(("pipe:", "socket:", "anon_inode:"))
        assert anonymous or same, (key, target)


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
