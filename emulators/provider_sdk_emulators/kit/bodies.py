"""Request bodies as the emulators read them: decoded, and bounded as they inflate.

A vendor's clients may compress what they send (``Content-Encoding: gzip``); an
emulator undoes it step by step with :func:`decoded`, so a small body cannot make it
hold or write gigabytes, and refuses a body past its limit with :class:`BodyTooLarge`
(answered with 413). It talks no HTTP and knows no vendor.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterable, AsyncIterator, Iterator

from provider_sdk.errors import InvalidInput, QuotaExceeded

__all__ = ["BODY_LIMIT", "INFLATE_LIMIT", "BodyTooLarge", "decoded"]

BODY_LIMIT = 16 << 20
"""The most an emulator reads into memory for one request body (JSON, an RPC message),
counted after any ``Content-Encoding`` is undone."""

INFLATE_LIMIT = 256 << 20
"""The most a compressed body (``Content-Encoding: gzip`` or ``deflate``) may inflate to,
even when it is streamed to disk: past it the request is refused, so a small body cannot
make the emulator write (or hold) gigabytes."""

# How much one step of the inflater may produce: the memory a single compressed chunk can
# cost, however much it would inflate.
_INFLATE_STEP = 256 << 10


class BodyTooLarge(QuotaExceeded):
    """A request body is larger than the emulator accepts (after decompression); an
    emulator answers it with 413 and reads no further.

    Attributes:
        limit: the limit in bytes that the body passed.
    """

    def __init__(self, message: str, *, limit: int, **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.limit = limit


def _inflater(encoding: str) -> zlib._Decompress | None:
    """A decompressor for one ``Content-Encoding`` value; ``None`` for ``identity``."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj(wbits=32 + zlib.MAX_WBITS)  # zlib header (or gzip)
    raise InvalidInput(f"unsupported Content-Encoding {encoding!r}; "
                       "send gzip, deflate or identity")


async def decoded(chunks: AsyncIterable[bytes], encoding: str | None, *,
                  limit: int | None) -> AsyncIterator[bytes]:
    """A request body's chunks with ``encoding`` undone, bounded as it inflates.

    The body is inflated step by step, each step producing at most a few hundred KiB,
    so memory stays bounded however much a chunk would inflate; the running total is
    checked before each chunk is yielded.

    Args:
        chunks: the body as it arrives.
        encoding: the ``Content-Encoding`` header (``None``, ``identity``, ``gzip``,
            ``deflate``, or several of these separated by commas, applied in order).
        limit: the most bytes to yield; ``None`` for no limit on an identity body. A
            compressed body is always held to :data:`INFLATE_LIMIT` at most.

    Raises:
        BodyTooLarge: the body (decoded) passes its limit; nothing past it is yielded.
        InvalidInput: an unknown encoding, or a corrupt or truncated compressed body.
    """
    stages = [d for name in (encoding or "").split(",") if (d := _inflater(name))]
    stages.reverse()  # the last encoding applied is the first to undo
    if stages:
        limit = INFLATE_LIMIT if limit is None else min(limit, INFLATE_LIMIT)
    total = 0

    def count(piece: bytes) -> bytes:
        nonlocal total
        total += len(piece)
        if limit is not None and total > limit:
            raise BodyTooLarge(f"the request body is larger than {limit} bytes"
                               f"{' once decompressed' if stages else ''}", limit=limit)
        return piece

    def inflate(index: int, data: bytes, final: bool = False) -> Iterator[bytes]:
        # One stage's output feeds the next; each step is bounded, and a step that
        # filled its bound is followed by another, since zlib may hold output back.
        if index == len(stages):
            if data:
                yield count(data)
            return
        stage = stages[index]
        try:
            while True:
                piece = stage.decompress(data, _INFLATE_STEP)
                data = stage.unconsumed_tail
                if stage.eof and stage.unused_data.strip(b"\0"):
                    raise InvalidInput("the compressed body has data after its end")
                yield from inflate(index + 1, piece)
                if not data and len(piece) < _INFLATE_STEP:
                    break
            if final:
                yield from inflate(index + 1, stage.flush(), final=True)
        except zlib.error as exc:
            raise InvalidInput(f"the compressed body is corrupt: {exc}") from None

    async for chunk in chunks:
        if not stages:
            yield count(chunk)
            continue
        for piece in inflate(0, chunk):
            yield piece
    if stages:
        for piece in inflate(0, b"", final=True):
            yield piece
        if not all(stage.eof for stage in stages):
            raise InvalidInput("the compressed body ends early")
