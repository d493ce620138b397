"""A process started through envd's API, and the streams its output fans out to.

Every stream attached to the process (the ``Start`` that made it, each ``Connect``)
gets every event from the moment it attaches, then the end. A stream holds a bounded
backlog: the process waits a while for a slow reader, then cuts it off with an error
rather than buffering for it. This module starts, signals and reads no process: the
world's process operations (``_world_processes``) feed it.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from provider_sdk.sandbox import Process
from provider_sdk_emulators.e2b._connect import RpcError

__all__ = ["STALL_VAR", "ProcessEntry", "stall"]

# Events a stream attached to a process may have waiting (at most 16 MiB of output): a
# client that reads slower than the process writes is cut off there, not buffered for.
_BACKLOG = 512
#: The environment variable that sets how many seconds a process stream may wait for a
#: reader that takes nothing before it cuts the reader off (:func:`stall`).
STALL_VAR = "PSDK_EMULATOR_READER_STALL"
_STALL = 60.0


def stall() -> float:
    """Seconds a process stream waits for a reader that takes nothing: ``$STALL_VAR``
    if it is a positive number, else 60."""
    try:
        seconds = float(os.environ.get(STALL_VAR, ""))
    except ValueError:
        return _STALL
    return seconds if 0 < seconds < float("inf") else _STALL


@attrs.define(eq=False)
class ProcessEntry:
    """A process started through envd's API: its output fans out to every stream."""

    pid: int
    config: dict[str, Any]
    tag: str | None
    process: Process
    subscribers: list[MemoryObjectSendStream[dict[str, Any]]] = attrs.Factory(list)
    ended: dict[str, Any] | None = None
    scope: anyio.CancelScope | None = None
    pty: bool = False
    """It runs on a terminal: its output is the terminal's."""
    patience: float = attrs.Factory(stall)
    """Seconds its streams wait for a reader that takes nothing (:func:`stall`)."""

    def subscribe(self) -> MemoryObjectReceiveStream[dict[str, Any]]:
        """A stream of this process's events from now on, ending with its end.

        At most a bounded backlog waits in it: a reader that falls that far behind gets
        a ``resource_exhausted`` error in place of the rest."""
        # One slot past the backlog, for what ends a stream (the end, or an error).
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](_BACKLOG + 1)
        if self.ended is not None:
            send.send_nowait(self.ended)
            send.close()
        else:
            self.subscribers.append(send)
        return receive

    async def publish(self, message: dict[str, Any]) -> None:
        """Hand ``message`` to every stream, waiting up to :attr:`patience` seconds while
        one is full (flow control); a reader stalled longer is cut off."""
        for send in list(self.subscribers):
            with anyio.move_on_after(self.patience):
                # A memory stream has no "room" event to wait on.
                while send.statistics().current_buffer_used >= _BACKLOG:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
        self.broadcast(message)

    def broadcast(self, message: dict[str, Any], *, final: bool = False) -> None:
        """Hand ``message`` to every stream at once; a full one is cut off with a
        ``resource_exhausted`` error, or takes its spare slot for the ``final`` message."""
        for send in list(self.subscribers):
            try:
                if not final and send.statistics().current_buffer_used >= _BACKLOG:
                    send.send_nowait({"error": RpcError(
                        "resource_exhausted", "the client fell behind the process's "
                        f"output by {_BACKLOG} events; reconnect to follow it")})
                    send.close()
                    self.subscribers.remove(send)
                    continue
                send.send_nowait(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.WouldBlock):
                send.close()
                self.subscribers.remove(send)

    def finish(self, message: dict[str, Any]) -> None:
        if self.ended is not None:
            return
        self.ended = message
        # A reader still behind gets the end after its backlog, not an error.
        self.broadcast(message, final=True)
        for send in self.subscribers:
            send.close()
        self.subscribers.clear()

