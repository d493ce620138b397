"""envd's ``process.Process`` service: the Connect requests that start processes, attach
to them, feed their input and signal them.

Each handler reads and checks its request's fields and answers in envd's messages. The
processes are the world's (``_world_processes``): these handlers start, find, signal and
resize them through it and write their input, and start no command themselves. Routing
and Connect framing are ``envd``'s.
"""

from __future__ import annotations

import base64
import binascii
import signal
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from provider_sdk import errors
from provider_sdk.models import FileType
from provider_sdk_emulators.e2b._connect import (
    EnvelopeReader,
    RpcError,
    end_stream,
    envelope,
    rpc_error,
)
from provider_sdk_emulators.e2b._process_entry import ProcessEntry
from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.e2b._world import World
from provider_sdk_emulators.e2b._world_processes import SCRIPT
from provider_sdk_emulators.kit.http import Request, Response

__all__ = ["ProcessService"]

_SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}
_DEFAULT_KEEPALIVE = 90.0


def _user(request: Request) -> str | None:
    """The user named by ``Authorization: Basic base64(user:)``."""
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(auth[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise RpcError("unauthenticated", "malformed Authorization header") from None
    return decoded.split(":", 1)[0] or None


def _pty_size(value: Any) -> tuple[int, int]:
    size = value.get("size") if isinstance(value, dict) else None
    cols = size.get("cols") if isinstance(size, dict) else None
    rows = size.get("rows") if isinstance(size, dict) else None
    if not isinstance(cols, int) or not isinstance(rows, int) or not (
            0 < cols < 10000 and 0 < rows < 10000):
        raise RpcError("invalid_argument", "pty.size needs positive cols and rows")
    return cols, rows


def _selector(message: dict[str, Any]) -> dict[str, Any]:
    selector = message.get("process")
    if not isinstance(selector, dict):
        raise RpcError("invalid_argument", "process selector is required")
    return selector


class ProcessService:
    """The ``process.Process`` handlers of :class:`~provider_sdk_emulators.e2b.envd.Envd`."""

    world: World

    async def start(self, record: SandboxRecord, message: dict[str, Any],
                    request: Request) -> AsyncIterator[dict[str, Any]]:
        process = message.get("process")
        if not isinstance(process, dict) or not isinstance(process.get("cmd"), str):
            raise RpcError("invalid_argument", "process.cmd is required")
        pty = _pty_size(message.get("pty")) if message.get("pty") else None
        if pty is not None:
            await self._check_script(record)
        args = process.get("args") or []
        envs = process.get("envs") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise RpcError("invalid_argument", "process.args must be a list of strings")
        if not isinstance(envs, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in envs.items()):
            raise RpcError("invalid_argument", "process.envs must be an object of strings")
        timeout = self._deadline(request)
        deadline = None if timeout is None else anyio.current_time() + timeout
        cwd = process.get("cwd") or None
        if cwd is not None:
            await self._check_cwd(record, cwd)
        try:
            entry, events = await self.world.processes.start_process(
                record, argv=[process["cmd"], *args], env=envs, cwd=cwd,
                user=_user(request), tag=message.get("tag") or None,
                stdin=bool(message.get("stdin", False)), timeout=timeout, pty=pty)
        except errors.InvalidInput as exc:
            raise RpcError("invalid_argument", str(exc)) from None
        yield {"event": {"start": {"pid": entry.pid}}}
        async for item in self._relay(events, request, deadline):
            yield item

    async def _check_script(self, record: SandboxRecord) -> None:
        try:
            await record.sandbox.files.stat(SCRIPT)
        except errors.NotFound:
            raise RpcError("unimplemented", f"PTYs need {SCRIPT} (util-linux) in the "
                                            "sandbox, and this one has none") from None

    async def _check_cwd(self, record: SandboxRecord, cwd: str) -> None:
        try:
            info = await record.sandbox.files.stat(cwd)
        except (errors.NotFound, errors.InvalidInput):
            info = None
        if info is None or info.type is not FileType.DIRECTORY:
            raise RpcError("invalid_argument", f"cwd '{cwd}' does not exist")

    def _deadline(self, request: Request) -> float | None:
        raw = request.headers.get("connect-timeout-ms")
        try:
            millis = int(raw) if raw else 0
        except ValueError:
            raise RpcError("invalid_argument", f"bad Connect-Timeout-Ms {raw!r}") from None
        return millis / 1000 if millis > 0 else None

    async def _relay(self, events: MemoryObjectReceiveStream[dict[str, Any]],
                     request: Request, deadline: float | None) -> AsyncIterator[dict[str, Any]]:
        """A process's events, with keepalives while it is quiet, until the request's
        ``deadline`` (a clock time): then, as envd's request context does, the stream
        ends with ``deadline_exceeded`` (the process's own deadline is the world's)."""
        try:
            interval = float(request.headers.get("keepalive-ping-interval", "") or
                             _DEFAULT_KEEPALIVE)
        except ValueError:
            interval = _DEFAULT_KEEPALIVE
        async with events:
            while True:
                item: dict[str, Any] | None = None
                wait = max(interval, 0.05)
                if deadline is not None:
                    wait = min(wait, deadline - anyio.current_time())
                with anyio.move_on_after(max(wait, 0.0)):
                    try:
                        item = await events.receive()
                    except anyio.EndOfStream:
                        return
                if item is None:
                    if deadline is not None and anyio.current_time() >= deadline:
                        raise RpcError("deadline_exceeded", "context deadline exceeded")
                    yield {"event": {"keepalive": {}}}
                    continue
                if isinstance(item.get("error"), RpcError):
                    raise item["error"]
                yield item

    async def connect(self, record: SandboxRecord, message: dict[str, Any],
                      request: Request) -> AsyncIterator[dict[str, Any]]:
        timeout = self._deadline(request)
        deadline = None if timeout is None else anyio.current_time() + timeout
        entry = self.world.processes.find_process(record, _selector(message))
        events = entry.subscribe()
        yield {"event": {"start": {"pid": entry.pid}}}
        async for item in self._relay(events, request, deadline):
            yield item

    async def list_processes(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        return {"processes": [
            {"config": e.config, "pid": e.pid, **({"tag": e.tag} if e.tag else {})}
            for e in record.processes.values() if e.ended is None]}

    async def send_input(self, record: SandboxRecord, message: dict[str, Any],
                         request: Request) -> dict[str, Any]:
        entry = self.world.processes.find_process(record, _selector(message))
        await entry.process.write_stdin(self._input(entry, message.get("input")))
        return {}

    def _input(self, entry: ProcessEntry, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise RpcError("invalid_argument", "input is required")
        key = "pty" if "pty" in value else "stdin"
        if key == "pty" and not entry.pty:
            raise RpcError("failed_precondition", f"process {entry.pid} has no PTY")
        try:
            return base64.b64decode(value.get(key, ""), validate=True)
        except (binascii.Error, TypeError):
            raise RpcError("invalid_argument", f"input.{key} must be base64") from None

    async def stream_input(self, record: SandboxRecord, request: Request) -> Response:
        """The client-streaming ``StreamInput``: a start, then data and keepalives."""
        try:
            reader = EnvelopeReader(request.stream())
            first = await reader.next()
            if not isinstance(first, dict) or not isinstance(first.get("start"), dict):
                raise RpcError("invalid_argument", "the first message must be start")
            entry = self.world.processes.find_process(record, _selector(first["start"]))
            while (message := await reader.next()) is not None:
                data = message.get("data") if isinstance(message, dict) else None
                if isinstance(data, dict):
                    await entry.process.write_stdin(self._input(entry, data.get("input")))
            body = envelope({}) + end_stream()
        except RpcError as exc:
            body = end_stream(exc)
        except errors.SandboxError as exc:
            body = end_stream(rpc_error(exc))
        return Response(200, (("content-type", "application/connect+json"),), body)

    async def send_signal(self, record: SandboxRecord, message: dict[str, Any],
                          request: Request) -> dict[str, Any]:
        entry = self.world.processes.find_process(record, _selector(message))
        sig = _SIGNALS.get(str(message.get("signal")))
        if sig is None:
            raise RpcError("invalid_argument", f"unknown signal {message.get('signal')!r}")
        await self.world.processes.send_signal(record, entry.pid, sig)
        return {}

    async def close_stdin(self, record: SandboxRecord, message: dict[str, Any],
                          request: Request) -> dict[str, Any]:
        entry = self.world.processes.find_process(record, _selector(message))
        await entry.process.close_stdin()
        return {}

    async def update(self, record: SandboxRecord, message: dict[str, Any],
                     request: Request) -> dict[str, Any]:
        entry = self.world.processes.find_process(record, _selector(message))
        if message.get("pty"):
            cols, rows = _pty_size(message["pty"])
            await self.world.processes.resize(record, entry, cols, rows)
        return {}
