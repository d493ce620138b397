"""Starting, freezing and ending a local sandbox's process tree.

A sandbox is bubblewrap running the agent in fresh namespaces (user, mount, PID,
network, IPC, UTS, cgroup), detached from whoever started it. Where cgroup v1
controllers are writable the whole tree is placed in its own cgroups: the freezer pauses
it with memory intact, memory and CPU limits apply, and the pids controller stops fork
bombs. Without them, pause stops each process by signal. Blocking functions here run in
worker threads; they know processes and kernel interfaces, not the agent protocol.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import attrs

from provider_sdk.models import Resources

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("freezer", "memory", "cpu", "cpuacct", "pids")
PIDS_MAX = 4096
AGENT_SOURCE = Path(__file__).with_name("_agent.py")
SANDBOX_PYTHON = "/usr/bin/python3"
SANDBOX_AGENT = "/etc/psdk/agent.py"
SANDBOX_CONFIG = "/etc/psdk/agent.json"
# The agent's process model, beside the agent (which imports it from its own directory).
PROCS_SOURCE = AGENT_SOURCE.with_name("_procs.py")
SANDBOX_PROCS = "/etc/psdk/_procs.py"
# Host /etc entries that change as packages are installed: shown read-only, live.
ETC_LIVE = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")
# Top-level host directories a shell and Python need, shown read-only (or as the same
# symlinks on merged-/usr systems). Nothing else of the host is visible.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@attrs.frozen
class Launched:
    """Identifies a started sandbox: its namespace's init process, and the agent's pid
    for unisolated sandboxes."""

    init_pid: int
    init_start: int
    """The init process's start time, so a recycled pid is never mistaken for it."""
    pid_namespace: int | None


def system_links() -> dict[str, str]:
    """Top-level host directories that are symlinks (merged /usr): a sandbox's root has
    the same links, made once with the root (bubblewrap refuses to make them again)."""
    return {name: os.readlink(Path("/") / name) for name in SYSTEM_DIRS
            if (Path("/") / name).is_symlink()}


def bwrap_path() -> str | None:
    """The bubblewrap executable, if installed."""
    return shutil.which("bwrap")


