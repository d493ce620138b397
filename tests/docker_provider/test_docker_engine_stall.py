"""An Engine that stops answering: each call ends in a typed error once the client's
time for an answer has passed, instead of the HTTP library's own exception."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from provider_sdk_docker._engine import Engine

from provider_sdk import errors

pytestmark = pytest.mark.anyio


@pytest.fixture
def stalled() -> Iterator[str]:
    """A server on 127.0.0.1 that answers ``/version`` like an Engine and then takes
    every other request without ever answering it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    done = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            held.append(conn)
            request = conn.recv(65536)
            if b" /version " in request.split(b"\r\n", 1)[0]:
                body = json.dumps({"ApiVersion": "1.41"}).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                continue
            while not done.is_set():  # keep the request: never answer it
                done.wait(0.1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        server.close()
        for conn in held:
            conn.close()
        thread.join(10)


async def test_a_call_the_engine_never_answers_is_an_operation_timeout(stalled: str) -> None:
    engine = Engine(stalled, provider="docker", timeout=0.5)
    try:
        with pytest.raises(errors.OperationTimeout, match=r"did not answer within 0\.5 s"):
            await engine.api("containers", all=True)
    finally:
        engine.close()
