"""Contract, hostile section: exposed ports (``ports.expose``) against a hostile server.

The server listening in the sandbox is the sandbox's code, and attacks whatever relays
its port: it floods endless answers, never answers, never accepts, drips one byte at a
time, holds connections open, answers heads too large or not HTTP at all, frames a body
two ways, plants the token's cookie, and points its client at other ports of the host.
Whatever it does, the caller's memory stays bounded, the caller is never hung, other
traffic passes, ``unexpose`` and kill end every connection, the token never reaches the
sandbox, a request for one port never reaches another, and a broken answer (or one that
cannot come) is a ``502``. The relays of local and docker, and the emulators', run in
this process: its memory and open descriptors are theirs too, and are measured where
``/proc`` shows them.

The server is a perl script (every template of the suite has perl); it behaves by the
request's path, logs every byte it receives to a file, and keeps what it holds open
whatever its client does.
"""

from __future__ import annotations

import itertools
import os
import secrets
import urllib.parse
from collections.abc import Mapping, Sequence

import anyio
import anyio.abc
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.models import ExposedPort
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.ports import _address, _connect, _credentials, _with_path
from provider_sdk_contract.support import RssGrowth, eventually

__all__ = ["HostilePortsContract"]

PORT = 8766
OTHER_PORT = 8767
LOG = "/tmp/psdk-hostile-port-{port}.log"
_MiB = 1 << 20
MEMORY_BOUND = 64 * _MiB
"""How far this process may grow while a flood passes a client that pauses."""
CLIENT_TIMEOUT = 2.0
"""Seconds the test's client waits for an answer that never comes."""
PROMPT = 15.0
"""Seconds within which an ended port ends its connections and a refusal comes."""
FD_SLACK = 8
"""Descriptors this process may keep past its count before the connections (pooled
connections to an engine, say), or one per connection where there were more: each
leaked connection holds at least two."""

_SERVER = r"""
use strict; use IO::Socket::INET;
my ($port, $log) = @ARGV;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port,
                              Listen => 128, ReuseAddr => 1) or die "listen: $!";
$SIG{CHLD} = "IGNORE"; $SIG{PIPE} = "IGNORE"; $| = 1; print "ready\n";
sub logged { open(my $f, ">>", $log) or return; binmode $f; syswrite($f, $_[0]); close $f; }
sub out { my ($c, $data) = @_; defined(syswrite($c, $data)) or exit 0; }
sub hold { my $c = shift; while (sysread($c, my $buf, 65536)) { logged($buf); }
           sleep 3600 while 1; }
sub nap { select(undef, undef, undef, 0.05); }
sub head { my $extra = shift; "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n$extra"; }
while (my $c = $s->accept) {
  if (fork()) { close $c; next; }
  binmode $c;
  my $head = "";
  while ($head !~ /\r\n\r\n/) { my $n = sysread($c, my $buf, 65536); last unless $n;
                                $head .= $buf; logged($buf); }
  my ($path, $query) = $head =~ m{^\S+ /?([^?\s]*)\??(\S*)};
  $path //= ""; $query //= "";
  my ($other) = $query =~ /(?:^|&)to=(\d+)/; $other //= 1;
  if ($path eq "flood") {
    out($c, head("Connection: close\r\n\r\n"));
    my $zeros = "\0" x 65536; out($c, $zeros) while 1;
  } elsif ($path eq "silent") { hold($c);
  } elsif ($path eq "drip") {
    for my $byte (split //, "HTTP/1.1 200 OK\r\nX-Drip: ") { out($c, $byte); nap(); }
    while (1) { out($c, "a"); nap(); }
  } elsif ($path eq "hold") { out($c, head("Connection: close\r\n\r\nheld\n")); hold($c);
  } elsif ($path eq "redirect") {
    out($c, "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:$other/stolen\r\n"
            . "X-Accel-Redirect: http://127.0.0.1:$other/internal\r\n"
            . "Refresh: 0; url=http://127.0.0.1:$other/refresh\r\n"
            . "Content-Length: 0\r\nConnection: close\r\n\r\n");
  } elsif ($path eq "cookie") {
    out($c, "HTTP/1.1 103 Early Hints\r\nSet-Cookie: psdk_token_$other=forged\r\n\r\n");
    out($c, head("Set-Cookie: psdk_token_$other=forged; Path=/\r\n"
                 . "Set-Cookie: psdk_token=forged; Path=/\r\n"
                 . "Set-Cookie: PSDK_TOKEN_$other=forged\r\nSet-Cookie: app=kept; Path=/\r\n"
                 . "Content-Length: 2\r\nConnection: close\r\n\r\nok"));
  } elsif ($path eq "interim") {
    out($c, "HTTP/1.1 100 Continue\r\n\r\n" . head("Content-Length: 2\r\nConnection: keep-alive\r\n"
            . "Keep-Alive: timeout=60\r\n\r\nok")); hold($c);
  } elsif ($path eq "bighead") {
    out($c, head("X-Big: " . ("a" x (1 << 20)) . "\r\nContent-Length: 2\r\n"
                 . "Connection: keep-alive\r\n\r\nok")); hold($c);
  } elsif ($path eq "endlesshead") {
    out($c, "HTTP/1.1 200 OK\r\nX-Endless: "); my $a = "a" x 65536; out($c, $a) while 1;
  } elsif ($path eq "garbage") { out($c, ("\x00\xff\xfe\x80" x 1024) . "\r\n\r\n");
  } elsif ($path eq "conflict") {
    out($c, head("Content-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
                 . "0\r\n\r\nHTTP/1.1 200 OK\r\nSet-Cookie: psdk_token_$other=forged\r\n"
                 . "Content-Length: 0\r\n\r\n")); hold($c);
  } elsif ($path eq "barelf") {
    out($c, "HTTP/1.1 200 OK\nContent-Length: 2\nConnection: keep-alive\n\nok"); hold($c);
  } elsif ($path eq "nul") {
    out($c, head("X-Nul: a\0b\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"));
  } elsif ($path eq "switch") {
    out($c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\n");
    hold($c);
  } elsif ($path eq "empty") {
  } else {
    my ($req) = split(/\r\n\r\n/, $head, 2); $req //= "";
    out($c, head("Content-Length: " . length($req) . "\r\nConnection: close\r\n\r\n" . $req));
  }
  close $c; exit 0;
}
"""

