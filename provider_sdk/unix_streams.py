"""Connections to UNIX sockets (a local sandbox's agent, the Docker Engine) that a
cancelled read or write leaves sound, on either event loop.

anyio's UNIX socket streams on asyncio wait on the raw socket with a reader callback that
sets a future's result. A read cancelled in the same turn of the loop in which its
socket became readable leaves that callback queued; it then sets the result of a
cancelled future, and the loop reports ``InvalidStateError`` (which fails a test that
runs the loop, and is logged everywhere else). On asyncio the stream here waits the same
way with a callback that checks first; on trio, anyio's stream is used as it is.
"""

from __future__ import annotations

import asyncio
import os
import socket

import anyio
import anyio.lowlevel
from anyio.abc import ByteStream

__all__ = ["connect_unix"]

_MAX_SOCKET_PATH = 100  # sun_path holds 107 bytes and a NUL; keep a margin


async def connect_unix(path: str) -> ByteStream:
    """A stream connected to the UNIX socket at ``path``, even one whose path is longer
    than the kernel allows (it is reached through its directory's descriptor).

    Raises:
        OSError: nothing listens there.
    """
    if len(path) <= _MAX_SOCKET_PATH:
        return await _connect(path)
    fd = os.open(os.path.dirname(path), os.O_PATH)
    try:
        return await _connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    finally:
        os.close(fd)


async def _connect(path: str) -> ByteStream:
    if not _on_asyncio():
        return await anyio.connect_unix(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, path)
    except BaseException:
        sock.close()
        raise
    return _AsyncioStream(sock)


def _on_asyncio() -> bool:
    """Whether the calling task is an asyncio task (not trio's, guest mode included)."""
    try:
        return asyncio.current_task() is not None
    except RuntimeError:
        return False


def _wake(ready: asyncio.Future[None]) -> None:
    """The reader's or writer's callback: a wait cancelled meanwhile is left as it is."""
    if not ready.done():
        ready.set_result(None)


class _AsyncioStream(ByteStream):
    """anyio's UNIX socket stream, as anyio makes it on asyncio, but for the callback
    that wakes a read or a write: it leaves a cancelled wait alone, and the wait stops
    watching the socket as it ends. Bytes are read and written only once the waiting
    task runs again, so a cancelled read loses nothing. The end of the stream is
    ``EndOfStream``, a broken connection ``BrokenResourceError``, and use after
    ``aclose`` ``ClosedResourceError``, as anyio says them."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._waits: set[asyncio.Future[None]] = set()
        self._closed = False

    async def _until(self, writable: bool) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        (loop.add_writer if writable else loop.add_reader)(self._sock, _wake, ready)
        self._waits.add(ready)
        try:
            await ready
        finally:
            self._waits.discard(ready)
            (loop.remove_writer if writable else loop.remove_reader)(self._sock)

    def _broken(self, exc: OSError) -> Exception:
        if self._closed:
            return anyio.ClosedResourceError()
        return anyio.BrokenResourceError(str(exc))

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self._sock.recv(max_bytes)
            except BlockingIOError:
                await self._until(writable=False)
                continue
            except OSError as exc:
                raise self._broken(exc) from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        view = memoryview(item)
        while view:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await self._until(writable=True)
                continue
            except OSError as exc:
                raise self._broken(exc) from exc
            view = view[sent:]

    async def send_eof(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise self._broken(exc) from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._sock.close()
            for ready in self._waits:  # a read or write waiting meanwhile is closed too
                _wake(ready)
        await anyio.lowlevel.checkpoint()
