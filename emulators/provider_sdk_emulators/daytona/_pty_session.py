"""A PTY session of the toolbox: its description, the relay in the sandbox that runs its
terminal, and the clients attached to it.

The relay is a small Python program that starts ``bash`` on a pseudo-terminal and copies
its output to stdout; its stdin carries framed messages (``d`` data, ``r`` a resize, see
:func:`frame`). This module holds no routes: ``_pty`` serves them, and ``_store`` keeps a
sandbox's sessions.
"""

from __future__ import annotations

import contextlib
import json
import struct
from typing import Any

import attrs

from provider_sdk.errors import SandboxError
from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Process
from provider_sdk.tasks import OwnedTask
from provider_sdk_emulators.kit.websocket import CLOSE_INTERNAL_ERROR, CLOSE_OK, WebSocket

# Frames on the relay's stdin: a kind byte ("d" data, "r" resize), a 4-byte length, the
# payload (for "r": cols and rows, 2 bytes each).
RELAY = r'''
import fcntl, os, pty, select, struct, sys, termios
cols, rows = int(sys.argv[1]), int(sys.argv[2])
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm-256color"
    os.execvp("bash", ["bash", "-i"])
def size(c, r):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", r, c, 0, 0))
size(cols, rows)
pending, reading = b"", True
while True:
    ready = select.select([fd, 0] if reading else [fd], [], [])[0]
    if fd in ready:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            break
        os.write(1, data)
    if 0 in ready:
        chunk = os.read(0, 65536)
        if not chunk:
            reading = False
        pending += chunk
        while len(pending) >= 5:
            kind, length = pending[:1], struct.unpack(">I", pending[1:5])[0]
            if len(pending) < 5 + length:
                break
            payload, pending = pending[5:5 + length], pending[5 + length:]
            if kind == b"d":
                os.write(fd, payload)
            elif kind == b"r":
                size(*struct.unpack(">HH", payload))
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
os._exit(128 - code if code < 0 else code)
'''


def frame(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack(">I", len(payload)) + payload


@attrs.define(kw_only=True, eq=False)
class PtySession:
    """One terminal: its description, its relay, and the clients attached."""

    id: str
    cwd: str
    envs: dict[str, str]
    cols: int
    rows: int
    created_at: str
    process: Process
    exit_code: int | None = None
    clients: dict[WebSocket, bool] = attrs.field(factory=dict)
    """Attached clients, each with whether it asked for exit control messages."""
    reader: OwnedTask | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "cwd": self.cwd, "envs": dict(self.envs), "cols": self.cols,
                "rows": self.rows, "createdAt": self.created_at,
                "active": self.exit_code is None, "lazyStart": False}

    async def follow(self) -> None:
        """Send the terminal's output to every attached client; at its end, its exit."""
        code = -1
        with contextlib.suppress(SandboxError):
            async for event in self.process.events():
                if isinstance(event, ProcessOutput) and event.stream == "stdout":
                    for ws in list(self.clients):
                        with contextlib.suppress(ConnectionError, RuntimeError):
                            await ws.send_bytes(event.data)
                elif isinstance(event, ProcessExit):
                    code = event.exit_code
        self.exit_code = code if code >= 0 else 128 - code
        for ws, control in list(self.clients.items()):
            await exited(ws, self.exit_code, control=control)
        self.clients.clear()

    async def close(self) -> None:
        """Kill the terminal; attached clients are told it exited."""
        with contextlib.suppress(SandboxError):
            await self.process.kill()
        if self.reader is not None:
            await self.reader.stop(grace=5.0)


async def exited(ws: WebSocket, code: int, *, control: bool) -> None:
    reason = None if code == 0 else ("Ctrl+C" if code == 130 else "SIGKILL" if code == 137
                                     else "SIGTERM" if code == 143
                                     else f"signal {code - 128}" if code > 128
                                     else "non-zero exit")
    data: dict[str, Any] = {"exitCode": code}
    if reason is not None:
        data["exitReason"] = reason
    with contextlib.suppress(ConnectionError, RuntimeError):
        if control:
            await ws.send_text(json.dumps({"type": "control", "status": "exited", **data}))
            await ws.close(code=CLOSE_OK)
        else:
            await ws.close(code=CLOSE_OK if code == 0 else CLOSE_INTERNAL_ERROR,
                           reason=json.dumps(data).encode())
