"""How the agent starts commands and contains everything they start.

The agent forks one small helper, the spawner (``_spawner.py``), before it starts any
thread. Each ``exec`` and ``start`` goes to a supervisor (:func:`supervise`) the spawner
forked, ahead (a spare) or when it came, which marks itself a child subreaper and starts
the command: through its launcher if it has one (a spare's, ``_spawner.Launcher``),
else by forking it itself. Every orphan the command leaves (``setsid``, double fork, ``nohup``, a
cleared environment, closed stdio) is reparented to that supervisor, so "everything the
command started" is exactly the supervisor's subtree: no session, process group or
environment variable is trusted. Where the agent runs as the sandbox's root (see
``docs/local-provider.md``) spawner and supervisors stay root, so the command, which
runs as the sandbox user, can neither signal nor trace them.

A supervisor reports on its control socket (one JSON object per packet): its own pid
(``{"supervisor"}``) first, ``{"pid"}`` once the command runs (or ``{"error"}`` if it
could not be started), ``{"exit"}`` when
the command itself ends, ``{"done"}`` when its whole subtree is gone. On a ``kill``
packet it SIGKILLs its subtree, repeatedly and without forking, until nothing is left.
After a normal exit it keeps reaping the descendants the command left on purpose, and
ends when none are left. Orphans of a supervisor that died anyway reach the spawner
(a subreaper too), which kills them.

``Running`` and ``Background`` are the agent's side of one command: its pipes, its
control socket, and (for ``start``) its output kept for replay.

Like ``_agent.py``, this module is copied into the sandbox and imports only the standard
library.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import threading
import time

# Only the type checker reads these: importing ``typing`` (and ``collections.abc``) would
# only slow the agent's start inside the sandbox (annotations are not evaluated).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PACKET = 1 << 16
CHUNK = 1 << 18
REPLAY_LIMIT = 64 << 20  # bytes of a background process's output kept for replay
# Seconds a background process's output waits for an attached reader that takes none of
# it; past that the reader is no longer waited for and what it missed is dropped.
READER_STALL = 60.0
# Seconds a killed command's output is still read: a descendant that escaped the kill
# (or another command holding its pipe) must not hold the call.
KILL_GRACE = 2.0
FORK_ATTEMPTS = 30  # about 4.5 s of retries while a pids limit is full
SPAWN_TIMEOUT = 30.0  # seconds the agent waits for a supervisor's first report

_libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    """``prctl(option, value)``; raises ``OSError`` on failure."""
    if _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_inheritable_capabilities() -> None:
    """Empty this process's inheritable capability set (its children's too), keeping
    its effective and permitted ones; raises ``OSError`` on failure."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    for half in data:
        half.inheritable = 0
    if _libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_fs_ids(uid: int, gid: int) -> None:
    """Make this thread's file accesses act as ``uid``/``gid`` (per thread on Linux)."""
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)


def send_packet(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    """Send ``obj`` as one packet, with ``fds``. An object larger than a packet (a
    command's arguments and environment may take up to the kernel's 2 MiB) goes in a
    memory file whose descriptor the packet carries first."""
    data = json.dumps(obj).encode()
    fds = list(fds or ())
    memfd = -1
    if len(data) > PACKET:
        memfd = os.memfd_create("psdk-packet", os.MFD_CLOEXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(memfd, view):]
        data, fds = json.dumps({"large": len(data)}).encode(), [memfd, *fds]
    try:
        if fds:
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                   array.array("i", fds))])
        else:
            sock.send(data)
    finally:
        if memfd >= 0:
            os.close(memfd)