_UNACCEPTING = r"""
use strict; use IO::Socket::INET;
my ($port) = @ARGV;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $port,
                              Listen => 0, ReuseAddr => 1) or die "listen: $!";
my @queued = map { IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port,
                                         Blocking => 0) } 1 .. 8;
$| = 1; print "ready\n"; sleep 3600 while 1;
"""
"""A server that listens and never accepts, its queue filled by its own connections: a
connection to it is neither refused nor taken, it waits."""

_MALFORMED = ("bighead", "endlesshead", "garbage", "conflict", "barelf", "nul", "switch",
              "empty")
"""Paths whose answer is broken: each must reach the caller as a ``502``."""


async def _start(sandbox: Sandbox, port: int = PORT) -> None:
    """Start the hostile server on 127.0.0.1:``port`` inside; return once it listens."""
    found = await sandbox.exec("command -v perl")
    if not found.ok:
        pytest.skip("the template has no perl to run the hostile server in")
    script = "/tmp/psdk-hostile-server"
    await sandbox.files.write(script, _SERVER)
    await _ready(sandbox, ["perl", script, str(port), LOG.format(port=port)])


async def _ready(sandbox: Sandbox, argv: list[str]) -> None:
    """Start ``argv``; return once it prints ``ready``."""
    process = await sandbox.start(argv)
    events = process.events()
    with anyio.fail_after(30):
        async for event in events:
            assert getattr(event, "exit_code", None) is None, f"{argv[0]} exited"
            if b"ready" in getattr(event, "data", b""):
                break
    await events.aclose()  # type: ignore[attr-defined]


async def _received(sandbox: Sandbox, port: int = PORT) -> bytes:
    """Every byte the server on ``port`` received."""
    log = LOG.format(port=port)
    return await sandbox.files.read(log) if await sandbox.files.exists(log) else b""


