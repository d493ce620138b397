"""A small HTTP/1.1 server on anyio and h11, enough for an emulator.

One task per connection; requests on a connection are served one after another
(keep-alive, no pipelining). Request bodies are read lazily, their ``Content-Encoding``
undone as they arrive and bounded after decoding
(:func:`~provider_sdk_emulators.kit.bodies.decoded`): a body read whole stops at
:data:`~provider_sdk_emulators.kit.bodies.BODY_LIMIT`, and one that passes its limit is
answered 413. A response body is bytes or an async iterator of chunks (sent chunked; a
:class:`Last` chunk ends it, sent with the end of the message in one write). While a
streamed response is being sent, the connection is watched: when the client goes away
the stream is cancelled, as a real server would notice the reset. A handler may answer
:class:`Takeover` instead, to relay the connection's bytes itself (a reverse proxy's
WebSockets); the server then sends nothing and closes the connection once the takeover
returns.

A handler may take a request over as a WebSocket (:meth:`Request.websocket`): the
handshake is answered here, the frames are :mod:`provider_sdk_emulators.kit.websocket`'s,
and the connection ends with the socket.

This module owns HTTP framing only; it knows nothing of sandboxes or vendors.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import socket
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import h11

from provider_sdk_emulators.kit.bodies import BODY_LIMIT, BodyTooLarge, decoded
from provider_sdk_emulators.kit.websocket import WebSocket, accept_key, open_websocket

__all__ = ["Handler", "Last", "NotAWebSocket", "Request", "Response", "Served",
           "Takeover", "json_response", "serve", "too_large"]

log = logging.getLogger(__name__)

_RECEIVE = 65536
# What is read (and dropped) of a body the handler left unread, so the client sees the
# answer rather than a reset; past it the connection is closed.
_DRAIN_LIMIT = 16 << 20
_DRAIN_SECONDS = 10.0


class NotAWebSocket(ValueError):
    """:meth:`Request.websocket` on a request that is not a WebSocket handshake."""


Upgrade = Callable[[str | None], AbstractAsyncContextManager[WebSocket]]


class Request:
    """One HTTP request: method, path, query, headers (lower-case names) and a body."""

    def __init__(self, method: str, target: str, headers: Mapping[str, str],
                 body: AsyncIterator[bytes],
                 raw_headers: Sequence[tuple[str, str]] = (),
                 upgrade: Upgrade | None = None) -> None:
        self.method = method
        self.target = target
        split = urlsplit(target)
        self.path = split.path or "/"
        self.query_string = split.query
        self.query: dict[str, str] = {}
        for key, value in parse_qsl(split.query, keep_blank_values=True):
            self.query.setdefault(key, value)
        self.headers = dict(headers)
        self.raw_headers = list(raw_headers)
        """The headers as they came: names as spelled, repeats kept, in order."""
        self.params: dict[str, str] = {}
        """Path parameters, filled in by the router."""
        self.state: dict[str, Any] = {}
        """What the emulator keeps on the request for its handlers (its context, say)."""
        self._body = body
        self._consumed = False
        self._upgrade = upgrade
        self.upgraded = False
        """Whether a handler took the connection over as a WebSocket."""

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.path}>"

    def query_all(self, name: str) -> list[str]:
        """Every value the query gives ``name``, in order."""
        return [value for key, value in parse_qsl(self.query_string, keep_blank_values=True)
                if key == name]

    @property
    def has_body(self) -> bool:
        """Whether the request says it carries a body (a length above 0, or chunks)."""
        length = self.headers.get("content-length", "0").strip()
        return "transfer-encoding" in self.headers or (length.isdigit() and int(length) > 0)

    def offered_protocols(self) -> list[str]:
        """The WebSocket subprotocols the client offers, in its order."""
        offered = self.headers.get("sec-websocket-protocol", "")
        return [p.strip() for p in offered.split(",") if p.strip()]

    def websocket(self, protocol: str | None = None) -> AbstractAsyncContextManager[
            WebSocket]:
        """Take the request over as a WebSocket, agreeing on ``protocol`` (one the
        client offered, or ``None``); the socket is closed when the block exits, and
        the connection with it. Whatever the handler returns then is not sent.

        Raises:
            NotAWebSocket: (on enter) the request is no WebSocket handshake; nothing
                was sent, so the handler may still answer it.
        """
        if self._upgrade is None or self.method != "GET" \
                or "websocket" not in self.headers.get("upgrade", "").lower() \
                or not self.headers.get("sec-websocket-key") \
                or self.headers.get("sec-websocket-version", "").strip() != "13":
            raise NotAWebSocket("expected a WebSocket handshake (GET with Upgrade: "
                                "websocket and Sec-WebSocket-Version: 13)")
        self.upgraded = True
        return self._upgrade(protocol)

    def stream(self, limit: int | None = None, *, raw: bool = False) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive, decoded (read once).

        Args:
            limit: the most bytes to accept, counted after decoding; ``None`` for no
                limit on a plain body (a compressed one is held to
                :data:`~provider_sdk_emulators.kit.bodies.INFLATE_LIMIT`).
            raw: leave the ``Content-Encoding`` alone (a body to pass on as it came).

        Raises:
            BodyTooLarge: (while iterating) the body passes its limit.
            InvalidInput: (while iterating) an unknown encoding or a corrupt body.
        """
        if self._consumed:
            raise RuntimeError("the request body was already read")
        self._consumed = True
        encoding = None if raw else self.headers.get("content-encoding")
        return decoded(self._body, encoding, limit=limit)

    async def read(self, limit: int = BODY_LIMIT, *, raw: bool = False) -> bytes:
        """The whole body, decoded (unless ``raw``); at most ``limit`` bytes are held.

        Raises:
            BodyTooLarge: the body passes ``limit``.
            InvalidInput: an unknown encoding or a corrupt compressed body.
        """
        return b"".join([chunk async for chunk in self.stream(limit, raw=raw)])

    async def json(self) -> Any:
        """The body parsed as JSON (an empty body is ``{}``), read to
        :data:`~provider_sdk_emulators.kit.bodies.BODY_LIMIT` at most.

        Raises:
            ValueError: the body is not JSON (or its encoding is corrupt).
            BodyTooLarge: the body passes the limit.
        """
        data = await self.read()
        return json.loads(data) if data.strip() else {}


