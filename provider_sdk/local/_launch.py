"""Starting, freezing and ending a local sandbox's process tree.

A sandbox is bubblewrap running the agent in fresh namespaces (user, mount, PID,
network, IPC, UTS, cgroup), detached from whoever started it. Where cgroup v1
controllers are writable the whole tree is placed in its own cgroups: the freezer pauses
it with memory intact, memory and CPU limits apply, and the pids controller stops fork
bombs (``_cgroups``). Without them, pause stops each process by signal. The command
line comes from ``_bwrap``. Blocking functions here run in worker threads; they know
processes and kernel interfaces, not the agent protocol.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import attrs

from provider_sdk.local import _seccomp
from provider_sdk.local._bwrap import ARGS_FD, INFO_FD, LISTEN_FD, SECCOMP_FD, USERNS_FD
from provider_sdk.local._cgroups import Cgroup
from provider_sdk.models import Resources


@attrs.frozen
class Launched:
    """Identifies a started sandbox: its namespace's init process, and the agent's pid
    for unisolated sandboxes."""

    init_pid: int
    init_start: int
    """The init process's start time, so a recycled pid is never mistaken for it."""
    pid_namespace: int | None
    agent_pid: int | None = None
    """The agent's pid on the host, once known (:func:`find_agent`)."""
    agent_start: int = 0
    token: str = ""
    """Names this launch's exit-status file (``Shared.status_path``)."""


AGENT_NS_PID = 2
"""The agent's pid inside an isolated sandbox: bubblewrap's init is 1, and its first
(and only) child is the agent."""
IDLE_EXIT = 75
"""The agent's exit status when it ends the sandbox after its idle timeout. The host-side
launcher records the status in a file only the host can write, so code inside the
sandbox cannot forge it by writing anywhere."""
OUTPUT_QUOTED = 2000
"""Bytes of start-up output (bubblewrap's and the agent's) quoted in an error."""


@attrs.frozen
class Started:
    """A started sandbox, and the read end of its start-up output (bubblewrap's and the
    agent's stdout and stderr): read while starting, for an error message, then closed.
    Nothing in the sandbox holds a host file."""

    launched: Launched
    output: int

    def output_text(self) -> str:
        """What was written to the start-up output so far, bounded and marked as coming
        from inside the sandbox."""
        return quote_output(self.output)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.output)


def quote_output(fd: int) -> str:
    """Up to :data:`OUTPUT_QUOTED` bytes of the start-up output, without waiting."""
    os.set_blocking(fd, False)
    raw = b""
    with contextlib.suppress(OSError):
        while len(raw) < 1 << 16 and (chunk := os.read(fd, 1 << 16)):
            raw += chunk
    if not raw.strip():
        return "(no output)"
    text = raw[-OUTPUT_QUOTED:].decode(errors="replace").strip()
    cut = " (last bytes)" if len(raw) > OUTPUT_QUOTED else ""
    return f"its output{cut}, from inside the sandbox: {text!r}"


LAUNCH_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC0"}
"""The environment bubblewrap and the agent start with (commands get theirs from each
request). The C locale and a zone named in the variable itself keep the C library from
reading locale, conversion-module or time zone files: in a template sandbox those are
the image's, which its user may change, and such a file can load code."""


# Runs with stdout on the start-up output pipe and stderr captured: it prints the
# sandbox's pid to stderr, then drops both, waits and records the exit status.
_LAUNCHER = r"""
status=$1; shift
while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift
(
  "$@" </dev/null 2>&1 &
  echo $! >&2
  exec >/dev/null 2>&1
  wait $!
  echo $? > "$status.new" && mv -f "$status.new" "$status"
) &
"""