def _request_bytes(url: str, headers: Mapping[str, str], path: str, *,
                   method: str = "GET", extra: Sequence[str] = (), body: bytes = b"",
                   target: str | None = None) -> bytes:
    """One request for ``path`` under ``url``, with the credentials in ``headers``."""
    split = urllib.parse.urlsplit(_with_path(url, path))
    if target is None:
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {_address(url)[3]}",
             *(f"{k}: {v}" for k, v in headers.items()), *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _send(url: str, headers: Mapping[str, str], path: str,
                **request: object) -> anyio.abc.ByteStream:
    """A connection that has sent a request for ``path``."""
    stream = await _connect(url)
    await stream.send(_request_bytes(url, headers, path, **request))  # type: ignore[arg-type]
    return stream


async def _answer(stream: anyio.abc.ByteStream, limit: int = 4 * _MiB) -> bytes:
    """What comes on ``stream`` until it ends (or ``limit`` bytes)."""
    answer = b""
    while len(answer) < limit:
        try:
            answer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            break
    return answer


async def _final_head(stream: anyio.abc.ByteStream) -> tuple[bytes, bytes]:
    """The first final (non-1xx) answer head on ``stream``, and what followed it."""
    data = b""
    while True:
        while b"\r\n\r\n" not in data:
            data += await stream.receive()
        head, _, data = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 1"):
            return head, data


async def _fetch(url: str, headers: Mapping[str, str], path: str,
                 **request: object) -> tuple[int, bytes, bytes]:
    """Status, head and body of one request on a connection of its own."""
    with anyio.fail_after(PROMPT):
        async with await _send(url, headers, path, **request) as stream:
            answer = await _answer(stream)
    head, _, body = answer.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, head, body


async def _passes(url: str, headers: Mapping[str, str], marker: str) -> None:
    """Assert that an ordinary request reaches the server and gets its answer."""
    status, _, body = await _fetch(url, headers, f"ok?{marker}")
    assert status == 200, (status, body[:200])
    assert f"?{marker}".encode() in body, body[:200]


