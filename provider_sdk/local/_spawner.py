"""The spawner: the agent's helper that hands each command to a supervisor.

The agent forks it before it starts any thread (forking a threaded process is not safe),
and sends it each ``exec`` and ``start`` as one packet with the command's stdin, stdout
and stderr and a control socket (``_procs.send_packet``). It hands the command to a
supervisor (``_procs.supervise``) forked ahead: a spare waits for its command on a
socket of its own, with its launcher (``_procs.Launcher``), and the spawner forks one
whenever it has none and has been quiet for :data:`SPARE_DELAY`, so a command after a
pause does not wait for a fork of this interpreter. A command that finds no spare (one
soon after another, or while the pids limit refuses a spare) has its supervisor forked
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
import time
from collections.abc import Callable
from typing import Any

try:  # on the host: type checks, unisolated agents
    from provider_sdk.local import _procs
except ImportError:  # inside a sandbox: the copy beside this file
    import _procs  # type: ignore[import-not-found,no-redef]

SPARE_DELAY = 0.02
"""Seconds the spawner stays quiet before it forks a spare: not while the sandbox
starts or a short command runs, whose CPU it would take."""


class Spawner:
    """The agent's handle on its spawner process (made before any thread starts)."""

    def __init__(self, user: tuple[int, int] | None, keep: list[int]) -> None:
        """``user``: the uid and gid commands run as (when the agent may switch to
        them); ``keep``: descriptors the spawner closes (the agent's own)."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                self.sock.close()
                for fd in keep:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                _spawner_main(theirs, user)
            finally:
                os._exit(70)
        theirs.close()
        self.pid = pid

    def spawn(self, request: dict[str, Any], stdin: int, stdout: int,
              stderr: int) -> socket.socket:
        """Start a command under a new supervisor; returns the supervisor's control
        socket. The caller still owns (and closes) the three descriptors."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            _procs.send_packet(self.sock, request, [stdin, stdout, stderr, theirs.fileno()])
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        return mine


def _spawner_main(sock: socket.socket, user: tuple[int, int] | None) -> None:
    _procs.prctl(_procs.PR_SET_CHILD_SUBREAPER, 1)
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

    spare: socket.socket | None = None
    refill = True
    while True:
        events = sel.select(SPARE_DELAY if refill else None)
        if refill and not events:  # quiet again: make the next supervisor ready
            spare, refill = _fork_spare(in_child, user, supervisors), False
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
                os._exit(0)
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                continue
            refill = True  # once quiet again (a spare the pids limit refused, too)
            handed, spare = spare is not None and _hand_over(spare, request, fds), None
            if handed:
                for fd in fds:
                    os.close(fd)
                continue
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
            launcher = _procs.Launcher.fork(user, drop=theirs)
            request, fds = _procs.recv_packet(theirs)
            if request is not None and len(fds) == 4:
                _procs.supervise(request, fds, user, launcher)
        finally:
            os._exit(70)
    theirs.close()
    if pid < 0:
        mine.close()
        return None
    supervisors.add(pid)
    return mine


def _hand_over(spare: socket.socket, request: dict[str, Any], fds: list[int]) -> bool:
    """Give a command to a spare supervisor; ``False`` if it is gone."""
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
