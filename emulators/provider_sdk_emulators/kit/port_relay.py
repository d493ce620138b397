"""How the emulators reach a server listening in one of their backend's sandboxes.

A vendor's edge (E2B's host routing, CubeProxy, Daytona's preview proxy) forwards a
request for a sandbox's port to the server listening on it inside. An emulator does the
same through its backend: :func:`relay` exposes the port on the backend sandbox
(``ports.expose``: on local and docker, a proxy on 127.0.0.1 whose connections the
backend's own channel carries into the sandbox, which keeps loopback only), sends it the
request's head with the backend's token in its header, and then copies bytes both ways
until either side ends, which carries request bodies, streamed answers and
WebSockets. The vendor's own credentials are the emulator's to check before it calls
this, and to name (:class:`~provider_sdk.port_credentials.Credentials`): the head
forwarded has none of them, wherever the client put or echoes them (a ``Referer``, a
cookie, a parameter), and a target that carries one elsewhere is refused (``400``).

This module knows no vendor and no HTTP server: it reads nothing of the client's but
the bytes it relays, and never logs or raises a token.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Sequence

import anyio
import anyio.abc

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.models import ExposedPort
from provider_sdk.port_credentials import CredentialInTarget, Credentials, scrub
from provider_sdk.sandbox import Sandbox

__all__ = ["HOP_HEADERS", "backend_port", "relay"]

HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer"})
"""Headers of one hop, never relayed as they came (an upgrade gets its own)."""
_CHUNK = 1 << 16


async def backend_port(backend: Sandbox, port: int) -> ExposedPort:
    """The backend's exposed address for ``port`` of ``backend`` (made on first use).

    Raises:
        UnsupportedCapability: the backend exposes no ports.
        SandboxError: the backend could not expose it.
    """
    if Capability.PORTS_EXPOSE not in backend.provider.capabilities:
        raise errors.UnsupportedCapability(
            Capability.PORTS_EXPOSE.value, provider=backend.provider.name,
            sandbox_id=backend.id, detail="the emulator's backend cannot reach a port "
                                          "inside its sandboxes")
    return await backend.expose(port)


def _head(exposed: ExposedPort, method: str, target: str,
          headers: Sequence[tuple[str, str]], credentials: Credentials) -> bytes:
    """The head the backend gets.

    Raises:
        CredentialInTarget: the target carries one of ``credentials`` in its path.
    """
    target, headers = scrub(target, headers, credentials)
    header = exposed.token_header or "X-Psdk-Token"
    dropped = {*HOP_HEADERS, header.lower()}
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in dropped]
    if any(name.lower() == "upgrade" for name, _ in headers):
        lines.append("Connection: Upgrade")
    lines.append(f"{header}: {exposed.token.reveal()}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


async def relay(client: anyio.abc.ByteStream, exposed: ExposedPort, *, method: str,
                target: str, headers: Sequence[tuple[str, str]],
                credentials: Credentials, rest: bytes = b"") -> None:
    """Forward one request to the backend's ``exposed`` address and relay the exchange.

    ``headers`` are the request's, as they came; ``credentials`` the vendor's, which
    the backend never gets; ``rest`` is what the client sent past the request's head.
    Returns when either side ends; a target that carries a credential outside a
    parameter is a 400, a backend that cannot be reached a 502. A local or docker
    backend's proxy checks the request's framing, size and origin and the answer (a
    malformed or oversized head is its 502) on the way.
    """
    try:
        head = _head(exposed, method, target, headers, credentials)
    except CredentialInTarget:
        await _refuse(client, b"400 Bad Request")
        return
    address = urllib.parse.urlsplit(exposed.base_url)
    try:
        upstream = await anyio.connect_tcp(address.hostname or "127.0.0.1",
                                           address.port or 80)
    except OSError:
        await _refuse(client, b"502 Bad Gateway")
        return
    async with upstream:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                 OSError):
            await upstream.send(head + rest)
            await _pipe(client, upstream)


async def _refuse(client: anyio.abc.ByteStream, status: bytes) -> None:
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await client.send(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n"
                          b"Connection: close\r\n\r\n")


async def _pipe(client: anyio.abc.ByteStream, upstream: anyio.abc.ByteStream) -> None:
    """Copy bytes both ways, each as it comes (never an answer whole); either side's end
    ends the exchange, so nothing is left waiting on a server that never answers once
    its client has gone."""
    gone = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
            OSError)

    async with anyio.create_task_group() as tg:
        async def forward() -> None:
            with contextlib.suppress(*gone):
                while True:
                    await upstream.send(await client.receive(_CHUNK))
            tg.cancel_scope.cancel()

        tg.start_soon(forward)
        with contextlib.suppress(*gone):
            while True:
                await client.send(await upstream.receive(_CHUNK))
        tg.cancel_scope.cancel()
