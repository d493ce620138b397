"""``provider_sdk.unix_streams.connect_unix`` on both event loops: a read cancelled in
the very turn of the loop in which its socket became readable leaves the loop without
an error and loses no byte; the ends of a stream are anyio's errors; a path longer than
the kernel allows is reached."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteStream
from anyio.lowlevel import checkpoint

from provider_sdk.unix_streams import connect_unix

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "s"))
    server.listen()
    with server:
        yield server


async def _pair(listener: socket.socket) -> tuple[ByteStream, socket.socket]:
    stream = await connect_unix(listener.getsockname())
    peer, _ = listener.accept()
    return stream, peer


async def test_a_read_cancelled_as_its_socket_turns_readable_is_sound(
        listener: socket.socket) -> None:
    stream, peer = await _pair(listener)
    with peer:
        for i in range(20):
            got: list[bytes] = []
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def read() -> None:
                    with scope:  # noqa: B023 (each round's own scope, awaited in it)
                        got.append(await stream.receive())  # noqa: B023

                tg.start_soon(read)
                await anyio.wait_all_tasks_blocked()
                # The byte arrives, and the read is cancelled by a task that runs before
                # the loop hands the read its readiness, in the same turn of the loop.
                peer.send(bytes([i]))
                await checkpoint()
                scope.cancel()
            if not got:
                got.append(await stream.receive())
            assert got == [bytes([i])]  # the byte was read once, by one read or the next
        await stream.aclose()


async def test_the_peer_closing_is_the_end_of_the_stream(listener: socket.socket) -> None:
    stream, peer = await _pair(listener)
    peer.sendall(b"last words")
    peer.close()
    assert await stream.receive() == b"last words"
    with pytest.raises(anyio.EndOfStream):
        await stream.receive()
    await stream.aclose()


async def test_a_read_waiting_when_the_stream_closes_ends(listener: socket.socket) -> None:
    stream, peer = await _pair(listener)
    with peer:
        async with anyio.create_task_group() as tg:
            ended: list[type[BaseException]] = []

            async def read() -> None:
                try:
                    await stream.receive()
                except (anyio.ClosedResourceError, anyio.EndOfStream) as exc:
                    ended.append(type(exc))

            tg.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            with anyio.fail_after(5):
                await stream.aclose()
        assert ended
        with pytest.raises(anyio.ClosedResourceError):
            await stream.send(b"x")


async def test_send_and_send_eof_reach_the_peer(listener: socket.socket) -> None:
    stream, peer = await _pair(listener)
    with peer:
        payload = bytes(range(256)) * 8192  # 2 MiB: more than the socket's buffers hold
        async with anyio.create_task_group() as tg:
            received = bytearray()

            def drain() -> None:
                while chunk := peer.recv(1 << 16):
                    received.extend(chunk)

            tg.start_soon(anyio.to_thread.run_sync, drain)
            await stream.send(payload)
            await stream.send_eof()
        assert bytes(received) == payload
        await stream.aclose()


async def test_an_answer_the_peer_sent_before_it_closed_outlives_a_broken_send(
        listener: socket.socket) -> None:
    # As an agent does that answers a command which did not read all its stdin.
    stream, peer = await _pair(listener)
    peer.sendall(b"answer")
    peer.close()

    async def flood() -> None:
        for _ in range(100):
            await stream.send(b"x" * 65536)

    with anyio.fail_after(5), pytest.raises(anyio.BrokenResourceError):
        await flood()
    assert await stream.receive() == b"answer"
    with pytest.raises(anyio.EndOfStream):
        await stream.receive()
    await stream.aclose()


async def test_a_path_longer_than_the_kernel_allows_is_reached(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "agent.sock")
    assert len(path) > 108
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with server:
        fd = os.open(str(deep), os.O_PATH)
        try:
            server.bind(f"/proc/self/fd/{fd}/agent.sock")
        finally:
            os.close(fd)
        server.listen()
        stream = await connect_unix(path)
        peer, _ = server.accept()
        with peer:
            peer.sendall(b"hello")
            assert await stream.receive() == b"hello"
        await stream.aclose()
