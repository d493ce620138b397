"""A streaming ``multipart/form-data`` reader: parts are read as the body arrives.

envd's ``POST /files`` takes files as multipart parts; a part's data is handed on in
chunks as it arrives, so an upload of any size costs the emulator a few chunks of
memory, never the whole body. Only what envd reads is parsed: each part's
``Content-Disposition`` name and filename (the filename kept whole, directories
included, as envd's ``FileNameWithPath`` does).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

__all__ = ["MultipartError", "Part", "boundary_of", "parts"]

_MAX_HEAD = 16 << 10  # one part's headers
_MAX_PREAMBLE = 64 << 10


class MultipartError(ValueError):
    """The body is not well-formed multipart."""


def boundary_of(content_type: str) -> bytes:
    """The boundary a ``multipart/form-data`` content type names.

    Raises:
        MultipartError: there is none.
    """
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if match is None or len(match.group(1)) > 200:
        raise MultipartError("multipart body without a (valid) boundary")
    return match.group(1).encode("latin-1")


class Part:
    """One part: its field ``name``, its ``filename`` (or ``None``), and its data,
    which :meth:`chunks` gives once, as it arrives."""

    def __init__(self, reader: _Reader, name: str, filename: str | None) -> None:
        """A part whose headers were read; its data is next in ``reader``."""
        self.name = name
        self.filename = filename
        # One generator over the part's data, shared: a reader that stops early leaves
        # the rest for skip(), so the next part is found where it starts.
        self._data = reader.part_data()
        self._taken = False

    def __repr__(self) -> str:
        return f"<Part {self.name!r} filename={self.filename!r}>"

    async def chunks(self) -> AsyncIterator[bytes]:
        """The part's data, chunk by chunk (read once)."""
        if self._taken:
            raise RuntimeError("the part's data was already read")
        self._taken = True
        async for chunk in self._data:
            yield chunk

    async def skip(self) -> None:
        """Read past what is left of the part's data."""
        self._taken = True
        async for _chunk in self._data:
            pass


class _Reader:
    def __init__(self, body: AsyncIterator[bytes], boundary: bytes) -> None:
        self.body = body
        self.delimiter = b"--" + boundary
        self.buffer = bytearray()
        self.ended = False

    async def fill(self) -> bool:
        """Read one more chunk of the body; ``False`` at its end."""
        chunk = await anext(self.body, None)
        if chunk is None:
            return False
        self.buffer += chunk
        return True

    async def until(self, marker: bytes, limit: int, what: str) -> bytes:
        """Everything up to ``marker`` (consumed with it), at most ``limit`` bytes."""
        while (at := self.buffer.find(marker)) < 0:
            if len(self.buffer) > limit:
                raise MultipartError(f"the multipart {what} is too long")
            if not await self.fill():
                raise MultipartError(f"the multipart body ends inside the {what}")
        data = bytes(self.buffer[:at])
        del self.buffer[:at + len(marker)]
        return data

    async def after_delimiter(self) -> bool:
        """Past a delimiter: ``True`` if a part follows, ``False`` at the close."""
        while len(self.buffer) < 2:
            if not await self.fill():
                raise MultipartError("the multipart body ends after a boundary")
        if self.buffer[:2] == b"--":
            self.ended = True
            return False
        await self.until(b"\r\n", 1024, "boundary line")  # transport padding, then CRLF
        return True

    async def part_data(self) -> AsyncIterator[bytes]:
        marker = b"\r\n" + self.delimiter
        keep = len(marker) - 1  # a marker may straddle two chunks
        while True:
            at = self.buffer.find(marker)
            if at >= 0:
                if at:
                    yield bytes(self.buffer[:at])
                del self.buffer[:at + len(marker)]
                return
            if len(self.buffer) > keep:
                data = bytes(self.buffer[:-keep])
                del self.buffer[:-keep]
                yield data
            if not await self.fill():
                raise MultipartError("the multipart body ends inside a part")


def _disposition(head: bytes) -> tuple[str, str | None]:
    disposition = ""
    for line in head.decode("utf-8", "replace").split("\r\n"):
        if line.lower().startswith("content-disposition:"):
            disposition = line
    name = re.search(r'\bname="((?:[^"\\]|\\.)*)"', disposition)
    filename = re.search(r'\bfilename="((?:[^"\\]|\\.)*)"', disposition)
    return (name.group(1) if name else "",
            re.sub(r"\\(.)", r"\1", filename.group(1)) if filename else None)


async def parts(body: AsyncIterator[bytes], boundary: bytes) -> AsyncIterator[Part]:
    """The parts of a multipart body, in order. Each part's data must be read (or
    skipped) before the next part is asked for; an unread part is skipped.

    Raises:
        MultipartError: (while iterating) a malformed body.
    """
    reader = _Reader(body, boundary)
    # The preamble, then the first delimiter (which may open the body directly).
    reader.buffer += b"\r\n"
    await reader.until(b"\r\n" + reader.delimiter, _MAX_PREAMBLE, "preamble")
    previous: Part | None = None
    while True:
        if previous is not None:
            await previous.skip()
        if not await reader.after_delimiter():
            return
        while len(reader.buffer) < 2 and await reader.fill():
            pass
        if reader.buffer[:2] == b"\r\n":  # a part without headers
            del reader.buffer[:2]
            head = b""
        else:
            head = await reader.until(b"\r\n\r\n", _MAX_HEAD, "part header")
        previous = Part(reader, *_disposition(head))
        yield previous
