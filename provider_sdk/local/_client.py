"""The host's side of the agent protocol (framing described in ``_agent.py``).

One connection per operation; errors the agent reports become the neutral error tree
here, once. Every call is bounded: the agent must accept it (connect and acknowledge)
within ``accept_timeout``, and while the call lasts a ``health`` check, given by the
provider, is polled so that an agent that died or was stopped ends the call with
``Unavailable`` instead of holding it. This module knows the wire format, not sandbox
state.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from provider_sdk import errors
from provider_sdk.models import ExecResult
from provider_sdk.provider import Command, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.unix_streams import connect_unix

HEADER = struct.Struct(">cI")
MAX_FRAME = 64 << 20  # data frames are 1 MiB at most; a listing of a huge directory is less
_ERRORS: dict[str, type[errors.SandboxError]] = {
    "FileNotFound": errors.FileNotFound,
    "IsADirectory": errors.IsADirectory,
    "NotADirectory": errors.NotADirectory,
    "FileExists": errors.FileExists,
    "Conflict": errors.Conflict,
    "PermissionDenied": errors.PermissionDenied,
    "InvalidInput": errors.InvalidInput,
    "ProcessNotFound": errors.ProcessNotFound,
    "NotARegularFile": errors.NotARegularFile,
}
# Seconds past a command's timeout the client waits for the agent's answer: the agent
# gives up on a killed command's output after its own grace, so this is only reached
# when the agent itself is stuck.
CLIENT_GRACE = 10.0


T = TypeVar("T")

HEALTH_POLL = 0.5  # seconds between checks of the agent's process during a call


class AgentTrouble(Exception):
    """The health check found the agent dead or stopped (the message says which)."""


class _Channel:
    """One framed connection to the agent."""

    def __init__(self, stream: ByteStream,
                 health: Callable[[], str | None] | None = None) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)
        self.health = health
        self.pending: tuple[bytes, bytes] | None = None

    async def _check(self) -> None:
        if self.health is not None:
            trouble = await anyio.to_thread.run_sync(self.health)
            if trouble is not None:
                raise AgentTrouble(trouble)

    async def _watched(self, io: Callable[[], Awaitable[T]]) -> T:
        """``io()``, checking the agent's health every :data:`HEALTH_POLL` seconds while
        it waits. The check runs beside the I/O and cuts it short only when it finds
        trouble (a send cut short cannot be retried)."""
        result: list[T] = []
        try:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    while True:
                        await anyio.sleep(HEALTH_POLL)
                        await self._check()

                tg.start_soon(watch)
                result.append(await io())
                tg.cancel_scope.cancel()
        except BaseException as exc:
            # The I/O's or the check's error, not the group the watch's task group makes
            # of it (a BaseExceptionGroup on trio); when both failed at once (a dead
            # agent's socket ends as the check sees it die), the check's, which says why.
            inner = _single(exc)
            if inner is exc:
                inner = next((e for e in getattr(exc, "exceptions", ())
                              if isinstance(e, AgentTrouble)), exc)
            if inner is exc:
                raise
            raise inner from None
        return result[0]

    async def _receive_exactly(self, size: int) -> bytes:
        """``size`` bytes, checking the agent's health after each :data:`HEALTH_POLL`
        seconds without them. A read cut short loses nothing (what it read stays in the
        buffer), so the wait needs no task of its own beside it: most answers come
        before the first check is due."""
        if self.health is None or len(self.reader.buffer) >= size:
            return await self.reader.receive_exactly(size)
        while True:
            with anyio.move_on_after(HEALTH_POLL):
                return await self.reader.receive_exactly(size)
            await self._check()

    async def send(self, kind: bytes, payload: bytes = b"", *, watched: bool = True) -> None:
        """Send one frame. A large one is ``watched``: it blocks on an agent that stopped
        reading (a caller that reads the channel meanwhile watches it already)."""
        data = HEADER.pack(kind, len(payload)) + payload
        if not watched or self.health is None or len(data) < 65536:
            await self.stream.send(data)
            return
        await self._watched(lambda: self.stream.send(data))

    async def send_json(self, obj: dict[str, Any]) -> None:
        await self.send(b"J", json.dumps(obj).encode())

    async def recv(self) -> tuple[bytes, bytes]:
        """The next frame (acknowledgements are skipped)."""
        if self.pending is not None:
            frame, self.pending = self.pending, None
            return frame
        while True:
            kind, payload = await self._recv_any()
            if kind != b"A":
                return kind, payload

    async def _recv_any(self) -> tuple[bytes, bytes]:
        kind, size = HEADER.unpack(await self._receive_exactly(HEADER.size))
        if size > MAX_FRAME:  # the agent runs inside the sandbox: never trust its sizes
            raise anyio.BrokenResourceError(f"frame of {size} bytes from the agent")
        return kind, (await self._receive_exactly(size) if size else b"")

    async def accepted(self) -> None:
        """Wait for the agent's acknowledgement of the request."""
        frame = await self._recv_any()
        if frame[0] != b"A":  # an agent started before acknowledgements: keep the frame
            self.pending = frame


