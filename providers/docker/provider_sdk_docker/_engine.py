"""The Engine API, for async callers: the ``docker`` package's calls in worker threads,
exec streams read natively, and every Engine error translated once.

The ``docker`` package is blocking, so each call runs in a worker thread. Attaching to an
exec's output is done here instead, over a connection of its own to the same socket (an
HTTP upgrade, then Docker's multiplexed stream format), so output is read as it comes
without holding a thread per running command.
"""

from __future__ import annotations

import functools
import json
import struct
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
import docker
import docker.errors
import requests.exceptions

from provider_sdk import errors
from provider_sdk.unix_streams import connect_unix

__all__ = ["FREEZE_FAILED", "Engine", "Frame"]

T = TypeVar("T")
Frame = tuple[Literal["stdout", "stderr"], bytes]
Kind = Literal["sandbox", "image", "snapshot", "volume", "exec"]

_STREAMS: dict[int, Literal["stdout", "stderr"]] = {1: "stdout", 2: "stderr"}
#: What the runtime says when it gave up freezing a container (and thawed it again).
FREEZE_FAILED = "unable to freeze"
_HEADER = struct.Struct(">BxxxL")
_MAX_HEADERS = 64 * 1024


class Engine:
    """One Docker Engine, reached at ``base_url`` (``unix://...`` or ``tcp://...``)."""

    def __init__(self, base_url: str, *, provider: str, threads: int = 32,
                 timeout: float = 120.0) -> None:
        """``timeout``: seconds to wait for each answer of the Engine."""
        self.base_url = base_url
        self.timeout = timeout
        self._provider = provider
        self._client: docker.APIClient | None = None
        self._limiter = anyio.CapacityLimiter(threads)

    @property
    def client(self) -> docker.APIClient:
        """The ``docker`` package's low-level client (connects on first use)."""
        if self._client is None:
            try:
                self._client = docker.APIClient(base_url=self.base_url, version="auto",
                                                timeout=self.timeout)
            except docker.errors.DockerException as exc:
                raise self.unavailable(exc) from exc
        return self._client

    def close(self) -> None:
        """Close the client's connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def unavailable(self, exc: BaseException) -> errors.Unavailable:
        """The error for an Engine that cannot be reached."""
        return errors.Unavailable(
            f"cannot reach the Docker Engine at {self.base_url} ({type(exc).__name__}): is "
            "dockerd running, and is DOCKER_HOST right?", provider=self._provider)

    async def call(self, fn: Callable[..., T], *args: Any, kind: Kind = "sandbox",
                   what: str | None = None, sandbox_id: str | None = None,
                   **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in a worker thread; translate what it raises.

        ``kind`` and ``what`` say what a 404 means (which sandbox, image, volume...).
        """
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs),
                                                  limiter=self._limiter)
        except docker.errors.DockerException as exc:
            raise self.translate(exc, kind=kind, what=what, sandbox_id=sandbox_id) from exc
        except requests.exceptions.ConnectionError as exc:
            raise self.unavailable(exc) from exc
        except requests.exceptions.Timeout as exc:
            raise errors.OperationTimeout(
                f"the Docker Engine at {self.base_url} did not answer within "
                f"{self.timeout:g} s", provider=self._provider, sandbox_id=sandbox_id) from exc

    async def api(self, method: str, *args: Any, kind: Kind = "sandbox",
                  what: str | None = None, sandbox_id: str | None = None,
                  **kwargs: Any) -> Any:
        """Call ``APIClient.<method>`` in a worker thread, translating errors."""
        client = await anyio.to_thread.run_sync(lambda: self.client, limiter=self._limiter)
        return await self.call(getattr(client, method), *args, kind=kind, what=what,
                               sandbox_id=sandbox_id, **kwargs)

    def translate(self, exc: BaseException, *, kind: Kind, what: str | None,
                  sandbox_id: str | None) -> errors.SandboxError:
        """One Engine error as the neutral error it means."""
        where = {"provider": self._provider, "sandbox_id": sandbox_id}
        if not isinstance(exc, docker.errors.APIError):
            if "Connection" in str(exc) or "connect" in str(exc).lower():
                return self.unavailable(exc)
            return errors.SandboxError(f"Docker client error: {exc}", **where)
        status = exc.status_code or 0
        message = _explanation(exc)
        if "no space left on device" in message.lower() or \
                "disk quota exceeded" in message.lower():
            return errors.QuotaExceeded(f"the sandbox's disk is full: {message}", **where)
        if status == 404:
            if kind == "sandbox":
                return errors.SandboxNotFound(f"no sandbox {what!r}", **where)
            if kind == "image":
                return errors.TemplateNotFound(
                    f"no image {what!r} in the Docker Engine (no image is pulled "
                    f"implicitly: build or load it, or set PSDK_DOCKER_TEMPLATE)", **where)
            if kind == "snapshot":
                return errors.SnapshotNotFound(f"no snapshot {what!r}", **where)
            if kind == "volume":
                return errors.VolumeNotFound(f"no volume {what!r}", **where)
            return errors.NotFound(message, **where)
        if status == 409:
            lowered = message.lower()
            if "is paused" in lowered:
                return errors.SandboxNotRunning(f"sandbox {sandbox_id!r} is paused",
                                                state="paused", **where)
            if "is not running" in lowered or "restarting" in lowered:
                return errors.SandboxNotRunning(f"sandbox {sandbox_id!r} is not running",
                                                state="stopped", **where)
            return errors.Conflict(message, **where)
        if status in (401, 403):
            return errors.PermissionDenied(message, **where)
        if status == 400:
            return errors.InvalidInput(message, **where)
        if status == 429:
            return errors.RateLimited(message, provider=self._provider, sandbox_id=sandbox_id)
        if status in (502, 503, 504):
            return errors.Unavailable(message, **where)
        if FREEZE_FAILED in message:
            # runc gave up waiting for every process to stop (one in the kernel, on a
            # busy host) and thawed them all again: nothing was paused, try again.
            return errors.Unavailable(f"the container's processes did not all stop in "
                                      f"time, so it was not paused: {message}", **where)
        return errors.SandboxError(f"Docker Engine error {status}: {message}", **where)

    # ------------------------------------------------------------ exec streams

    async def attach(self, exec_id: str, *, sandbox_id: str) -> ExecStream:
        """Start exec ``exec_id`` and attach to its stdin, stdout and stderr."""
        stream = await self._connect()
        try:
            version = self.client.api_version
            body = b'{"Detach":false,"Tty":false}'
            request = (f"POST /v{version}/exec/{exec_id}/start HTTP/1.1\r\n"
                       "Host: docker\r\nContent-Type: application/json\r\n"
                       "Connection: Upgrade\r\nUpgrade: tcp\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body
            await stream.send(request)
            status, leftover, text = await _read_response_head(stream)
            if status not in (101, 200):
                raise self._status_error(status, text, sandbox_id)
            return ExecStream(stream, leftover)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            raise

    async def _connect(self) -> anyio.abc.ByteStream:
        url = urllib.parse.urlsplit(self.base_url)
        try:
            if url.scheme in ("unix", "http+unix"):
                return await connect_unix(url.path)
            if url.scheme in ("tcp", "http") and url.hostname:
                return await anyio.connect_tcp(url.hostname, url.port or 2375)
        except OSError as exc:
            raise self.unavailable(exc) from exc
        raise errors.ConfigError(f"DOCKER_HOST {self.base_url!r}: only unix:// and tcp:// "
                                 "Engine addresses are supported", provider=self._provider)

    def _status_error(self, status: int, text: str, sandbox_id: str) -> errors.SandboxError:
        body = text.partition("\r\n\r\n")[2]
        try:
            message = str(json.loads(body).get("message", body))
        except (ValueError, AttributeError):
            message = body.strip() or f"HTTP {status}"
        response = requests.Response()
        response.status_code = status
        exc = docker.errors.APIError(message, response=response, explanation=message)
        return self.translate(exc, kind="exec", what=None, sandbox_id=sandbox_id)


class ExecStream:
    """An attached exec: write its stdin, read its output frames."""

    def __init__(self, stream: anyio.abc.ByteStream, buffered: bytes) -> None:
        self._stream = stream
        self._buffer = bytearray(buffered)
        self._eof = False

    async def send(self, data: bytes) -> None:
        """Write to the process's stdin."""
        await self._stream.send(data)

    async def close_stdin(self) -> None:
        """Give the process end of file on stdin."""
        await self._stream.send_eof()

    async def frames(self) -> AsyncIterator[Frame]:
        """Output frames until the process closes its output."""
        while True:
            while len(self._buffer) < _HEADER.size or \
                    len(self._buffer) < _HEADER.size + _HEADER.unpack_from(self._buffer)[1]:
                if not await self._fill():
                    return
            kind, size = _HEADER.unpack_from(self._buffer)
            data = bytes(self._buffer[_HEADER.size:_HEADER.size + size])
            del self._buffer[:_HEADER.size + size]
            if kind in _STREAMS and data:
                yield _STREAMS[kind], data

    async def line(self) -> bytes:
        """The first line of stdout (for a command that reports something, then detaches)."""
        seen = b""
        async for stream, data in self.frames():
            if stream == "stdout":
                seen += data
                if b"\n" in seen:
                    return seen.partition(b"\n")[0]
        return seen

    async def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            data = await self._stream.receive(1 << 20)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            self._eof = True
            return False
        self._buffer += data
        return True

    async def aclose(self) -> None:
        """Close the connection."""
        await self._stream.aclose()


async def _read_response_head(stream: anyio.abc.ByteStream) -> tuple[int, bytes, str]:
    """Status, bytes after the head, and the text read (for error bodies)."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            data += await stream.receive(65536)
        except anyio.EndOfStream:
            break
        if len(data) > _MAX_HEADERS:
            break
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        status = 0
    if status not in (101, 200):
        # An error: read its (small) body too, for the message.
        with anyio.move_on_after(5):
            while True:
                try:
                    rest += await stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
                if len(rest) > _MAX_HEADERS or _complete(head, rest):
                    break
    return status, rest, (head + b"\r\n\r\n" + rest).decode("utf-8", "replace")


def _complete(head: bytes, body: bytes) -> bool:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip() or 0)
    return False


def _explanation(exc: docker.errors.APIError) -> str:
    text = exc.explanation
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text or exc)
