"""Daytona's notification gateway as the unmodified SDK and a Socket.IO client see it:
the SDK's event dispatcher connects once and stays connected, a client with the key gets
each sandbox's creation and state changes, and one without it gets nothing."""

from __future__ import annotations

import json
import secrets
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
import pytest
import socketio
from daytona import AsyncDaytona, CreateSandboxFromSnapshotParams
from daytona_emulator_fixtures import running, sdk_config
from provider_sdk_emulators.daytona import _events
from provider_sdk_emulators.kit import websocket
from raw_websocket import frame, handshake, read_frame

pytestmark = pytest.mark.anyio

_EVENTS = ("sandbox.created", "sandbox.state.updated")


async def _client(key: str, seen: list[tuple[str, Any]],
                  destroyed: anyio.Event | None = None) -> socketio.AsyncClient:
    """A Socket.IO client connected to the gateway with ``key``, recording events (and
    setting ``destroyed`` when a sandbox is)."""
    client = socketio.AsyncClient(reconnection=False)

    def record(name: str, data: Any) -> None:
        seen.append((name, data))
        if destroyed is not None and isinstance(data, dict) \
                and data.get("newState") == "destroyed":
            destroyed.set()

    for name in _EVENTS:
        client.on(name, lambda data, name=name: record(name, data))
    await client.connect(running().url, socketio_path="/api/socket.io/",
                         auth={"token": key}, transports=["websocket"], wait_timeout=10)
    return client


def _get(query: str) -> tuple[int, dict[str, Any]]:
    """GET the gateway without a WebSocket upgrade (127.0.0.1 only)."""
    try:
        with urllib.request.urlopen(f"{running().url}/api/socket.io/?{query}",
                                    timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_a_client_with_the_key_gets_creation_and_every_state_change() -> None:
    seen: list[tuple[str, Any]] = []
    destroyed = anyio.Event()
    client = await _client(running().api_key.reveal(), seen, destroyed)
    try:
        async with AsyncDaytona(sdk_config()) as daytona:
            sandbox = await daytona.create(CreateSandboxFromSnapshotParams(
                labels={"events": secrets.token_hex(4)}))
            await sandbox.stop()
            await sandbox.start()
            await daytona.delete(sandbox)
        with anyio.fail_after(30):
            await destroyed.wait()
    finally:
        await client.disconnect()
    changes = [(data["oldState"], data["newState"]) for name, data in seen
               if name == "sandbox.state.updated" and data["sandbox"]["id"] == sandbox.id]
    created = [data for name, data in seen if name == "sandbox.created"
               and data["id"] == sandbox.id]
    assert len(created) == 1
    assert created[0]["state"] == "started"
    assert created[0]["labels"] == sandbox.labels
    assert changes == [("started", "stopped"), ("stopped", "started"),
                       ("started", "destroyed")]
    assert all(data["sandbox"]["state"] == data["newState"] for name, data in seen
               if name == "sandbox.state.updated")


async def test_a_wrong_key_is_refused_and_gets_no_events() -> None:
    with pytest.raises(socketio.exceptions.ConnectionError):
        await _client("not-the-key", [])
    with pytest.raises(socketio.exceptions.ConnectionError):
        await _client("", [])


async def test_the_sdk_connects_once_and_stays_connected() -> None:
    """Every sandbox object the SDK makes subscribes through one dispatcher: with the
    gateway served it connects on the first and is still the same connection after
    many calls (an unserved gateway made it try again on every call)."""
    async with AsyncDaytona(sdk_config()) as daytona:
        sandbox = await daytona.create(CreateSandboxFromSnapshotParams(
            labels={"events": secrets.token_hex(4)}))
        try:
            dispatcher = daytona._event_dispatcher
            assert dispatcher is not None
            with anyio.fail_after(10):
                while not dispatcher.is_connected:  # noqa: ASYNC110  (it offers no event)
                    await anyio.sleep(0.05)
            connection = dispatcher._sio
            for _ in range(5):
                fetched = await daytona.get(sandbox.id)
                await fetched.set_labels({"events": "again"})
            assert dispatcher.is_connected
            assert dispatcher._sio is connection
        finally:
            await daytona.delete(sandbox)


def test_long_polling_and_other_protocol_versions_are_refused() -> None:
    assert _get("EIO=4&transport=polling") == (400, {"code": 0,
                                                     "message": "Transport unknown"})
    assert _get("EIO=3&transport=websocket") == (
        400, {"code": 5, "message": "Unsupported protocol version"})


async def test_a_client_that_stops_answering_pings_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_events, "PING_INTERVAL", 0.2)
    monkeypatch.setattr(_events, "PING_TIMEOUT", 0.3)
    url = running().url.replace("http://", "ws://")
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"{url}/api/socket.io/?EIO=4&transport=websocket") as ws:
        opened = await ws.receive_str()
        assert opened.startswith("0")
        assert json.loads(opened[1:])["pingInterval"] == 200
        await ws.send_str("40" + json.dumps({"token": running().api_key.reveal()}))
        assert (await ws.receive_str()).startswith("40{")
        pings = 0
        with anyio.fail_after(10):
            async for message in ws:  # answer two pings, then none
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                if message.data == "2":
                    pings += 1
                    if pings <= 2:
                        await ws.send_str("3")
        assert pings == 3
        assert ws.closed or ws.close_code is not None


async def test_a_client_that_stops_reading_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client with the key that reads nothing, while its pings' answers fill its
    socket, is dropped all the same: neither the gateway's own ping nor its close can go
    out, and the client learns of it only by the reset of what it goes on sending."""
    # The socket is full long before the first ping.
    monkeypatch.setattr(_events, "PING_INTERVAL", 0.5)
    monkeypatch.setattr(_events, "PING_TIMEOUT", 0.3)
    monkeypatch.setattr(websocket, "_CLOSE_WAIT", 0.5)
    port = urlsplit(running().url).port
    assert port is not None
    connect = frame(0x1, ("40" + json.dumps({"token": running().api_key.reveal()})).encode())
    ping = frame(0x1, b"2" + b"x" * 500_000)  # answered with as big a pong
    pings = frame(0x1, b"2") * 1000  # then left unread, in the gateway's buffers

    def flood(sock: socket.socket) -> None:
        for _ in range(30):
            sock.sendall(ping)
        while True:
            sock.sendall(pings)

    def session() -> None:
        with handshake(port, "/api/socket.io/?EIO=4&transport=websocket") as sock:
            assert read_frame(sock)[1].startswith(b"0{")
            sock.sendall(connect)
            assert read_frame(sock)[1].startswith(b"40{")
            # Hung up on (with what it sent unread: a reset), or still full after the
            # socket's timeout of 10 s (a TimeoutError).
            with pytest.raises((BrokenPipeError, ConnectionResetError)):
                flood(sock)

    await anyio.to_thread.run_sync(session)