def recv_packet(sock: socket.socket, flags: int = 0
                ) -> tuple[dict[str, Any] | None, list[int]]:
    """One packet and the descriptors sent with it; ``None`` at end of stream.
    ``flags`` go to ``recvmsg`` (``MSG_DONTWAIT``: raise ``BlockingIOError`` if none
    is waiting)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(PACKET, socket.CMSG_LEN(17 * fds.itemsize),
                                                flags)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    obj = json.loads(data)
    received = list(fds)
    if "large" in obj and received:
        memfd = received.pop(0)
        try:
            obj = json.loads(os.pread(memfd, obj["large"], 0))
        finally:
            os.close(memfd)
    return obj, received


def children_of() -> dict[int, list[int]]:
    """parent pid -> child pids, for every process this process can see."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        fields = raw[raw.rindex(b")") + 2:].split()
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def kill_subtree(root: int) -> None:
    """SIGKILL ``root`` and its descendants (a supervisor's whole subtree)."""
    for pid in [root, *descendants(root)]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    tree = children_of()
    found, todo = [], list(tree.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def supervise(request: dict[str, Any], fds: list[int], user: tuple[int, int] | None,
              start: Callable[[dict[str, Any], list[int]], int | None] | None = None,
              ) -> None:
    """Start the command of ``request`` (its stdin, stdout, stderr and control socket
    in ``fds``), report on it and contain its subtree, as a supervisor does. ``start``
    (a spare's launcher's, see ``_spawner.Launcher``) starts it if it can: it returns
    the pid, or ``None`` to leave the start to the supervisor."""
    ctl = socket.socket(fileno=fds[3])
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    # First who to kill should the start never end: a process of the user may stop the
    # command (or its launcher) before its exec, and the start then waits for ever.
    with contextlib.suppress(OSError):
        send_packet(ctl, {"supervisor": os.getpid()})
    try:
        pid = start(request, fds[:3]) if start is not None else None
        if pid is None:
            pid = _spawn(request, fds[:3], user)
    except OSError as exc:
        with contextlib.suppress(OSError):
            send_packet(ctl, {"error": {"errno": exc.errno or 0,
                                        "message": exc.strerror or str(exc)}})
        return
    finally:
        for fd in fds[:3]:
            os.close(fd)
    with contextlib.suppress(OSError):
        send_packet(ctl, {"pid": pid, "supervisor": os.getpid()})
    _watch(ctl, pid)


def _spawn(request: dict[str, Any], stdio: list[int], user: tuple[int, int] | None) -> int:
    """Fork and exec the command from here, switching to ``user`` on the way; its pid."""
    # Under the sandbox's memory limit the OOM killer must pick commands, never the
    # agent or a supervisor: the command inherits this score at fork, before it can
    # fork anything itself; the supervisor takes its own back right after.
    oom_score_adj(1000)
    try:
        for attempt in range(FORK_ATTEMPTS):
            try:
                proc = popen(request, stdio, user)
                break
            except BlockingIOError:  # the pids limit is full; a killed tree frees it soon
                if attempt == FORK_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
    finally:
        oom_score_adj(0)
    proc.returncode = 0  # reaped by _watch, not by this object
    return proc.pid


def popen(request: dict[str, Any], stdio: list[int],
          user: tuple[int, int] | None = None) -> subprocess.Popen[bytes]:
    """Start the command of ``request`` on ``stdio`` in a session of its own, as
    ``user`` if given. subprocess forks and execs in C (``vfork`` where it can, which is
    not when it switches user): far cheaper than a Python fork of this process.

    ``subprocess`` is imported by the spawner as it starts (see ``_spawner``), so the
    supervisors and launchers it forks have it: the agent itself never needs it."""
    import subprocess

    return subprocess.Popen(
        request["argv"], stdin=stdio[0], stdout=stdio[1], stderr=stdio[2],
        cwd=request["cwd"], env=request["env"], start_new_session=True,
        close_fds=True, restore_signals=True,
        user=None if user is None else user[0],
        group=None if user is None else user[1],
        extra_groups=None if user is None else [])


def oom_score_adj(value: int) -> None:
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(value))


