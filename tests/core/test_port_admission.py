"""What a client gets from the port proxy before it shows its token (provider_sdk.ports
over provider_sdk.request_head): a head past 32 KiB is a 431 however it arrives, a
connection that shows no token is closed soon, and a crowd of such connections, all
from 127.0.0.1 as every client is, never keeps a token holder out."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.abc
import pytest

from provider_sdk import request_head
from provider_sdk.models import ExposedPort
from provider_sdk.ports import PortProxy
from provider_sdk.request_head import MAX_HEAD, Gate

pytestmark = pytest.mark.anyio

CROWD = 400
"""Connections that never show a token, held open at once."""


class _Upstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.heads: list[bytes] = []


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Upstream)
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(65536)
            if not data:
                return
            head += data
        server.heads.append(head)
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
async def exposed(upstream: _Upstream) -> AsyncIterator[ExposedPort]:
    @contextlib.asynccontextmanager
    async def open_stream() -> AsyncIterator[anyio.abc.ByteStream]:
        async with await anyio.connect_tcp(*upstream.server_address[:2]) as stream:
            yield stream

    ports = PortProxy(provider="test")
    yield await ports.expose("sb", 80, open_stream)
    await ports.aclose()


async def _connect(exposed: ExposedPort) -> anyio.abc.SocketStream:
    host, port = exposed.base_url.split("/")[2].split(":")
    return await anyio.connect_tcp(host, int(port))


async def _answer(stream: anyio.abc.ByteStream) -> bytes:
    answer = b""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
        while True:
            answer += await stream.receive()
    return answer


async def _exchange(exposed: ExposedPort, raw: bytes) -> bytes:
    with anyio.fail_after(20):
        async with await _connect(exposed) as stream:
            with contextlib.suppress(anyio.BrokenResourceError):
                await stream.send(raw)
            return await _answer(stream)


def _head_of(size: int, token: str) -> bytes:
    """A request head of ``size`` bytes (without its final blank line), token first."""
    start = f"GET / HTTP/1.1\r\nX-Psdk-Token: {token}\r\nX-Pad: ".encode()
    return start + b"a" * (size - len(start))


async def test_a_head_past_32_kib_is_refused_however_it_arrives(
        exposed: ExposedPort, upstream: _Upstream) -> None:
    """A head of exactly 32 KiB passes; one byte more, 40 KiB or 90 KiB, with the token
    and in one piece (so it is all there when the proxy first reads), is a 431 and
    reaches nothing."""
    token = exposed.token.reveal()
    answer = await _exchange(exposed, _head_of(MAX_HEAD, token) + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    for size in (MAX_HEAD + 1, 40 * 1024, 90 * 1024):
        answer = await _exchange(exposed, _head_of(size, token) + b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 431 "), (size, answer[:80])
    assert len(upstream.heads) == 1


async def test_token_holders_pass_while_a_crowd_without_a_token_waits(
        exposed: ExposedPort) -> None:
    """400 connections from 127.0.0.1 that sent part of a head and no token, held open:
    a client with the token, also from 127.0.0.1, is answered as before, promptly."""
    token = exposed.token.reveal().encode()
    crowd: list[anyio.abc.SocketStream] = []
    try:
        for _ in range(CROWD):
            stream = await _connect(exposed)
            crowd.append(stream)
            await stream.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
        with anyio.fail_after(10):
            for _ in range(5):
                answer = await _exchange(exposed, b"GET / HTTP/1.1\r\nX-Psdk-Token: " + token
                                         + b"\r\n\r\n")
                assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    finally:
        for stream in crowd:
            await stream.aclose()


@pytest.mark.slow
async def test_a_head_that_shows_no_token_soon_is_closed_and_one_that_does_may_take_longer(
        exposed: ExposedPort, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the token, the head has ``TOKEN_TIMEOUT`` (408 after); once a line has
    shown it, the rest may come until ``HEAD_TIMEOUT``."""
    monkeypatch.setattr(request_head, "TOKEN_TIMEOUT", 1.0)
    token = exposed.token.reveal().encode()
    with anyio.fail_after(20):
        async with await _connect(exposed) as slow, await _connect(exposed) as tokenless:
            await slow.send(b"GET / HTTP/1.1\r\nX-Psdk-Token: " + token + b"\r\n")
            await tokenless.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
            with anyio.fail_after(4):
                refused = await _answer(tokenless)
            assert refused.startswith(b"HTTP/1.1 408 "), refused[:80]
            await anyio.sleep(1.0)  # past the token's deadline: this one showed it
            await slow.send(b"Host: x\r\n\r\n")
            answer = await _answer(slow)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]


async def test_the_gate_pushes_out_the_oldest_of_a_client_then_of_all() -> None:
    """A client past its share makes room among its own connections, the oldest first;
    others' are untouched until the gate is full, and then the oldest of all goes."""
    gate = Gate(total=6, per_client=3)
    tickets = [gate.enter("a", anyio.CancelScope()) for _ in range(3)]
    other = gate.enter("b", anyio.CancelScope())
    tickets.append(gate.enter("a", anyio.CancelScope()))
    assert [t.evicted for t in tickets] == [True, False, False, False]
    assert tickets[0].scope.cancel_called
    assert not other.evicted
    assert gate.waiting == 4
    more = [gate.enter(client, anyio.CancelScope()) for client in ("c", "c", "d")]
    assert gate.waiting == 6
    assert tickets[1].evicted  # the oldest of all, when the gate was full
    assert not other.evicted
    assert not any(t.evicted for t in more)
    for ticket in [*tickets, other, *more]:
        gate.leave(ticket)
    assert gate.waiting == 0


async def test_a_client_whose_one_connection_is_pushed_out_keeps_its_place() -> None:
    """When the oldest of all, pushed out for a newcomer of the same address, was that
    address's only one, the newcomer still counts as that address's."""
    gate = Gate(total=2, per_client=2)
    first = gate.enter("a", anyio.CancelScope())
    gate.enter("b", anyio.CancelScope())
    newcomer = gate.enter("a", anyio.CancelScope())
    assert first.evicted
    again = gate.enter("a", anyio.CancelScope())  # the gate is full: the oldest goes
    assert not newcomer.evicted
    gate.leave(newcomer)
    gate.leave(again)
    assert gate.waiting == 0
