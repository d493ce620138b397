"""One request's exchange on the port proxy (:mod:`provider_sdk.ports`), once its head
is checked and forwarded: the client's body goes on as far as it goes (never what is
pipelined after it), and the sandbox's answer passes only once its head is checked.

The server in the sandbox is untrusted: its answer's head is read (at most
:data:`RESPONSE_HEAD` bytes) and checked before any of it passes, interim heads pass
edited, and the final head says ``Connection: close`` and sets no ``psdk_token``
cookie of the sandbox's making. Either side's end of stream ends the exchange.

This module never logs, reprs or raises a token.
"""

from __future__ import annotations

import contextlib
import re

import anyio
import anyio.abc

from provider_sdk._chunked import ChunkedError, RequestBody

__all__ = ["CHUNK", "COOKIE_PREFIX", "RESPONSE_HEAD", "answer", "framing_problem", "relay"]

COOKIE_PREFIX = "psdk_token"
"""The prefix of the proxy's cookies, which the sandbox never gets nor sets."""
RESPONSE_HEAD = 64 * 1024
"""Bytes of an answer's head from the sandbox the proxy reads; past it, the answer is a
``502``."""
CHUNK = 1 << 16
"""Bytes read at once from either side."""
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


async def relay(client: anyio.abc.ByteStream, tunnel: anyio.abc.ByteStream, *,
                cookie: bytes | None, upgrade: bool, body: RequestBody,
                held: bytes = b"") -> None:
    """Relay both ways until either side ends or fails: a client's end of stream ends
    its exchange (nothing is left waiting on a server that never answers). What the
    client sends is forwarded as far as ``body`` goes, so a request pipelined after it
    never reaches the sandbox; malformed chunked framing ends the exchange, with a
    ``400`` unless the answer has begun. With ``upgrade``, what comes past the body
    (``held`` first) is held back, reading no more past :data:`CHUNK` bytes, until the
    answer: after a ``101`` it is forwarded, and all that follows as it comes; after
    any other answer, never. The sandbox's answer passes only once its head is checked
    (:func:`_pass_head`)."""
    answering = anyio.Event()
    refused: list[str] = []
    pending = bytearray(held if upgrade else b"")
    reading = anyio.CancelScope()  # cancelled when the answer switches protocols
    switched = False
    async with anyio.create_task_group() as tg:
        async def from_client() -> None:
            with contextlib.suppress(anyio.EndOfStream, *_GONE):
                with reading:
                    while True:
                        if len(pending) > CHUNK:  # no more until the answer comes
                            await anyio.sleep_forever()
                        data = await client.receive(CHUNK)
                        try:
                            forward, past = body.take(data)
                        except ChunkedError as exc:
                            refused.append(f"malformed chunked body: {exc}")
                            break
                        if upgrade:
                            pending.extend(past)
                        if forward:
                            await tunnel.send(forward)
                if switched:
                    if pending:
                        await tunnel.send(bytes(pending))
                        pending.clear()
                    while True:
                        await tunnel.send(await client.receive(CHUNK))
            tg.cancel_scope.cancel()

        tg.start_soon(from_client)
        with contextlib.suppress(anyio.EndOfStream, *_GONE):
            status = await _pass_head(client, tunnel, cookie=cookie, upgrade=upgrade,
                                      answering=answering)
            if status == 101:
                switched = True
                reading.cancel()
            while status:
                await client.send(await tunnel.receive(CHUNK))
        tg.cancel_scope.cancel()
    if refused and not answering.is_set():
        await answer(client, 400, refused[0])


