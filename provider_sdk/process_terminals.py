"""``ProcessTerminals``: the terminals role (``terminal.pty``) of a provider whose
commands role has background processes but whose backend has no terminals of its own.

A terminal is a background process running a small python3 program, :data:`RELAY`: it
starts the terminal's program on a pseudo-terminal (``pty.fork``), copies what the
terminal prints to its stdout, and reads its stdin as frames, each a type byte and a
4-byte big-endian length: ``d`` carries keys to type, ``r`` a new size (columns and
rows, two big-endian 16-bit numbers), which it sets on the terminal so the program
gets ``SIGWINCH``. The program starts with every signal at its default (none ignored
or blocked, whatever the relay was started with), so Ctrl-C interrupts it. The relay
ends once the program has exited and the terminal is drained, with the program's exit
status (killed by signal N, it kills itself with N), so the process's exit is the
terminal's. Killing the process kills the whole tree, the program
with it. The sandbox needs python3 (3.9 or later).
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator

from provider_sdk.commands import Command, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.errors import SandboxError
from provider_sdk.roles import Commands, Processes
from provider_sdk.terminals import TerminalSpec

__all__ = ["RELAY", "ProcessTerminals", "frame"]

_FRAME = 1 << 16
"""Most bytes of keys one frame carries."""

RELAY = r"""
import fcntl, os, pwd, select, signal, struct, sys, termios

def size(fd, cols, rows):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

cols, rows = int(sys.argv[1]), int(sys.argv[2])
argv = sys.argv[3:]
if not argv:
    shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    argv = ["-" + os.path.basename(shell)]
    program = shell
else:
    program = argv[0]
os.environ.setdefault("TERM", "xterm-256color")
os.set_blocking(0, True)
os.set_blocking(1, True)
master, slave = os.openpty()
size(slave, cols, rows)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
pid = os.fork()
if pid == 0:
    signal.set_wakeup_fd(-1)
    for number in range(1, signal.NSIG):  # as a terminal's program expects them
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(number, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for fd in (master, wake_r, wake_w):
        os.close(fd)
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    if slave > 2:
        os.close(slave)
    try:
        os.execvp(program, argv)
    except OSError as exc:
        os.write(2, ("%s: %s\n" % (program, exc.strerror)).encode())
    os._exit(127)
os.close(slave)
os.set_blocking(master, False)
frames, keys, status, reading = b"", b"", None, True

def out(data):
    while data:
        data = data[os.write(1, data):]

def drain():
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            return False
        if not data:
            return False
        out(data)
        if len(data) < 65536:
            return True

while True:
    wanted = [master, wake_r] + ([0] if reading else [])
    try:
        readable, writable, _ = select.select(wanted, [master] if keys else [], [])
    except InterruptedError:
        continue
    if wake_r in readable:
        os.read(wake_r, 512)
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
            while drain():
                pass
            break
    if master in readable:
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            data = None
        except OSError:
            data = b""
        if data == b"":
            break
        if data:
            out(data)
    if 0 in readable:
        data = os.read(0, 65536)
        if not data:
            reading = False
        frames += data
        while len(frames) >= 5:
            kind, length = frames[:1], struct.unpack(">I", frames[1:5])[0]
            if len(frames) < 5 + length:
                break
            body, frames = frames[5:5 + length], frames[5 + length:]
            if kind == b"d":
                keys += body
            elif kind == b"r" and length == 4:
                size(master, *struct.unpack(">HH", body))
    if keys and master in writable:
        try:
            keys = keys[os.write(master, keys):]
        except BlockingIOError:
            pass
        except OSError:
            keys = b""
if status is None:
    status = os.waitpid(pid, 0)[1]
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""
"""The in-sandbox relay (``python3 -c RELAY COLS ROWS [PROGRAM ARG...]``)."""


def frame(kind: bytes, body: bytes) -> bytes:
    """One frame of the relay's stdin."""
    return kind + struct.pack(">I", len(body)) + body


class ProcessTerminals:
    """The terminals role over a commands role's background processes (see the
    module). ``provider`` names the provider in errors."""

    def __init__(self, processes: Processes, *, provider: str) -> None:
        self._processes = processes
        self._provider = provider

    @classmethod
    def over(cls, commands: Commands, *, provider: str) -> ProcessTerminals | None:
        """The role over ``commands``, or ``None`` where it has no background processes."""
        if isinstance(commands, Processes):
            return cls(commands, provider=provider)
        return None

    async def open_terminal(self, sandbox_id: str, spec: TerminalSpec) -> _Session:
        command = Command(argv=("python3", "-c", RELAY, str(spec.cols), str(spec.rows),
                                *spec.argv), env=dict(spec.env), cwd=spec.cwd)
        pid = await self._processes.start(sandbox_id, command)
        return _Session(self._processes, sandbox_id, pid, self._provider)


class _Session:
    """One terminal: the relay's process."""

    def __init__(self, processes: Processes, sandbox_id: str, pid: int,
                 provider: str) -> None:
        self._processes = processes
        self._sandbox_id = sandbox_id
        self._pid = pid
        self._provider = provider
        self._code: int | None = None
        self._complaint = b""

    @property
    def pid(self) -> int:
        return self._pid

    async def output(self) -> AsyncIterator[bytes]:
        events: AsyncIterator[ProcessEvent] = self._processes.process_events(
            self._sandbox_id, self._pid)
        try:
            async for event in events:
                if isinstance(event, ProcessOutput):
                    if event.stream == "stdout":
                        yield event.data
                    else:  # the relay's own trouble (no python3, say): kept for wait()
                        self._complaint = (self._complaint + event.data)[-2000:]
                elif isinstance(event, ProcessExit):
                    self._code = event.exit_code
                    return
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def write(self, data: bytes) -> None:
        for start in range(0, len(data), _FRAME):
            await self._processes.send_stdin(self._sandbox_id, self._pid,
                                             frame(b"d", data[start:start + _FRAME]))

    async def resize(self, cols: int, rows: int) -> None:
        await self._processes.send_stdin(self._sandbox_id, self._pid,
                                         frame(b"r", struct.pack(">HH", cols, rows)))

    async def wait(self) -> int:
        if self._code is None:
            raise SandboxError(f"terminal {self._pid} ended without an exit status"
                               + (f": {self._complaint.decode(errors='replace').strip()}"
                                  if self._complaint else ""),
                               provider=self._provider, sandbox_id=self._sandbox_id)
        return self._code

    async def kill(self) -> None:
        await self._processes.kill_process(self._sandbox_id, self._pid)
