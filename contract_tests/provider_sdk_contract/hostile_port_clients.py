"""Contract, hostile section: exposed ports (``ports.expose``) against what clients send.

The other half of the hostile ports section (:mod:`provider_sdk_contract.hostile_ports`
has the hostile server): a browser echoes the port's URL, token and all, as the
``Referer`` of every page and subresource, and a client may spell the token's parameter
percent-encoded; a page served by one port (or sandbox) sends requests to another, whose
credentials the browser may hold; a head may be larger than any relay should take; and
anyone on the machine may open connections that never show a token. Whatever they do,
no token reaches the server in the sandbox, a page of another origin cannot use the
port, a head past 32 KiB is a ``431``, and token holders are answered while the crowd
waits. The same hostile server logs every byte it receives.
"""

from __future__ import annotations

import urllib.parse

import anyio
import anyio.abc

from provider_sdk.capabilities import Capability
from provider_sdk.models import ExposedPort
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.hostile_ports import (
    OTHER_PORT,
    PORT,
    PROMPT,
    _fetch,
    _passes,
    _received,
    _request_bytes,
    _start,
)
from provider_sdk_contract.markers import requires
from provider_sdk_contract.ports import _address, _connect, _credentials, _with_path

__all__ = ["HostilePortClientsContract"]

CROWD = 400
"""Connections held open by someone without a token, at once."""
_UPGRADE = ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]


def _origin(url: str, *, port_offset: int = 0) -> str:
    """The origin of ``url`` (``scheme://host:port``), its port moved by ``port_offset``
    (another origin of the same site)."""
    split = urllib.parse.urlsplit(url)
    port = (split.port or (443 if split.scheme == "https" else 80)) + port_offset
    return f"{split.scheme}://{split.hostname}:{port}"


def _encoded_names(exposed: ExposedPort) -> list[str]:
    """``exposed.url`` with the name of the query parameter that carries its token
    percent-encoded, two ways; none where the token is not a query parameter."""
    split = urllib.parse.urlsplit(exposed.url)
    token = exposed.token.reveal()
    urls = []
    for piece in split.query.split("&"):
        name, _, value = piece.partition("=")
        if name and urllib.parse.unquote(value) == token:
            every = "".join(f"%{byte:02X}" for byte in name.encode())
            underscore = name.replace("_", "%5f")
            for spelled in dict.fromkeys((every, underscore)):
                query = split.query.replace(piece, f"{spelled}={value}")
                urls.append(urllib.parse.urlunsplit(split._replace(query=query)))
    return urls