def start(*, argv: list[str], args: list[str] | None, listener: socket.socket,
          data: dict[str, bytes], status: Path, cgroup: Cgroup | None,
          resources: Resources, userns: int | None = None) -> Started:
    """Start ``argv`` detached, in the cgroups, with the agent's listening socket.

    ``args`` (bubblewrap's options and command) are handed over through ``--args FD``
    so that no host path shows in the sandbox's ``/proc/1/cmdline``; ``data`` fills
    placeholders with descriptors to in-memory files of that content; ``userns`` (the
    caller's to close) fills ``USERNS_FD``. A throwaway
    ``sh`` joins the cgroups (so every later process is inside them) and starts a host
    side launcher that runs the sandbox and, when it ends, writes its exit status to
    ``status``; the sandbox is nobody's child and outlives this process.
    """
    procs = cgroup.create(resources) if cgroup else []
    info_read, info_write = os.pipe()
    out_read, out_write = os.pipe()
    fds: dict[str, int] = {INFO_FD: info_write, LISTEN_FD: listener.fileno()}
    try:
        for key, content in data.items():
            fds[key] = _memfd(key, content)
        if args is not None:
            fds[SECCOMP_FD] = _memfd(SECCOMP_FD, _seccomp.program())
            given = {**fds, **({} if userns is None else {USERNS_FD: userns})}
            filled = [str(given[a]) if a in given else a for a in args]
            fds[ARGS_FD] = _memfd(ARGS_FD, b"".join(a.encode() + b"\0" for a in filled))
        argv = [str(fds[a]) if a in fds else a for a in argv]
        passed = (*fds.values(), *(() if userns is None else (userns,)))
        sh = subprocess.run(
            ["/bin/sh", "-c", _LAUNCHER, "sh", str(status), *procs, "--", *argv],
            pass_fds=passed, start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=out_write, stderr=subprocess.PIPE, env=LAUNCH_ENV,
            check=False, timeout=30,
        )
    finally:
        for key, fd in fds.items():
            if key not in (INFO_FD, LISTEN_FD):
                os.close(fd)
        os.close(info_write)
        os.close(out_write)
    started: Started | None = None
    try:
        if sh.returncode != 0:
            raise OSError(f"cannot start the sandbox: {sh.stderr.decode(errors='replace')}")
        pid = int(sh.stderr)
        if args is None:
            started = Started(Launched(init_pid=pid, init_start=start_time(pid) or 0,
                                       pid_namespace=None, agent_pid=pid,
                                       agent_start=start_time(pid) or 0), out_read)
            return started
        info = _read_info(info_read)
        if info is None:
            raise OSError("bubblewrap exited at start; " + quote_output(out_read))
        init = int(info["child-pid"])
        started = Started(Launched(init_pid=init, init_start=start_time(init) or 0,
                                   pid_namespace=int(info["pid-namespace"])), out_read)
        return started
    finally:
        os.close(info_read)
        if started is None:
            os.close(out_read)


def _memfd(name: str, content: bytes) -> int:
    """An in-memory file holding ``content``, positioned at its start."""
    fd = os.memfd_create(name.strip("{}"))
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_info(fd: int) -> dict[str, int] | None:
    raw = b""
    while chunk := os.read(fd, 4096):
        raw += chunk
        try:
            return json.loads(raw)  # type: ignore[no-any-return]
        except ValueError:
            continue
    return None



def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2:].split()


def start_time(pid: int) -> int | None:
    """A process's start time in clock ticks, or ``None`` if it is gone (or a zombie)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def alive(launched: Launched) -> bool:
    """Whether the sandbox's init process is still the one we started."""
    return start_time(launched.init_pid) == launched.init_start


def namespace_pids(launched: Launched) -> list[int]:
    """Every process of an isolated sandbox (those in its PID namespace)."""
    if launched.pid_namespace is None:
        return [launched.init_pid] if alive(launched) else []
    want = f"pid:[{launched.pid_namespace}]"
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == want:
                    found.append(int(name))
            except OSError:
                continue
    return found


