"""The emulator kit on its own: routing, WebSockets on the HTTP server, the key check
and the admin API that every emulator shares."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import struct
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from httpx_ws import aconnect_ws
from provider_sdk_emulators.kit import http, service, websocket
from provider_sdk_emulators.kit.faults import Faults
from provider_sdk_emulators.kit.http import (
    Last,
    NotAWebSocket,
    Request,
    Response,
    json_response,
    serve,
)
from provider_sdk_emulators.kit.routing import Router
from provider_sdk_emulators.kit.websocket import MessageType, accept_key
from raw_websocket import frame, handshake, read_frame

from provider_sdk.config import Secret
from provider_sdk.errors import ConfigError

pytestmark = pytest.mark.anyio


async def _ok(request: Request) -> Response:
    return json_response(200, {"params": request.params})


# ------------------------------------------------------------------------ routing


def test_the_first_row_whose_method_and_pattern_match_serves() -> None:
    async def other(request: Request) -> Response:
        return Response(204)

    router = Router([("GET", "/a/tags", other), ("GET", "/a/{id}", _ok), ("*", "/a/{id}", other)])
    assert router.resolve("GET", "/a/tags").handler is other
    found = router.resolve("GET", "/a/x1")
    assert (found.handler, found.params) == (_ok, {"id": "x1"})
    assert router.resolve("DELETE", "/a/x1").handler is other


def test_a_path_no_method_serves_names_the_allowed_methods_and_no_match_names_none() -> None:
    router = Router([("GET", "/a/{id}", _ok), ("POST", "/a/{id}", _ok)])
    found = router.resolve("PUT", "/a/1")
    assert found.handler is None
    assert found.allowed == ("GET", "POST")
    assert router.resolve("GET", "/b").allowed == ()
    assert router.resolve("GET", "/a/1/2").handler is None  # {id} is one segment


def test_a_parameter_with_an_expression_takes_slashes_and_is_decoded() -> None:
    router = Router([("GET", "/s/{name:.+}/activate", _ok),
                     ("POST", "/x/{which:stop|delete}/{n}", _ok)])
    assert router.resolve("GET", "/s/org/image%3A1/activate").params == {"name": "org/image:1"}
    assert router.resolve("GET", "/s/org%2Fimage/activate").params == {"name": "org/image"}
    assert router.resolve("POST", "/x/stop/5").params == {"which": "stop", "n": "5"}
    assert router.resolve("POST", "/x/start/5").handler is None


def test_a_static_part_is_matched_literally() -> None:
    router = Router([("GET", "/v1.0/files", _ok)])
    assert router.resolve("GET", "/v1.0/files").handler is _ok
    assert router.resolve("GET", "/v1x0/files").handler is None


# ------------------------------------------------------------------ faults, admin


def test_faults_validate_names_and_values_and_count_what_was_served() -> None:
    faults = Faults({"resume_504": "504s after each resume", "latency": "seconds"},
                     {"resume_504": "2"})
    assert faults.count("resume_504") == 2
    assert faults.value("latency") == 0.0
    faults.set("latency", "0.25")
    faults.served("resume_504")
    faults.served("resume_504")
    assert faults.report() == {"set": {"resume_504": 2.0, "latency": 0.25},
                               "served": {"resume_504": 2.0, "latency": 0.0}}
    with pytest.raises(ConfigError, match=r"unknown fault 'nope'; known: latency, resume_504"):
        faults.set("nope", 1)
    for bad in ("-1", "many", "inf", "nan"):
        with pytest.raises(ConfigError, match="non-negative number"):
            faults.set("latency", bad)
    assert faults.value("latency") == 0.25


def test_a_counted_fault_is_taken_until_it_runs_out() -> None:
    faults = Faults({"boom": "the next N calls fail"}, {"boom": "2"})
    assert [faults.take("boom") for _ in range(3)] == [True, True, False]
    assert faults.report() == {"set": {"boom": 0.0}, "served": {"boom": 2.0}}


def _request(method: str, path: str, headers: dict[str, str] | None = None,
             body: bytes = b"") -> Request:
    async def chunks() -> AsyncIterator[bytes]:
        if body:
            yield body

    return Request(method, path, headers or {}, chunks())


async def test_a_body_is_read_decoded_or_raw_and_repeated_query_values_are_kept() -> None:
    packed = gzip.compress(b"hello")
    request = _request("POST", "/x?a=1&b=2&a=3", {"content-encoding": "gzip",
                                                  "content-length": str(len(packed))}, packed)
    assert request.query == {"a": "1", "b": "2"}
    assert request.query_all("a") == ["1", "3"]
    assert request.has_body
    assert await request.read() == b"hello"
    raw = _request("POST", "/x", {"content-encoding": "gzip"}, packed)
    assert await raw.read(raw=True) == packed
    assert not _request("GET", "/x").has_body


def test_the_key_is_taken_from_a_bearer_token_or_the_named_header() -> None:
    key = Secret("k-1")
    bearer = _request("GET", "/", {"authorization": "Bearer k-1"})
    header = _request("GET", "/", {"x-api-key": "k-1"})
    assert service.key_matches(service.presented_key(bearer), key)
    assert service.key_matches(service.presented_key(header, header="X-API-Key"), key)
    assert not service.key_matches(service.presented_key(header), key)  # not asked for
    assert not service.key_matches("", Secret(""))


def _error(request: Request, status: int, message: str) -> Response:
    return json_response(status, {"status": status, "message": message})


async def test_the_admin_api_reports_and_sets_faults() -> None:
    faults = Faults({"latency": "seconds", "boom": "count"})
    answer = await service.admin(_request("POST", "/_emulator/faults",
                                          body=b'{"boom": 3}'), faults, _error)
    assert answer.status == 200
    assert faults.count("boom") == 3
    assert isinstance(answer.body, bytes)
    report = json.loads(answer.body)
    assert report["set"]["boom"] == 3
    assert report["known"]["latency"] == "seconds"
    refused = await service.admin(_request("POST", "/_emulator/faults",
                                           body=b'{"nope": 1}'), faults, _error)
    assert refused.status == 400
    assert isinstance(refused.body, bytes)
    assert "unknown fault 'nope'" in json.loads(refused.body)["message"]
    elsewhere = await service.admin(_request("GET", "/_emulator/other"), faults, _error)
    assert elsewhere.status == 404
    assert (await service.admin(_request("DELETE", "/_emulator/faults"), faults,
                                _error)).status == 405


async def test_latency_waits_as_long_as_the_fault_says_and_counts_it() -> None:
    faults = Faults({"latency": "seconds"}, {"latency": "0.2"})
    started = anyio.current_time()
    await service.inject_latency(faults)
    assert anyio.current_time() - started >= 0.2
    assert faults.report()["served"]["latency"] == 1


# --------------------------------------------------------------- streamed bodies


async def test_a_last_chunk_goes_out_with_the_end_of_the_body_and_ends_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    send = http._SocketStream.send

    async def recording(self: http._SocketStream, item: bytes) -> None:
        writes.append(bytes(item))
        await send(self, item)

    monkeypatch.setattr(http._SocketStream, "send", recording)
    closed = anyio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"one"
            yield Last(b"two")
            yield b"never read"
        finally:
            closed.set()

    async def streaming(request: Request) -> Response:
        return Response(200, body=chunks())

    async with serve(streaming) as port, httpx.AsyncClient() as client:
        answer = await client.get(f"http://127.0.0.1:{port}/")
        assert answer.content == b"onetwo"
        assert closed.is_set()
    assert writes[-1] == b"3\r\ntwo\r\n0\r\n\r\n"  # the chunk and the end: one write


# --------------------------------------------------------------------- WebSockets


async def _echo(request: Request) -> Response:
    """Echo until the client closes; ``busy`` first sleeps a second without reading."""
    if request.path == "/plain":
        return Response(200, body=b"plain")
    try:
        socket_cm = request.websocket("chat" if "chat" in request.offered_protocols()
                                      else None)
    except NotAWebSocket as exc:
        return Response(400, body=str(exc).encode())
    async with socket_cm as ws:
        if request.path == "/busy":
            await anyio.sleep(1.0)
        if request.path == "/bye":
            await ws.send_text("bye")
            await ws.close(4008, "timed out")
            return Response(500)  # not sent: the connection was taken over
        async for message in ws:
            if message.type is MessageType.TEXT:
                assert isinstance(message.data, str)
                await ws.send_text(message.data.upper())
            else:
                assert isinstance(message.data, bytes)
                await ws.send_bytes(message.data[::-1])
    return Response(500)


async def test_a_websocket_client_talks_to_a_handler_and_agrees_a_protocol() -> None:
    async with serve(_echo) as port, httpx.AsyncClient() as client:
        async with aconnect_ws(f"http://127.0.0.1:{port}/ws", client,
                               subprotocols=["other", "chat"]) as ws:
            assert ws.subprotocol == "chat"
            await ws.send_text("hello")
            assert await ws.receive_text() == "HELLO"
            await ws.send_bytes(b"abc" * 50_000)  # a 64-bit length
            assert await ws.receive_bytes() == b"cba" * 50_000
        plain = await client.get(f"http://127.0.0.1:{port}/plain")
        assert plain.text == "plain"  # the server still serves plain requests


async def test_a_request_that_is_no_handshake_is_left_to_the_handler() -> None:
    async with serve(_echo) as port, httpx.AsyncClient() as client:
        answer = await client.get(f"http://127.0.0.1:{port}/ws")
    assert answer.status_code == 400
    assert b"WebSocket handshake" in answer.content


def test_the_accept_key_is_the_one_rfc_6455_gives_for_its_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def _raw_session(port: int, path: str, frames: list[bytes]) -> list[tuple[int, bytes]]:
    with handshake(port, path) as sock:
        for each in frames:
            sock.sendall(each)
        got = [read_frame(sock)]
        while got[-1][0] != 0x8:
            got.append(read_frame(sock))
        with contextlib.suppress(OSError):  # the close is answered, if still open
            sock.sendall(frame(0x8, got[-1][1][:2]))
        return got


async def test_fragments_are_joined_and_pings_answered_while_the_handler_is_busy() -> None:
    def session(port: int) -> list[tuple[int, bytes]]:
        with handshake(port, "/busy") as sock:
            sock.sendall(frame(0x9, b"p1") + frame(0x1, b"he", fin=False)
                         + frame(0x0, b"llo"))
            started = anyio.from_thread.run_sync(anyio.current_time)
            got = [read_frame(sock)]
            pong_after = anyio.from_thread.run_sync(anyio.current_time) - started
            got.append(read_frame(sock))
            sock.sendall(frame(0x8, struct.pack(">H", 1000)))
            got.append(read_frame(sock))
        assert pong_after < 0.9, "the pong waited for the handler"
        return got

    async with serve(_echo) as port:
        got = await anyio.to_thread.run_sync(session, port)
    # The pong comes while the handler sleeps; the echo once it reads.
    assert got == [(0xA, b"p1"), (0x1, b"HELLO"), (0x8, struct.pack(">H", 1000))]


async def test_an_unmasked_client_frame_is_a_protocol_error() -> None:
    async with serve(_echo) as port:
        got = await anyio.to_thread.run_sync(_raw_session, port, "/ws",
                                             [frame(0x1, b"x", masked=False)])
    assert got[-1][0] == 0x8
    assert got[-1][1][:2] == struct.pack(">H", 1002)


async def test_the_handler_s_close_code_and_reason_reach_the_client() -> None:
    async with serve(_echo) as port:
        got = await anyio.to_thread.run_sync(_raw_session, port, "/bye", [])
    assert got == [(0x1, b"bye"), (0x8, struct.pack(">H", 4008) + b"timed out")]


async def test_a_client_that_never_reads_does_not_hold_up_the_close(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A task of the handler fills the socket of a client that reads nothing and is
    still sending when the handler leaves the socket's block: the block ends all the
    same (its close frame cannot go out), and the connection with it."""
    monkeypatch.setattr(websocket, "_CLOSE_WAIT", 0.5)
    left = anyio.Event()

    async def flood(request: Request) -> Response:
        async def send_forever(ws: websocket.WebSocket) -> None:
            while True:
                await ws.send_bytes(b"x" * 65536)

        async with anyio.create_task_group() as tg:
            async with request.websocket(None) as ws:
                tg.start_soon(send_forever, ws)
                await anyio.sleep(0.5)  # long past the client's full buffers
            left.set()
            tg.cancel_scope.cancel()
        return Response(500)

    def drained(sock: socket.socket) -> None:
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(1 << 20):
                pass

    async with serve(flood) as port:
        sock = await anyio.to_thread.run_sync(handshake, port, "/flood")
        with sock:
            with anyio.fail_after(10):
                await left.wait()
            # The connection is gone: reading what was sent ends.
            await anyio.to_thread.run_sync(drained, sock)
