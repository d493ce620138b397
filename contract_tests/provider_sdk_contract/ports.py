"""Contract: exposed ports (``ports.expose``).

A small HTTP server started in the sandbox (in python3, or in perl where the template
has no python3) answers each request with the request head it received and logs its
request line to a file; after a WebSocket upgrade it echoes every byte. The tests talk
to the exposed URL over raw sockets, so they see exactly what the proxy sends and what
the server received. A URL whose host is ``localhost``, a name under ``.localhost`` or a
loopback address is reached on 127.0.0.1, with the URL's host in the ``Host`` header (so
no name is ever resolved); any other host (a vendor's own service) is reached as named,
over TLS for ``https``.

Each test reaches the server the way the ``ExposedPort`` says: with ``token_header``
set, ``base_url`` with the token in that header, else ``url`` as it is. What only some
providers offer is a declared capability: ``ports.url_token`` (the URL carries the token)
and ``ports.revoke`` (``unexpose`` ends the address and its token).
"""

from __future__ import annotations

import ipaddress
import secrets
import ssl
import urllib.parse
from collections.abc import Mapping

import anyio
import anyio.abc
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput
from provider_sdk.models import ExposedPort
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

__all__ = ["PortsContract"]

PORT = 8765
LOG = "/tmp/psdk-contract-requests.log"

_PYTHON_SERVER = r"""
import socket, sys, threading
log = sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("ready", flush=True)
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        data = c.recv(4096)
        if not data:
            break
        head += data
    req, _, rest = head.partition(b"\r\n\r\n")
    with open(log, "ab") as f:
        f.write(req.split(b"\r\n")[0] + b"\n")
    if b"\r\nupgrade: websocket" in req.lower():
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\n\r\n" + rest)
        while data := c.recv(4096):
            c.sendall(data)
    else:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                  b"Connection: close\r\n\r\n" % len(req) + req)
    c.close()
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

_PERL_SERVER = r"""
use strict; use IO::Socket::INET;
my ($port, $log) = @ARGV;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port, Listen => 16,
                              ReuseAddr => 1) or die "listen: $!";