def _open_fds() -> int | None:
    """How many descriptors this process holds, where ``/proc`` says."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


async def _fds_settle(before: int | None, what: str, connections: int = 1) -> None:
    """Wait until this process holds no more descriptors than ``before`` (and slack)
    after ``connections`` ended."""
    if before is None:
        return

    async def settled() -> bool:
        now = _open_fds()
        return now is not None and now <= before + max(FD_SLACK, connections)

    await eventually(settled, what=f"{what}: this process holds {_open_fds()} descriptors, "
                                   f"{before} before", timeout=PROMPT)


async def _ended(stream: anyio.abc.ByteStream) -> None:
    """Read ``stream`` until it ends; fail if it is still open after :data:`PROMPT`."""
    with anyio.fail_after(PROMPT):
        await _answer(stream, limit=1 << 40)


class HostilePortsContract(ContractBase):
    """A hostile server behind an exposed port: floods, silence, held connections,
    broken and deceitful answers are contained."""

    async def _hostile(self, factory: Factory) -> tuple[Sandbox, ExposedPort]:
        sandbox = await factory.sandbox()
        await _start(sandbox)
        return sandbox, await sandbox.expose(PORT)

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_flood_streams_and_keeps_memory_bounded(
            self, factory: Factory) -> None:
        """An endless answer reaches the client as a stream; while the client pauses,
        the relays hold it back instead of buffering it: this process grows by less
        than 64 MiB over 96 MiB read, and the relays end once the client leaves."""
        _, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        await _passes(url, headers, "warm")
        fds = _open_fds()
        received = 0
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(120):
                async with await _send(url, headers, "flood") as stream:
                    head, data = await _final_head(stream)
                    assert head.startswith(b"HTTP/1.1 200"), head[:200]
                    received = len(data)
                    while received < 8 * _MiB:
                        data = await stream.receive()
                        assert data.count(0) == len(data)
                        received += len(data)
                    await anyio.sleep(3)  # the client stops reading; the server does not
                    while received < 96 * _MiB:
                        received += len(await stream.receive())
        assert rss.growth < MEMORY_BOUND, (
            f"this process grew by {rss.growth / _MiB:.0f} MiB while a flood passed")
        await _fds_settle(fds, "the flood's relays did not end with their client")

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_silent_server_hangs_no_one(self, factory: Factory) -> None:
        """Connections to a server that never answers, or drips its head a byte at a
        time, end with the client's timeout; meanwhile other requests to the port,
        another port and another sandbox pass, and once the clients leave, so do the
        relays."""
        sandbox, exposed = await self._hostile(factory)
        await _start(sandbox, OTHER_PORT)
        other_port = await sandbox.expose(OTHER_PORT)
        other_sandbox, other_sandbox_port = await self._hostile(factory)
        assert other_sandbox.id != sandbox.id
        url, headers = _credentials(exposed)
        others = [_credentials(other_port), _credentials(other_sandbox_port)]
        for other_url, other_headers in [(url, headers), *others]:
            await _passes(other_url, other_headers, "warm")
        fds = _open_fds()
        waiting = [await _send(url, headers, path) for path in ["silent", "drip"] * 6]
        got: list[tuple[bytes, bytes]] = []
        try:
            async def wait(stream: anyio.abc.ByteStream) -> None:
                with anyio.move_on_after(CLIENT_TIMEOUT):
                    got.append(await _final_head(stream))

            async with anyio.create_task_group() as tg:
                for stream in waiting:
                    tg.start_soon(wait, stream)
                for number, (other_url, other_headers) in enumerate([(url, headers), *others]):
                    await _passes(other_url, other_headers, f"meanwhile-{number}")
            assert got == [], "a server that never answered had an answer relayed"
        finally:
            for stream in waiting:
                await stream.aclose()
        await _fds_settle(fds, "the relays of the connections the clients left did not end",
                          len(waiting))
        await _passes(url, headers, "after")

    async def _held(self, factory: Factory, count: int) -> tuple[
            Sandbox, list[anyio.abc.ByteStream], int | None]:
        """``count`` connections the server answered and then holds open, and the
        descriptors this process held before them."""
        sandbox, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        await _passes(url, headers, "warm")
        fds = _open_fds()
        held = []
        with anyio.fail_after(60):
            for _ in range(count):
                held.append(stream := await _send(url, headers, "hold"))
                head, body = await _final_head(stream)
                assert head.startswith(b"HTTP/1.1 200"), head[:200]
                while b"held" not in body:
                    body += await stream.receive()
        await _passes(url, headers, "meanwhile")
        return sandbox, held, fds

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_held_connections_end_on_kill(self, factory: Factory) -> None:
        """Connections a server holds open, however many, end when the sandbox is
        killed, and the relays with them."""
        sandbox, held, fds = await self._held(factory, 16)
        try:
            await sandbox.kill()
            for stream in held:
                await _ended(stream)
        finally:
            for stream in held:
                await stream.aclose()
        await _fds_settle(fds, "the relays of a killed sandbox's connections did not end",
                          len(held))

    @requires(Capability.PORTS_REVOKE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_held_connections_end_on_unexpose(
            self, factory: Factory) -> None:
        """Connections a server holds open end with ``unexpose``, and the relays with
        them; the sandbox's other traffic is unaffected."""
        sandbox, held, fds = await self._held(factory, 16)
        try:
            await sandbox.unexpose(PORT)
            for stream in held:
                await _ended(stream)
        finally:
            for stream in held:
                await stream.aclose()
        await _fds_settle(fds, "the relays of an unexposed port's connections did not end",
                          len(held))
        again = await sandbox.expose(PORT)
        await _passes(*_credentials(again), "again")

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_answer_cannot_send_the_relay_to_the_host(
            self, factory: Factory) -> None:
        """An answer that points at another port of this machine (``Location``,
        ``X-Accel-Redirect``, ``Refresh``) reaches the client as it is: no relay
        follows it."""
        _, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        reached: list[bytes] = []
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener, \
                anyio.create_task_group() as tg:
            async def record(stream: anyio.abc.SocketStream) -> None:
                async with stream:
                    reached.append(await _answer(stream, limit=4096))

            tg.start_soon(listener.serve, record)
            host_port = listener.extra(anyio.abc.SocketAttribute.local_port)
            status, head, _ = await _fetch(url, headers, f"redirect?to={host_port}")
            await anyio.sleep(0.5)
            tg.cancel_scope.cancel()
        assert status == 302, head[:300]
        assert f"127.0.0.1:{host_port}/stolen".encode() in head, head[:300]
        assert reached == [], "a relay followed the sandbox's answer to a port of the host"

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_answer_cannot_plant_token_cookies(
            self, factory: Factory) -> None:
        """A ``Set-Cookie`` of a ``psdk_token`` cookie (this port's, another's, any
        case, in an interim head too) is taken off the answer; the application's own
        cookies pass."""
        _, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        other = urllib.parse.urlsplit(url).port or 80
        with anyio.fail_after(PROMPT):
            async with await _send(url, headers, f"cookie?to={other + 1}") as stream:
                answer = await _answer(stream)
        assert answer.endswith(b"\r\n\r\nok"), answer[-300:]
        cookies = [line.partition(b":")[2].strip() for line in answer.split(b"\r\n")
                   if line.partition(b":")[0].strip().lower() == b"set-cookie"]
        assert not [c for c in cookies if b"forged" in c], cookies
        assert any(c.startswith(b"app=kept") for c in cookies), cookies

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_token_never_reaches_the_server(
            self, factory: Factory) -> None:
        """Whatever the server answers to keep a connection (``100 Continue`` then
        keep-alive, a head too large, a body framed two ways), a client that reuses
        every connection it may, pipelines, or smuggles a request in a body framed two
        ways never gets the token, or another port's cookie, to the server."""
        sandbox, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        token = exposed.token.reveal()
        stolen = secrets.token_urlsafe(24)  # another port's cookie, as a browser sends it
        # The token where the provider takes it, and in the cookies a browser would send.
        cookie = {"Cookie": f"psdk_token_1={stolen}; psdk_token_{PORT}={token}; app=1"}
        ways = [(url, {**headers, **cookie})]
        if Capability.PORTS_URL_TOKEN in factory.provider.capabilities:
            ways.append((exposed.url, cookie))
        for (way, creds), path in itertools.product(ways, ("interim", "conflict", "bighead",
                                                           "ok")):
            with anyio.fail_after(PROMPT):
                async with await _connect(way) as stream:
                    first = _request_bytes(way, creds, path)
                    second = _request_bytes(way, creds, "second")
                    await stream.send(first + (second if path == "ok" else b""))
                    try:
                        head, _ = await _final_head(stream)
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        continue
                    if b"connection: close" not in head.lower():
                        await stream.send(second)  # as a browser reuses a connection
                        await anyio.sleep(0.5)
        received = await _received(sandbox)
        assert token.encode() not in received, "the server in the sandbox got the token"
        assert stolen.encode() not in received, "the server got another port's cookie"
        smuggled = _request_bytes(url, {**headers, **cookie}, "smuggled")
        chunked = b"0\r\n\r\n" + smuggled
        status, _, _ = await _fetch(url, headers, "interim", method="POST", body=chunked,
                                    extra=[f"Content-Length: {len(chunked)}",
                                           "Transfer-Encoding: chunked"])
        assert status >= 400, "a request framed two ways was relayed"
        received = await _received(sandbox)
        assert token.encode() not in received, "the smuggled request's token got through"
        assert b"/smuggled" not in received, "a smuggled request reached the server"

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_nothing_pipelined_after_a_chunked_body_reaches_the_server(
            self, factory: Factory) -> None:
        """A request with a chunked body (extensions, a trailer carrying the token), or
        one that asks for an upgrade the server never answers, followed on its
        connection by a request carrying the token and another port's cookie: the
        server gets the body, sent whole or split mid-chunk, and none of the token, the
        cookie or the second request."""
        sandbox, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        token = exposed.token.reveal()
        stolen = secrets.token_urlsafe(24)  # another port's cookie, as a browser sends it
        cookie = {"Cookie": f"psdk_token_1={stolen}; psdk_token_{PORT}={token}; app=1"}
        second = _request_bytes(url, {**headers, **cookie}, "pipelined")
        for number, split in enumerate((None, 15)):
            marker = f"body-{number}-".encode()
            body = (b"5;ext=\"a b\"\r\nfirst\r\n%x\r\n%b\r\n0\r\nX-Trailer: %b\r\n\r\n"
                    % (len(marker), marker, token.encode()))
            first = _request_bytes(url, headers, "silent", method="POST", body=body,
                                   extra=["Transfer-Encoding: chunked"])
            at = len(first) - len(body) + split if split is not None else len(first)
            with anyio.fail_after(PROMPT):
                async with await _connect(url) as stream:
                    await stream.send(first[:at])
                    await anyio.sleep(0.2)
                    await stream.send(first[at:] + second)

                    async def arrived(marker: bytes = marker) -> bool:
                        return marker in await _received(sandbox)

                    await eventually(arrived, what="the chunked body reached the server")
                    await anyio.sleep(0.5)  # what follows it would arrive meanwhile
        upgrade = _request_bytes(url, headers, "silent", extra=[
            "Upgrade: websocket", "Connection: Upgrade", "X-Marker: upgrade"])
        with anyio.fail_after(PROMPT):
            async with await _connect(url) as stream:
                await stream.send(upgrade + second)

                async def asked() -> bool:
                    return b"X-Marker: upgrade" in await _received(sandbox)

                await eventually(asked, what="the upgrade request reached the server")
                await anyio.sleep(0.5)
        received = await _received(sandbox)
        assert b"first" in received, "the server got none of the first chunk"
        assert token.encode() not in received, "the server in the sandbox got the token"
        assert stolen.encode() not in received, "the server got another port's cookie"
        assert b"/pipelined" not in received, "a request after a chunked body got through"

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_request_never_reaches_another_port(
            self, factory: Factory) -> None:
        """Whatever a request names (an absolute target, ``Host``, ``CONNECT``,
        forwarding headers, a request pipelined or smuggled after it), the exposed
        port's address reaches that port only; another port of the sandbox, listening
        but not exposed, gets nothing."""
        sandbox, exposed = await self._hostile(factory)
        await _start(sandbox, OTHER_PORT)
        url, headers = _credentials(exposed)
        elsewhere = f"127.0.0.1:{OTHER_PORT}"
        smuggled = f"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: {elsewhere}\r\n\r\n".encode()
        attempts: list[dict[str, object]] = [
            {"target": f"http://{elsewhere}/absolute"},
            {"method": "CONNECT", "target": elsewhere},
            {"extra": [f"X-Forwarded-Host: {elsewhere}", f"X-Forwarded-Port: {OTHER_PORT}",
                       f"Forwarded: host={elsewhere}"]},
            {"extra": ["Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings",
                       "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"]},
            {"body": b"GET /pipelined HTTP/1.1\r\nHost: " + elsewhere.encode() + b"\r\n\r\n"},
            {"method": "POST", "body": smuggled, "extra": [
                f"Content-Length: {len(smuggled)}", "Transfer-Encoding: chunked"]},
        ]
        for attempt in attempts:
            await _fetch(url, headers, "ok", **attempt)
        await _fetch(url, headers, "ok", extra=[f"X-Original-Host: {elsewhere}"])
        assert await _received(sandbox, OTHER_PORT) == b"", (
            "a request to the exposed port reached another port")
        assert b"X-Original-Host" in await _received(sandbox), (
            "the exposed port's own server got none of the requests")

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_broken_answer_is_a_502(self, factory: Factory) -> None:
        """A head too large (1 MiB, or endless), bytes that are not HTTP, a body framed
        two ways, bare line feeds, a NUL in a header, a switch nobody asked for, or no
        answer at all: each reaches the caller as a ``502`` with none of it, promptly,
        and the port keeps serving."""
        _, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        for path in _MALFORMED:
            status, head, body = await _fetch(url, headers, path)
            assert status == 502, (path, head[:200])
            assert b"X-Big" not in head + body, path
            assert b"\xff\xfe" not in body, path
            await _passes(url, headers, f"after-{path}")

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_server_that_never_accepts_is_a_prompt_502(
            self, factory: Factory) -> None:
        """A server that listens but never accepts (its queue full, so a connection
        waits instead of being refused): a request to it is answered ``502`` within
        15 s, while other requests to the sandbox pass, and the relay it cost ends."""
        sandbox, exposed = await self._hostile(factory)
        script = "/tmp/psdk-unaccepting-server"
        await sandbox.files.write(script, _UNACCEPTING)
        await _ready(sandbox, ["perl", script, str(OTHER_PORT)])
        stuck = await sandbox.expose(OTHER_PORT)
        url, headers = _credentials(exposed)
        await _passes(url, headers, "warm")
        fds = _open_fds()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_passes, url, headers, "meanwhile")
            status, head, _ = await _fetch(*_credentials(stuck), "anything")
        assert status == 502, head[:200]
        await _fds_settle(fds, "the relay to a server that never accepted did not end")
        await _passes(url, headers, "after")
