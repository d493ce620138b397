"""The spawner: the agent's helper that hands each command to a supervisor.

The agent forks it before it starts any thread (forking a threaded process is not safe).
Each command (``exec`` or ``start``) goes as one packet with its stdin, stdout and
stderr and a control socket (``_procs.send_packet``) to a supervisor
(``_procs.supervise``) forked ahead when it can: a *spare* waits for its command on a
socket of its own, with its :class:`Launcher`. The spawner forks one whenever the agent
holds none and it has been quiet for :data:`SPARE_DELAY`, and passes the spare's socket
to the agent, which sends the next command straight to it (one process fewer on the
command's way) and tells the spawner it took it. So a command after a pause waits for no
fork of this interpreter. A command that finds no spare (one soon after another, or
while the pids limit refuses a spare) goes to the spawner, which forks its supervisor
when it comes. The spawner is a child subreaper too: the orphans of a supervisor that
died anyway reach it, and it kills them.

Like ``_agent.py``, this module is copied into the sandbox and imports only the standard
library.
"""

from __future__ import annotations

import contextlib
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
    from collections.abc import Callable
    from typing import Any, NoReturn

try:  # on the host: type checks, unisolated agents
    from provider_sdk.local import _procs
except ImportError:  # inside a sandbox: the copy beside this file
    import _procs  # type: ignore[import-not-found,no-redef]

LAUNCH_POLL = 0.05
"""Seconds between a supervisor's checks that its launcher has not stopped."""
SPARE_DELAY = 0.02
"""Seconds the spawner stays quiet before it forks a spare: not while the sandbox
starts or a short command runs, whose CPU it would take."""


class Spawner:
    """The agent's handle on its spawner process (made before any thread starts)."""

    def __init__(self, user: tuple[int, int] | None, keep: list[int], *,
                 isolated: bool) -> None:
        """``user``: the uid and gid commands run as (when the agent may switch to
        them); ``keep``: descriptors the spawner closes (the agent's own);
        ``isolated``: the sandbox is a PID namespace of its own, which the spawner
        empties if the agent dies."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                self.sock.close()
                for fd in keep:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                _spawner_main(theirs, user, isolated)
            finally:
                os._exit(70)
        theirs.close()
        self.pid = pid
        self.lock = threading.Lock()
        self.spare: socket.socket | None = None

    def spawn(self, request: dict[str, Any], stdin: int, stdout: int,
              stderr: int) -> socket.socket:
        """Start a command under a new supervisor (a spare's, if one is ready); returns
        the supervisor's control socket. The caller still owns (and closes) the three
        descriptors."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = [stdin, stdout, stderr, theirs.fileno()]
        try:
            spare = self._take_spare()
            if spare is None or not _hand_over(spare, request, fds):
                _procs.send_packet(self.sock, request, fds)
            if spare is not None:  # the spawner makes the next one once quiet
                with contextlib.suppress(OSError):  # the command is handed over anyway
                    _procs.send_packet(self.sock, {"taken": True})
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        return mine

    def _take_spare(self) -> socket.socket | None:
        """The spare the spawner passed last (closing any older), if any; it is ours
        to hand a command to."""
        with self.lock:
            while True:
                try:
                    passed, fds = _procs.recv_packet(self.sock, socket.MSG_DONTWAIT)
                except OSError:  # none waiting (or the spawner is gone: sends say so)
                    break
                if passed is None:
                    break
                for fd in fds:
                    if self.spare is not None:
                        self.spare.close()
                    self.spare = socket.socket(fileno=fd)
            spare, self.spare = self.spare, None
        return spare


def _spawner_main(sock: socket.socket, user: tuple[int, int] | None,
                  isolated: bool) -> None:
    # What every supervisor and launcher starts its command with (``_procs.popen``),
    # imported once here rather than by the agent before it answers, or by each of them.
    import subprocess  # noqa: F401

    _procs.prctl(_procs.PR_SET_CHILD_SUBREAPER, 1)
    if not isolated:  # an isolated sandbox's spawner ends it when the agent's socket does
        _procs.prctl(_procs.PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    supervisors: set[int] = set()
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)

    def in_child() -> None:  # what a supervisor drops of the spawner's
        sel.close()
        sock.close()
        for fd in (wake_r, wake_w):
            os.close(fd)
        signal.set_wakeup_fd(-1)

    spare_out = False  # whether the agent holds a spare
    refill = True
    while True:
        events = sel.select(SPARE_DELAY if refill and not spare_out else None)
        if refill and not spare_out and not events:  # quiet: make the next one ready
            refill = False
            spare = _fork_spare(in_child, user, supervisors)
            if spare is not None:
                with spare:
                    try:
                        _procs.send_packet(sock, {"spare": True}, [spare.fileno()])
                    except OSError:  # the agent is gone, and so is the sandbox
                        _agent_gone(isolated)
                spare_out = True
        for key, _ in events:
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap_orphans(supervisors)
                continue
            try:
                request, fds = _procs.recv_packet(sock)
            except (OSError, ValueError):
                continue  # a malformed request must not end the spawner
            if request is None:  # the agent is gone, and so is the sandbox
                _agent_gone(isolated)
            if request.get("taken"):  # the agent used the spare it held (or found it gone)
                spare_out, refill = False, True
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                continue
            refill = True  # once quiet again (a spare the pids limit refused, too)
            pid = _fork_or_report(fds[3])
            if pid < 0:
                for fd in fds:
                    os.close(fd)
                continue
            if pid == 0:
                try:
                    in_child()
                    _procs.supervise(request, fds, user)
                finally:
                    os._exit(70)
            supervisors.add(pid)
            for fd in fds:
                os.close(fd)


def _agent_gone(isolated: bool) -> NoReturn:
    """End the spawner, and in an isolated sandbox every process of it first (but its
    init): with the agent gone, nothing would end a command at its timeout. Kills
    until none is left, so a process forked meanwhile goes too."""
    if isolated:
        for _ in range(1000):
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)  # all it may signal but init and itself
            mine = str(os.getpid())
            if all(name in ("1", mine) for name in os.listdir("/proc") if name.isdigit()):
                break
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            time.sleep(0.001)
    os._exit(0)


