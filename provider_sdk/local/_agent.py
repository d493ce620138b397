"""The agent inside each local sandbox: runs commands by forking, and does file I/O.

It is started once per sandbox (by bubblewrap, as the sandbox's first process) with the
standard library only, under the interpreter found inside the sandbox. It serves a
listening Unix socket that the host created and handed over as a file descriptor, so the
socket's path is never inside the sandbox's reach. One connection carries one operation.

Frames: one kind byte, a 4-byte big-endian length, the payload. Kinds: ``J`` a JSON
object, ``O``/``E`` stdout/stderr bytes, ``I`` stdin bytes, ``D`` file (or tunnel)
bytes, ``Z`` end of a side's data, ``C`` (empty) a tunnel's connection made, ``A``
(empty) the agent's acknowledgement that it took a request, sent at once so the host
can tell a live agent from one that cannot answer. Every operation ends with a ``J``
frame: ``{"ok": ...}`` or ``{"error": {"type": ..., "message": ...}}``.

The agent writes nothing to its stdout or stderr: they are a pipe the host reads only
while the sandbox starts. It ends the sandbox after its idle timeout by exiting with
status 75, which the host-side launcher records where the sandbox cannot write.

Its file operations and paths are ``_fileops.py``, its process model ``_procs.py`` and
``_spawner.py``: all are copied in beside it. This module must not import anything
outside the standard library, and must not trust anything the sandbox can change.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time

# Only the type checker reads these: importing ``typing`` (and ``collections.abc``) would
# only slow the agent's start inside the sandbox (annotations are not evaluated).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

try:  # on the host: type checks, unisolated agents
    from provider_sdk.local import _procs, _spawner
    from provider_sdk.local._fileops import FileOps, OpError, drain_client
except ImportError:  # inside a sandbox: the copies beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _procs  # type: ignore[import-not-found,no-redef]
    import _spawner  # type: ignore[import-not-found,no-redef]
    from _fileops import FileOps, OpError, drain_client  # type: ignore[import-not-found,no-redef]

HEADER = struct.Struct(">cI")
CHUNK = 1 << 18
FINISHED_KEPT = 256  # finished background processes remembered for reattach
IDLE_EXIT = 75  # the exit status that tells the host the idle timeout ended the sandbox
LONGEST_WAIT = 86400.0  # one wait for a command's output; epoll takes no more than 24 days

ERRNO_TYPES = {
    errno.ENOENT: "FileNotFound",
    errno.EISDIR: "IsADirectory",
    errno.ENOTDIR: "NotADirectory",
    errno.EEXIST: "FileExists",
    errno.ENOTEMPTY: "Conflict",
    errno.EACCES: "PermissionDenied",
    errno.EPERM: "PermissionDenied",
    errno.EROFS: "PermissionDenied",
    errno.ENAMETOOLONG: "InvalidInput",
    errno.EINVAL: "InvalidInput",
}


class Conn:
    """Framed reads and writes on one client connection (writes are thread-safe)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.lock = threading.Lock()

    def send(self, kind: bytes, payload: bytes) -> None:
        head = HEADER.pack(kind, len(payload))
        with self.lock:
            if len(payload) < 65536:  # one syscall for the small frames of a round trip
                self.sock.sendall(head + payload)
            else:
                self.sock.sendall(head)
                self.sock.sendall(payload)

    def send_json(self, obj: dict[str, Any]) -> None:
        self.send(b"J", json.dumps(obj).encode())

    def fill(self) -> bool:
        """Read once from the socket; ``False`` at end of stream."""
        data = self.sock.recv(1 << 20)
        self.buf += data
        return bool(data)

    def next_frame(self) -> tuple[bytes, bytes] | None:
        """A complete frame from what was read so far, if there is one."""
        if len(self.buf) < HEADER.size:
            return None
        kind, size = HEADER.unpack_from(self.buf)
        end = HEADER.size + size
        if len(self.buf) < end:
            return None
        payload = bytes(self.buf[HEADER.size:end])
        del self.buf[:end]
        return kind, payload

    def recv(self) -> tuple[bytes, bytes] | None:
        """The next frame, blocking; ``None`` if the client went away."""
        while (frame := self.next_frame()) is None:
            if not self.fill():
                return None
        return frame


