"""Bytes between business code and a sandbox: the :data:`Data` a write takes, cut into
chunks, and the errors of a local file named for the file the caller asked for.

The handles in :mod:`provider_sdk.sandbox` use these; ``Data`` is importable from there.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Generator, Iterable

from provider_sdk.errors import SandboxError

__all__ = ["CHUNK", "Data", "as_chunks", "named", "next_chunk"]

CHUNK = 1 << 20
Data = bytes | bytearray | memoryview | str | AsyncIterable[bytes] | Iterable[bytes]


async def as_chunks(data: Data) -> AsyncIterator[bytes]:
    """``data`` as a stream of chunks of at most :data:`CHUNK` bytes (an iterable's own
    chunks pass as they come)."""
    if isinstance(data, str):
        yield data.encode()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        for i in range(0, max(len(view), 1), CHUNK):
            yield bytes(view[i:i + CHUNK])
    elif isinstance(data, AsyncIterable):
        async for chunk in data:
            yield bytes(chunk)
    else:
        for chunk in data:
            yield bytes(chunk)


async def next_chunk(stream: AsyncIterator[bytes]) -> bytes | None:
    """The stream's next chunk, or ``None`` at its end."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return None


@contextlib.contextmanager
def named(target: str) -> Generator[None, None, None]:
    """Report a local file error under ``target``'s name, not the temporary file's."""
    try:
        yield
    except SandboxError:
        raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), target) from None
