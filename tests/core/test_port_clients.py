"""What browsers send the port proxy (provider_sdk.ports) besides the token, against a
server on 127.0.0.1 standing in for the sandbox that records every head it gets: the
token echoed in a ``Referer``, under a percent-encoded name or anywhere else never
reaches it, and a page of another origin cannot use the port."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.abc
import pytest

from provider_sdk.models import ExposedPort
from provider_sdk.ports import PortProxy

pytestmark = pytest.mark.anyio


class _Recorder(socketserver.ThreadingTCPServer):
    """Records each request head; answers ``101`` to an upgrade, else ``200 ok``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecorderHandler)
        self.heads: list[bytes] = []


class _RecorderHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Recorder)
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(65536)
            if not data:
                return
            head += data
        server.heads.append(head)
        if b"\r\nupgrade:" in head.lower():
            self.request.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                 b"Connection: Upgrade\r\n\r\n")
        else:
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
async def proxy() -> AsyncIterator[PortProxy]:
    ports = PortProxy(provider="test")
    yield ports
    await ports.aclose()


async def _expose(proxy: PortProxy, recorder: _Recorder, port: int = 80) -> ExposedPort:
    @contextlib.asynccontextmanager
    async def open_stream() -> AsyncIterator[anyio.abc.ByteStream]:
        async with await anyio.connect_tcp(*recorder.server_address[:2]) as stream:
            yield stream

    return await proxy.expose("sb", port, open_stream)


def _netloc(exposed: ExposedPort) -> str:
    return exposed.base_url.split("/")[2]


async def _status(exposed: ExposedPort, target: str, *headers: str,
                  method: str = "GET") -> int:
    """Send one request to the proxy (``Host`` is the exposed address); its status."""
    host, port = _netloc(exposed).split(":")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {_netloc(exposed)}", *headers]
    with anyio.fail_after(20):
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
            answer = b""
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while b"\r\n" not in answer:
                    answer += await stream.receive()
    return int(answer.split(b" ")[1])


def _cookie(exposed: ExposedPort) -> str:
    """The header a browser sends once the proxy set its cookie."""
    port = _netloc(exposed).split(":")[1]
    return f"Cookie: psdk_token_{port}={exposed.token.reveal()}"


@pytest.mark.parametrize("name", ["psdk%5Ftoken", "psdk%5ftoken", "%70sdk_token",
                                  "%70%73%64%6B%5F%74%6F%6B%65%6E"])
async def test_a_percent_encoded_token_parameter_is_taken_off(
        proxy: PortProxy, recorder: _Recorder, name: str) -> None:
    """The query's token is found by its decoded name, and taken off by it too."""
    exposed = await _expose(proxy, recorder)
    token = exposed.token.reveal()
    assert await _status(exposed, f"/p?{name}={token}&keep=1") == 200
    (head,) = recorder.heads
    assert head.startswith(b"GET /p?keep=1 HTTP/1.1\r\n"), head[:80]
    assert token.encode() not in head


async def test_the_token_a_browser_echoes_in_referer_is_taken_off(
        proxy: PortProxy, recorder: _Recorder) -> None:
    """A page opened with the token in its URL is every subresource's ``Referer``: the
    token parameter (any port's, under any spelling) leaves it, the page stays."""
    exposed = await _expose(proxy, recorder)
    token = exposed.token.reveal()
    base = exposed.base_url
    referers = [f"{base}?psdk_token={token}", f"{base}page?x=1&psdk%5Ftoken={token}",
                f"{base}page?psdk_token=another-ports-token&x=2"]
    for referer in referers:
        assert await _status(exposed, "/style.css", _cookie(exposed),
                             f"Referer: {referer}") == 200
    kept = [line for head in recorder.heads for line in head.split(b"\r\n")
            if line.startswith(b"Referer: ")]
    assert kept == [f"Referer: {base}".encode(), f"Referer: {base}page?x=1".encode(),
                    f"Referer: {base}page?x=2".encode()]
    assert not [head for head in recorder.heads if token.encode() in head]


