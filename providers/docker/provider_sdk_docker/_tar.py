"""Tar streams for the Engine's archive endpoints, produced and consumed in chunks.

A file goes in as a one-member archive read from a spool (memory for small files, a
temporary file for big ones), and comes out of an archive parsed as it streams: no file
is ever held in memory whole.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterable, Iterator
from typing import IO

__all__ = ["ArchiveReader", "one_file_archive"]

BLOCK = 512
CHUNK = 1 << 20


def one_file_archive(name: str, spool: IO[bytes], size: int, *, mode: int = 0o644,
                     uid: int = 0, gid: int = 0) -> Iterator[bytes]:
    """Yield a tar archive holding one regular file, its bytes read from ``spool``."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.mtime = int(time.time())
    yield info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")
    spool.seek(0)
    left = size
    while left:
        data = spool.read(min(CHUNK, left))
        if not data:
            raise OSError(f"spool ended {left} bytes early")
        left -= len(data)
        yield data
    yield b"\0" * (-size % BLOCK) + b"\0" * (2 * BLOCK)


class _ChunkReader(io.RawIOBase):
    """A read-only file over an iterable of byte chunks."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class ArchiveReader:
    """The first member of a streamed tar archive (blocking calls: run them in a thread).

    ``member`` is its header; :meth:`read` returns the next chunk of a regular file's
    bytes, ``b""`` at its end.
    """

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
            fileobj=io.BufferedReader(_ChunkReader(chunks), CHUNK), mode="r|",
            encoding="utf-8", errors="surrogateescape")
        member = self._tar.next()
        if member is None:
            raise tarfile.ReadError("empty archive")
        self.member = member
        self._data = self._tar.extractfile(member) if member.isfile() else None

    def read(self) -> bytes:
        """The next chunk of the member's bytes; ``b""`` when done."""
        return self._data.read(CHUNK) if self._data is not None else b""

    def close(self) -> None:
        """Stop reading."""
        self._tar.close()