def _fork_spare(in_child: Callable[[], None], user: tuple[int, int] | None,
                supervisors: set[int]) -> socket.socket | None:
    """Fork a supervisor ahead of its command: it waits on a socket of its own for the
    request the spawner hands over, and ends when the spawner goes. ``None`` while the
    pids limit is full."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid == 0:
        try:
            in_child()
            mine.close()
            launcher = Launcher.fork(user, drop=theirs)
            request, fds = _procs.recv_packet(theirs)
            if request is not None and len(fds) == 4:
                _procs.supervise(request, fds, user,
                                 launcher.start if launcher is not None else None)
        finally:
            os._exit(70)
    theirs.close()
    if pid < 0:
        mine.close()
        return None
    supervisors.add(pid)
    return mine


def _hand_over(spare: socket.socket, request: dict[str, Any], fds: list[int]) -> bool:
    """Give a command to a spare supervisor (closing our end of its socket); ``False``
    if it is gone."""
    with spare, contextlib.suppress(OSError):
        _procs.send_packet(spare, request, fds)
        return True
    return False


def _fork_or_report(ctl: int) -> int:
    """``os.fork()``, retried while the pids limit is full (a killed tree frees it soon);
    -1 after reporting the failure on the control socket ``ctl``."""
    for attempt in range(_procs.FORK_ATTEMPTS):
        try:
            return os.fork()
        except BlockingIOError as exc:
            if attempt == _procs.FORK_ATTEMPTS - 1:
                with contextlib.suppress(OSError), socket.socket(fileno=os.dup(ctl)) as sock:
                    _procs.send_packet(sock, {"error": {
                        "errno": exc.errno, "message": f"cannot fork: {exc.strerror}"}})
            else:
                time.sleep(0.01 * (attempt + 1))
    return -1


def _reap_orphans(supervisors: set[int]) -> None:
    """Reap ended supervisors; kill whatever a supervisor that died left behind."""
    lost = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        supervisors.discard(pid)
        lost = True
    if not lost:
        return
    me = os.getpid()
    for pid in _procs.children_of().get(me, []):
        if pid not in supervisors:
            # Reparented here: its supervisor was killed, so no one contains it.
            for victim in [pid, *_procs.descendants(pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)


class Launcher:
    """A child of a spare supervisor that starts its command, forked with the spare,
    off the path of any command.

    A supervisor that switches user as it starts its command must fork a copy of its
    interpreter (``vfork`` cannot switch user), then takes a page fault for each page
    either copy writes. The launcher switches itself (a few system calls) and then
    needs no switch, so it starts the command with ``vfork`` and exec; it reports the
    pid and ends, and the command is reparented to the supervisor (a subreaper). It also
    holds the raised OOM score the command inherits. Both rehearse the start once when
    the spare is made (a start of ``/``, which exec refuses), so the pages the start
    writes are their own by then.

    The launcher waits as the supervisor's user (root), so no command of the sandbox
    user may signal, trace or read it, and becomes the sandbox user only to start its
    command (not dumpable then: it can be neither traced nor read). Until it has
    reported, that command or another of the user's could stop or kill it: the
    supervisor then kills it and takes as the command its own child (the command,
    reparented), or, if there is none, starts the command itself. A launcher gone
    before the request, or refused a directory the user cannot enter, or the pids
    limit, also leaves the start to the supervisor, as it was without one.
    """

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        self.reaped = False

    @classmethod
    def fork(cls, user: tuple[int, int] | None, drop: socket.socket) -> Launcher | None:
        """Fork one from this (spare) supervisor, which closes ``drop`` (the spare's
        socket) in it, and rehearse a start; ``None`` if that fails (a full pids
        limit): the spare then starts its command itself."""
        try:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            return None
        if pid == 0:
            try:
                mine.close()
                drop.close()
                _launch(theirs, user)
            finally:
                os._exit(70)
        theirs.close()
        launcher = cls(pid, mine)
        if launcher._rehearse():
            return launcher
        mine.close()
        launcher._end()
        return None

    def _rehearse(self) -> bool:
        """One start that exec refuses, on both sides; whether the launcher answered."""
        try:
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            _procs.send_packet(self.sock, {**REHEARSAL, "env": {}}, [null] * 3)
            report = self._report()
        except OSError:
            return False
        finally:
            os.close(null)
        return report is not None and "rehearsed" in report

    def start(self, request: dict[str, Any], stdio: list[int]) -> int | None:
        """The started command's pid; ``None`` to start it without the launcher.

        Raises:
            OSError: the command could not be started (as ``Popen`` raises it).
        """
        try:
            with self.sock:
                try:
                    _procs.send_packet(self.sock, request, stdio)
                except OSError:
                    return None  # gone already
                report = self._report()
        finally:
            self._end()
        if report is None:  # stopped or killed: the command may have started
            mine = _procs.children_of().get(os.getpid(), [])
            return min(mine) if mine else None
        if "pid" in report:
            return int(report["pid"])
        failure = report.get("error") or {}
        if failure.get("again"):
            return None
        raise OSError(int(failure.get("errno") or 0), str(failure.get("message")))

    def _report(self) -> dict[str, Any] | None:
        """The launcher's report, or ``None`` once it stopped or ended without one."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            while True:
                if sel.select(LAUNCH_POLL):
                    try:
                        return _procs.recv_packet(self.sock)[0]
                    except OSError:
                        return None
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
                except ChildProcessError:
                    pid, status = self.pid, 0
                if pid:
                    self.reaped = not os.WIFSTOPPED(status)
                    return None

    def _end(self) -> None:
        """Kill the launcher (done, stopped, or never used) and reap it, so that the
        command it started is this supervisor's child from here on."""
        if self.reaped:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.reaped = True


