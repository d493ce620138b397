"""WebSockets (RFC 6455) on a connection the HTTP server has handed over.

The server side only: frames from the client must be masked, frames to it are not;
fragmented messages are put together, pings are answered, and a close is answered with a
close. A reader task, owned by the block that holds the socket (:func:`open_websocket`),
reads frames the whole time, so pings are answered while the handler is busy elsewhere
(an execution that runs for minutes); it hands text and binary messages on through a
small queue. Extensions (``permessage-deflate``) are not negotiated: a client that offers
one sends plain frames, as the RFC has it.

This module owns the framing only; :mod:`provider_sdk_emulators.kit.http` does the
handshake.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import hashlib
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import attrs

__all__ = ["CLOSE_GOING_AWAY", "CLOSE_INTERNAL_ERROR", "CLOSE_OK", "CLOSE_POLICY_VIOLATION",
           "CLOSE_PROTOCOL_ERROR", "MAX_MESSAGE", "Message", "MessageType", "WebSocket",
           "WebSocketClosed", "accept_key", "open_websocket"]

CLOSE_OK = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_INVALID_DATA = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
_NO_STATUS = 1005
_ABNORMAL = 1006

MAX_MESSAGE = 4 << 20
"""The largest message (after reassembly) a client may send; past it the socket is
closed with 1009."""

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CLOSE_WAIT = 5.0
"""Seconds a closing socket waits to send its close frame, and then for the client's own
close frame."""
_QUEUE = 64
_RECEIVE = 65536

_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` value for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.encode("latin-1") + _GUID).digest()).decode()


class MessageType(enum.Enum):
    """What a received message is."""

    TEXT = "text"
    BINARY = "binary"
    CLOSE = "close"


@attrs.frozen
class Message:
    """A message from the client: text, bytes, or the end (``CLOSE``, with the code the
    client sent; 1006 when the connection ended without one)."""

    type: MessageType
    data: str | bytes = b""
    code: int | None = None


class WebSocketClosed(ConnectionError):
    """A send on a socket that is closed (by either side, or by a broken connection)."""


class _ProtocolError(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class WebSocket:
    """One accepted WebSocket: send text or bytes, receive messages, close.

    Sends may come from several tasks at once (each frame is written whole); messages
    are received by one task.
    """

    def __init__(self, stream: anyio.abc.ByteStream, initial: bytes,
                 protocol: str | None, *, max_message: int = MAX_MESSAGE) -> None:
        self.protocol = protocol
        """The subprotocol the handshake agreed on, if any."""
        self._stream = stream
        self._buffer = bytearray(initial)
        self._max_message = max_message
        self._send_lock = anyio.Lock()
        self._sent_close = False
        self._received_close = anyio.Event()
        self._broken = False
        self._queue_in, self._queue_out = anyio.create_memory_object_stream[Message](_QUEUE)

    @property
    def closed(self) -> bool:
        """Whether either side has closed it (or the connection is gone)."""
        return self._sent_close or self._received_close.is_set() or self._broken

    async def send_text(self, text: str) -> None:
        """Send a text message.

        Raises:
            WebSocketClosed: the socket is closed.
        """
        await self._send_frame(_TEXT, text.encode())

    async def send_bytes(self, data: bytes) -> None:
        """Send a binary message.

        Raises:
            WebSocketClosed: the socket is closed.
        """
        await self._send_frame(_BINARY, bytes(data))

    async def close(self, code: int = CLOSE_OK, reason: str | bytes = b"") -> None:
        """Send a close frame (once; later calls do nothing). The client's own close is
        awaited when the block that opened the socket exits.

        A client that does not read gets a few seconds for the frame to go out; after
        them the socket counts as broken, and the connection ends with the block.
        """
        if self._sent_close or self._broken:
            return
        raw = reason.encode() if isinstance(reason, str) else bytes(reason)
        payload = struct.pack(">H", code) + raw[:123]
        with anyio.move_on_after(_CLOSE_WAIT) as waited, \
                contextlib.suppress(WebSocketClosed):
            await self._send_frame(_CLOSE, payload)
        if waited.cancelled_caught:
            self._broken = True  # (maybe half a frame out: nothing more may follow)
        self._sent_close = True

    async def receive(self) -> Message:
        """The next message; a ``CLOSE`` message once the client has closed (or the
        connection ended), and again on every later call."""
        try:
            return await self._queue_out.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return Message(MessageType.CLOSE, code=_ABNORMAL)

    async def __aiter__(self) -> AsyncIterator[Message]:
        """Text and binary messages until the client closes."""
        while True:
            message = await self.receive()
            if message.type is MessageType.CLOSE:
                return
            yield message

    # ---------------------------------------------------------------- framing

    async def _send_frame(self, opcode: int, payload: bytes) -> None:
        if self._sent_close or self._broken:
            raise WebSocketClosed("the WebSocket is closed")
        size = len(payload)
        if size < 126:
            head = struct.pack(">BB", 0x80 | opcode, size)
        elif size < 1 << 16:
            head = struct.pack(">BBH", 0x80 | opcode, 126, size)
        else:
            head = struct.pack(">BBQ", 0x80 | opcode, 127, size)
        async with self._send_lock:
            try:
                await self._stream.send(head + payload)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError) as exc:
                self._broken = True
                raise WebSocketClosed("the connection is gone") from exc

    async def _fill(self, size: int) -> None:
        while len(self._buffer) < size:
            self._buffer += await self._stream.receive(_RECEIVE)

    async def _frame(self) -> tuple[bool, int, bytes]:
        await self._fill(2)
        first, second = self._buffer[0], self._buffer[1]
        if first & 0x70:
            raise _ProtocolError(CLOSE_PROTOCOL_ERROR, "reserved bits set")
        if not second & 0x80:
            raise _ProtocolError(CLOSE_PROTOCOL_ERROR, "a client frame must be masked")
        size, offset = second & 0x7F, 2
        if size == 126:
            await self._fill(4)
            size, offset = struct.unpack(">H", self._buffer[2:4])[0], 4
        elif size == 127:
            await self._fill(10)
            size, offset = struct.unpack(">Q", self._buffer[2:10])[0], 10
        if size > self._max_message:
            raise _ProtocolError(CLOSE_TOO_BIG, "message too big")
        await self._fill(offset + 4 + size)
        mask = self._buffer[offset:offset + 4]
        start = offset + 4
        masked = bytes(self._buffer[start:start + size])
        del self._buffer[:start + size]
        repeated = (mask * (size // 4 + 1))[:size]
        payload = (int.from_bytes(masked, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
            size, "big") if size else b""
        return bool(first & 0x80), first & 0x0F, payload

    async def _read(self) -> None:
        """The reader: frames to messages until a close or the connection's end."""
        parts: list[bytes] = []
        kind: int | None = None
        code = _ABNORMAL
        try:
            while True:
                fin, opcode, payload = await self._frame()
                if opcode == _PING:
                    if len(payload) > 125:
                        raise _ProtocolError(CLOSE_PROTOCOL_ERROR, "control frame too long")
                    if not self._sent_close:
                        await self._send_frame(_PONG, payload)
                    continue
                if opcode == _PONG:
                    continue
                if opcode == _CLOSE:
                    code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 \
                        else _NO_STATUS
                    if not self._sent_close:
                        await self.close(code if code != _NO_STATUS else CLOSE_OK)
                    return
                if opcode in (_TEXT, _BINARY):
                    if kind is not None:
                        raise _ProtocolError(CLOSE_PROTOCOL_ERROR, "a message inside a message")
                    kind, parts = opcode, []
                elif opcode != _CONTINUATION or kind is None:
                    raise _ProtocolError(CLOSE_PROTOCOL_ERROR, f"unexpected opcode {opcode}")
                parts.append(payload)
                if sum(map(len, parts)) > self._max_message:
                    raise _ProtocolError(CLOSE_TOO_BIG, "message too big")
                if not fin:
                    continue
                data = b"".join(parts)
                if kind == _TEXT:
                    try:
                        message = Message(MessageType.TEXT, data.decode())
                    except UnicodeDecodeError:
                        raise _ProtocolError(CLOSE_INVALID_DATA, "text is not UTF-8") from None
                else:
                    message = Message(MessageType.BINARY, data)
                kind, parts = None, []
                await self._queue_in.send(message)
        except _ProtocolError as exc:
            code = exc.code
            await self.close(exc.code, exc.reason)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                ConnectionError, WebSocketClosed):
            self._broken = True
        finally:
            self._received_close.set()
            # (a full queue gets no close message: once drained, receive() gives one)
            with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError,
                                     anyio.ClosedResourceError):
                self._queue_in.send_nowait(Message(MessageType.CLOSE, code=code))
            self._queue_in.close()


@asynccontextmanager
async def open_websocket(stream: anyio.abc.ByteStream, initial: bytes,
                         protocol: str | None, *,
                         max_message: int = MAX_MESSAGE) -> AsyncIterator[WebSocket]:
    """A :class:`WebSocket` over ``stream`` (whose handshake is done), with its reader
    running until the block exits; on exit the socket is closed (1000 unless a close
    was sent) and the client's close awaited for a few seconds. Each of those steps is
    bounded, so a client that neither reads nor answers holds nothing up."""
    ws = WebSocket(stream, initial, protocol, max_message=max_message)
    async with anyio.create_task_group() as tg:
        tg.start_soon(ws._read)
        try:
            yield ws
        finally:
            with anyio.CancelScope(shield=True):
                await ws.close()
                with anyio.move_on_after(_CLOSE_WAIT):
                    while not (ws._received_close.is_set() or ws._broken):
                        # (messages the handler left unread are dropped)
                        await ws.receive()
            tg.cancel_scope.cancel()
