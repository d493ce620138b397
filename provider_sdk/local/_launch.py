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
from pathlib import Path, PurePosixPath

import attrs

from provider_sdk.local import _seccomp
from provider_sdk.local._system import SYSTEM_DIRS
from provider_sdk.local._users import AGENT_CAPS, SANDBOX_UID
from provider_sdk.models import Resources

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("freezer", "memory", "cpu", "cpuacct", "pids")
PIDS_MAX = 4096
SHM_MB = 64
"""The size of a sandbox's ``/dev/shm`` (a tmpfs; what it holds counts as the
sandbox's memory too)."""
AGENT_SOURCE = Path(__file__).with_name("_agent.py")
SANDBOX_PYTHON = "/usr/bin/python3"
SANDBOX_AGENT = "/etc/psdk/agent.py"
SANDBOX_CONFIG = "/etc/psdk/agent.json"
# The agent's process model and file operations, beside the agent (which imports them
# from its own directory).
PROCS_SOURCE = AGENT_SOURCE.with_name("_procs.py")
SANDBOX_PROCS = "/etc/psdk/_procs.py"
FILEOPS_SOURCE = AGENT_SOURCE.with_name("_fileops.py")
SANDBOX_FILEOPS = "/etc/psdk/_fileops.py"
SPAWNER_SOURCE = AGENT_SOURCE.with_name("_spawner.py")
SANDBOX_SPAWNER = "/etc/psdk/_spawner.py"
# Host /etc entries that change as packages are installed: shown read-only, live.
ETC_LIVE = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")


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
    """Names this launch's exit-status file (:func:`status_path`)."""


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
            limit = str(resources.memory_mb << 20)
            self._write("memory", "memory.limit_in_bytes", limit)
            # Memory plus swap at the same bound: swapping out cannot dodge the limit.
            if (self.path("memory") / "memory.memsw.limit_in_bytes").exists():
                self._write("memory", "memory.memsw.limit_in_bytes", limit)
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

    def oom_kills(self) -> int | None:
        """How many processes the kernel killed for this sandbox's memory limit, in
        its memory cgroup and any below it (``None`` where the kernel does not say).
        Read before and after every exec: a directory is listed only when its link
        count says it holds a cgroup (each one below adds a link)."""
        total, found = 0, False
        todo = [str(self.path("memory"))]
        while todo:
            directory = todo.pop()
            try:
                with open(f"{directory}/memory.oom_control") as control:
                    text = control.read()
                below = os.stat(directory).st_nlink > 2
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    total += int(value)
                    found = True
            if below:
                with contextlib.suppress(OSError), os.scandir(directory) as entries:
                    todo.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        return total if found else None

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
ARGS_FD = "{args_fd}"
SECCOMP_FD = "{seccomp_fd}"
AGENT_FD = "{agent_fd}"
CONFIG_FD = "{config_fd}"
PROCS_FD = "{procs_fd}"
FILEOPS_FD = "{fileops_fd}"
SPAWNER_FD = "{spawner_fd}"
USERNS_FD = "{userns_fd}"
EMPTY_FD = "{empty}"
"""An empty file's placeholder (``data`` maps it to ``b""``)."""
AGENT_NS_PID = 2
"""The agent's pid inside an isolated sandbox: bubblewrap's init is 1, and its first
(and only) child is the agent."""
IDLE_EXIT = 75
"""The agent's exit status when it ends the sandbox after its idle timeout. The host-side
launcher records the status in a file only the host can write, so code inside the
sandbox cannot forge it by writing anywhere."""
OUTPUT_QUOTED = 2000
"""Bytes of start-up output (bubblewrap's and the agent's) quoted in an error."""


def seal_args(*, separate: bool) -> list[str]:
    """bubblewrap options that seal the sandbox: its own namespaces, a user namespace
    in which no further one can be made, and the seccomp filter (where the architecture
    is known). ``separate``: bubblewrap runs as the sandbox's own uid 0 in the
    namespace :func:`~provider_sdk.local._users.namespaces` made for it: the agent keeps
    ``AGENT_CAPS`` and runs commands as the sandbox user."""
    if separate:
        # Every namespace --unshare-all makes but the user namespace, which is given.
        args = ["--userns", USERNS_FD, "--unshare-ipc", "--unshare-pid", "--unshare-net",
                "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
        for cap in AGENT_CAPS:
            args += ["--cap-add", cap]
    else:
        args = ["--unshare-all", "--unshare-user", "--disable-userns",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if _seccomp.supported():
        args += ["--seccomp", SECCOMP_FD]
    return args


def bwrap_argv(*, bwrap: str, root: Path, etc: Path, volumes: list[tuple[Path, str, bool]],
               separate: bool, devices: Path | None = None) -> list[str]:
    """The bubblewrap command line for a sandbox whose writable root is ``root``
    (:func:`start` fills in the ``*_FD`` placeholders). The agent and its configuration
    are copied in (``--ro-bind-data``), not bound from host paths."""
    argv = [
        bwrap, *seal_args(separate=separate), "--hostname", "sandbox", "--new-session",
        "--info-fd", INFO_FD, "--bind", str(root), "/",
        "--ro-bind", "/usr", "/usr",
    ]
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_dir() and not host.is_symlink():
            argv += ["--ro-bind", str(host), f"/{name}"]
    argv += [*proc_argv(), *device_argv(devices), *shm_argv(), *etc_args(etc)]
    for name in ETC_LIVE:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += [*agent_data_args(), "--remount-ro", "/etc", *volume_args(volumes)]
    return argv


def volume_args(volumes: list[tuple[Path, str, bool]]) -> list[str]:
    """bubblewrap options that bind each volume at its target. Missing directories on
    the way are made ``0755`` first: bubblewrap would make them ``0700`` for its own
    user, which the sandbox user is not where users are separate. Existing ones are
    left as they are."""
    argv: list[str] = []
    for source, target, read_only in volumes:
        parts = PurePosixPath(target).parts[1:]
        for depth in range(1, len(parts) + 1):
            argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[:depth])]
        argv += ["--ro-bind" if read_only else "--bind", str(source), target]
    return argv


