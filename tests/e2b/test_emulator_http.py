"""The emulator's HTTP layer: keep-alive, malformed requests, streamed and compressed
uploads, and the Connect framing envd's clients rely on."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import struct
from collections.abc import Iterator

import anyio
import anyio.from_thread
import httpx
import pytest
from e2b import Sandbox
from provider_sdk_emulators.kit import http
from provider_sdk_emulators.kit.http import Request, Response, serve

from provider_sdk.emulators import RunningEmulator


def _port(running: RunningEmulator) -> int:
    return int(running.url.rsplit(":", 1)[1])


def _envd_headers(running: RunningEmulator, sandbox_id: str) -> dict[str, str]:
    """What the SDK sends to a sandbox's envd: its id, and the token create returned."""
    detail = httpx.get(f"{running.url}/sandboxes/{sandbox_id}",
                       headers={"X-API-Key": running.api_key.reveal()}).json()
    return {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": detail["envdAccessToken"]}


def test_keep_alive_serves_several_requests_on_one_connection(
        e2b_emulator: RunningEmulator) -> None:
    with socket.create_connection(("127.0.0.1", _port(e2b_emulator)), timeout=10) as sock:
        request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(request + request)  # pipelined: answered in order
        data = b""
        while data.count(b"HTTP/1.1 200") < 2:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed early: {data!r}"
            data += chunk


def test_a_malformed_request_gets_400_and_the_connection_closes(
        e2b_emulator: RunningEmulator) -> None:
    with socket.create_connection(("127.0.0.1", _port(e2b_emulator)), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400")


def test_streamed_and_gzipped_uploads(e2b_emulator: RunningEmulator) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(data), 100_000):
            yield data[i:i + 100_000]

    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/streamed.bin", chunks())  # octet-stream, chunked
        assert bytes(sandbox.files.read("/tmp/streamed.bin", format="bytes")) == data
        sandbox.files.write("/tmp/gzipped.bin", data, gzip=True)
        assert bytes(sandbox.files.read("/tmp/gzipped.bin", format="bytes")) == data
        headers = _envd_headers(e2b_emulator, sandbox.sandbox_id)
        corrupt = httpx.post(f"{e2b_emulator.url}/files", params={"path": "/tmp/bad"},
                             content=gzip.compress(b"x")[:-4] + b"oops",
                             headers={**headers, "Content-Type": "application/octet-stream",
                                      "Content-Encoding": "gzip"})
        assert corrupt.status_code == 400


def test_connect_framing_of_a_streamed_call(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        message = json.dumps({"process": {"cmd": "/bin/echo", "args": ["framed"]}}).encode()
        answer = httpx.post(
            f"{e2b_emulator.url}/process.Process/Start",
            content=struct.pack(">BI", 0, len(message)) + message,
            headers={**_envd_headers(e2b_emulator, sandbox.sandbox_id),
                     "Content-Type": "application/connect+json"})
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/connect+json"
        frames = []
        body = answer.content
        while body:
            flags, size = struct.unpack(">BI", body[:5])
            frames.append((flags, json.loads(body[5:5 + size])))
            body = body[5 + size:]
        assert "start" in frames[0][1]["event"]
        assert frames[-2][1]["event"]["end"]["exited"] is True
        assert frames[-1] == (2, {})  # the end-stream frame


def test_a_process_s_end_and_the_end_of_its_stream_go_out_in_one_write(
        e2b_emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    send = http._SocketStream.send

    async def recording(self: http._SocketStream, item: bytes) -> None:
        writes.append(bytes(item))
        await send(self, item)

    with Sandbox.create() as sandbox:
        message = json.dumps({"process": {"cmd": "/bin/true"}}).encode()
        monkeypatch.setattr(http._SocketStream, "send", recording)
        answer = httpx.post(
            f"{e2b_emulator.url}/process.Process/Start",
            content=struct.pack(">BI", 0, len(message)) + message,
            headers={**_envd_headers(e2b_emulator, sandbox.sandbox_id),
                     "Content-Type": "application/connect+json"})
        monkeypatch.undo()
    assert answer.status_code == 200
    last = writes[-1]
    assert b'"end":' in last  # the process's end event,
    assert b"\x02\x00\x00\x00\x02{}" in last  # the end-stream frame
    assert last.endswith(b"\r\n0\r\n\r\n")  # and the end of the chunked body


@pytest.mark.anyio
async def test_a_body_sent_faster_than_it_is_read_waits_in_the_socket() -> None:
    """The server reads a body only as its handler asks: a client that pushes faster is
    held back by TCP flow control, not queued in the server's memory."""
    reading = anyio.Event()
    release = anyio.Event()

    async def slow(request: Request) -> Response:
        body = request.stream()
        await anext(body)
        reading.set()
        await release.wait()
        async for _ in body:
            pass
        return Response(200, body=b"read")

    def push(port: int) -> tuple[int, bytes]:
        """Send up to 512 MiB; how much the server took before the sender was held."""
        block = bytes(1 << 20)
        sent = 0
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\n\r\n" % (512 << 20))
            sock.settimeout(2)
            with contextlib.suppress(TimeoutError):
                while sent < 512 << 20:
                    sent += sock.send(block)
            anyio.from_thread.run_sync(release.set)
            sock.settimeout(60)
            sock.sendall(bytes((512 << 20) - sent))
            answer = b""
            while b"read" not in answer and (chunk := sock.recv(65536)):
                answer += chunk
        return sent, answer

    async with serve(slow) as port:
        sent, answer = await anyio.to_thread.run_sync(push, port)
    assert reading.is_set()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    # Loopback socket buffers hold a few MiB; a server that read ahead took it all.
    assert sent < 64 << 20, f"the server took {sent >> 20} MiB ahead of its handler"
