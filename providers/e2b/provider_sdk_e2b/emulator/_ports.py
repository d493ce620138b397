"""A sandbox's own ports, reached by host routing (``<port>-<id>.<domain>``), as E2B's
edge and CubeProxy reach them.

A data-plane request for a port other than envd's and the code interpreter's goes to
the server listening on that port inside the sandbox. The emulator exposes the port on
its backend (``ports.expose``: on local and docker, a proxy on 127.0.0.1 whose
connections the backend's own channel carries into the sandbox, which keeps loopback
only), and hands the client's connection to :func:`relay`: the request's head goes on
with the vendor's traffic token taken off and the backend's token put in its header,
then bytes flow both ways until either side ends, which carries WebSockets and streamed
answers. Nothing listening on the port is the backend proxy's own 502.

A sandbox created with ``allowPublicTraffic: false`` has a traffic access token, which
every request to such a port must carry in ``e2b-traffic-access-token`` (Cube also takes
``cube-traffic-access-token``); without it, or with a wrong one, the answer is a 403
with an empty body, before anything reaches the sandbox.
"""

from __future__ import annotations

import contextlib
import hmac
import urllib.parse

import anyio
import anyio.abc

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.models import ExposedPort
from provider_sdk_e2b.emulator._http import Request, Response, Takeover, json_response
from provider_sdk_e2b.emulator._records import SandboxRecord

__all__ = ["TRAFFIC_HEADERS", "relay", "traffic_denied"]

TRAFFIC_HEADERS = ("e2b-traffic-access-token", "cube-traffic-access-token")
"""The headers a traffic access token is taken from."""
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer"})
_CHUNK = 1 << 16


def traffic_denied(record: SandboxRecord, request: Request) -> Response | None:
    """The 403 for a request to a sandbox with private traffic that lacks its token."""
    if record.traffic_token is None:
        return None
    want = record.traffic_token.encode()
    for name in TRAFFIC_HEADERS:
        given = request.headers.get(name)
        if given is not None and hmac.compare_digest(given.encode("latin-1"), want):
            return None
    return Response(403)


async def relay(record: SandboxRecord, port: int, request: Request) -> Response | Takeover:
    """Hand the request to the server on ``port`` inside the sandbox."""
    backend = record.sandbox
    if Capability.PORTS_EXPOSE not in backend.provider.capabilities:
        return json_response(502, {"sandboxId": record.id, "port": port, "code": 502,
                                   "message": "The sandbox is running but port is not open "
                                              "(the emulator's backend exposes no ports)"})
    try:
        exposed = await backend.expose(port)
    except errors.SandboxError as exc:
        return json_response(502, {"sandboxId": record.id, "port": port, "code": 502,
                                   "message": exc.message})
    head = _head(request, exposed)

    async def take_over(client: anyio.abc.ByteStream, rest: bytes) -> None:
        address = urllib.parse.urlsplit(exposed.base_url)
        try:
            upstream = await anyio.connect_tcp(address.hostname or "127.0.0.1",
                                               address.port or 80)
        except OSError:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                     OSError):
                await client.send(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                                  b"Connection: close\r\n\r\n")
            return
        async with upstream:
            await upstream.send(head + rest)
            await _pipe(client, upstream)

    return Takeover(take_over)


def _head(request: Request, exposed: ExposedPort) -> bytes:
    """The request's head for the backend: the traffic token off, its own token on."""
    header = exposed.token_header or "X-Psdk-Token"
    dropped = {*TRAFFIC_HEADERS, *_HOP, header.lower()}
    target = request.path + (f"?{request.query_string}" if request.query_string else "")
    lines = [f"{request.method} {target} HTTP/1.1"]  # (CubeProxy's path form taken off)
    lines += [f"{name}: {value}" for name, value in request.raw_headers
              if name.lower() not in dropped]
    if "upgrade" in request.headers:
        lines.append("Connection: Upgrade")
    lines.append(f"{header}: {exposed.token.reveal()}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _pipe(client: anyio.abc.ByteStream, upstream: anyio.abc.ByteStream) -> None:
    """Copy bytes both ways; the upstream's end ends the exchange."""

    async def forward() -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                                 anyio.ClosedResourceError, OSError):
            while True:
                await upstream.send(await client.receive(_CHUNK))
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                 OSError):
            await upstream.send_eof()

    async with anyio.create_task_group() as tg:
        tg.start_soon(forward)
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                                 anyio.ClosedResourceError, OSError):
            while True:
                await client.send(await upstream.receive(_CHUNK))
        tg.cancel_scope.cancel()