async def _status(url: str, headers: dict[str, str], path: str, *,
                  method: str = "GET", extra: list[str] | None = None) -> int:
    """The status of the first final or switching answer to one request (it need not
    end: a ``101`` leaves the connection open)."""
    with anyio.fail_after(PROMPT):
        async with await _connect(url) as stream:
            await stream.send(_request_bytes(url, headers, path, method=method,
                                             extra=extra or []))
            answer = b""
            try:
                while True:
                    while b"\r\n\r\n" not in answer:
                        answer += await stream.receive()
                    if not answer.startswith(b"HTTP/1.1 100"):
                        break
                    answer = answer.partition(b"\r\n\r\n")[2]
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class HostilePortClientsContract(ContractBase):
    """Clients of an exposed port: what a browser echoes, what a page of another origin
    sends, heads too large and connections that never show a token."""

    async def _hostile(self, factory: Factory) -> tuple[Sandbox, ExposedPort]:
        sandbox = await factory.sandbox()
        await _start(sandbox)
        return sandbox, await sandbox.expose(PORT)

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_token_echoed_by_a_client_never_reaches_the_server(
            self, factory: Factory) -> None:
        """The port's URL (a page under it, another port's URL) as ``Referer``, and the
        URL with its token parameter's name percent-encoded: the requests reach the
        server, and neither port's token does."""
        sandbox, exposed = await self._hostile(factory)
        await _start(sandbox, OTHER_PORT)
        other = await sandbox.expose(OTHER_PORT)
        url, headers = _credentials(exposed)
        referers = [exposed.url, _with_path(exposed.url, "page?x=1"), other.url,
                    _with_path(other.url, "other?y=2")]
        for number, referer in enumerate(referers):
            status, head, _ = await _fetch(url, headers, f"ok?referer-{number}",
                                           extra=[f"Referer: {referer}"])
            assert status == 200, (number, head[:200])
        for number, encoded in enumerate(_encoded_names(exposed)):
            await _fetch(encoded, {}, f"ok?encoded-{number}")  # accepted or refused
        received = await _received(sandbox)
        assert f"referer-{len(referers) - 1}".encode() in received, (
            "the server got none of the requests")
        assert exposed.token.reveal().encode() not in received, (
            "the server in the sandbox got the port's token")
        assert other.token.reveal().encode() not in received, (
            "the server in the sandbox got another port's token")

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_page_of_another_origin_cannot_use_the_port(
            self, factory: Factory) -> None:
        """With the port's credentials (and its cookie, where its URL sets one), a
        WebSocket or a fetch whose ``Origin`` is another origin, and a subresource that
        ``Sec-Fetch-Site`` says another site's page loads, are refused before the server
        sees them; the port's own origin, a link followed from elsewhere and a client
        with no page pass."""
        sandbox, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        if Capability.PORTS_URL_TOKEN in factory.provider.capabilities:
            _, head, _ = await _fetch(exposed.url, {}, "ok?cookie")
            cookies = [line.partition(b":")[2].split(b";")[0].strip().decode("latin-1")
                       for line in head.split(b"\r\n")
                       if line.lower().startswith(b"set-cookie:")]
            if cookies:
                headers = {**headers, "Cookie": "; ".join(cookies)}
        elsewhere = _origin(exposed.base_url, port_offset=1)
        refused = [
            ("GET", ["Origin: " + elsewhere, *_UPGRADE]),
            ("POST", ["Origin: " + elsewhere, "Sec-Fetch-Site: same-site",
                      "Sec-Fetch-Mode: cors", "Content-Length: 0"]),
            ("GET", ["Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: no-cors",
                     "Sec-Fetch-Dest: script"]),
        ]
        for number, (method, extra) in enumerate(refused):
            path = "switch" if "Upgrade: websocket" in extra else "ok"
            status = await _status(url, headers, f"{path}?cross-{number}", method=method,
                                   extra=extra)
            assert 400 <= status < 500, (number, status)
        assert b"cross-" not in await _received(sandbox), (
            "a request from a page of another origin reached the server")
        own = _origin(exposed.base_url)
        assert await _status(url, headers, "switch?own", extra=[f"Origin: {own}",
                                                                *_UPGRADE]) == 101
        passing = [["Origin: " + own, "Sec-Fetch-Site: same-origin"],
                   ["Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate",
                    "Sec-Fetch-Dest: document"], []]
        for number, extra in enumerate(passing):
            assert await _status(url, headers, f"ok?own-{number}", extra=extra) == 200, extra

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_head_past_32_kib_is_a_431(self, factory: Factory) -> None:
        """A request head of 40 KiB or 90 KiB, credentials and all, sent in one piece, is
        refused with ``431``, and none of it reaches the server."""
        sandbox, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        for size in (40 * 1024, 90 * 1024):
            status, head, _ = await _fetch(url, headers, f"ok?big-{size}",
                                           extra=["X-Pad: " + "a" * size])
            assert status == 431, (size, head[:200])
        assert b"big-" not in await _received(sandbox), "a head too large was relayed"
        await _passes(url, headers, "after")

    @requires(Capability.PORTS_EXPOSE, Capability.PROCESS_BACKGROUND)
    async def test_hostile_port_crowd_without_a_token_keeps_no_token_holder_out(
            self, factory: Factory) -> None:
        """400 connections from this machine that sent part of a head and no token, held
        open: requests with the port's credentials are answered meanwhile."""
        _, exposed = await self._hostile(factory)
        url, headers = _credentials(exposed)
        await _passes(url, headers, "warm")
        crowd: list[anyio.abc.ByteStream] = []
        try:
            with anyio.fail_after(60):
                for _ in range(CROWD):
                    crowd.append(stream := await _connect(exposed.base_url))
                    await stream.send(f"GET / HTTP/1.1\r\nHost: {_address(url)[3]}\r\n"
                                      .encode())
            for number in range(3):
                await _passes(url, headers, f"meanwhile-{number}")
        finally:
            for stream in crowd:
                await stream.aclose()