def _watch(ctl: socket.socket, command: int) -> None:
    """Report the command's exit, contain its subtree, end when the subtree is empty."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    me = os.getpid()
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                with contextlib.suppress(OSError):
                    send_packet(ctl, {"done": True})
                return
            if pid == 0:
                break
            if pid == command:
                with contextlib.suppress(OSError):
                    send_packet(ctl, {"exit": os.waitstatus_to_exitcode(status)})
        for key, _ in sel.select():
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                continue
            try:
                request, fds = recv_packet(ctl)
            except OSError:
                request, fds = None, []
            for fd in fds:
                os.close(fd)
            if request is None:  # nobody listens any more: keep containing, quietly
                sel.unregister(ctl)
            elif request.get("kill"):
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(command, signal.SIGKILL)
                _kill_and_report(ctl, me, command)
                return


def _kill_and_report(ctl: socket.socket, me: int, command: int) -> None:
    """Kill the subtree; report the command's exit (if not yet reported) and done."""
    code: int | None = None
    while True:
        # Stop first, then kill: a stopped process cannot fork while we sweep.
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in descendants(me):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        # Reap every dead child before the next sweep (a sweep reads all of /proc).
        flags = 0  # block for the first: the sweep killed at least one
        try:
            while (reaped := os.waitpid(-1, flags))[0]:
                if reaped[0] == command:
                    code = os.waitstatus_to_exitcode(reaped[1])
                flags = os.WNOHANG
        except ChildProcessError:
            break
    with contextlib.suppress(OSError):
        if code is not None:
            send_packet(ctl, {"exit": code})
        send_packet(ctl, {"done": True})


class Running:
    """A command under its supervisor: the agent's ends of its pipes, and what the
    supervisor reported on its control socket."""

    def __init__(self, pid: int, ctl: socket.socket, stdin: int | None, stdout: int,
                 stderr: int) -> None:
        self.pid = pid
        self.ctl = ctl
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code: int | None = None
        self.gone = False  # the supervisor's whole subtree has ended
        self.killed = False
        self.supervisor = 0

    def on_control(self) -> bool:
        """Read one report; ``False`` once the supervisor has nothing more to say."""
        try:
            report, fds = recv_packet(self.ctl)
        except OSError:
            report, fds = None, []
        for fd in fds:
            os.close(fd)
        if report is None or report.get("done"):
            self.gone = True
            return False
        if "exit" in report and self.exit_code is None:
            self.exit_code = int(report["exit"])
        return True

    def kill(self) -> None:
        """Ask the supervisor to SIGKILL everything the command started."""
        self.killed = True
        with contextlib.suppress(OSError):
            send_packet(self.ctl, {"kill": True})

    def force(self) -> None:
        """SIGKILL the supervisor and its subtree from here: a killed command whose
        subtree is still not gone after the grace may have stopped its supervisor.
        What survives the sweep is reparented to the spawner, which kills it."""
        if self.gone or not self.supervisor:
            return
        kill_subtree(self.supervisor)

    def drain(self, send: Callable[[bytes, bytes], None]) -> None:
        """Send what is already in the output pipes, without waiting for more."""
        for tag, fd in ((b"O", self.stdout), (b"E", self.stderr)):
            if fd < 0:
                continue
            os.set_blocking(fd, False)
            with contextlib.suppress(OSError):
                while data := os.read(fd, CHUNK):
                    send(tag, data)

    def close_stdin(self) -> None:
        if self.stdin is not None:
            close_fd(self.stdin)
            self.stdin = None

    def close(self) -> None:
        self.close_stdin()
        for fd in (self.stdout, self.stderr):
            close_fd(fd)
        self.stdout = self.stderr = -1
        with contextlib.suppress(OSError):
            self.ctl.close()


_FIRST_READER = object()  # stands for the reader a background process has not had yet


