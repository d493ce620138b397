"""Bounds on what the host holds from a sandbox: output kept per call, file reads into
memory. Every provider uses these, so a sandbox that floods its output or offers an
endless file cannot exhaust the process that drives it.

Streaming paths (``on_stdout``/``on_stderr`` callbacks, ``files.stream``,
``files.download``) see everything and hold nothing; only what is kept in memory is
bounded. This module owns the limits and the buffer; it must not know any backend.
"""

from __future__ import annotations

__all__ = ["DEFAULT_OUTPUT_LIMIT", "DEFAULT_READ_LIMIT", "OutputBuffer", "check_limit"]

DEFAULT_OUTPUT_LIMIT = 16 << 20
"""Bytes of each of stdout and stderr an :class:`~provider_sdk.models.ExecResult` keeps
unless the call or the provider says otherwise (16 MiB)."""
DEFAULT_READ_LIMIT = 256 << 20
"""Largest file ``files.read`` loads into memory unless the call or the provider says
otherwise (256 MiB)."""


def check_limit(name: str, value: object) -> int:
    """``value`` as a limit in bytes: a positive integer, else ``InvalidInput``."""
    from provider_sdk.errors import InvalidInput

    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{name} must be a positive number of bytes, got {value!r}")
    return value


class OutputBuffer:
    """The first ``limit`` bytes of a stream, and a count of the bytes past them.

    ``append`` never holds more than ``limit`` bytes, whatever arrives.
    """

    __slots__ = ("_data", "dropped", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data = bytearray()
        self.dropped = 0
        """Bytes that arrived past the limit and were not kept."""

    def append(self, chunk: bytes | bytearray | memoryview) -> None:
        """Keep what fits of ``chunk``; count the rest."""
        room = self.limit - len(self._data)
        if room >= len(chunk):
            self._data += chunk
        else:
            if room > 0:
                self._data += chunk[:room]
            self.dropped += len(chunk) - max(room, 0)

    def __len__(self) -> int:
        return len(self._data)

    def value(self) -> bytes:
        """The bytes kept."""
        return bytes(self._data)
