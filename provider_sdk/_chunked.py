"""A request body's framing, decoded as it streams: which bytes a client sends after a
request head belong to the request, and how they reach the server in the sandbox.

The port proxy (:mod:`provider_sdk.ports`) forwards one request per connection. Where
the request's body ends, so does what it forwards: a pipelined request after it would
reach the sandbox's server without its head being checked or its token stripped.
:class:`ChunkedDecoder` finds that end in a chunked body (``Transfer-Encoding:
chunked``) without ever holding the body whole: each chunk's bytes pass as they come,
and only a chunk's size line or a trailer line is held, up to a bound. A framing error
is a :class:`ChunkedError`, whose message never quotes what the client sent.

:class:`RequestBody` is the proxy's view of one body: of a known length, or chunked (the
sandbox gets the decoded bytes in chunks of the proxy's own making, so a server that
parses chunked framing differently sees nothing it could read otherwise; extensions and
trailers are dropped).
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE", "MAX_TRAILERS", "ChunkedDecoder", "ChunkedError", "RequestBody"]

MAX_LINE = 4096
"""Bytes of a chunk's size line (with its extensions), or of one trailer line, at most."""
MAX_TRAILERS = 32 * 1024
"""Bytes of a chunked body's trailer section, at most."""
MAX_SIZE = (1 << 63) - 1
"""The largest chunk size accepted."""

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
_EXTENSION = rb"[ \t]*;[ \t]*" + _TOKEN + rb"(?:[ \t]*=[ \t]*(?:" + _TOKEN + rb"|" \
    + _QUOTED + rb"))?"
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]+)(?:" + _EXTENSION + rb")*")
_FIELD_LINE = re.compile(_TOKEN + rb":[ \t]*[^\x00-\x08\x0a-\x1f\x7f]*")

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedError(ValueError):
    """The chunked framing is malformed or past a bound; the message says how, never
    with any of the client's bytes."""


class ChunkedDecoder:
    """Decodes a chunked body as it comes: :meth:`feed` takes any split of the bytes
    and returns the body's bytes in them, until the last chunk and its trailers end it
    (:attr:`done`). Holds at most one line (:data:`MAX_LINE`) between calls."""

    def __init__(self, *, max_line: int = MAX_LINE, max_trailers: int = MAX_TRAILERS) -> None:
        self._max_line = max_line
        self._max_trailers = max_trailers
        self._state = _SIZE
        self._left = 0
        self._line = bytearray()
        self._trailers = 0

    @property
    def done(self) -> bool:
        """Whether the body has ended (the last chunk and the trailer section came)."""
        return self._state == _DONE

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """The body's bytes in ``data``, and what came past the body's end.

        Raises:
            ChunkedError: the framing is malformed (a size that is not hex, a line not
                ended by CRLF, a chunk not followed by CRLF, a malformed extension or
                trailer), or a line or the trailers are too long.
        """
        out = bytearray()
        at = 0
        while at < len(data) and self._state != _DONE:
            if self._state == _DATA:
                take = min(self._left, len(data) - at)
                out += data[at:at + take]
                at += take
                self._left -= take
                if not self._left:
                    self._state = _DATA_END
                continue
            end = data.find(b"\n", at)
            if end < 0:
                self._line += data[at:]
                at = len(data)
                if len(self._line) > self._max_line + 1:  # + the CR of its end
                    raise ChunkedError(self._too_long())
                break
            self._line += data[at:end + 1]
            at = end + 1
            line = bytes(self._line)
            self._line.clear()
            if len(line) > self._max_line + 2:
                raise ChunkedError(self._too_long())
            if not line.endswith(b"\r\n") or b"\r" in line[:-2]:
                raise ChunkedError("a line not ended by CRLF")
            self._line_came(line[:-2])
        return bytes(out), data[at:]

    def _too_long(self) -> str:
        what = "trailer line" if self._state == _TRAILER else "chunk size line"
        return f"a {what} longer than {self._max_line} bytes"

    def _line_came(self, line: bytes) -> None:
        if self._state == _DATA_END:
            if line:
                raise ChunkedError("a chunk longer than its size")
            self._state = _SIZE
        elif self._state == _SIZE:
            size = _SIZE_LINE.fullmatch(line)
            if size is None:
                raise ChunkedError("a malformed chunk size line")
            self._left = int(size[1], 16)
            if self._left > MAX_SIZE:
                raise ChunkedError("a chunk size too large")
            self._state = _DATA if self._left else _TRAILER
        elif not line:  # the trailer section's end
            self._state = _DONE
        else:
            self._trailers += len(line) + 2
            if self._trailers > self._max_trailers:
                raise ChunkedError(f"trailers longer than {self._max_trailers} bytes")
            if _FIELD_LINE.fullmatch(line) is None:
                raise ChunkedError("a malformed trailer line")


class RequestBody:
    """Which of the bytes a client sends past a request's head are its body, as the
    server in the sandbox gets them: :meth:`take` splits each piece that comes into
    what to forward and what came past the body's end.

    ``length`` bytes of body, or with ``chunked`` a chunked body, re-framed.
    """

    def __init__(self, length: int = 0, *, chunked: bool = False) -> None:
        self._left = length
        self._decoder = ChunkedDecoder() if chunked else None

    @property
    def done(self) -> bool:
        """Whether the body has ended: nothing more will be forwarded."""
        return self._decoder.done if self._decoder is not None else self._left == 0

    def take(self, data: bytes) -> tuple[bytes, bytes]:
        """What of ``data`` (the next bytes from the client) to forward, and what came
        past the body's end (all of it once the body has ended).

        Raises:
            ChunkedError: a chunked body's framing is malformed.
        """
        if self._decoder is not None:
            if self._decoder.done:
                return b"", data
            payload, past = self._decoder.feed(data)
            out = b"%x\r\n%b\r\n" % (len(payload), payload) if payload else b""
            return (out + b"0\r\n\r\n" if self._decoder.done else out), past
        taken = data[:self._left]
        self._left -= len(taken)
        return taken, data[len(taken):]