REHEARSAL = {"argv": ["/"], "cwd": "/", "rehearsal": True}
"""What a launcher is given to rehearse: exec refuses a directory."""


def _launch(sock: socket.socket, user: tuple[int, int] | None) -> None:
    """The launcher's life: start commands until one starts (rehearsals refused by
    exec, then the real one), reporting each. It becomes the user only for the real
    one: until then no command of the user may signal it."""
    _procs.oom_score_adj(1000)
    _procs.prctl(_procs.PR_SET_DUMPABLE, 0)
    while True:
        request, fds = _procs.recv_packet(sock)
        if request is None or len(fds) != 3:
            return
        if user is not None and not request.get("rehearsal"):
            os.setgroups([])
            os.setregid(user[1], user[1])
            os.setreuid(user[0], user[0])
            _procs.prctl(_procs.PR_SET_DUMPABLE, 0)  # a change of user resets it
        try:
            proc = _procs.popen(request, fds)
        except OSError as exc:
            if request.get("rehearsal"):
                _procs.send_packet(sock, {"rehearsed": True})
                continue
            again = isinstance(exc, BlockingIOError) or (
                isinstance(exc, PermissionError) and exc.filename == request["cwd"])
            _procs.send_packet(sock, {"error": {
                "errno": exc.errno or 0, "again": again,
                "message": exc.strerror or str(exc)}})
            return
        finally:
            for fd in fds:
                os.close(fd)
        proc.returncode = 0  # Popen's finalizer must not reap it: the supervisor does
        _procs.send_packet(sock, {"pid": proc.pid})
        return