class Cgroup:
    """The v1 cgroups of one sandbox (one directory per controller)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def available() -> bool:
        """Whether every controller we use is mounted and writable."""
        return all(os.access(CGROUP_ROOT / c, os.W_OK) and (CGROUP_ROOT / c / "cgroup.procs")
                   .exists() for c in CONTROLLERS)

    def path(self, controller: str) -> Path:
        return CGROUP_ROOT / controller / self.name

    def create(self, resources: Resources) -> list[str]:
        """Create the cgroups with their limits; return their ``cgroup.procs`` files."""
        for c in CONTROLLERS:
            self.path(c).mkdir(exist_ok=True)
        self._write("pids", "pids.max", str(PIDS_MAX))
        if resources.memory_mb:
            self._write("memory", "memory.limit_in_bytes", str(resources.memory_mb << 20))
        if resources.cpu:
            self._write("cpu", "cpu.cfs_period_us", "100000")
            self._write("cpu", "cpu.cfs_quota_us", str(int(resources.cpu * 100000)))
        return [str(self.path(c) / "cgroup.procs") for c in CONTROLLERS]

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.path(controller) / name).write_text(value)

    def _read(self, controller: str, name: str) -> str | None:
        try:
            return (self.path(controller) / name).read_text().strip()
        except OSError:
            return None

    def exists(self) -> bool:
        return self.path("freezer").is_dir()

    def frozen(self) -> bool:
        return self._read("freezer", "freezer.state") in ("FROZEN", "FREEZING")

    def freeze(self, frozen: bool) -> None:
        """Freeze or thaw the whole tree and wait until the kernel says it is done."""
        want = "FROZEN" if frozen else "THAWED"
        deadline = time.monotonic() + 10
        while True:
            self._write("freezer", "freezer.state", want)
            if self._read("freezer", "freezer.state") == want:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cgroup freezer did not reach {want}")
            time.sleep(0.002)

    def pids(self) -> list[int]:
        text = self._read("freezer", "cgroup.procs") or ""
        return [int(p) for p in text.split()]

    def memory(self) -> tuple[int | None, int | None]:
        """Memory in use and the limit (``None`` when unlimited)."""
        usage = self._read("memory", "memory.usage_in_bytes")
        limit = self._read("memory", "memory.limit_in_bytes")
        lim = int(limit) if limit and int(limit) < 1 << 60 else None
        return (int(usage) if usage else None), lim

    def cpu_seconds(self) -> float | None:
        usage = self._read("cpuacct", "cpuacct.usage")
        return int(usage) / 1e9 if usage else None

    def destroy(self) -> None:
        """Kill what is left in the cgroups and remove them."""
        if not self.exists():
            return
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():
                _signal(pid, signal.SIGKILL)
            if self.frozen():
                self.freeze(False)
            time.sleep(0.005)
        for c in CONTROLLERS:
            try:
                self.path(c).rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                time.sleep(0.02)
                self.path(c).rmdir()


INFO_FD = "{info_fd}"
LISTEN_FD = "{listen_fd}"


def bwrap_argv(*, bwrap: str, root: Path, etc: Path, config: Path,
               volumes: list[tuple[Path, str, bool]]) -> list[str]:
    """The bubblewrap command line for a sandbox whose writable root is ``root``
    (:func:`start` fills in ``INFO_FD``)."""
    argv = [
        bwrap, "--unshare-all", "--uid", "1000", "--gid", "1000", "--hostname", "sandbox",
        "--new-session", "--info-fd", INFO_FD,
        "--bind", str(root), "/",
        "--ro-bind", "/usr", "/usr",
    ]
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_dir() and not host.is_symlink():
            argv += ["--ro-bind", str(host), f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", str(etc), "/etc"]
    for name in ETC_LIVE:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--ro-bind", str(AGENT_SOURCE), SANDBOX_AGENT,
             "--ro-bind", str(PROCS_SOURCE), SANDBOX_PROCS,
             "--ro-bind", str(config), SANDBOX_CONFIG]
    for source, target, read_only in volumes:
        argv += ["--ro-bind" if read_only else "--bind", str(source), target]
    return argv


def start(*, argv: list[str], listener: socket.socket, info: bool, log: Path,
          cgroup: Cgroup | None, resources: Resources) -> Launched:
    """Start ``argv`` detached, in the cgroups, with the agent's listening socket.

    A throwaway ``sh`` joins the cgroups (so every later process is inside them),
    starts the sandbox in the background and exits: the sandbox is nobody's child and
    outlives this process.
    """
    procs = cgroup.create(resources) if cgroup else []
    read_fd, write_fd = os.pipe()
    script = ('log=$1; shift; while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; '
              'shift; "$@" >>"$log" 2>&1 </dev/null & echo $!')
    fill = {INFO_FD: str(write_fd), LISTEN_FD: str(listener.fileno())}
    argv = [fill.get(a, a) for a in argv]
    try:
        sh = subprocess.run(
            ["/bin/sh", "-c", script, "sh", str(log), *procs, "--", *argv],
            pass_fds=(write_fd, listener.fileno()), start_new_session=True,
            capture_output=True, env={"PATH": "/usr/bin:/bin"},
            check=False, timeout=30,
        )
    finally:
        os.close(write_fd)
    try:
        if sh.returncode != 0:
            raise OSError(f"cannot start the sandbox: {sh.stderr.decode(errors='replace')}")
        pid = int(sh.stdout)
        if not info:
            return Launched(init_pid=pid, init_start=start_time(pid) or 0, pid_namespace=None)
        data = _read_info(read_fd)
        if data is None:
            raise OSError("bubblewrap exited at start: " + tail(log))
        init = int(data["child-pid"])
        return Launched(init_pid=init, init_start=start_time(init) or 0,
                        pid_namespace=int(data["pid-namespace"]))
    finally:
        os.close(read_fd)


def _read_info(fd: int) -> dict[str, int] | None:
    raw = b""
    while chunk := os.read(fd, 4096):
        raw += chunk
        try:
            return json.loads(raw)  # type: ignore[no-any-return]
        except ValueError:
            continue
    return None


def agent_command(python: str, *, agent: str, config: str) -> list[str]:
    """How the agent is started (:func:`start` fills in ``LISTEN_FD``)."""
    return [python, "-I", "-S", agent, config, LISTEN_FD]


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


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def host_python() -> str:
    """The interpreter for an unisolated sandbox's agent."""
    return sys.executable