class Agent(FileOps):
    def __init__(self, config: dict[str, Any]) -> None:
        self.root = config.get("root") or ""  # non-empty only in unisolated mode
        self.workdir = config["workdir"]
        self.env = dict(config["env"])
        self.idle_timeout = config.get("idle_timeout")
        self.last_active = time.monotonic()
        self.busy = 0
        self.procs: dict[int, _procs.Background] = {}
        self.children: dict[int, _procs.Running] = {}  # every command running now (exec and start)
        self.lock = threading.Lock()
        user = config.get("user")  # set when this agent is not the sandbox user
        self.user: tuple[int, int] | None = (int(user[0]), int(user[1])) if user else None
        self.spawner: _spawner.Spawner | None = None

    # ---------------------------------------------------------------- serving

    def serve(self, listener: socket.socket) -> None:
        # Forked before any thread starts: forking a threaded process is not safe.
        self.spawner = _spawner.Spawner(self.user, keep=[listener.fileno()],
                                        isolated=not self.root)
        if self.idle_timeout:
            threading.Thread(target=self.idle_watch, daemon=True).start()
        while True:
            sock, _ = listener.accept()
            try:
                threading.Thread(target=self.handle, args=(sock,), daemon=True).start()
            except RuntimeError:  # no thread to be had (a full pids limit): refuse this one
                sock.close()
                time.sleep(0.01)

    def idle_watch(self) -> None:
        limit = float(self.idle_timeout or 0)
        while True:
            time.sleep(min(1.0, limit / 4))
            with self.lock:
                running = any(p.exit_code is None for p in self.procs.values())
                idle = time.monotonic() - self.last_active
            if not self.busy and not running and idle > limit:
                self.stop()

    def stop(self) -> None:
        """End the sandbox: every process in it, then the agent (and so the sandbox)."""
        if self.root:  # unisolated: only what this agent started, never the host's
            self.op_kill_all(None, {})
        else:
            with contextlib.suppress(ProcessLookupError):  # nothing else is running
                os.kill(-1, signal.SIGKILL)
        os._exit(IDLE_EXIT)

    def handle(self, sock: socket.socket) -> None:
        conn = Conn(sock)
        with self.lock:
            self.busy += 1
        if self.user is not None:
            # File operations act as the sandbox user: its owner, its permissions.
            _procs.set_fs_ids(*self.user)
        try:
            frame = conn.recv()
            if frame is None or frame[0] != b"J":
                return
            conn.send(b"A", b"")
            req = json.loads(frame[1])
            op = getattr(self, "op_" + str(req.get("op")), None)
            if op is None:
                raise OpError("InvalidInput", f"unknown operation {req.get('op')!r}")
            result = op(conn, req)
            conn.send_json({"ok": result if result is not None else True})
        except OpError as exc:
            self.reply_error(conn, exc.kind, str(exc))
        except OSError as exc:
            kind = ERRNO_TYPES.get(exc.errno or 0, "SandboxError")
            where = f": {self.shown(exc.filename)}" if exc.filename else ""
            self.reply_error(conn, kind, f"{exc.strerror}{where}")
        except Exception as exc:  # a bad request must never take the agent down
            self.reply_error(conn, "SandboxError", f"agent: {type(exc).__name__}: {exc}")
        finally:
            with self.lock:
                self.busy -= 1
                self.last_active = time.monotonic()
            with contextlib.suppress(OSError):
                sock.close()

    @staticmethod
    def reply_error(conn: Conn, kind: str, message: str) -> None:
        with contextlib.suppress(OSError):
            conn.send_json({"error": {"type": kind, "message": message}})

    # ---------------------------------------------------------------- process

    def spawn(self, req: dict[str, Any], stdin: bool,
              deadline: float | None = None) -> _procs.Running:
        """Start a command under a supervisor of its own (see ``_procs``). A start not
        reported by ``deadline`` (an exec's timeout) or within ``SPAWN_TIMEOUT`` fails,
        and its supervisor's subtree is killed."""
        argv = req["argv"]
        env = {**self.env, **req.get("env", {})}
        cwd = self.path(req.get("cwd") or self.workdir)
        if not os.path.isdir(cwd):
            raise OpError("InvalidInput", f"cwd {self.shown(cwd)!r} is not a directory")
        if self.root and "HOME" not in req.get("env", {}):
            env["HOME"] = self.root + env.get("HOME", "/")
        assert self.spawner is not None
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        if stdin:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
        ours = [out_r, err_r, in_w]
        try:
            ctl = self.spawner.spawn({"argv": argv, "env": env, "cwd": cwd},
                                     in_r, out_w, err_w)
        except BaseException:
            for fd in ours:
                _procs.close_fd(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        reply, supervisor = start_report(ctl, deadline)
        if reply is None or "pid" not in reply:
            ctl.close()
            for fd in ours:
                _procs.close_fd(fd)
            if reply is None and supervisor:  # a start held up: nothing of it may run
                _procs.kill_subtree(supervisor)
            failure = (reply or {}).get("error") or {"message": "the supervisor failed"}
            raise OpError("Spawn", f"{argv[0]}: {failure['message']}")
        run = _procs.Running(int(reply["pid"]), ctl, in_w if stdin else None, out_r, err_r)
        run.supervisor = int(reply.get("supervisor") or 0)
        with self.lock:
            self.children[run.pid] = run
        return run

    def op_kill_all(self, conn: Conn | None, req: dict[str, Any]) -> None:
        """Kill every command this agent started (the host then ends the agent)."""
        with self.lock:
            running = list(self.children.values()) + [
                b.run for b in self.procs.values() if b.exit_code is None]
        for run in running:
            run.kill()

    def op_ping(self, conn: Conn, req: dict[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid()}

    def op_exec(self, conn: Conn, req: dict[str, Any]) -> dict[str, Any]:
        timeout = req.get("timeout")
        deadline = time.monotonic() + float(timeout) if timeout else None
        try:
            run = self.spawn(req, stdin=bool(req.get("stdin")), deadline=deadline)
        except OpError as exc:
            if exc.kind != "Spawn":
                raise
            if req.get("stdin"):
                drain_client(conn)
            if deadline is not None and time.monotonic() >= deadline:
                return {"exit_code": -signal.SIGKILL, "timed_out": True}
            conn.send(b"E", f"psdk: {exc}\n".encode())
            return {"exit_code": 127, "timed_out": False}
        sel = selectors.DefaultSelector()
        sel.register(run.stdout, selectors.EVENT_READ, b"O")
        sel.register(run.stderr, selectors.EVENT_READ, b"E")
        sel.register(run.ctl, selectors.EVENT_READ, b"K")
        sel.register(conn.sock, selectors.EVENT_READ, b"C")
        pending = bytearray()
        stdin_open = run.stdin is not None  # the client may still send stdin frames

        def take_stdin() -> bool:
            """Queue the stdin frames read so far; whether more may come."""
            while (frame := conn.next_frame()) is not None:
                if frame[0] == b"I" and frame[1]:
                    if not pending and run.stdin is not None:
                        sel.register(run.stdin, selectors.EVENT_WRITE, b"W")
                    pending.extend(frame[1])
                elif frame[0] == b"Z":
                    if not pending:
                        run.close_stdin()
                    return False
            return True

        if stdin_open:
            stdin_open = take_stdin()  # frames that arrived with the request
        timed_out = False
        give_up: float | None = None  # once killed: when to stop waiting for output
        open_pipes = 2
        try:
            while True:
                if give_up is not None and run.gone:
                    run.drain(conn.send)  # everything is dead: what is left in the pipes
                    break
                if not open_pipes and (run.exit_code is not None or run.gone):
                    break
                ends = [t for t in (deadline, give_up) if t is not None]
                wait = min(max(0.0, min(ends) - time.monotonic()), LONGEST_WAIT) \
                    if ends else None
                events = sel.select(wait)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    timed_out = True
                    run.kill()
                    deadline, give_up = None, now + _procs.KILL_GRACE
                if give_up is not None and now >= give_up:
                    run.force()  # the subtree outlived the grace: kill it from here
                    break
                for key, _ in events:
                    if key.data == b"C":
                        if not conn.fill():  # the client went away: so must the command
                            raise ConnectionResetError("client closed")
                        if stdin_open:
                            stdin_open = take_stdin()
                    elif key.data == b"K":
                        if not run.on_control():
                            sel.unregister(key.fileobj)
                    elif key.data == b"W":
                        try:
                            del pending[:os.write(key.fd, pending[:CHUNK])]
                        except BrokenPipeError:
                            pending.clear()
                        if not pending:
                            sel.unregister(key.fileobj)
                            if not stdin_open:
                                run.close_stdin()
                    else:
                        data = os.read(key.fd, CHUNK)
                        if data:
                            conn.send(key.data, data)
                        else:
                            sel.unregister(key.fileobj)
                            open_pipes -= 1
        except BaseException:
            run.kill()
            raise
        finally:
            self.forget(run.pid)
            sel.close()
            run.close()
        code = run.exit_code if run.exit_code is not None else -signal.SIGKILL
        return {"exit_code": code, "timed_out": timed_out}

    def op_start(self, conn: Conn, req: dict[str, Any]) -> dict[str, Any]:
        stdin = req.get("stdin", True) is not False  # False: empty, as exec's without
        run = self.spawn(req, stdin=stdin)
        bg = _procs.Background(run, self.forget)
        with self.lock:
            self.procs[run.pid] = bg
            finished = [p for p, b in self.procs.items() if b.exit_code is not None]
            for pid in finished[:-FINISHED_KEPT]:
                del self.procs[pid]
        return {"pid": run.pid, "stdin": stdin}

    def forget(self, pid: int) -> None:
        """A command has exited: it is no longer one to kill."""
        with self.lock:
            self.children.pop(pid, None)

    def background(self, pid: int) -> _procs.Background:
        with self.lock:
            bg = self.procs.get(pid)
        if bg is None:
            raise OpError("ProcessNotFound", f"no background process {pid}")
        return bg

    def op_events(self, conn: Conn, req: dict[str, Any]) -> dict[str, Any]:
        bg = self.background(int(req["pid"]))
        reader = bg.attach()
        try:
            position = bg.first
            while True:
                with bg.cond:
                    position = max(position, bg.first)  # what was dropped is gone
                    while position >= bg.end and bg.exit_code is None:
                        bg.cond.wait(0.5)
                        if conn_closed(conn.sock):
                            return {}
                        position = max(position, bg.first)
                    chunks = bg.chunks[position - bg.first:]
                    # The exit code is set after the last chunk: with it, none follow.
                    code = bg.exit_code
                for tag, data in chunks:
                    conn.send(tag, data)
                    position += 1
                    bg.advance(reader, position)
                if code is not None:
                    return {"exit_code": code}
        finally:
            bg.detach(reader)

    def op_stdin(self, conn: Conn, req: dict[str, Any]) -> None:
        bg = self.background(int(req["pid"]))
        stdin = bg.stdin
        refused = False
        while True:
            frame = conn.recv()
            if frame is None or frame[0] == b"Z":
                break
            if stdin is not None and not stdin.closed and not refused:
                try:
                    stdin.write(frame[1])
                    stdin.flush()
                except BrokenPipeError:
                    # Read the rest of what the client sends before saying so: an answer
                    # while it still sends would end its connection mid-frame instead.
                    refused = True
        if refused:
            raise OpError("Conflict", "the process closed its stdin")
        if req.get("close") and stdin is not None:
            close_quietly(stdin)
            bg.run.stdin = None  # closed through the file object

    def op_kill_process(self, conn: Conn, req: dict[str, Any]) -> None:
        self.background(int(req["pid"])).run.kill()

    # ---------------------------------------------------------------- tunnels

    def op_tunnel(self, conn: Conn, req: dict[str, Any]) -> None:
        """Connect to ``127.0.0.1:port`` inside the sandbox and relay bytes both ways:
        ``D`` frames from the client to the port (``Z``: no more), the port's bytes as
        ``D`` frames (``Z`` at its end). The connection is made by this process, in the
        sandbox's own network namespace: nothing outside the sandbox is reachable."""
        port = req.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise OpError("InvalidInput", f"port {port!r} is not a TCP port")
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError as exc:
            raise OpError("Refused", f"nothing answers on port {port} in the sandbox "
                                     f"({exc.strerror or exc})") from None
        sock.settimeout(None)
        conn.send(b"C", b"")
        upstream = threading.Thread(target=tunnel_upstream, args=(conn, sock), daemon=True)
        upstream.start()
        try:
            while data := sock.recv(CHUNK):
                conn.send(b"D", data)
            conn.send(b"Z", b"")
        except OSError:
            pass  # either side went away: the client's end closes the rest
        upstream.join()
        sock.close()

def tunnel_upstream(conn: Conn, sock: socket.socket) -> None:
    """A tunnel's client-to-port half: ``D`` frames to the port (``Z`` half-closes it)
    until the client goes away; then the port's connection is shut down whole."""
    try:
        while (frame := conn.recv()) is not None:
            if frame[0] == b"Z":
                sock.shutdown(socket.SHUT_WR)
            elif frame[0] == b"D":
                sock.sendall(frame[1])
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def start_report(ctl: socket.socket, deadline: float | None
                 ) -> tuple[dict[str, Any] | None, int]:
    """A supervisor's report of its command's start (``{"pid"}`` or ``{"error"}``), or
    ``None`` if none came in time; and the supervisor's pid, once it has said it. Its
    pid is waited for up to ``SPAWN_TIMEOUT`` (a dead spawner), even past ``deadline``
    (an exec's timeout), so that a start held up is known by whom to kill; the start
    only until ``deadline``."""
    waits = time.monotonic() + _procs.SPAWN_TIMEOUT
    supervisor = 0
    try:
        while True:
            ends = waits if not supervisor or deadline is None else min(waits, deadline)
            if (left := ends - time.monotonic()) <= 0:
                return None, supervisor
            ctl.settimeout(left)
            reply, fds = _procs.recv_packet(ctl)
            for fd in fds:
                _procs.close_fd(fd)
            if reply is None or "supervisor" not in reply or "pid" in reply:
                return reply, supervisor
            supervisor = int(reply["supervisor"])
    except OSError:  # the wait ended (TimeoutError) or the socket did
        return None, supervisor
    finally:
        ctl.settimeout(None)


def conn_closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def close_quietly(f: Any) -> None:
    with contextlib.suppress(OSError):
        f.close()


def main() -> None:
    with open(sys.argv[1]) as f:
        config = json.load(f)
    listener = socket.socket(fileno=int(sys.argv[2]))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # Sandboxed code may not trace this process or open its descriptors through /proc.
    _procs.prctl(_procs.PR_SET_DUMPABLE, 0)
    # Nothing this process starts inherits a capability, even through a file that
    # grants inheritable ones: commands hold none of any kind.
    _procs.drop_inheritable_capabilities()
    Agent(config).serve(listener)


if __name__ == "__main__":
    main()