READ_ONLY_PROC = ("sys", "sysrq-trigger", "irq", "bus", "fs", "pressure")
"""What of ``/proc`` is read-only inside: the host-global knobs (Docker's list, and the
pressure files, where any user may register a trigger). The kernel refuses most of
their writes to every id a sandbox has already; this holds whoever runs it."""


def proc_argv() -> list[str]:
    """bubblewrap arguments mounting the sandbox's ``/proc`` with
    :data:`READ_ONLY_PROC` read-only (the binds show the same files, from the host's
    ``/proc``, whose ``sys`` answers for the reader's own namespaces as the sandbox's
    would)."""
    argv = ["--proc", "/proc"]
    for name in READ_ONLY_PROC:
        argv += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    return argv


DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8),
           "urandom": (1, 9), "tty": (5, 0)}
"""The device nodes a sandbox has (bubblewrap's ``--dev`` set), by name: major, minor."""


def device_argv(devices: Path | None) -> list[str]:
    """bubblewrap arguments for ``/dev``: bubblewrap's own (a tmpfs, the sandbox's
    terminals, the standard nodes bound from the host), and over each standard node,
    where ``devices`` holds the sandbox's own copies of them, its own."""
    argv = ["--dev", "/dev"]
    for name in DEVICES if devices is not None else ():
        argv += ["--dev-bind", f"{devices}/{name}", f"/dev/{name}"]
    return argv


def shm_argv() -> list[str]:
    """bubblewrap arguments making ``/dev/shm`` a tmpfs of :data:`SHM_MB`, writable by
    every user as on any Linux (after ``--dev``)."""
    return ["--perms", "1777", "--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm"]


def _etc_entries(etc: Path) -> list[Path]:
    """The shared ``etc`` directory's own entries (not the mount points for the host's
    live entries, which bubblewrap makes on the tmpfs)."""
    if not etc.is_dir():
        return []
    return sorted(e for e in etc.iterdir() if e.name not in ETC_LIVE)


def etc_args(etc: Path) -> list[str]:
    """bubblewrap options that make ``/etc`` a copy of the shared ``etc`` directory on
    a tmpfs (files through descriptors, see :func:`etc_data`), so that no host path of
    the home shows in the sandbox's mount table. The caller remounts it read-only."""
    argv = ["--tmpfs", "/etc"]
    for entry in _etc_entries(etc):
        inside = f"/etc/{entry.name}"
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), inside]
        elif entry.is_dir():
            argv += ["--dir", inside]
        elif entry.is_file():
            argv += ["--perms", "0644", "--ro-bind-data", "{etc:" + entry.name + "}", inside]
    return argv


def etc_data(etc: Path, names: tuple[str, ...] | None = None) -> dict[str, bytes]:
    """The contents :func:`etc_args` (or one of its ``names``) refers to."""
    return {"{etc:" + e.name + "}": e.read_bytes() for e in _etc_entries(etc)
            if e.is_file() and not e.is_symlink() and (names is None or e.name in names)}


def agent_data_args() -> list[str]:
    """bubblewrap options that copy the agent and its configuration into the sandbox."""
    return ["--ro-bind-data", AGENT_FD, SANDBOX_AGENT, "--ro-bind-data", PROCS_FD,
            SANDBOX_PROCS, "--ro-bind-data", FILEOPS_FD, SANDBOX_FILEOPS,
            "--ro-bind-data", SPAWNER_FD, SANDBOX_SPAWNER,
            "--ro-bind-data", CONFIG_FD, SANDBOX_CONFIG]


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


def agent_command(python: str, *, agent: str, config: str) -> list[str]:
    """How the agent is started (:func:`start` fills in ``LISTEN_FD``)."""
    return [python, "-I", "-S", "-B", agent, config, LISTEN_FD]


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
    for pid in namespace_pids(launched):
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
