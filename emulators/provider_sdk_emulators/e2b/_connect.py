"""The Connect protocol (v1) with the JSON codec, as envd speaks it.

Unary calls: a bare JSON body in, a bare JSON body out; an error is a non-200 status with
``{"code": "<name>", "message": ...}``. Streaming calls (``application/connect+json``):
5-byte envelopes (flags, big-endian length) around each JSON message; the response is
always 200 and ends with an end-stream envelope (flag ``0x02``) holding ``{}`` or
``{"error": {...}}``. :func:`rpc_error` names the Connect error envd answers for each
neutral error.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from typing import Any

from provider_sdk import errors

__all__ = ["END_STREAM", "STATUS", "EnvelopeReader", "RpcError", "end_stream", "envelope",
           "rpc_error"]

END_STREAM = 0x02

#: The HTTP status of each Connect error code on unary calls.
STATUS = {
    "canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
    "not_found": 404, "already_exists": 409, "permission_denied": 403,
    "resource_exhausted": 429, "failed_precondition": 400, "aborted": 409,
    "out_of_range": 400, "unimplemented": 501, "internal": 500, "unavailable": 503,
    "data_loss": 500, "unauthenticated": 401,
}

_MAX_MESSAGE = 16 << 20


class RpcError(Exception):
    """A Connect error: a code name from :data:`STATUS` and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def rpc_error(exc: errors.SandboxError, path: str = "") -> RpcError:
    """The Connect error envd would answer for a neutral error: its message without
    the backend's own ``[provider id]`` prefix, which envd has no part in."""
    if isinstance(exc, errors.NotFound):
        return RpcError("not_found", f"path '{path}' does not exist" if path else exc.message)
    if isinstance(exc, errors.FileExists):
        return RpcError("already_exists", f"path '{path}' already exists")
    if isinstance(exc, (errors.InvalidInput, errors.Conflict)):
        return RpcError("invalid_argument", exc.message)
    if isinstance(exc, errors.PermissionDenied):
        return RpcError("permission_denied", exc.message)
    if isinstance(exc, errors.QuotaExceeded):  # a message past the read limit, too
        return RpcError("resource_exhausted", exc.message)
    if isinstance(exc, (errors.SandboxNotRunning, errors.Unavailable)):
        return RpcError("unavailable", exc.message)
    return RpcError("internal", exc.message)


def envelope(message: Any, flags: int = 0) -> bytes:
    """One framed message."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def end_stream(error: RpcError | None = None) -> bytes:
    """The last frame of a streamed response."""
    return envelope({"error": error.to_json()} if error else {}, END_STREAM)


class EnvelopeReader:
    """Reads framed messages from a request body as they arrive."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = bytearray()

    async def next(self) -> Any | None:
        """The next message, or ``None`` at the end of the body.

        Raises:
            RpcError: a malformed, compressed or oversized frame.
        """
        while True:
            if len(self._buffer) >= 5:
                flags, size = struct.unpack(">BI", self._buffer[:5])
                if size > _MAX_MESSAGE:
                    raise RpcError("resource_exhausted", f"message of {size} bytes is too large")
                if len(self._buffer) >= 5 + size:
                    raw = bytes(self._buffer[5:5 + size])
                    del self._buffer[:5 + size]
                    if flags & 0x01:
                        raise RpcError("unimplemented", "compressed messages are not supported")
                    if flags & END_STREAM:
                        continue
                    try:
                        return json.loads(raw) if raw else {}
                    except ValueError as exc:
                        raise RpcError("invalid_argument", f"malformed JSON message: {exc}") \
                            from None
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                if self._buffer:
                    raise RpcError("invalid_argument", "the body ends inside a frame") from None
                return None
            self._buffer += chunk