class Last(bytes):
    """The last chunk of a streamed body: sent with the end of the message, in one
    write (one wake-up of the client), and nothing more is read from the body."""


@attrs.frozen
class Response:
    """A response; ``body`` bytes are sent with a length, an iterator chunked.
    ``reason`` is the status line's phrase (h11 leaves it empty when not given).
    ``opening``: the first chunk of a streamed body, known when the response starts,
    sent in one write with the head."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | AsyncIterable[bytes] = b""
    reason: str = ""
    opening: bytes = b""


@attrs.frozen
class Takeover:
    """An answer that takes the connection over: ``relay`` gets the client's stream and
    the bytes received past the request's head (the start of its body, or of what
    follows an upgrade), unread by the handler, and answers the client itself."""

    relay: Callable[[anyio.abc.ByteStream, bytes], Awaitable[None]]


Handler = Callable[[Request], Awaitable[Response]]
Served = Callable[[Request], Awaitable[Response | Takeover]]
"""What :func:`serve` runs: a handler that may also take a connection over."""


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response."""
    return Response(status, (("content-type", "application/json"), *(headers or {}).items()),
                    json.dumps(data).encode())


class _Connection:
    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        self.stashed = b""

    async def next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self.stashed:
                data, self.stashed = self.stashed, b""
            else:
                try:
                    data = await self.stream.receive(_RECEIVE)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                        ConnectionError):
                    data = b""
            self.h11.receive_data(data)

    async def send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            await self.stream.send(data)

    async def send_all(self, *events: Any) -> None:
        """Send ``events`` in one write."""
        data = b"".join(self.h11.send(event) or b"" for event in events)
        if data:
            await self.stream.send(data)

    async def body(self) -> AsyncIterator[bytes]:
        if self.h11.they_are_waiting_for_100_continue:
            await self.send(h11.InformationalResponse(status_code=100, headers=[]))
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} in a body")

    async def watch_disconnect(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` when the client closes the connection."""
        try:
            data = await self.stream.receive(_RECEIVE)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                ConnectionError):
            scope.cancel()
            return
        self.stashed += data  # the start of a pipelined request: keep it for later


async def _send_response(conn: _Connection, response: Response) -> None:
    headers = [(k.encode(), v.encode()) for k, v in response.headers]
    if isinstance(response.body, bytes):
        # Head, body and end in one write, as a buffered server sends a small answer:
        # one segment, one wake-up of the client.
        headers.append((b"content-length", str(len(response.body)).encode()))
        await conn.send_all(h11.Response(status_code=response.status, headers=headers,
                                         reason=response.reason.encode("latin-1", "replace")),
                            *([h11.Data(data=response.body)] if response.body else []),
                            h11.EndOfMessage())
        return
    await conn.send_all(h11.Response(status_code=response.status, headers=headers,
                                     reason=response.reason.encode("latin-1", "replace")),
                        *([h11.Data(data=response.opening)] if response.opening else []))
    chunks = response.body
    async with anyio.create_task_group() as tg:
        if conn.h11.their_state is h11.DONE:
            tg.start_soon(conn.watch_disconnect, tg.cancel_scope)
        last = b""
        try:
            async for chunk in chunks:
                if isinstance(chunk, Last):
                    last = bytes(chunk)
                    break
                if chunk:
                    await conn.send(h11.Data(data=chunk))
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        await conn.send_all(*([h11.Data(data=last)] if last else []), h11.EndOfMessage())
        tg.cancel_scope.cancel()
    if tg.cancel_scope.cancel_called and conn.h11.our_state is not h11.DONE:
        raise anyio.EndOfStream  # the client left mid-stream


async def _serve_connection(stream: anyio.abc.ByteStream, handler: Served) -> None:
    conn = _Connection(stream)
    async with stream:
        while True:
            try:
                event = await conn.next_event()
            except h11.RemoteProtocolError as exc:
                with anyio.move_on_after(1):
                    await _send_error(conn, exc.error_status_hint, str(exc))
                return
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed, or garbage
            headers: dict[str, str] = {}
            raw: list[tuple[str, str]] = []
            for name, value in event.headers.raw_items():
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
                raw.append((name.decode("latin-1"), text))
            request = Request(event.method.decode(), event.target.decode("latin-1"), headers,
                              conn.body(), raw, functools.partial(
                                  _upgrade, conn, headers.get("sec-websocket-key", "")))
            try:
                response = await handler(request)
            except BodyTooLarge as exc:
                response = too_large(exc)
            except Exception:
                if request.upgraded:
                    log.debug("emulator: a WebSocket handler failed", exc_info=True)
                    return
                log.exception("emulator: unhandled error serving %s %s", request.method,
                              request.path)
                response = json_response(500, {"code": 500,
                                               "message": "internal emulator error"})
            if request.upgraded:
                return  # the socket is closed: so is the connection
            if isinstance(response, Takeover):
                rest = bytes(conn.h11.trailing_data[0]) + conn.stashed
                await response.relay(stream, rest)
                return
            try:
                await _send_response(conn, response)
                # Drain what the handler left unread, so the connection can be reused;
                # a body too large to drain soon ends the connection instead.
                drained = 0
                with anyio.move_on_after(_DRAIN_SECONDS):
                    while conn.h11.their_state is h11.SEND_BODY and drained <= _DRAIN_LIMIT:
                        event = await conn.next_event()
                        if isinstance(event, h11.ConnectionClosed):
                            return
                        if isinstance(event, h11.Data):
                            drained += len(event.data)
                if conn.h11.their_state is h11.SEND_BODY:
                    return
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                    ConnectionError, h11.LocalProtocolError, h11.RemoteProtocolError):
                return
            if conn.h11.our_state is h11.MUST_CLOSE or conn.h11.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return


@asynccontextmanager
async def _upgrade(conn: _Connection, key: str, protocol: str | None) -> AsyncIterator[
        WebSocket]:
    """Answer the handshake (101) and hand the connection to a WebSocket."""
    while conn.h11.their_state is h11.SEND_BODY:  # a handshake has no body: skip it
        event = await conn.next_event()
        if isinstance(event, h11.ConnectionClosed):
            raise anyio.EndOfStream
    headers = [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
               (b"sec-websocket-accept", accept_key(key).encode())]
    if protocol is not None:
        headers.append((b"sec-websocket-protocol", protocol.encode("latin-1")))
    await conn.send(h11.InformationalResponse(status_code=101, headers=headers,
                                              reason=b"Switching Protocols"))
    initial = conn.stashed + conn.h11.trailing_data[0]
    conn.stashed = b""
    async with open_websocket(conn.stream, initial, protocol) as ws:
        yield ws


def too_large(exc: BodyTooLarge) -> Response:
    """The 413 for a body past its limit; the connection is closed after it."""
    return json_response(413, {"code": 413, "message": exc.message},
                         {"connection": "close"})


async def _send_error(conn: _Connection, status: int, message: str) -> None:
    if conn.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return  # a response is already under way
    body = json.dumps({"code": status, "message": message}).encode()
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                             ConnectionError, h11.LocalProtocolError):
        await conn.send_all(h11.Response(status_code=status, headers=[
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]), h11.Data(data=body), h11.EndOfMessage())


class _SocketStream(anyio.abc.ByteStream):
    """A connected socket that reads only when asked.

    anyio's own TCP stream (asyncio backend) keeps its transport reading until a
    ``receive`` has to wait, so a client that sends faster than a handler reads has its
    bytes queued in the server's memory; here the kernel's socket buffer is all there
    is, and a fast sender is held back by TCP flow control.
    """

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.closed = False

    async def receive(self, max_bytes: int = _RECEIVE) -> bytes:
        while True:
            if self.closed:
                raise anyio.ClosedResourceError
            try:
                data = self.sock.recv(max_bytes)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_readable(self.sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            if self.closed:
                raise anyio.ClosedResourceError
            try:
                sent = self.sock.send(view)
            except (BlockingIOError, InterruptedError):
                await anyio.wait_writable(self.sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[sent:]
        await anyio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            anyio.notify_closing(self.sock)  # wakes a task waiting on it
            self.sock.close()
        await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def serve(handler: Served, *, port: int = 0) -> AsyncIterator[int]:
    """Serve ``handler`` on 127.0.0.1 (only) until the block exits; yield the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    listener.setblocking(False)
    bound = int(listener.getsockname()[1])

    async def on_connection(sock: socket.socket) -> None:
        try:
            await _serve_connection(_SocketStream(sock), handler)
        except Exception:  # a broken connection must never take the server down
            log.debug("emulator: connection ended with an error", exc_info=True)

    async def accept(tg: anyio.abc.TaskGroup) -> None:
        while True:
            await anyio.wait_readable(listener)
            try:
                sock, _address = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError:  # out of descriptors, say: wait, then try again
                log.warning("emulator: accept failed", exc_info=True)
                await anyio.sleep(0.1)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tg.start_soon(on_connection, sock)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(accept, tg)
            try:
                yield bound
            finally:
                tg.cancel_scope.cancel()
    finally:
        anyio.notify_closing(listener)
        listener.close()
