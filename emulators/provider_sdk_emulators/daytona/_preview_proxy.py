"""The preview proxy: a listener of its own on 127.0.0.1, as Daytona's proxy is a
service of its own, serving the preview URLs the API hands out (``_preview``).

Each connection's first request head is read as :mod:`provider_sdk.request_head` reads
it (at most 32 KiB, within 5 s, and at most 64 connections of one client address and
256 in all waiting for theirs, a newer one taking the place of the oldest); its path
must be ``/preview/{port}-{sandboxIdOrToken}[/...]`` and its credentials good (the
sandbox's access token, the API key, or a signed token still valid: see ``_preview``),
else it is answered (400, 401, 404, 408, 431, 502, 503) and closed before anything
reaches the sandbox. What follows the label is the path the server sees. No credential
of Daytona's reaches the sandbox (:func:`credentials`): not the headers, query
parameter and cookie that carry them, nor any of them wherever else a client puts or
echoes them (a ``Referer`` that names a preview URL). Then
:mod:`provider_sdk_emulators.kit.port_relay` relays the connection to the port through the backend
(``ports.expose``: the sandbox keeps loopback only) until either side ends, which
carries bodies, streamed answers and WebSockets; revoking a signed token ends the
connections relayed with it. The backend's proxy answers each request with
``Connection: close``, so every request is checked on a connection of its own, and
refuses what a page of another origin sends. Nothing listening on the port is a 502.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator

import anyio
import anyio.abc

from provider_sdk.errors import SandboxError
from provider_sdk.port_credentials import Credentials
from provider_sdk.request_head import Gate, HeadRefused, read_head
from provider_sdk_emulators.daytona._http import Context, HttpError
from provider_sdk_emulators.daytona._preview import (
    AUTH_COOKIE_PREFIX,
    TOKEN_HEADER,
    TOKEN_QUERY,
    target,
)
from provider_sdk_emulators.kit import port_relay

__all__ = ["credentials", "serve"]

_PREFIX = "/preview/"
_REASONS = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 502: "Bad Gateway",
            503: "Service Unavailable"}


def credentials(ctx: Context) -> Credentials:
    """What a request relayed to a sandbox's port loses: ``Authorization`` and
    ``X-Daytona-Preview-Token``, the ``daytona-sandbox-auth-*`` cookies, the
    ``DAYTONA_SANDBOX_AUTH_KEY`` parameter, and the API key, every sandbox's preview
    token and every signed token wherever they are, so no sandbox gets a credential of
    the emulator's, its own or another's."""
    store = ctx.store
    tokens = [ctx.api_key.reveal(), *(token for _port, token in store.signed_previews)]
    tokens += [record.preview_token.reveal() for record in store.sandboxes.values()]
    return Credentials(headers={"authorization", TOKEN_HEADER}, cookies=(AUTH_COOKIE_PREFIX,),
                       params={TOKEN_QUERY}, values=tokens)


@contextlib.asynccontextmanager
async def serve(ctx: Context) -> AsyncIterator[str]:
    """Serve previews on 127.0.0.1 until the block exits; yield the proxy's base URL."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    gate = Gate()
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, lambda client: _handle(ctx, gate, client))
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()


async def _handle(ctx: Context, gate: Gate, client: anyio.abc.SocketStream) -> None:
    async with client:
        try:
            await _proxy(ctx, gate, client)
        except HttpError as error:
            await _answer(client, error.status, error.message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
                OSError):
            pass  # the client went away


async def _proxy(ctx: Context, gate: Gate, client: anyio.abc.SocketStream) -> None:
    try:
        head, rest = await read_head(client, gate)
    except HeadRefused as refused:
        raise HttpError(refused.status, refused.reason) from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    method, raw_target = parts[0], parts[1]
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "malformed header")
        headers.append((name, value.strip()))
    split = urllib.parse.urlsplit(raw_target)
    if not split.path.startswith(_PREFIX):
        raise HttpError(404, f"no preview at {split.path}; preview URLs are "
                             "/preview/{port}-{sandboxIdOrToken}")
    label, _, tail = split.path[len(_PREFIX):].partition("/")
    query = urllib.parse.parse_qsl(split.query, keep_blank_values=True)
    named = {name.lower(): value for name, value in headers}
    record, port = target(ctx, label, named, dict(query))
    if record.handle is None or record.state != "started":
        raise HttpError(502, f"sandbox {record.id} is {record.state}, not started")
    try:
        exposed = await port_relay.backend_port(record.handle, port)
    except SandboxError as exc:
        raise HttpError(502, exc.message) from exc
    forwarded = "/" + tail + (f"?{split.query}" if split.query else "")
    signed = (port, label.partition("-")[2])
    relays = ctx.store.preview_relays
    with anyio.CancelScope() as scope:  # a signed token's revocation cancels it
        if signed in ctx.store.signed_previews:
            relays.setdefault(signed, set()).add(scope)
        try:
            await port_relay.relay(client, exposed, method=method, target=forwarded,
                                   headers=headers, credentials=credentials(ctx), rest=rest)
        finally:
            live = relays.get(signed)
            if live is not None:
                live.discard(scope)
                if not live:
                    del relays[signed]


async def _answer(client: anyio.abc.SocketStream, status: int, message: str) -> None:
    """An error answer in the API's envelope (never naming a token)."""
    body = json.dumps({"statusCode": status, "message": message,
                       "error": _REASONS.get(status, "Error")}).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await client.send(head + body)