$SIG{CHLD} = "IGNORE"; $| = 1; print "ready\n";
while (my $c = $s->accept) {
  if (fork()) { close $c; next; }
  my $head = "";
  while ($head !~ /\r\n\r\n/) { my $n = sysread($c, my $buf, 4096); last unless $n; $head .= $buf; }
  my ($req, $rest) = split(/\r\n\r\n/, $head, 2);
  open(my $f, ">>", $log); print $f ((split(/\r\n/, $req))[0] . "\n"); close $f;
  if ($req =~ /\r\nupgrade:\s*websocket/i) {
    syswrite($c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 . "Connection: Upgrade\r\n\r\n" . ($rest // ""));
    while (my $n = sysread($c, my $buf, 4096)) { syswrite($c, $buf); }
  } else {
    syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                 . length($req) . "\r\nConnection: close\r\n\r\n" . $req);
  }
  exit 0;
}
"""


async def _start_server(sandbox: Sandbox, port: int = PORT) -> None:
    """Start the test's HTTP server on 127.0.0.1:``port`` inside; return once it listens."""
    found = await sandbox.exec("command -v python3 || command -v perl")
    interpreter = found.stdout.strip().splitlines()[0] if found.ok else ""
    if not interpreter:
        pytest.skip("the template has neither python3 nor perl to run the test's HTTP "
                    "server in")
    script = "/tmp/psdk-contract-server"
    await sandbox.files.write(script, _PERL_SERVER if interpreter.endswith("perl")
                              else _PYTHON_SERVER)
    process = await sandbox.start([interpreter, script, str(port), LOG])
    events = process.events()
    with anyio.fail_after(30):
        async for event in events:
            assert getattr(event, "exit_code", None) is None, "the test's server exited"
            if b"ready" in getattr(event, "data", b""):
                break
    await events.aclose()  # type: ignore[attr-defined]


def _address(url: str) -> tuple[str, int, bool, str]:
    """Where to connect for ``url``: host, port, TLS, and the ``Host`` header to send."""
    split = urllib.parse.urlsplit(url)
    name = split.hostname or ""
    tls = split.scheme == "https"
    port = split.port or (443 if tls else 80)
    try:
        loopback = ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost" or name.endswith(".localhost")
    return ("127.0.0.1" if loopback else name), port, tls, split.netloc


async def _connect(url: str) -> anyio.abc.ByteStream:
    host, port, tls, netloc = _address(url)
    if tls:
        return await anyio.connect_tcp(host, port, tls=True,
                                       ssl_context=ssl.create_default_context(),
                                       tls_hostname=netloc.rsplit(":", 1)[0])
    return await anyio.connect_tcp(host, port)


async def _request(url: str, headers: Mapping[str, str] | None = None, *,
                   method: str = "GET") -> tuple[int, dict[str, list[str]], bytes]:
    """One HTTP/1.1 request over a raw socket: status, headers (lower-cased names), body."""
    split = urllib.parse.urlsplit(url)
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {_address(url)[3]}", "Connection: close",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    with anyio.fail_after(30):
        async with await _connect(url) as stream:
            await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
            answer = b""
            while len(answer) < 1 << 20:
                try:
                    answer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    found: dict[str, list[str]] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        found.setdefault(name.strip().lower(), []).append(value.strip())
    return int(status_line.split(" ")[1]), found, body


def _credentials(exposed: ExposedPort) -> tuple[str, dict[str, str]]:
    """The address and headers that reach the port: the token in its header where the
    port names one, else the URL that carries it."""
    if exposed.token_header is not None:
        return exposed.base_url, {exposed.token_header: exposed.token.reveal()}
    return exposed.url, {}


async def _reaches(url: str, headers: Mapping[str, str] | None = None) -> bool:
    """Whether a request gets the server's own answer (it answers every request 200 with
    the request head); refused connections and the provider's refusals are ``False``."""
    try:
        status, _, body = await _request(url, headers)
    except OSError:
        return False
    return status == 200 and body.startswith(b"GET ")


async def _logged(sandbox: Sandbox) -> list[str]:
    """The request lines the server in the sandbox received."""
    if not await sandbox.files.exists(LOG):
        return []
    return (await sandbox.files.read_text(LOG)).splitlines()


def _with_path(url: str, path_and_query: str) -> str:
    """``url`` for another path under it, its own query (a token) kept."""
    split = urllib.parse.urlsplit(url)
    path, _, query = path_and_query.partition("?")
    joined = "&".join(q for q in (query, split.query) if q)
    return urllib.parse.urlunsplit((split.scheme, split.netloc,
                                    split.path.rstrip("/") + "/" + path, joined, ""))


def _with_token(url: str, token: str, replacement: str) -> str:
    """``url`` with its token replaced (wherever the provider puts it)."""
    assert token in url, "a URL that carries its token names it"
    return url.replace(token, replacement)


class PortsContract(ContractBase):
    """Exposed ports: reachable with the token only, gone after kill (and, where
    declared, after unexpose)."""

    async def _exposed(self, factory: Factory) -> tuple[Sandbox, ExposedPort]:
        sandbox = await factory.sandbox()
        await _start_server(sandbox)
        return sandbox, await sandbox.expose(PORT)

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_token_reaches_the_server_in_the_sandbox(self, factory: Factory) -> None:
        """With its token, the address gets the server's answer, on any path."""
        sandbox, exposed = await self._exposed(factory)
        url, headers = _credentials(exposed)
        status, _, body = await _request(url, headers)
        assert status == 200, body
        assert body.startswith(b"GET / HTTP/1.1"), body
        status, _, body = await _request(_with_path(url, "page?x=1"), headers)
        assert status == 200, body
        assert body.startswith(b"GET /page?x=1 HTTP/1.1"), body
        assert await _logged(sandbox) == ["GET / HTTP/1.1", "GET /page?x=1 HTTP/1.1"]

    @requires(Capability.PORTS_URL_TOKEN, Capability.PROCESS_BACKGROUND)
    async def test_url_reaches_the_server_as_it_is(self, factory: Factory) -> None:
        """The URL, as it is, gets the server's answer; so does another path under it."""
        sandbox, exposed = await self._exposed(factory)
        status, _, body = await _request(exposed.url)
        assert status == 200, body
        assert body.startswith(b"GET / HTTP/1.1"), body
        status, _, body = await _request(_with_path(exposed.url, "page?x=1"))
        assert status == 200, body
        assert body.startswith(b"GET /page?x=1 HTTP/1.1"), body
        assert await _logged(sandbox) == ["GET / HTTP/1.1", "GET /page?x=1 HTTP/1.1"]

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_token_never_reaches_the_sandbox(self, factory: Factory) -> None:
        """The token is taken off what is forwarded; the request's other headers and
        query parameters are kept."""
        _, exposed = await self._exposed(factory)
        url, headers = _credentials(exposed)
        _, _, body = await _request(_with_path(url, "q?keep=1"), {**headers, "X-App": "1"})
        assert exposed.token.reveal().encode() not in body, body
        assert b"GET /q?keep=1" in body, body
        assert b"X-App: 1\r\n" in body + b"\r\n", body

    @requires(Capability.PORTS_URL_TOKEN, Capability.PROCESS_BACKGROUND)
    async def test_url_token_never_reaches_the_sandbox(self, factory: Factory) -> None:
        """Nor does the token of the URL; the request's query parameters are kept."""
        _, exposed = await self._exposed(factory)
        _, _, body = await _request(_with_path(exposed.url, "q?keep=1"))
        assert exposed.token.reveal().encode() not in body, body
        assert body.startswith(b"GET /q?keep=1 HTTP/1.1"), body

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_missing_or_wrong_token_is_refused(self, factory: Factory) -> None:
        """No token, or a wrong one, is refused before the sandbox sees it."""
        sandbox, exposed = await self._exposed(factory)
        wrong = secrets.token_urlsafe(24)
        attempts: list[tuple[str, dict[str, str]]] = [(exposed.base_url, {})]
        if exposed.token_header is not None:
            attempts += [(exposed.base_url, {exposed.token_header: wrong}),
                         (exposed.base_url, {exposed.token_header: exposed.token.reveal()[:-1]})]
        for url, headers in attempts:
            status, _, _ = await _request(url, headers)
            assert status in (401, 403), (status, headers.keys())
        assert await _logged(sandbox) == []

    @requires(Capability.PORTS_URL_TOKEN, Capability.PROCESS_BACKGROUND)
    async def test_url_with_a_wrong_token_is_refused(self, factory: Factory) -> None:
        """The URL with another token in its place, or its own cut short, is refused."""
        sandbox, exposed = await self._exposed(factory)
        token = exposed.token.reveal()
        for replacement in (secrets.token_urlsafe(24), token[:-1]):
            status, _, _ = await _request(_with_token(exposed.url, token, replacement))
            assert status in (401, 403), status
        assert await _logged(sandbox) == []

    @requires(Capability.PORTS_REVOKE, Capability.PROCESS_BACKGROUND)
    async def test_url_stops_answering_after_unexpose(self, factory: Factory) -> None:
        """After ``unexpose`` the address reaches the server no more; exposing again gives
        a new token, and the old one is refused."""
        sandbox, exposed = await self._exposed(factory)
        url, headers = _credentials(exposed)
        assert await _reaches(url, headers)
        await sandbox.unexpose(PORT)
        assert not await _reaches(url, headers)
        again = await sandbox.expose(PORT)
        assert again.token != exposed.token
        assert await _reaches(*_credentials(again))
        assert not await _reaches(url, headers)

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_url_stops_answering_after_kill(self, factory: Factory) -> None:
        """Killing the sandbox ends its exposed ports."""
        sandbox, exposed = await self._exposed(factory)
        url, headers = _credentials(exposed)
        assert await _reaches(url, headers)
        await sandbox.kill()
        assert not await _reaches(url, headers)

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_websocket_passes_through(self, factory: Factory) -> None:
        """A WebSocket upgrade reaches the server, and bytes flow both ways after it."""
        _, exposed = await self._exposed(factory)
        url, headers = _credentials(exposed)
        split = urllib.parse.urlsplit(_with_path(url, "ws"))
        lines = [f"GET {split.path}{'?' + split.query if split.query else ''} HTTP/1.1",
                 f"Host: {_address(url)[3]}", "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                 *(f"{k}: {v}" for k, v in headers.items())]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        frame = bytes([0x81, 0x85, 1, 2, 3, 4]) + bytes(
            b ^ (1, 2, 3, 4)[i % 4] for i, b in enumerate(b"hello"))
        with anyio.fail_after(30):
            async with await _connect(url) as stream:
                await stream.send(request)
                answer = b""
                while b"\r\n\r\n" not in answer:
                    answer += await stream.receive()
                head, _, echoed = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 101"), head
                for _ in range(3):  # the connection stays open: several round trips
                    await stream.send(frame)
                    while len(echoed) < len(frame):
                        echoed += await stream.receive()
                    assert echoed == frame
                    echoed = b""

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_exposing_twice_keeps_the_address(self, factory: Factory) -> None:
        """Exposing a port already exposed returns the same address and token."""
        sandbox, exposed = await self._exposed(factory)
        assert await sandbox.expose(PORT) == exposed

    @requires(Capability.PORTS_EXPOSE)
    async def test_port_out_of_range_is_invalid(self, factory: Factory) -> None:
        """A port that is not 1-65535 (or not an int) is ``InvalidInput``."""
        sandbox = await factory.sandbox()
        for port in (0, 65536, -1, True, "80"):
            with pytest.raises(InvalidInput):
                await sandbox.expose(port)  # type: ignore[arg-type]
