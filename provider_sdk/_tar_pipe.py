"""Blocking archive work in a thread, joined to async code by an OS pipe.

:func:`produced` runs a writer (a tree being archived) in a thread and yields what it
writes, chunk by chunk; :func:`consumed` feeds chunks to a reader (an archive being
unpacked) in a thread. The pipe holds at most its kernel buffer, so neither side ever
holds the whole stream, and either side stopping ends the other: a reader that stops
early (or fails) makes the writes fail with ``EPIPE``, a writer that stops closes its
end and the reader sees end of file. The thread's error is raised in the caller, as it
was raised; the caller's own error (or cancellation) wins over the one it causes in the
thread. Plain threads and :func:`anyio.to_thread.run_sync`, so any anyio loop runs it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO

import anyio
import anyio.to_thread

__all__ = ["consumed", "produced"]

CHUNK = 1 << 20


class _Worker:
    """``work(stream)`` in a thread of its own; the stream is closed when it returns."""

    def __init__(self, work: Callable[[BinaryIO], None], fd: int, mode: str) -> None:
        self._error: BaseException | None = None
        self._stream: BinaryIO = os.fdopen(fd, mode)  # type: ignore[assignment]
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True,
                                        name="psdk-archive")
        self._thread.start()

    def _run(self, work: Callable[[BinaryIO], None]) -> None:
        try:
            with self._stream:
                work(self._stream)
        except BaseException as exc:  # raised again in the caller by join()
            self._error = exc

    async def join(self) -> BaseException | None:
        """Wait for the thread (even when cancelled); its error, if it failed."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._thread.join)
        return self._error


async def produced(work: Callable[[BinaryIO], None]) -> AsyncIterator[bytes]:
    """What ``work`` writes to the stream it is given, in chunks of at most 1 MiB."""
    r, w = os.pipe()
    try:
        worker = _Worker(work, w, "wb")
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    try:
        while chunk := await anyio.to_thread.run_sync(os.read, r, CHUNK):
            yield chunk
    finally:
        os.close(r)
        error = await worker.join()
    if error is not None:
        raise error


async def consumed(chunks: AsyncIterator[bytes], work: Callable[[BinaryIO], None]) -> None:
    """Hand ``chunks`` to ``work``, which reads them from the stream it is given; return
    once it has returned (it may stop before the chunks end)."""
    r, w = os.pipe()
    try:
        worker = _Worker(work, r, "rb")
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    try:
        async for chunk in chunks:
            try:
                await anyio.to_thread.run_sync(_write_all, w, chunk)
            except BrokenPipeError:
                break  # the reader stopped; its error, if any, says why
    finally:
        os.close(w)
        error = await worker.join()
    if error is not None:
        raise error


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
