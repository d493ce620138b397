"""Daytona's notification gateway: Socket.IO events at ``GET /api/socket.io/``.

Daytona's SDKs open one Socket.IO connection per client (``EIO=4``, the WebSocket
transport only) and wait for sandbox states on it; a client that cannot connect falls
back to polling, and tries to connect again on its next call. So the gateway is served as
Daytona serves it:

- The handshake needs no ``Authorization`` header: the key comes in the Socket.IO
  ``CONNECT`` packet, as ``{"token": KEY}``; a missing or wrong one gets a
  ``CONNECT_ERROR`` and nothing else.
- A connected client gets its organisation's events (every sandbox here):
  ``sandbox.created`` with the sandbox's DTO, and ``sandbox.state.updated`` with
  ``{sandbox, oldState, newState}``, as states change (``Notifications`` in ``_store``).
  One that falls :data:`~provider_sdk_emulators.daytona._store.EVENT_BACKLOG` events
  behind is dropped.
- The server pings every :data:`PING_INTERVAL` seconds; a client that has not answered
  within :data:`PING_TIMEOUT` is dropped, as Engine.IO drops one.
- Long-polling (what the SDKs never use) is refused with Engine.IO's ``400``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import anyio
import anyio.abc

from provider_sdk_emulators.daytona._http import UPGRADED, context, json_response, websocket
from provider_sdk_emulators.daytona._store import EVENT_BACKLOG
from provider_sdk_emulators.kit import service
from provider_sdk_emulators.kit.http import Request, Response
from provider_sdk_emulators.kit.websocket import MessageType, WebSocket, WebSocketClosed

__all__ = ["PING_INTERVAL", "PING_TIMEOUT", "gateway"]

PING_INTERVAL = 25.0
"""Seconds between the server's pings (Socket.IO's default, which Daytona keeps)."""
PING_TIMEOUT = 20.0
"""Seconds a client has to answer a ping."""
_MAX_PAYLOAD = 1_000_000

# Engine.IO packet types (the first character of a message) and Socket.IO's (the next).
_OPEN, _CLOSE, _PING, _PONG, _MESSAGE = "0", "1", "2", "3", "4"
_CONNECT, _DISCONNECT, _CONNECT_ERROR = "0", "1", "4"


async def gateway(request: Request) -> Response:
    """``GET /api/socket.io/?EIO=4&transport=websocket``: the event stream."""
    if request.query.get("EIO") != "4":
        return json_response({"code": 5, "message": "Unsupported protocol version"}, 400)
    if request.query.get("transport") != "websocket":
        return json_response({"code": 0, "message": "Transport unknown"}, 400)
    async with websocket(request) as ws:
        await _Client(request, ws).serve()
    return UPGRADED


class _Client:
    """One connected client: its pings, its ``CONNECT``, and its events once connected."""

    _tasks: anyio.abc.TaskGroup

    def __init__(self, request: Request, ws: WebSocket) -> None:
        self.ctx = context(request)
        self.ws = ws
        self.answered = anyio.Event()  # the last ping's pong
        self.events, self._queued = anyio.create_memory_object_stream[str](EVENT_BACKLOG)
        """Where the store puts this client's events, once it has connected."""

    async def serve(self) -> None:
        await self.ws.send_text(_OPEN + json.dumps({
            "sid": secrets.token_urlsafe(15), "upgrades": [],
            "pingInterval": int(PING_INTERVAL * 1000), "pingTimeout": int(PING_TIMEOUT * 1000),
            "maxPayload": _MAX_PAYLOAD}))
        try:
            async with anyio.create_task_group() as self._tasks:
                self._tasks.start_soon(self._ping)
                async for message in self.ws:
                    if message.type is not MessageType.TEXT or not isinstance(message.data, str):
                        continue
                    if not await self._packet(message.data):
                        break
                self._tasks.cancel_scope.cancel()
        finally:
            self.ctx.store.notifications.clients.discard(self.events)
            self.events.close()
            self._queued.close()

    async def _packet(self, text: str) -> bool:
        """Act on one Engine.IO packet; ``False`` when the client is done."""
        kind, body = text[:1], text[1:]
        if kind == _PONG:
            self.answered.set()
        elif kind == _PING:
            await self.ws.send_text(_PONG + body)
        elif kind == _CLOSE:
            return False
        elif kind == _MESSAGE:
            return await self._message(body)
        return True

    async def _message(self, body: str) -> bool:
        kind, rest = body[:1], body[1:]
        namespace = "/"
        if rest.startswith("/"):
            namespace, _, rest = rest.partition(",")
        prefix = "" if namespace == "/" else f"{namespace},"
        if kind == _DISCONNECT:
            return False
        if kind != _CONNECT:
            return True  # an event from the client: the gateway takes none
        if namespace != "/":
            await self._send(_CONNECT_ERROR, prefix, {"message": "Invalid namespace"})
            return True
        try:
            auth = json.loads(rest) if rest else {}
        except ValueError:
            auth = None
        token = auth.get("token") if isinstance(auth, dict) else None
        if not (isinstance(token, str) and service.key_matches(token, self.ctx.api_key)):
            await self._send(_CONNECT_ERROR, prefix, {"message": "Unauthorized"})
            return True
        if self.events not in self.ctx.store.notifications.clients:
            await self._send(_CONNECT, prefix, {"sid": secrets.token_urlsafe(15)})
            self.ctx.store.notifications.clients.add(self.events)
            self._tasks.start_soon(self._forward)
        return True

    async def _send(self, kind: str, prefix: str, payload: dict[str, Any]) -> None:
        await self.ws.send_text(_MESSAGE + kind + prefix + json.dumps(payload))

    async def _forward(self) -> None:
        """Send the queued events; a queue cut off (the client fell behind) ends it."""
        try:
            async for message in self._queued:
                await self.ws.send_text(message)
        except WebSocketClosed:
            pass
        self._tasks.cancel_scope.cancel()

    async def _ping(self) -> None:
        """Ping every PING_INTERVAL; a client that has not taken the ping and answered
        it within PING_TIMEOUT (one that stopped reading, too) is dropped."""
        try:
            while True:
                await anyio.sleep(PING_INTERVAL)
                self.answered = anyio.Event()
                with anyio.move_on_after(PING_TIMEOUT):
                    await self.ws.send_text(_PING)
                    await self.answered.wait()
                if not self.answered.is_set():
                    break
        except WebSocketClosed:
            pass
        self._tasks.cancel_scope.cancel()