async def test_no_header_carries_the_token_or_another_ports_to_the_sandbox(
        proxy: PortProxy, recorder: _Recorder) -> None:
    """A header that carries this port's token, or another port's of the same proxy,
    as it is or percent-encoded, is dropped; the application's headers stay."""
    exposed = await _expose(proxy, recorder)
    other = (await _expose(proxy, recorder, 81)).token.reveal()
    token = exposed.token.reveal()
    assert await _status(exposed, "/", f"X-Psdk-Token: {token}",
                         f"X-Original-Url: /?t={token.replace('-', '%2D')}",
                         f"X-Other: {other}", f"Authorization: Bearer {other}",
                         "Authorization: Bearer app", f"Cookie: app=1; s={token}") == 200
    (head,) = recorder.heads
    assert token.encode() not in head
    assert other.encode() not in head
    lines = head.split(b"\r\n")
    assert b"Authorization: Bearer app" in lines
    assert b"Cookie: app=1" in lines
    assert not [line for line in lines if line.startswith((b"X-Original-Url", b"X-Other"))]


@pytest.mark.parametrize("target", ["/{token}/page", "/p;psdk_token={token}?x=1"])
async def test_a_target_that_carries_the_token_elsewhere_is_refused(
        proxy: PortProxy, recorder: _Recorder, target: str) -> None:
    """The token in the path, or past a separator the proxy does not split on, cannot
    be taken off: the request is a 400, and nothing reaches the sandbox."""
    exposed = await _expose(proxy, recorder)
    token = exposed.token.reveal()
    assert await _status(exposed, target.format(token=token), _cookie(exposed)) == 400
    assert recorder.heads == []


_UPGRADE = ("Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")


async def test_a_page_of_another_port_cannot_use_this_one(
        proxy: PortProxy, recorder: _Recorder) -> None:
    """Another exposed port is another origin of the same site, so the browser sends
    this port's cookie with its page's requests: a WebSocket, a fetch or a form from
    there is a 403, and nothing reaches the sandbox."""
    exposed = await _expose(proxy, recorder)
    elsewhere = (await _expose(proxy, recorder, 81)).base_url.rstrip("/")
    cookie = _cookie(exposed)
    attempts: list[tuple[str, tuple[str, ...]]] = [
        ("GET", (f"Origin: {elsewhere}", *_UPGRADE)),
        ("GET", (f"Origin: {elsewhere}", "Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: cors")),
        ("POST", (f"Origin: {elsewhere}", "Sec-Fetch-Mode: navigate", "Content-Length: 0")),
        ("GET", ("Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: no-cors",
                 "Sec-Fetch-Dest: script")),
        ("GET", ("Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate",
                 "Sec-Fetch-Dest: embed")),
        ("GET", ("Origin: null", *_UPGRADE)),
        ("GET", ("Origin: http://localhost:1", *_UPGRADE)),
    ]
    for method, headers in attempts:
        status = await _status(exposed, "/private", cookie, *headers, method=method)
        assert status == 403, (method, headers)
    assert recorder.heads == []


async def test_the_ports_own_pages_and_clients_without_a_page_pass(
        proxy: PortProxy, recorder: _Recorder) -> None:
    """A page of the port's own origin (its WebSockets and fetches), a link followed from
    another site, a URL typed in, and a client that names no origin (curl) pass."""
    exposed = await _expose(proxy, recorder)
    own = exposed.base_url.rstrip("/")
    cookie = _cookie(exposed)
    assert await _status(exposed, "/ws", cookie, f"Origin: {own}", *_UPGRADE) == 101
    passing: list[tuple[str, tuple[str, ...]]] = [
        ("POST", (f"Origin: {own}", "Sec-Fetch-Site: same-origin", "Content-Length: 0")),
        ("POST", ("Origin: null", "Sec-Fetch-Site: same-origin", "Content-Length: 0")),
        ("GET", ("Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: navigate",
                 "Sec-Fetch-Dest: document")),
        ("GET", ("Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate",
                 "Sec-Fetch-Dest: iframe")),
        ("GET", ("Sec-Fetch-Site: none", "Sec-Fetch-Mode: navigate")),
        ("GET", ()),
    ]
    for method, headers in passing:
        assert await _status(exposed, "/", cookie, *headers, method=method) == 200, headers
    assert len(recorder.heads) == 1 + len(passing)
