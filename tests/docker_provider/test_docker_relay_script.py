"""The relay script that carries an exposed port's connections into a Docker sandbox
(``_scripts.RELAY``), run here with the host's bash against servers on 127.0.0.1: it
ends when either side does, however soon, and carries bytes both ways."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator

import pytest
from provider_sdk_docker import _scripts

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _server(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            with client:
                handle(client)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        listener.close()


@pytest.fixture
def prompt() -> Iterator[int]:
    """A server that answers at once and closes, before reading anything."""
    yield from _server(lambda client: client.sendall(b"at once\n"))


@pytest.fixture
def echo() -> Iterator[int]:
    """A server that sends back one line it reads, then holds the connection."""
    def handle(client: socket.socket) -> None:
        line = client.makefile("rb").readline()
        client.sendall(b"got " + line)
        client.recv(1)  # until the relay goes away

    yield from _server(handle)


def _relay(port: int) -> subprocess.Popen[bytes]:
    assert BASH is not None
    return subprocess.Popen([BASH, "-c", _scripts.RELAY, "psdk", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_a_server_that_answers_at_once_ends_the_relay_with_its_stdin_open(
        prompt: int) -> None:
    """The port's end ends the relay, even when it comes before the relay has started
    both directions (``wait -n`` missed that about one run in twenty, and the relay
    then waited for a stdin that the client keeps open)."""
    for _ in range(100):
        relay = _relay(prompt)
        try:
            assert relay.wait(timeout=10) == 0
            assert relay.stdout is not None
            assert relay.stdout.read() == b"at once\n"
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.wait()
            assert relay.stdin is not None
            relay.stdin.close()


def test_bytes_pass_both_ways_and_the_clients_end_ends_the_relay(echo: int) -> None:
    relay = _relay(echo)
    assert relay.stdin is not None
    assert relay.stdout is not None
    assert relay.stderr is not None
    assert relay.stderr.read(1) == b"+"  # connected
    relay.stdin.write(b"hello\n")
    relay.stdin.flush()
    assert relay.stdout.readline() == b"got hello\n"
    relay.stdin.close()  # the client goes: the server's side, held open, is stopped
    assert relay.wait(timeout=10) == 0


def test_nothing_listening_is_exit_7_and_no_connected_mark() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])  # bound, not listening: refused
        relay = _relay(port)
        out, err = relay.communicate(timeout=10)
    assert relay.returncode == 7
    assert (out, err) == (b"", b"")