class AgentClient:
    """Talks to one sandbox's agent through its socket."""

    def __init__(self, socket_path: str, *, provider: str, sandbox_id: str,
                 accept_timeout: float = 15.0,
                 health: Callable[[], str | None] | None = None) -> None:
        self.socket_path = socket_path
        self.provider = provider
        self.sandbox_id = sandbox_id
        self.accept_timeout = accept_timeout
        self.health = health

    def _unavailable(self, message: str) -> errors.Unavailable:
        return errors.Unavailable(message, provider=self.provider, sandbox_id=self.sandbox_id)

    @contextlib.asynccontextmanager
    async def _open(self, request: dict[str, Any]) -> AsyncIterator[_Channel]:
        try:
            with anyio.fail_after(self.accept_timeout):
                stream = await connect_unix(self.socket_path)
        except OSError as exc:
            raise self._unavailable(
                f"the sandbox's agent does not answer ({exc.strerror})") from exc
        except TimeoutError:
            raise self._unavailable(f"the sandbox's agent did not take the connection "
                                    f"within {self.accept_timeout:g}s") from None
        async with stream:
            channel = _Channel(stream, self.health)
            try:
                try:
                    with anyio.fail_after(self.accept_timeout):
                        await channel.send_json(request)
                        await channel.accepted()
                except TimeoutError:
                    raise self._unavailable(f"the sandbox's agent did not take the call "
                                            f"within {self.accept_timeout:g}s") from None
                yield channel
            except Exception as exc:
                # A task group around the channel wraps what it raises in a group of one.
                inner = _single(exc)
                if isinstance(inner, AgentTrouble):
                    raise self._unavailable(str(inner)) from None
                if isinstance(inner, (anyio.EndOfStream, anyio.BrokenResourceError,
                                      anyio.IncompleteRead)):
                    raise self._unavailable("the sandbox's agent closed the connection"
                                            ) from exc
                if inner is not exc:
                    raise inner from exc
                raise

    def _result(self, payload: bytes) -> Any:
        reply = json.loads(payload)
        if "error" in reply:
            err = reply["error"]
            cls = _ERRORS.get(err["type"], errors.SandboxError)
            raise cls(err["message"], provider=self.provider, sandbox_id=self.sandbox_id)
        return reply["ok"]

    async def call(self, op: str, **fields: Any) -> Any:
        """A request with no data frames; returns the agent's ``ok`` value."""
        async with self._open({"op": op, **fields}) as channel:
            while True:
                kind, payload = await channel.recv()
                if kind == b"J":
                    return self._result(payload)

    async def exec(self, command: Command) -> ExecResult:
        """Run a command; raise ``CommandTimeout`` with the partial output on timeout."""
        request = {"op": "exec", "argv": list(command.argv), "env": dict(command.env),
                   "cwd": command.cwd, "timeout": command.timeout,
                   "stdin": command.stdin is not None}
        out, err = command.buffers()
        start = anyio.current_time()
        reply: dict[str, Any] | None = None
        limit = command.timeout + CLIENT_GRACE if command.timeout else None

        async def answer(channel: _Channel) -> dict[str, Any]:
            """The command's output, into the buffers and callbacks, then the reply."""
            while True:
                kind, payload = await channel.recv()
                if kind == b"O":
                    out.append(payload)
                    if command.on_stdout is not None:
                        await _call(command.on_stdout, payload)
                elif kind == b"E":
                    err.append(payload)
                    if command.on_stderr is not None:
                        await _call(command.on_stderr, payload)
                elif kind == b"J":
                    result: dict[str, Any] = self._result(payload)
                    return result

        with anyio.move_on_after(limit):
            async with self._open(request) as channel:
                if command.stdin is None:  # nothing to send beside: no task for it
                    reply = await answer(channel)
                else:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._send_stdin, channel, command.stdin)
                        reply = await answer(channel)
                        tg.cancel_scope.cancel()
        # Without a reply the connection is closed, which makes the agent kill the tree.
        timed_out = reply is None or bool(reply["timed_out"])
        result = ExecResult(exit_code=-9 if reply is None else reply["exit_code"],
                            stdout_bytes=out.value(), stderr_bytes=err.value(),
                            duration=anyio.current_time() - start,
                            stdout_truncated=out.dropped, stderr_truncated=err.dropped)
        if timed_out:
            raise errors.CommandTimeout(
                f"command timed out after {command.timeout}s; its process tree was killed",
                result=result, provider=self.provider, sandbox_id=self.sandbox_id)
        return result

    @staticmethod
    async def _send_stdin(channel: _Channel, data: bytes) -> None:
        """Send a command's stdin, then end of file. A command that ends without reading
        it all has the agent answer and close: what it left is dropped. The frames are
        not watched: :meth:`exec` reads the channel meanwhile, and its reads check the
        agent's health (a watch's task group would group the send's error with a
        cancellation on trio, out of this suppression's reach)."""
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            for i in range(0, len(data), 1 << 20):
                await channel.send(b"I", data[i:i + (1 << 20)], watched=False)
            await channel.send(b"Z", watched=False)

    async def read(self, path: str) -> AsyncIterator[bytes]:
        """A file's bytes in chunks."""
        async with self._open({"op": "read", "path": path}) as channel:
            while True:
                kind, payload = await channel.recv()
                if kind == b"D":
                    yield payload
                elif kind == b"J":
                    self._result(payload)
                    return

    async def write(self, path: str, chunks: AsyncIterator[bytes]) -> None:
        """Write a file from chunks (replaced whole, atomically)."""
        async with self._open({"op": "write", "path": path}) as channel:
            async with anyio.create_task_group() as tg:
                reply: list[bytes] = []

                async def receive() -> None:
                    kind, payload = await channel.recv()
                    while kind != b"J":
                        kind, payload = await channel.recv()
                    reply.append(payload)
                    tg.cancel_scope.cancel()  # an early error ends the upload

                tg.start_soon(receive)
                async for chunk in chunks:
                    if chunk:
                        await channel.send(b"D", chunk)
                await channel.send(b"Z")
            self._result(reply[0])

    async def stdin(self, pid: int, data: bytes, *, close: bool) -> None:
        """Write to (and optionally close) a background process's stdin."""
        async with self._open({"op": "stdin", "pid": pid, "close": close}) as channel:
            for i in range(0, len(data), 1 << 20):
                await channel.send(b"I", data[i:i + (1 << 20)])
            await channel.send(b"Z")
            while True:
                kind, payload = await channel.recv()
                if kind == b"J":
                    self._result(payload)
                    return

    @contextlib.asynccontextmanager
    async def tunnel(self, port: int) -> AsyncIterator[ByteStream]:
        """A byte stream to ``127.0.0.1:port`` inside the sandbox, made by the agent;
        the error it reports if nothing answers there."""
        async with self._open({"op": "tunnel", "port": port}) as channel:
            kind, payload = await channel.recv()
            if kind == b"J":
                self._result(payload)
                raise self._unavailable("the sandbox's agent ended the tunnel")
            yield _Tunnel(channel)

    async def events(self, pid: int) -> AsyncIterator[ProcessEvent]:
        """A background process's output (replayed from its start), then its exit."""
        async with self._open({"op": "events", "pid": pid}) as channel:
            while True:
                kind, payload = await channel.recv()
                if kind == b"O":
                    yield ProcessOutput("stdout", payload)
                elif kind == b"E":
                    yield ProcessOutput("stderr", payload)
                elif kind == b"J":
                    yield ProcessExit(self._result(payload)["exit_code"])
                    return


class _Tunnel(ByteStream):
    """A tunnel's bytes over the agent's frames (see ``op_tunnel`` in ``_agent``)."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._ended = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._ended:
            kind, payload = await self._channel.recv()
            if kind == b"D" and payload:
                return payload
            if kind in (b"Z", b"J"):
                self._ended = True
        raise anyio.EndOfStream

    async def send(self, item: bytes) -> None:
        for i in range(0, len(item), 1 << 20):
            await self._channel.send(b"D", item[i:i + (1 << 20)])

    async def send_eof(self) -> None:
        await self._channel.send(b"Z")

    async def aclose(self) -> None:
        await self._channel.stream.aclose()


def _single(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups of one, else ``exc``."""
    while True:
        inner = getattr(exc, "exceptions", None)
        if not (isinstance(inner, tuple) and len(inner) == 1 and isinstance(inner[0], Exception)):
            return exc
        exc = inner[0]


async def _call(callback: Any, payload: bytes) -> None:
    result = callback(payload)
    if result is not None and hasattr(result, "__await__"):
        await result
