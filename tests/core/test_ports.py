"""The host-side port proxy (provider_sdk.ports) against a server on 127.0.0.1 standing
in for the sandbox: what reaches it, what is refused before, and what stops it."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import string
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.abc
import pytest
from provider_sdk_contract.support import eventually
from structlog.testing import capture_logs

from provider_sdk import errors
from provider_sdk._chunked import ChunkedDecoder
from provider_sdk.portal import Portal
from provider_sdk.ports import MAX_HEAD, PortProxy

pytestmark = pytest.mark.anyio


class _Upstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.heads: list[bytes] = []


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(4096)
            if not data:
                return
            head += data
        server = self.server
        assert isinstance(server, _Upstream)
        server.heads.append(head)
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                             b"Connection: keep-alive\r\n\r\nok")


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _opener(upstream: _Upstream, calls: list[int] | None = None):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def open_stream() -> AsyncIterator[anyio.abc.ByteStream]:
        if calls is not None:
            calls.append(1)
        async with await anyio.connect_tcp(*upstream.server_address[:2]) as stream:
            yield stream

    return open_stream


def _failing(error: errors.SandboxError):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def open_stream() -> AsyncIterator[anyio.abc.ByteStream]:
        raise error
        yield  # pragma: no cover

    return open_stream


@pytest.fixture
async def proxy() -> AsyncIterator[PortProxy]:
    ports = PortProxy(provider="test")
    yield ports
    await ports.aclose()


def _address(url: str) -> tuple[str, int]:
    host, port = url.split("/")[2].split(":")
    return host, int(port)


async def _send(url: str, raw: bytes) -> bytes:
    """Send raw bytes to the proxy; return all it answers."""
    with anyio.fail_after(20):
        async with await anyio.connect_tcp(*_address(url)) as stream:
            with contextlib.suppress(anyio.BrokenResourceError):
                await stream.send(raw)
            answer = b""
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    answer += await stream.receive()
            return answer


async def test_each_port_has_a_token_of_32_url_safe_characters(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """The token is 32 random characters (docs/security.md), another for each port."""
    tokens = [(await proxy.expose("sb", port, _opener(upstream))).token.reveal()
              for port in (80, 81)]
    for token in tokens:
        assert len(token) == 32, token
        assert set(token) <= set(string.ascii_letters + string.digits + "-_"), token
    assert tokens[0] != tokens[1]


async def test_exposed_lists_the_ports_of_that_sandbox_alone(
        proxy: PortProxy, upstream: _Upstream) -> None:
    for sandbox_id, port in (("a", 80), ("b", 82), ("b", 81), ("c", 83)):
        await proxy.expose(sandbox_id, port, _opener(upstream))
    assert proxy.exposed("a") == [80]
    assert proxy.exposed("b") == [81, 82]
    assert proxy.exposed("c") == [83]
    assert proxy.exposed("d") == []


async def test_a_dropped_sandboxs_port_is_exposed_anew(proxy: PortProxy,
                                                       upstream: _Upstream) -> None:
    """Once a sandbox is dropped its ports are no longer listed, and exposing one again
    makes a new listener with a new token, which answers."""
    first = await proxy.expose("a", 80, _opener(upstream))
    await proxy.drop("a")
    assert proxy.exposed("a") == []
    again = await proxy.expose("a", 80, _opener(upstream))
    assert again.token.reveal() != first.token.reveal()
    answer = await _send(again.base_url, (
        f"GET / HTTP/1.1\r\nX-Psdk-Token: {again.token.reveal()}\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]


async def test_each_ports_cookie_is_named_for_its_port(proxy: PortProxy,
                                                       upstream: _Upstream) -> None:
    """Browsers share cookies across the ports of a host: the cookie a listener sets is
    named for its own port, so two exposed ports' cookies do not overwrite each other."""
    for port in (80, 81):
        exposed = await proxy.expose("sb", port, _opener(upstream))
        answer = await _send(exposed.base_url, (
            f"GET /?psdk_token={exposed.token.reveal()} HTTP/1.1\r\n\r\n").encode())
        (cookie,) = [line for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")
                     if line.startswith(b"Set-Cookie: ")]
        name = cookie.removeprefix(b"Set-Cookie: ").split(b"=")[0]
        assert name == f"psdk_token_{_address(exposed.base_url)[1]}".encode(), cookie


