"""The host-side proxy that serves a sandbox's exposed ports (``ports.expose``).

A provider whose sandboxes have no network of their own (local, docker) owns one
:class:`PortProxy`. Each exposed port gets a listener on ``127.0.0.1`` (an ephemeral
port, never another address). Every connection must present the port's access token in
its first request head: ``?psdk_token=`` in the query (the name may come
percent-encoded), an ``X-Psdk-Token`` header, ``Authorization: Bearer``, or the cookie
the proxy sets on the answer to a request that had the token in its query
(``HttpOnly``, ``SameSite=Strict``), so a browser keeps working after the first page.
Anything else is answered ``401`` and closed before anything reaches the sandbox. So is
a request a browser's page of another origin sends (``403``): every exposed port is on
127.0.0.1, one site for the browser, so the cookie goes with it (the rule is
``provider_sdk._port_request``'s). The request head is forwarded without the token,
wherever a client put or echoes it (query, header, bearer, cookies, ``Referer``, any
header that carries it) and without any other port's token; a target that carries a
token elsewhere is refused (``400``). Then the proxy opens a stream into the sandbox
through the provider's own channel (an *opener* the provider gives) and relays bytes
both ways, which carries WebSockets and any other upgrade. A request that is not an
upgrade is forwarded with ``Connection: close``, and its answer's head gets
``Connection: close`` too, so every request is checked and stripped on a connection of
its own: what the client sends past the request's body (a pipelined request) is never
forwarded. The body's end is found as it streams, never holding it whole, whatever its
framing: none, ``Content-Length``, or chunked (decoded, and sent on in chunks of the
proxy's making, without extensions or trailers). A request whose body is framed two
ways (``Content-Length`` and ``Transfer-Encoding``), whose codings do not end in
``chunked``, or whose chunked framing is malformed (a size line or trailer past its
bound too) is refused (``400``) and its connection closed. After a request that asks
for an upgrade, what the client sends past its body waits for the answer: after a
``101`` it passes, and all that follows as it comes; after any other answer, none of it
does.

The server in the sandbox is as untrusted as the code that runs it. Its answer's head is
read (at most 64 KiB) and checked before any of it passes: a head too large, not
HTTP/1.1's, framed two ways, or missing is answered ``502``. Interim answers
(``100 Continue``) pass, and the final head after them is edited like any:
``Connection: close``, and no ``Set-Cookie`` of a ``psdk_token`` cookie the sandbox
tries to plant. The body then streams as it comes, never held whole, and either side's
end ends the connection, so a server that never answers holds nothing once its client
has gone.

What a client sends before it is authenticated is bounded
(:mod:`provider_sdk.request_head`): a request head of at most
:data:`~provider_sdk.request_head.MAX_HEAD` bytes, the token shown within
:data:`~provider_sdk.request_head.TOKEN_TIMEOUT` seconds and the head complete within
:data:`~provider_sdk.request_head.HEAD_TIMEOUT`; at most
:data:`~provider_sdk.request_head.MAX_WAITING_PER_CLIENT` connections of one client
address and :data:`~provider_sdk.request_head.MAX_WAITING` of the provider wait to show
a token at once, a newer one taking the place of the oldest, so connections that never
show one cannot keep out those that do.

The listeners run on an event loop of the proxy's own, in a thread started on the first
``expose`` and stopped (every listener and connection cancelled) by :meth:`aclose`:
a task group the proxy owns, whatever loop or thread its callers use. Openers are
called on that loop.

This module must not know any backend, and never logs, reprs or raises a token.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import urllib.parse
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import anyio.abc
import anyio.to_thread
import attrs
import structlog

from provider_sdk import errors
from provider_sdk._chunked import ChunkedError
from provider_sdk._port_exchange import COOKIE_PREFIX, answer, relay
from provider_sdk._port_request import TOKEN_PARAM, Request, credentials, shows_token
from provider_sdk.events import logger
from provider_sdk.models import ExposedPort
from provider_sdk.port_credentials import CredentialInTarget
from provider_sdk.portal import Portal
from provider_sdk.request_head import HEAD_TIMEOUT, MAX_HEAD, Gate, HeadRefused, read_head

__all__ = ["HEAD_TIMEOUT", "MAX_HEAD", "Opener", "PortProxy"]

#: Opens a byte stream to the exposed port inside the sandbox (called on the proxy's
#: loop, once per authenticated connection); it raises a
#: :class:`~provider_sdk.errors.SandboxError` when it cannot.
Opener = Callable[[], AbstractAsyncContextManager[anyio.abc.ByteStream]]


@attrs.define(eq=False)
class _Entry:
    sandbox_id: str
    port: int
    token: str = attrs.field(repr=False)
    opener: Opener
    exposed: ExposedPort | None = None
    scope: anyio.CancelScope | None = None  # made on the proxy's loop
    done: threading.Event = attrs.field(factory=threading.Event)


class PortProxy:
    """Exposed ports of one provider instance, each served on ``127.0.0.1``.

    Use :meth:`expose` from a provider's ``_expose`` hook, :meth:`unexpose` from its
    ``_unexpose``, :meth:`drop` when a sandbox is killed, and :meth:`aclose` from the
    provider's ``aclose``.
    """

    def __init__(self, *, provider: str) -> None:
        self._provider = provider
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._portal: Portal | None = None  # the proxy's own loop, once a port is exposed
        self._gate = Gate()  # used on the proxy's loop only

    async def expose(self, sandbox_id: str, port: int, opener: Opener) -> ExposedPort:
        """Serve ``port`` of ``sandbox_id``: connections go through ``opener``. A port
        already exposed keeps its address and token."""
        with self._lock:
            entry = self._entries.get((sandbox_id, port))
        if entry is not None and entry.exposed is not None:
            return entry.exposed
        portal = await anyio.to_thread.run_sync(self._started_portal)
        entry = _Entry(sandbox_id, port, secrets.token_urlsafe(24), opener)
        ready = await portal.acall(self._listen, entry)
        listener, address = ready
        base = f"http://{address[0]}:{address[1]}/"
        entry.exposed = ExposedPort(port=port, base_url=base, token=entry.token,
                                    url=f"{base}?{TOKEN_PARAM}={entry.token}",
                                    token_header="X-Psdk-Token")
        with self._lock:
            existing = self._entries.get((sandbox_id, port))
            if existing is None:
                self._entries[(sandbox_id, port)] = entry
        if existing is not None:  # exposed meanwhile by another task: keep that one
            await portal.acall(listener.aclose)
            assert existing.exposed is not None
            return existing.exposed
        portal.spawn(self._serve, entry, listener)
        return entry.exposed

    async def unexpose(self, sandbox_id: str, port: int) -> None:
        """Stop serving the port; its URL no longer answers when this returns."""
        with self._lock:
            entry = self._entries.pop((sandbox_id, port), None)
        await self._stop([entry] if entry is not None else [])

    async def drop(self, sandbox_id: str) -> None:
        """Stop serving every port of a sandbox (it was killed)."""
        with self._lock:
            gone = [e for key, e in self._entries.items() if key[0] == sandbox_id]
            for entry in gone:
                del self._entries[(entry.sandbox_id, entry.port)]
        await self._stop(gone)

    def exposed(self, sandbox_id: str) -> list[int]:
        """The ports of a sandbox this proxy serves."""
        with self._lock:
            return sorted(port for sid, port in self._entries if sid == sandbox_id)

    async def aclose(self) -> None:
        """Stop every listener and connection, and the proxy's thread. Safe to call twice."""
        with self._lock:
            self._entries.clear()
            portal, self._portal = self._portal, None
        if portal is None:
            return
        with anyio.CancelScope(shield=True):
            # Stopping the loop cancels every listener and connection still served.
            await anyio.to_thread.run_sync(portal.close)

    # ------------------------------------------------------------ the proxy's loop

    def _started_portal(self) -> Portal:
        with self._lock:
            if self._portal is None:
                try:
                    self._portal = Portal.start(name=f"psdk-{self._provider}-ports")
                except RuntimeError as exc:
                    raise errors.Unavailable("the port proxy's event loop did not start",
                                             provider=self._provider) from exc
            return self._portal

    async def _stop(self, entries: list[_Entry]) -> None:
        portal = self._portal
        if portal is None or not entries:
            return
        with anyio.CancelScope(shield=True):
            for entry in entries:
                if entry.scope is not None:
                    with contextlib.suppress(RuntimeError):  # the loop is stopping
                        await portal.acall(_cancel, entry.scope)
            for entry in entries:
                await anyio.to_thread.run_sync(entry.done.wait, 10.0)

    @staticmethod
    async def _listen(entry: _Entry) -> tuple[anyio.abc.Listener[anyio.abc.SocketStream],
                                              tuple[str, int]]:
        entry.scope = anyio.CancelScope()
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        address = listener.listeners[0].extra(anyio.abc.SocketAttribute.local_address)
        return listener, (str(address[0]), int(address[1]))

    async def _serve(self, entry: _Entry,
                     listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        assert entry.scope is not None
        try:
            with entry.scope:
                async with listener:
                    await listener.serve(lambda client: self._handle(entry, client))
        finally:
            entry.done.set()

    async def _handle(self, entry: _Entry, client: anyio.abc.ByteStream) -> None:
        async with client:
            try:
                await self._proxy(entry, client)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError,
                    anyio.EndOfStream):
                pass  # the client went away: that ends its connection, nothing else
            except Exception as exc:  # one connection's failure must not end the listener
                if structlog.is_configured():  # the library never configures logging
                    logger.debug("sandbox.ports.connection.failed",
                                 provider=self._provider, sandbox_id=entry.sandbox_id,
                                 port=entry.port, error=type(exc).__name__)

    async def _proxy(self, entry: _Entry, client: anyio.abc.ByteStream) -> None:
        try:
            head, rest = await read_head(
                client, self._gate,
                shows_credential=lambda line, first: shows_token(line, first, entry.token))
        except HeadRefused as refused:
            await answer(client, refused.status, refused.reason)
            return
        request = Request.parse(head)
        if request is None:
            await answer(client, 400, "malformed request head")
            return
        body = request.body()
        try:
            first, past = body.take(rest) if not isinstance(body, str) else (b"", b"")
        except ChunkedError as exc:
            body = f"malformed chunked body: {exc}"
        if isinstance(body, str):
            await answer(client, 400, body)
            return
        via_query = request.authenticate(entry.token)
        if via_query is None:
            await answer(client, 401, "this port needs its access token")
            return
        refusal = request.cross_origin()
        if refusal is not None:
            await answer(client, 403, refusal)
            return
        with self._lock:
            tokens = [known.token for known in self._entries.values()]
        try:
            forwarded = request.forwarded(credentials([entry.token, *tokens]))
        except CredentialInTarget:
            await answer(client, 400, "the request's target carries an access token "
                                      "outside the psdk_token parameter")
            return
        cookie = None
        if via_query:
            address = entry.exposed.base_url if entry.exposed else ""
            cookie = (f"{_cookie_name(address)}={entry.token}; Path=/; HttpOnly; "
                      "SameSite=Strict").encode()
        opened = False
        try:
            async with entry.opener() as tunnel:
                opened = True
                await tunnel.send(forwarded + first)
                await relay(client, tunnel, cookie=cookie, upgrade=request.upgrade,
                            body=body, held=past)
        except errors.SandboxNotFound:
            if not opened:
                await answer(client, 502, "the sandbox is gone")
            with self._lock:
                self._entries.pop((entry.sandbox_id, entry.port), None)
            if entry.scope is not None:
                entry.scope.cancel()
        except errors.SandboxError as exc:
            if not opened:  # once relaying, the sandbox's side ending closes the client's
                await answer(client, 502, f"cannot reach port {entry.port} in the "
                                           f"sandbox: {exc.message}")


async def _cancel(scope: anyio.CancelScope) -> None:
    scope.cancel()


def _cookie_name(base_url: str) -> str:
    """The cookie of one exposed address: browsers share cookies across the ports of a
    host, so each listener's cookie is named for its port."""
    port = urllib.parse.urlsplit(base_url).port or 0
    return f"{COOKIE_PREFIX}_{port}"
