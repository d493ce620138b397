"""The MCP server over streamable HTTP, on 127.0.0.1, behind a bearer token.

Every request must carry ``Authorization: Bearer <token>`` with one of the server's
tokens; anything else gets ``401`` before it reaches the MCP application, with a body
that names no token. A token may name a client (``--owners-file``: the owner it binds
to), which the request then carries in its state (``CLIENT_STATE``) for the tools. Tokens
are compared in constant time, every one of them on every request, and kept as
:class:`~provider_sdk.secret.Secret`, so they appear in no repr, log or error. The
server binds 127.0.0.1 only; the MCP application's own DNS-rebinding protection also
refuses requests whose ``Host`` or ``Origin`` is not local.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import socket
from collections.abc import Iterator, Sequence

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from provider_sdk.mcp.tools import CLIENT_STATE
from provider_sdk.secret import Secret

__all__ = ["ENDPOINT", "HOST", "BearerAuth", "listen", "serve_http"]

HOST = "127.0.0.1"
"""The only address the server binds."""
ENDPOINT = "/mcp"
"""The path of the MCP endpoint."""
_GRACE = 3  # seconds open streams get to finish when the server stops

class BearerAuth:
    """ASGI middleware: only requests bearing one of ``tokens`` reach ``app``.

    ``tokens`` maps each token to the client it names, or to ``None``; a request whose
    token names a client carries it in its state under :data:`CLIENT_STATE`.
    """

    def __init__(self, app: ASGIApp, tokens: Sequence[tuple[Secret, str | None]]) -> None:
        if not tokens:
            raise ValueError("BearerAuth needs at least one token")
        self._app = app
        self._expected = [(f"Bearer {token.reveal()}".encode(), client)
                          for token, client in tokens]

    def __repr__(self) -> str:
        return f"BearerAuth(tokens=*** x{len(self._expected)})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        authorized, client = self._authorized(scope)
        if authorized:
            state = scope.setdefault("state", {})
            state.pop(CLIENT_STATE, None)
            if client is not None:
                state[CLIENT_STATE] = client
            await self._app(scope, receive, send)
            return
        body = json.dumps({"error": "unauthorized",
                           "detail": "a valid 'Authorization: Bearer <token>' header is "
                                     "required"}).encode()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="psdk-mcp"')]})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope: Scope) -> tuple[bool, str | None]:
        given = [value for name, value in scope.get("headers", ())
                 if name.lower() == b"authorization"]
        if len(given) != 1:
            return False, None
        found, client = False, None
        for expected, named in self._expected:  # every one: no early exit to time
            if hmac.compare_digest(given[0], expected):
                found, client = True, named
        return found, client


class _Server(uvicorn.Server):
    """Uvicorn, leaving signals to ``psdk`` (which cancels the command on a stop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:``port`` (0: a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve_http(server: MCPServer, sock: socket.socket,
                     tokens: Sequence[tuple[Secret, str | None]]) -> None:
    """Serve ``server`` on ``sock`` to requests bearing one of ``tokens`` (each with the
    client it names, or ``None``; see :class:`BearerAuth`) until cancelled; then stop
    taking requests, give open ones a few seconds, and return."""
    app = BearerAuth(server.streamable_http_app(streamable_http_path=ENDPOINT, host=HOST),
                     tokens)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=_GRACE)
    web = _Server(config)
    stopped = anyio.Event()

    async def run() -> None:
        # Shielded: a stop asks uvicorn to shut down (below) instead of cutting it off,
        # so the MCP sessions' tasks end in order.
        with anyio.CancelScope(shield=True):
            try:
                await web.serve(sockets=[sock])
            finally:
                stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await stopped.wait()
        finally:
            web.should_exit = True