async def test_drop_stops_that_sandbox_alone(proxy: PortProxy, upstream: _Upstream) -> None:
    kept = await proxy.expose("a", 80, _opener(upstream))
    await proxy.expose("b", 80, _opener(upstream))
    await proxy.drop("b")
    assert proxy.exposed("a") == [80]
    assert _accepts(kept.base_url)


async def test_a_sandbox_id_is_matched_by_its_value(proxy: PortProxy,
                                                    upstream: _Upstream) -> None:
    """``exposed`` and ``drop`` take any string equal to the id, not only the one
    ``expose`` was given."""
    exposed = await proxy.expose("".join(["sand", "box"]), 80, _opener(upstream))
    assert proxy.exposed("".join(["sand", "box"])) == [80]
    await proxy.drop("".join(["sand", "box"]))
    assert proxy.exposed("sandbox") == []
    assert not _accepts(exposed.base_url)


async def test_a_connection_that_fails_leaves_the_listener_serving(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """An opener that fails with an error of no known kind ends that connection alone
    (logged, where the application configured structlog): the next one is served."""
    calls: list[int] = []

    @contextlib.asynccontextmanager
    async def flaky() -> AsyncIterator[anyio.abc.ByteStream]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the opener broke")
        async with await anyio.connect_tcp(*upstream.server_address[:2]) as stream:
            yield stream

    exposed = await proxy.expose("sb", 80, flaky)
    token = exposed.token.reveal()
    request = f"GET / HTTP/1.1\r\nX-Psdk-Token: {token}\r\n\r\n".encode()
    with capture_logs() as logs:  # as an application that configured structlog
        assert await _send(exposed.base_url, request) == b""
    assert [(e["event"], e["error"], e["sandbox_id"], e["port"]) for e in logs] == [
        ("sandbox.ports.connection.failed", "RuntimeError", "sb", 80)]
    assert token not in repr(logs)
    answer = await _send(exposed.base_url, request)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    assert len(calls) == 2


async def test_unexpose_and_aclose_in_a_cancelled_scope_still_stop_listening(
        upstream: _Upstream) -> None:
    """A caller whose scope is cancelled still gets the listeners stopped."""
    ports = PortProxy(provider="test")
    first = await ports.expose("a", 80, _opener(upstream))
    second = await ports.expose("b", 80, _opener(upstream))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await ports.unexpose("a", 80)
    assert not _accepts(first.base_url)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await ports.aclose()
    assert not _accepts(second.base_url)


async def test_a_port_exposed_twice_at_once_is_served_once(proxy: PortProxy,
                                                           upstream: _Upstream) -> None:
    """Two callers exposing one port at the same time get the same address and token."""
    got: list[str] = []

    async def expose() -> None:
        exposed = await proxy.expose("sb", 80, _opener(upstream))
        got.append(f"{exposed.base_url} {exposed.token.reveal()}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(expose)
        tg.start_soon(expose)
    assert len(got) == 2
    assert got[0] == got[1]
    assert proxy.exposed("sb") == [80]



@pytest.mark.parametrize("raised", [errors.Unavailable("the stream broke"),
                                    errors.SandboxNotFound("gone")])
async def test_a_sandbox_error_once_relaying_adds_nothing_to_the_answer(
        proxy: PortProxy, upstream: _Upstream, raised: errors.SandboxError) -> None:
    """Once the stream into the sandbox is open, the sandbox's side failing ends the
    client's connection: no 502 of the proxy's follows the answer that passed."""
    @contextlib.asynccontextmanager
    async def breaking() -> AsyncIterator[anyio.abc.ByteStream]:
        async with await anyio.connect_tcp(*upstream.server_address[:2]) as stream:
            yield stream
        raise raised

    exposed = await proxy.expose("sb", 80, breaking)
    answer = await _send(exposed.base_url, (
        f"GET / HTTP/1.1\r\nX-Psdk-Token: {exposed.token.reveal()}\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:80]
    assert answer.endswith(b"\r\n\r\nok"), answer[-80:]


def test_the_provider_is_named_by_keyword() -> None:
    with pytest.raises(TypeError):
        PortProxy("test")  # type: ignore[misc]


async def test_a_closed_proxy_lists_nothing_and_exposes_anew(upstream: _Upstream) -> None:
    ports = PortProxy(provider="test")
    first = await ports.expose("sb", 80, _opener(upstream))
    await ports.aclose()
    assert ports.exposed("sb") == []
    again = await ports.expose("sb", 80, _opener(upstream))
    try:
        assert again.token.reveal() != first.token.reveal()
        answer = await _send(again.base_url, (
            f"GET / HTTP/1.1\r\nX-Psdk-Token: {again.token.reveal()}\r\n\r\n").encode())
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    finally:
        await ports.aclose()


async def test_unexpose_and_drop_return_once_the_listener_stopped(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """They wait for the listener's end, which comes as soon as it is cancelled (their
    wait for it is bounded at 10 s: far more than either takes)."""
    await proxy.expose("a", 80, _opener(upstream))
    await proxy.expose("b", 80, _opener(upstream))
    began = time.monotonic()
    await proxy.unexpose("a", 80)
    await proxy.drop("b")
    assert time.monotonic() - began < 5


async def test_a_client_that_resets_its_connection_is_no_failure(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """A client that resets its connection halfway through its head went away: that
    ends its connection, and no failure is logged."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    with capture_logs() as logs:  # as an application that configured structlog
        with socket.create_connection(_address(exposed.base_url), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            await eventually(lambda: _true(proxy._gate.waiting == 1),
                             what="the connection waits to show its token")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await eventually(lambda: _true(proxy._gate.waiting == 0),
                         what="the reset connection ended")
        answer = await _send(exposed.base_url, (
            f"GET / HTTP/1.1\r\nX-Psdk-Token: {exposed.token.reveal()}\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    assert logs == []


async def test_nothing_the_proxy_holds_shows_a_token_in_its_repr(
        proxy: PortProxy, upstream: _Upstream) -> None:
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    assert exposed.token.reveal() not in repr(vars(proxy))


async def test_a_port_proxy_whose_loop_cannot_start_is_unavailable(
        monkeypatch: pytest.MonkeyPatch, upstream: _Upstream) -> None:
    """The thread of the proxy's loop failing to start (a fault no test machine makes on
    demand, so it is injected where it surfaces) is Unavailable, naming the provider."""
    def refuse(cls: type[Portal], *, name: str) -> Portal:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(Portal, "start", classmethod(refuse))
    ports = PortProxy(provider="test")
    with pytest.raises(errors.Unavailable) as caught:
        await ports.expose("sb", 80, _opener(upstream))
    assert caught.value.provider == "test"
    await ports.aclose()


async def test_listens_on_loopback_only(proxy: PortProxy, upstream: _Upstream) -> None:
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    assert exposed.base_url.startswith("http://127.0.0.1:")
    assert exposed.url == f"{exposed.base_url}?psdk_token={exposed.token.reveal()}"


async def test_token_is_never_in_repr(proxy: PortProxy, upstream: _Upstream) -> None:
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    assert exposed.token.reveal() not in repr(exposed)
    assert exposed.token.reveal() not in str(exposed)


async def test_oversized_head_is_refused_before_the_sandbox(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """A head past MAX_HEAD gets 431 and the connection closes: the proxy does not keep
    reading what a client sends."""
    calls: list[int] = []
    exposed = await proxy.expose("sb", 80, _opener(upstream, calls))
    answer = await _send(exposed.base_url, b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD * 4))
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    assert calls == []


async def test_each_request_gets_a_connection_of_its_own(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """The answer tells the client to close (so its next request is checked again) and
    carries the cookie when the token came in the query."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    token = exposed.token.reveal()
    answer = await _send(exposed.url, f"GET /?psdk_token={token} HTTP/1.1\r\n\r\n".encode())
    head = answer.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 OK"
    assert b"Connection: close" in head
    assert b"Connection: keep-alive" not in head
    (cookie,) = [h for h in head if h.startswith(b"Set-Cookie: ")]
    assert b"HttpOnly" in cookie
    assert b"SameSite=Strict" in cookie
    pair = cookie.removeprefix(b"Set-Cookie: ").split(b";")[0]
    answer = await _send(exposed.base_url, b"GET / HTTP/1.1\r\nCookie: " + pair + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer


async def test_malformed_head_is_refused(proxy: PortProxy, upstream: _Upstream) -> None:
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    token = exposed.token.reveal()
    answer = await _send(exposed.base_url,
                         f"GARBAGE\r\nX-Psdk-Token: {token}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert upstream.heads == []


async def test_application_bearer_is_kept(proxy: PortProxy, upstream: _Upstream) -> None:
    """Only the proxy's token is removed: the application's own Authorization stays."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    token = exposed.token.reveal()
    answer = await _send(exposed.base_url, (
        f"GET /a HTTP/1.1\r\nHost: x\r\nX-Psdk-Token: {token}\r\n"
        "Authorization: Bearer app-secret\r\nConnection: keep-alive\r\n\r\n").encode())
    assert answer.endswith(b"ok")
    (head,) = upstream.heads
    assert b"Authorization: Bearer app-secret" in head
    assert token.encode() not in head
    assert b"Connection: close" in head
    assert b"keep-alive" not in head


async def test_unreachable_port_is_a_502_naming_no_token(proxy: PortProxy) -> None:
    exposed = await proxy.expose("sb", 80, _failing(errors.Unavailable("nothing answers")))
    token = exposed.token.reveal()
    answer = await _send(exposed.url, f"GET /?psdk_token={token} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 502 ")
    assert token.encode() not in answer


async def test_a_gone_sandbox_ends_its_listener(proxy: PortProxy) -> None:
    exposed = await proxy.expose("sb", 80, _failing(errors.SandboxNotFound("gone")))
    token = exposed.token.reveal()
    answer = await _send(exposed.url, f"GET /?psdk_token={token} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 502 ")
    assert proxy.exposed("sb") == []

    async def closed() -> bool:
        return not _accepts(exposed.base_url)

    await eventually(closed, what="the listener of a gone sandbox closed")


async def test_drop_and_aclose_stop_listening(upstream: _Upstream) -> None:
    ports = PortProxy(provider="test")
    first = await ports.expose("a", 80, _opener(upstream))
    second = await ports.expose("b", 80, _opener(upstream))
    await ports.drop("a")
    assert not _accepts(first.base_url)
    assert _accepts(second.base_url)
    await ports.aclose()
    assert not _accepts(second.base_url)
    await ports.aclose()  # twice is fine


def _accepts(url: str) -> bool:
    try:
        socket.create_connection(_address(url), timeout=5).close()
    except OSError:
        return False
    return True


async def test_bearer_and_query_tokens_are_accepted_and_stripped(
        proxy: PortProxy, upstream: _Upstream) -> None:
    """Beside its header, the proxy takes ``Authorization: Bearer`` and the query
    parameter, and forwards neither."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    assert exposed.token_header == "X-Psdk-Token"
    token = exposed.token.reveal()
    for target, extra in ((f"/b?keep=1&psdk_token={token}", ""),
                          ("/c", f"Authorization: Bearer {token}\r\n")):
        answer = await _send(exposed.base_url, (
            f"GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").encode())
        assert answer.startswith(b"HTTP/1.1 200"), answer
    assert [h.split(b"\r\n")[0] for h in upstream.heads] == [b"GET /b?keep=1 HTTP/1.1",
                                                             b"GET /c HTTP/1.1"]
    assert all(token.encode() not in head for head in upstream.heads)


async def test_wrong_tokens_in_every_form_are_refused(proxy: PortProxy,
                                                      upstream: _Upstream) -> None:
    """A wrong token in the query, the header, a bearer or the cookie is a 401."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    wrong = "w" * 32
    for target, extra in ((f"/?psdk_token={wrong}", ""), ("/", f"X-Psdk-Token: {wrong}\r\n"),
                          ("/", f"Authorization: Bearer {wrong}\r\n"),
                          ("/", f"Cookie: psdk_token={wrong}\r\n")):
        answer = await _send(exposed.base_url, (
            f"GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").encode())
        assert answer.startswith(b"HTTP/1.1 401"), (target, answer[:40])
    assert upstream.heads == []


def _near_misses(token: str) -> list[str]:
    """Tokens a check that compares only part of the token would take."""
    other = "A" if token[-1] != "A" else "B"
    return [token[:-1], token[:1], "", token + "x", token[:-1] + other, token * 2,
            token.swapcase()]


async def test_near_miss_tokens_in_every_form_are_refused(proxy: PortProxy,
                                                          upstream: _Upstream) -> None:
    """A token that is all but the real one (a prefix, empty, one more or one other
    character, twice the token) is a 401 in the query, the header, a bearer or the
    cookie: the whole token, and only it, opens the port."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    for wrong in _near_misses(exposed.token.reveal()):
        for target, extra in ((f"/?psdk_token={wrong}", ""),
                              ("/", f"X-Psdk-Token: {wrong}\r\n"),
                              ("/", f"Authorization: Bearer {wrong}\r\n"),
                              ("/", f"Cookie: psdk_token={wrong}\r\n")):
            answer = await _send(exposed.base_url, (
                f"GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").encode())
            assert answer.startswith(b"HTTP/1.1 401"), (target, extra, answer[:40])
    assert upstream.heads == []


async def test_cookie_keeps_a_browser_working(proxy: PortProxy, upstream: _Upstream) -> None:
    """The answer to a request with the token in its query sets an HttpOnly,
    SameSite=Strict cookie, with which the next page loads without the token; the
    cookie is stripped and the application's own cookies are kept."""
    exposed = await proxy.expose("sb", 80, _opener(upstream))
    token = exposed.token.reveal()
    first = await _send(exposed.base_url, f"GET /?psdk_token={token} HTTP/1.1\r\n"
                                          "Host: x\r\n\r\n".encode())
    head = first.partition(b"\r\n\r\n")[0].decode()
    (cookie,) = [line.split(":", 1)[1].strip() for line in head.split("\r\n")
                 if line.lower().startswith("set-cookie:")]
    attributes = [a.strip().lower() for a in cookie.split(";")]
    assert "httponly" in attributes, cookie
    assert "samesite=strict" in attributes, cookie
    answer = await _send(exposed.base_url, (f"GET /next HTTP/1.1\r\nHost: x\r\n"
                                            f"Cookie: app=1; {cookie.split(';')[0]}\r\n"
                                            "\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert upstream.heads[-1].startswith(b"GET /next HTTP/1.1")
    assert b"Cookie: app=1\r\n" in upstream.heads[-1]
    assert all(token.encode() not in head for head in upstream.heads)


class _Canned(socketserver.ThreadingTCPServer):
    """Answers every connection with ``answer`` once its request head came, then keeps
    reading (and recording) until nothing came for half a second, and closes it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: bytes, idle: float = 0.5) -> None:
        super().__init__(("127.0.0.1", 0), _CannedHandler)
        self.answer = answer
        self.idle = idle
        self.received = b""


class _CannedHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Canned)
        answered = False
        with contextlib.suppress(TimeoutError):
            while data := self.request.recv(65536):
                server.received += data
                if not answered and b"\r\n\r\n" in server.received:
                    self.request.sendall(server.answer)
                    self.request.settimeout(server.idle)
                    answered = True


@contextlib.contextmanager
def _canned(answer: bytes, idle: float = 0.5) -> Iterator[_Canned]:
    server = _Canned(answer, idle)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _canned_opener(server: _Canned):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def open_stream() -> AsyncIterator[anyio.abc.ByteStream]:
        async with await anyio.connect_tcp(*server.server_address[:2]) as stream:
            yield stream

    return open_stream


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n",
    b"\x00\xff\xfe garbage\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    b"HTTP/1.1 200 OK\r\nX-Nul: a\x00b\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n X-Folded: a\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX Space: a\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Le",
], ids=["too-large", "not-http", "length-and-chunked", "two-lengths", "bare-lf", "nul",
        "folded", "space-in-name", "bad-status", "unasked-switch", "cut-short"])
async def test_broken_answer_is_a_502(proxy: PortProxy, answer: bytes) -> None:
    """An answer head the proxy cannot pass safely is a 502, with none of it."""
    with _canned(answer) as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        got = await _send(exposed.base_url, b"GET / HTTP/1.1\r\nX-Psdk-Token: "
                          + exposed.token.reveal().encode() + b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 502 "), got[:120]
    assert answer[:40] not in got


async def test_interim_head_passes_and_the_final_one_is_edited(proxy: PortProxy) -> None:
    """After ``100 Continue`` the final head still says ``Connection: close``; no head
    keeps a ``psdk_token`` cookie of the sandbox's, the application's cookies stay."""
    answer = (b"HTTP/1.1 100 Continue\r\nSet-Cookie: psdk_token_1=forged\r\n\r\n"
              b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nSet-Cookie: PSDK_TOKEN=forged\r\n"
              b"Set-Cookie: app=1\r\nContent-Length: 2\r\n\r\nok")
    with _canned(answer) as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        got = await _send(exposed.base_url, b"GET / HTTP/1.1\r\nX-Psdk-Token: "
                          + exposed.token.reveal().encode() + b"\r\n\r\n")
    interim, final, body = got.split(b"\r\n\r\n")
    assert interim == b"HTTP/1.1 100 Continue"
    assert final.split(b"\r\n") == [b"HTTP/1.1 200 OK", b"Set-Cookie: app=1",
                                    b"Content-Length: 2", b"Connection: close"]
    assert body == b"ok"


async def test_request_framed_two_ways_is_refused(proxy: PortProxy) -> None:
    """A request with both ``Content-Length`` and ``Transfer-Encoding`` gets a 400 and
    nothing reaches the sandbox."""
    with _canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        got = await _send(exposed.base_url, b"POST / HTTP/1.1\r\nX-Psdk-Token: "
                          + exposed.token.reveal().encode() + b"\r\nContent-Length: 5\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400 "), got[:120]
        assert server.received == b""


async def test_nothing_past_the_request_body_is_forwarded(proxy: PortProxy) -> None:
    """The body's ``Content-Length`` bytes are forwarded; a request pipelined after
    them, token and all, is not."""
    with _canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        token = exposed.token.reveal().encode()
        second = b"GET /second HTTP/1.1\r\nX-Psdk-Token: " + token + b"\r\n\r\n"
        got = await _send(exposed.base_url, b"POST / HTTP/1.1\r\nX-Psdk-Token: " + token
                          + b"\r\nContent-Length: 4\r\n\r\nbody" + second)
        assert got.startswith(b"HTTP/1.1 200 "), got[:120]
        await eventually(lambda: _true(server.received.endswith(b"body")),
                         what="the body reached the server")
        assert token not in server.received
        assert b"/second" not in server.received


async def _true(value: bool) -> bool:
    return value


@pytest.mark.slow
async def test_nothing_past_a_chunked_body_is_forwarded(proxy: PortProxy) -> None:
    """A chunked body reaches the server re-framed (extensions and trailers dropped),
    up to its last chunk; a request pipelined after it, token, other ports' cookies and
    all, does not, however the client splits what it sends."""
    with _canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        token = exposed.token.reveal().encode()
        second = (b"GET /second HTTP/1.1\r\nX-Psdk-Token: " + token
                  + b"\r\nCookie: psdk_token_1=other\r\n\r\n")
        body = (b"4;ext=1\r\nbody\r\n6\r\n-more-\r\n0\r\nX-Trailer: " + token
                + b"\r\n\r\n")
        head = (b"POST / HTTP/1.1\r\nX-Psdk-Token: " + token
                + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        for split in (len(head), len(head) + 9, len(head) + len(body) - 3):
            server.received = b""
            got = await _send_in_two(exposed.base_url, head + body + second, split)
            assert got.startswith(b"HTTP/1.1 200 "), got[:120]
            await eventually(lambda: _true(server.received.endswith(b"0\r\n\r\n")),
                             what="the body reached the server")
            decoded, past = ChunkedDecoder().feed(server.received.partition(b"\r\n\r\n")[2])
            assert (decoded, past) == (b"body-more-", b"")
            assert token not in server.received
            assert b"/second" not in server.received
            assert b"other" not in server.received


async def _send_in_two(url: str, raw: bytes, split: int) -> bytes:
    """Send ``raw`` in two pieces, a moment apart; return all the proxy answers."""
    with anyio.fail_after(20):
        async with await anyio.connect_tcp(*_address(url)) as stream:
            answer = b""
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await stream.send(raw[:split])
                await anyio.sleep(0.1)
                await stream.send(raw[split:])
                while True:
                    answer += await stream.receive()
            return answer


@pytest.mark.parametrize("body", [b"5\r\nhello\r\nzz\r\n", b"5\r\nhelloGET / HTTP/1.1\r\n",
                                  b"0\r\nno colon\r\n\r\n", b"5\nhello\r\n0\r\n\r\n",
                                  b"1;" + b"a" * 5000 + b"\r\n"],
                         ids=["bad-size", "no-crlf-after-data", "bad-trailer", "bare-lf",
                              "long-line"])
async def test_malformed_chunked_body_is_refused(proxy: PortProxy, body: bytes) -> None:
    """Malformed chunked framing in what came with the head is a 400 before anything
    reaches the sandbox; the connection closes."""
    with _canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        got = await _send(exposed.base_url, b"POST / HTTP/1.1\r\nX-Psdk-Token: "
                          + exposed.token.reveal().encode()
                          + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        assert got.startswith(b"HTTP/1.1 400 "), got[:120]
        assert b"malformed chunked body" in got
        assert server.received == b""


async def test_malformed_chunked_body_midway_is_a_400(proxy: PortProxy) -> None:
    """Malformed framing after the first chunks reached a server that has not answered
    yet ends the exchange with a 400; nothing of it or after it reaches the server."""
    with _canned(b"", idle=10) as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        token = exposed.token.reveal().encode()
        head = (b"POST / HTTP/1.1\r\nX-Psdk-Token: " + token
                + b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        rest = b"5\r\nworldGET /second HTTP/1.1\r\nX-Psdk-Token: " + token + b"\r\n\r\n"
        with anyio.fail_after(20):
            async with await anyio.connect_tcp(*_address(exposed.base_url)) as stream:
                await stream.send(head)
                await eventually(lambda: _true(server.received.endswith(b"hello\r\n")),
                                 what="the first chunk reached the server")
                await stream.send(rest)
                got = b""
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while True:
                        got += await stream.receive()
        assert got.startswith(b"HTTP/1.1 400 "), got[:120]
        assert server.received.endswith(b"\r\n\r\n5\r\nhello\r\n"), server.received[-40:]
        assert b"world" not in server.received
        assert token not in server.received


@pytest.mark.parametrize("coding", [b"gzip", b"chunked, gzip", b"chunked, chunked",
                                    b"chunked,"])
async def test_transfer_coding_not_ending_in_chunked_is_refused(
        proxy: PortProxy, coding: bytes) -> None:
    """A body whose end cannot be found (codings that do not end in ``chunked``) is a
    400, and nothing reaches the sandbox."""
    with _canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        got = await _send(exposed.base_url, b"POST / HTTP/1.1\r\nX-Psdk-Token: "
                          + exposed.token.reveal().encode() + b"\r\nTransfer-Encoding: "
                          + coding + b"\r\n\r\n0\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400 "), got[:120]
        assert server.received == b""


_UPGRADE = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Psdk-Token: "


@pytest.mark.slow
async def test_nothing_after_an_upgrade_request_passes_without_a_101(
        proxy: PortProxy) -> None:
    """What a client sends after a request that asks for an upgrade waits for the
    answer: an answer that is not ``101`` (or none yet) lets none of it through, so a
    request pipelined there, token and all, never reaches the sandbox."""
    for answer in (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b""):
        with _canned(answer, idle=10) as server:
            exposed = await proxy.expose("sb", 80, _canned_opener(server))
            token = exposed.token.reveal().encode()
            second = b"GET /second HTTP/1.1\r\nX-Psdk-Token: " + token + b"\r\n\r\n"
            with anyio.fail_after(20):
                async with await anyio.connect_tcp(*_address(exposed.base_url)) as stream:
                    await stream.send(_UPGRADE + token + b"\r\n\r\n" + second)
                    await eventually(lambda: _true(b"/ws" in server.received),
                                     what="the upgrade request reached the server")
                    await anyio.sleep(0.3)
                    await stream.send(second)
                    await anyio.sleep(0.3)
            assert token not in server.received
            assert b"/second" not in server.received
            await proxy.unexpose("sb", 80)


async def test_after_a_101_the_upgraded_connection_carries_everything(
        proxy: PortProxy) -> None:
    """Once the sandbox answers ``101``, what the client sent after its request (held
    until then) and all that follows pass as they come."""
    switch = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\n\r\n")
    with _canned(switch, idle=10) as server:
        exposed = await proxy.expose("sb", 80, _canned_opener(server))
        token = exposed.token.reveal().encode()
        with anyio.fail_after(20):
            async with await anyio.connect_tcp(*_address(exposed.base_url)) as stream:
                await stream.send(_UPGRADE + token + b"\r\n\r\nearly-")
                got = b""
                while b"\r\n\r\n" not in got:
                    got += await stream.receive()
                assert got.startswith(b"HTTP/1.1 101 "), got[:120]
                await stream.send(b"late")
                await eventually(lambda: _true(server.received.endswith(b"early-late")),
                                 what="the upgraded connection's bytes reached the server")
        assert token not in server.received