def signal_all(launched: Launched, sig: signal.Signals) -> None:
    """Send ``sig`` to every process of the sandbox (pause without a freezer).

    For SIGSTOP the sweep repeats until every process is stopped: a process forked
    during one sweep is caught by the next.
    """
    for _ in range(100):
        for pid in namespace_pids(launched):
            _signal(pid, sig)
        if sig != signal.SIGSTOP:
            return
        states = [_stat_fields(pid) for pid in namespace_pids(launched)]
        if all(f is None or f[0] in (b"T", b"t", b"Z", b"X") for f in states):
            return
        time.sleep(0.002)


def kill(launched: Launched) -> None:
    """End the sandbox's process tree. Killing an isolated sandbox's init ends its
    whole PID namespace."""
    if alive(launched):
        _signal(launched.init_pid, signal.SIGKILL)
        _signal(launched.init_pid, signal.SIGCONT)
    deadline = time.monotonic() + 5
    while alive(launched) and time.monotonic() < deadline:
        time.sleep(0.005)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def find_agent(launched: Launched) -> Launched:
    """``launched`` with its agent's host pid filled in, if the agent is found (the
    process of the sandbox's PID namespace that is pid 2 there)."""
    if launched.agent_pid is not None or launched.pid_namespace is None:
        return launched
    # The agent is the init's child: its list of children names it at once, where the
    # kernel keeps one; else every process of the namespace is looked at.
    for pid in children(launched.init_pid) or namespace_pids(launched):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:") and line.split()[-1] == str(AGENT_NS_PID):
                begun = start_time(pid)
                if begun is not None:
                    return attrs.evolve(launched, agent_pid=pid, agent_start=begun)
    return launched


def children(pid: int) -> list[int]:
    """The children of a single-threaded process (``[]`` if unknown: the kernel keeps
    no list, or the process is gone)."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def end_unsupervised(launched: Launched, cgroup: Cgroup | None) -> None:
    """Kill every process of an isolated sandbox whose agent is gone, but its init (the
    sandbox stays, in state ``error``, until resumed or killed): with no agent nor
    supervisor, nothing would end them at a timeout. Each sweep kills with the tree
    frozen (its cgroups, else each process stopped), so nothing forks in between; it
    sweeps until only init is left, for at most a few seconds."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if all(pid == launched.init_pid for pid in namespace_pids(launched)):
            return
        group = cgroup if cgroup is not None and cgroup.exists() else None
        _hold(launched, group, True)
        for pid in namespace_pids(launched):
            if pid != launched.init_pid:
                _signal(pid, signal.SIGKILL)
        _hold(launched, group, False)
        time.sleep(0.002)


def _hold(launched: Launched, group: Cgroup | None, held: bool) -> None:
    """Freeze (or thaw) the tree by its cgroup, else stop (or continue) each process.
    A cgroup removed meanwhile (a kill of the sandbox under way in another process)
    leaves the signals to do it."""
    if group is not None:
        try:
            group.freeze(held)
            return
        except FileNotFoundError:
            pass
    signal_all(launched, signal.SIGSTOP if held else signal.SIGCONT)


def agent_state(launched: Launched) -> str | None:
    """The agent's process state: ``None`` if it is gone, ``"stopped"`` if stopped by a
    signal or a tracer, ``"running"`` otherwise (a frozen cgroup is seen elsewhere);
    ``"unknown"`` while its pid is not recorded."""
    if launched.agent_pid is None:
        return "unknown"
    fields = _stat_fields(launched.agent_pid)
    if fields is None or fields[0] in (b"Z", b"X") or int(fields[19]) != launched.agent_start:
        return None
    return "stopped" if fields[0] in (b"T", b"t") else "running"


def continue_process(pid: int) -> None:
    """Let a stopped process go on (SIGCONT)."""
    _signal(pid, signal.SIGCONT)


def exit_status(path: Path) -> int | None:
    """The exit status the launcher recorded when the sandbox ended, if it has."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def host_python() -> str:
    """The interpreter for an unisolated sandbox's agent."""
    return sys.executable