async def _pass_head(client: anyio.abc.ByteStream, tunnel: anyio.abc.ByteStream, *,
                     cookie: bytes | None, upgrade: bool, answering: anyio.Event) -> int:
    """Pass the answer's heads to the client, checked and edited; the final status when
    the rest may follow as it comes, ``0`` when the answer was refused with a ``502``.

    No head keeps a ``psdk_token`` cookie the sandbox tries to set. Interim heads
    (``1xx``) pass, the next is read after them; ``101`` ends the checks (only for a
    request that asked for an upgrade). The final head gets ``cookie`` and
    ``Connection: close``. ``answering`` is set as the final answer (or the ``502``)
    begins."""

    async def refuse(reason: str) -> int:
        answering.set()
        await answer(client, 502, reason)
        return 0

    data = bytearray()
    while True:
        end = data.find(b"\r\n\r\n")
        if end > RESPONSE_HEAD or (end < 0 and len(data) > RESPONSE_HEAD):
            return await refuse("the answer's head from the sandbox is too large")
        if _BARE_LF.search(data, 0, end if end >= 0 else len(data)):  # ends it early for some
            return await refuse("malformed answer from the sandbox: a line not ended by "
                                "CRLF")
        if end < 0:
            try:
                data += await tunnel.receive(CHUNK)
            except anyio.EndOfStream:
                return await refuse("the server in the sandbox ended the connection "
                                    "without a complete answer")
            continue
        head, data = bytes(data[:end]), data[end + 4:]
        checked = _checked_head(head, upgrade)
        if isinstance(checked, str):
            return await refuse(f"malformed answer from the sandbox: {checked}")
        status, headers = checked
        status_line = head.partition(b"\r\n")[0]
        if 100 <= status < 200 and status != 101:
            await client.send(_edited(status_line, headers, None, close=False) + b"\r\n\r\n")
            continue
        answering.set()
        if status != 101:
            head = _edited(status_line, headers, cookie, close=True)
        await client.send(head + b"\r\n\r\n" + bytes(data))
        return status


_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?:[ \t][^\x00-\x08\x0a-\x1f\x7f]*)?")
_BARE_LF = re.compile(rb"(?<!\r)\n")
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*)")


def _checked_head(head: bytes, upgrade: bool) -> tuple[int, list[tuple[bytes, bytes]]] | str:
    """The status and headers of an answer's head, or what is wrong with it: a status
    line or header that is not HTTP/1.1's, a body framed two ways (``Content-Length``
    and ``Transfer-Encoding``, or lengths that differ), a switch nobody asked for."""
    status_line, *lines = head.split(b"\r\n")
    matched = _STATUS.fullmatch(status_line)
    if matched is None:
        return "not an HTTP/1.1 status line"
    status = int(matched[1])
    headers = []
    for line in lines:
        header = _HEADER.fullmatch(line)
        if header is None:
            return "a header line that is not HTTP's"
        headers.append((header[1], header[2].rstrip(b" \t")))
    problem = framing_problem(headers)
    if problem is not None:
        return problem
    if status == 101 and not upgrade:
        return "switching protocols when no upgrade was asked for"
    return status, headers


def framing_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """What makes a message's body framing ambiguous, if anything."""
    lengths = {length.strip() for name, value in headers
               if name.lower() == b"content-length" for length in value.split(b",")}
    if lengths and any(n.lower() == b"transfer-encoding" for n, _ in headers):
        return "both Content-Length and Transfer-Encoding"
    if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
        return "an invalid or repeated Content-Length"
    return None


def _edited(status_line: bytes, headers: list[tuple[bytes, bytes]],
            cookie: bytes | None, *, close: bool) -> bytes:
    """An answer's head as the client gets it: no ``psdk_token`` cookie of the sandbox's
    making, ``Set-Cookie: cookie``, and with ``close`` ``Connection: close`` (the
    client's next request comes on a connection of its own, checked and stripped)."""
    kept = [status_line]
    for name, value in headers:
        lower = name.lower()
        if close and lower in (b"connection", b"keep-alive", b"proxy-connection"):
            continue
        if lower in (b"set-cookie", b"set-cookie2") and value.partition(b"=")[0].strip() \
                .lower().startswith(COOKIE_PREFIX.encode()):
            continue
        kept.append(name + b": " + value)
    if close:
        kept.append(b"Connection: close")
    if cookie is not None:
        kept.append(b"Set-Cookie: " + cookie)
    return b"\r\n".join(kept)


async def answer(client: anyio.abc.ByteStream, status: int, reason: str) -> None:
    """A short plain-text answer from the proxy itself (never naming a token)."""
    phrases = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
               408: "Request Timeout",
               431: "Request Header Fields Too Large", 502: "Bad Gateway",
               503: "Service Unavailable"}
    body = f"{reason}\n".encode()
    head = (f"HTTP/1.1 {status} {phrases.get(status, 'Error')}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")
    if status == 401:
        head += 'WWW-Authenticate: Bearer realm="psdk"\r\n'
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await client.send(head.encode() + b"\r\n" + body)