class Background:
    """A background process: its output kept for replay, its exit code once known.

    Output is a sequence of chunks numbered from the start. At most
    :data:`REPLAY_LIMIT` bytes are kept; past that the oldest go, except while an
    attached reader (:meth:`attach`) still has to send them: then the process is held
    back (its pipes are not read, so its writes block) until the reader catches up,
    for up to :data:`READER_STALL` seconds without progress from it. Until the first
    reader attaches, the process is held as if one had (for up to that long after its
    start), so whoever started it and then asks for its output gets all of it.
    """

    def __init__(self, run: Running, on_exit: Callable[[int], None]) -> None:
        self.run = run
        self.on_exit = on_exit
        self.stdin = open(run.stdin, "wb") if run.stdin is not None else None  # noqa: SIM115
        run.stdin = None  # the file object owns it now
        self.chunks: list[tuple[bytes, bytes]] = []
        self.first = 0
        """The number of ``chunks[0]``: how many chunks were dropped before it."""
        self.size = 0
        self.readers: dict[object, tuple[int, float]] = {_FIRST_READER: (0, time.monotonic())}
        """Each attached reader's next chunk number, and when it last took one."""
        self.exit_code: int | None = None
        self.cond = threading.Condition()
        threading.Thread(target=self.pump, daemon=True).start()

    @property
    def end(self) -> int:
        """The number the next chunk will have."""
        return self.first + len(self.chunks)

    def attach(self) -> object:
        """A new reader, starting at the oldest chunk kept; :meth:`detach` it after."""
        reader = object()
        with self.cond:
            self.readers.pop(_FIRST_READER, None)  # the first reader takes its place
            self.readers[reader] = (self.first, time.monotonic())
        return reader

    def detach(self, reader: object) -> None:
        with self.cond:
            self.readers.pop(reader, None)
            self.cond.notify_all()

    def advance(self, reader: object, position: int) -> None:
        """``reader`` has sent every chunk before ``position``."""
        with self.cond:
            self.readers[reader] = (position, time.monotonic())
            self.cond.notify_all()

    def _waited_for(self) -> bool:
        """Whether a reader that is still taking output needs the oldest chunk."""
        now = time.monotonic()
        return not self.run.killed and any(
            position <= self.first and now - taken < READER_STALL
            for position, taken in self.readers.values())

    def keep(self, tag: bytes, data: bytes) -> None:
        with self.cond:
            self.chunks.append((tag, data))
            self.size += len(data)
            self.cond.notify_all()
            while self.size > REPLAY_LIMIT and len(self.chunks) > 1:
                if self._waited_for():
                    self.cond.wait(0.5)
                    continue
                self.size -= len(self.chunks.pop(0)[1])
                self.first += 1

    def pump(self) -> None:
        run = self.run
        sel = selectors.DefaultSelector()
        sel.register(run.stdout, selectors.EVENT_READ, b"O")
        sel.register(run.stderr, selectors.EVENT_READ, b"E")
        sel.register(run.ctl, selectors.EVENT_READ, b"K")
        open_pipes = 2
        give_up: float | None = None
        while open_pipes or (run.exit_code is None and not run.gone):
            if run.killed and give_up is None:
                give_up = time.monotonic() + KILL_GRACE
            if give_up is not None and (run.gone or time.monotonic() >= give_up):
                run.force()  # killed: a survivor holding a pipe must not keep it running
                break
            events = sel.select(None if give_up is None else
                                max(0.0, min(0.5, give_up - time.monotonic())))
            if run.killed and give_up is None:
                continue
            for key, _ in events:
                if key.data == b"K":
                    if not run.on_control():
                        sel.unregister(key.fileobj)
                    continue
                data = os.read(key.fd, CHUNK)
                if data:
                    self.keep(key.data, data)
                else:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
        sel.close()
        self.on_exit(run.pid)
        code = run.exit_code if run.exit_code is not None else -signal.SIGKILL
        if self.stdin is not None:
            with contextlib.suppress(OSError):
                self.stdin.close()
        run.close()
        with self.cond:
            self.exit_code = code
            self.cond.notify_all()


def close_fd(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)
