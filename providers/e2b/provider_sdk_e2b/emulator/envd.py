"""The data plane: envd's HTTP and Connect-RPC API, over the backend's sandbox.

What envd does, this does through the neutral API: a process request runs exactly the
argv it names (E2B's SDKs send ``/bin/bash -l -c CMD``, so the login shell, and the
``PATH`` that ``/etc/profile`` sets, are as real as on E2B); process output fans out to
every stream attached to the process; signals go to the process itself, not its
children; a request's ``Connect-Timeout-Ms`` kills the process when it passes.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import posixpath
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from provider_sdk import errors
from provider_sdk.emulators import BodyTooLarge
from provider_sdk.models import FileInfo, FileType
from provider_sdk_e2b.emulator import _multipart
from provider_sdk_e2b.emulator._connect import (
    STATUS,
    EnvelopeReader,
    RpcError,
    end_stream,
    envelope,
)
from provider_sdk_e2b.emulator._http import Request, Response, json_response, too_large
from provider_sdk_e2b.emulator._world import SCRIPT, ProcessEntry, SandboxRecord, World

__all__ = ["Envd"]

Unary = Callable[[SandboxRecord, dict[str, Any], Request], Awaitable[dict[str, Any]]]
Streaming = Callable[[SandboxRecord, dict[str, Any], Request], AsyncIterator[dict[str, Any]]]

_TYPES = {FileType.FILE: "FILE_TYPE_FILE", FileType.DIRECTORY: "FILE_TYPE_DIRECTORY",
          FileType.SYMLINK: "FILE_TYPE_SYMLINK"}
_SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}
_WATCH_POLL = 0.2
_DEFAULT_KEEPALIVE = 90.0


def _rpc_error(exc: errors.SandboxError, path: str = "") -> RpcError:
    """The Connect error envd would answer for a neutral error."""
    if isinstance(exc, errors.NotFound):
        return RpcError("not_found", f"path '{path}' does not exist" if path else str(exc))
    if isinstance(exc, errors.FileExists):
        return RpcError("already_exists", f"path '{path}' already exists")
    if isinstance(exc, (errors.InvalidInput, errors.Conflict)):
        return RpcError("invalid_argument", str(exc))
    if isinstance(exc, errors.PermissionDenied):
        return RpcError("permission_denied", str(exc))
    if isinstance(exc, errors.QuotaExceeded):  # a message past the read limit, too
        return RpcError("resource_exhausted", str(exc))
    if isinstance(exc, (errors.SandboxNotRunning, errors.Unavailable)):
        return RpcError("unavailable", str(exc))
    return RpcError("internal", str(exc))


def _permissions(info: FileInfo) -> str:
    kind = {"directory": "d", "symlink": "l"}.get(info.type.value, "-")
    bits = "".join(ch if info.mode & (1 << (8 - i)) else "-"
                   for i, ch in enumerate("rwxrwxrwx"))
    return kind + bits


def entry_json(info: FileInfo) -> dict[str, Any]:
    """envd's ``EntryInfo`` for a neutral :class:`FileInfo`."""
    entry: dict[str, Any] = {
        "name": info.name, "type": _TYPES.get(info.type, "FILE_TYPE_UNSPECIFIED"),
        "path": info.path, "size": str(info.size), "mode": info.mode,
        "permissions": _permissions(info),
    }
    if info.modified_at is not None:
        entry["modifiedTime"] = info.modified_at.astimezone(dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ")
    if info.symlink_target is not None:
        entry["symlinkTarget"] = info.symlink_target
    return entry


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


class _Watcher:
    """Directory changes, found by comparing listings (a poll, not inotify)."""

    def __init__(self, record: SandboxRecord, path: str, recursive: bool) -> None:
        self.record = record
        self.path = path
        self.recursive = recursive
        self.seen: dict[str, tuple[str, int, float]] = {}

    async def listing(self) -> dict[str, tuple[str, int, float]]:
        found: dict[str, tuple[str, int, float]] = {}
        pending = [self.path]
        while pending:
            directory = pending.pop()
            try:
                entries = await self.record.sandbox.files.list(directory)
            except errors.NotFound:
                continue
            for info in entries:
                stamp = info.modified_at.timestamp() if info.modified_at else 0.0
                found[info.path] = (info.type.value, info.size, stamp)
                if self.recursive and info.type is FileType.DIRECTORY:
                    pending.append(info.path)
        return found

    async def changes(self) -> list[dict[str, Any]]:
        current = await self.listing()
        events = []
        base = self.path.rstrip("/") + "/"
        for path, meta in current.items():
            before = self.seen.get(path)
            kind = "EVENT_TYPE_CREATE" if before is None else (
                "EVENT_TYPE_WRITE" if before != meta else None)
            if kind:
                events.append({"name": path.removeprefix(base), "type": kind})
        events += [{"name": path.removeprefix(base), "type": "EVENT_TYPE_REMOVE"}
                   for path in self.seen if path not in current]
        self.seen = current
        return events


class Envd:
    """envd's handlers, over one :class:`World`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.unary: dict[str, Unary] = {
            "process.Process/List": self.list_processes,
            "process.Process/SendInput": self.send_input,
            "process.Process/SendSignal": self.send_signal,
            "process.Process/CloseStdin": self.close_stdin,
            "process.Process/Update": self.update,
            "filesystem.Filesystem/Stat": self.stat,
            "filesystem.Filesystem/MakeDir": self.make_dir,
            "filesystem.Filesystem/Move": self.move,
            "filesystem.Filesystem/ListDir": self.list_dir,
            "filesystem.Filesystem/Remove": self.remove,
            "filesystem.Filesystem/CreateWatcher": self.create_watcher,
            "filesystem.Filesystem/GetWatcherEvents": self.watcher_events,
            "filesystem.Filesystem/RemoveWatcher": self.remove_watcher,
        }
        self.streaming: dict[str, Streaming] = {
            "process.Process/Start": self.start,
            "process.Process/Connect": self.connect,
            "filesystem.Filesystem/WatchDir": self.watch_dir,
        }
        self.watchers: dict[str, _Watcher] = {}

    async def handle(self, record: SandboxRecord, request: Request) -> Response:
        """Serve one data-plane request to envd's port."""
        path = request.path
        if path == "/health" and request.method == "GET":
            return Response(204)
        if path == "/files":
            if request.method == "GET":
                return await self.download(record, request)
            if request.method == "POST":
                return await self.upload(record, request)
            return json_response(405, {"code": 405, "message": "method not allowed"})
        if request.method != "POST":
            return json_response(404, {"code": 404, "message": f"no route {path}"})
        if not self.token_ok(record, request):
            return json_response(401, {"code": "unauthenticated",
                                       "message": "invalid or missing X-Access-Token"})
        method = path.lstrip("/")
        if method == "process.Process/StreamInput":
            return await self.stream_input(record, request)
        if method in self.streaming:
            return await self._serve_stream(record, request, self.streaming[method])
        if method in self.unary:
            return await self._serve_unary(record, request, self.unary[method])
        return json_response(404, {"code": "unimplemented", "message": f"{method} is not served"})

    def token_ok(self, record: SandboxRecord, request: Request) -> bool:
        """Whether the request carries the sandbox's access token (or none is set)."""
        token = record.access_token
        return token is None or hmac.compare_digest(
            request.headers.get("x-access-token", ""), token)

    # ----------------------------------------------------------- Connect framing

    async def _serve_unary(self, record: SandboxRecord, request: Request,
                           handler: Unary) -> Response:
        try:
            if not request.headers.get("content-type", "").startswith("application/json"):
                raise RpcError("invalid_argument", "only the JSON codec is served")
            try:
                message = await request.json()
            except ValueError as exc:
                raise RpcError("invalid_argument", f"malformed JSON: {exc}") from None
            if not isinstance(message, dict):
                raise RpcError("invalid_argument", "the message must be a JSON object")
            result = await handler(record, message, request)
        except RpcError as exc:
            return json_response(STATUS.get(exc.code, 500), exc.to_json())
        except errors.SandboxError as exc:
            error = _rpc_error(exc)
            return json_response(STATUS.get(error.code, 500), error.to_json())
        return json_response(200, result)

    async def _serve_stream(self, record: SandboxRecord, request: Request,
                            handler: Streaming) -> Response:
        # As envd does, the request is read and the first message produced before the
        # response starts: a client may stop sending its body once it sees the
        # response's headers, and one that sees the first message (a process's start, a
        # watch's start) may rely on what it says having happened.
        items: AsyncIterator[dict[str, Any]] | None = None
        first: dict[str, Any] | None = None
        failed: RpcError | None = None
        try:
            if not request.headers.get("content-type", "").startswith(
                    "application/connect+json"):
                raise RpcError("invalid_argument", "only the JSON codec is served")
            reader = EnvelopeReader(request.stream())
            message = await reader.next()
            if not isinstance(message, dict):
                raise RpcError("invalid_argument", "a request message is required")
            # One message and the end of the body: then the server notices if the
            # client goes away while the stream is quiet.
            if await reader.next() is not None:
                raise RpcError("invalid_argument", "a server stream takes one message")
            items = handler(record, message, request)
            first = await anext(items, None)
        except RpcError as exc:
            failed = exc
        except errors.SandboxError as exc:
            failed = _rpc_error(exc)

        async def body() -> AsyncIterator[bytes]:
            try:
                if failed is not None:
                    raise failed
                if first is not None:
                    yield envelope(first)
                if items is not None:
                    async for item in items:
                        yield envelope(item)
            except RpcError as exc:
                yield end_stream(exc)
                return
            except errors.SandboxError as exc:
                yield end_stream(_rpc_error(exc))
                return
            finally:
                aclose = getattr(items, "aclose", None)
                if aclose is not None:
                    await aclose()
            yield end_stream()

        return Response(200, (("content-type", "application/connect+json"),), body())

    # -------------------------------------------------------------- processes

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
        cwd = process.get("cwd") or None
        if cwd is not None:
            await self._check_cwd(record, cwd)
        timeout = self._deadline(request)
        try:
            entry, events = await self.world.start_process(
                record, argv=[process["cmd"], *args], env=envs, cwd=cwd,
                user=_user(request), tag=message.get("tag") or None,
                stdin=bool(message.get("stdin", False)), timeout=timeout, pty=pty)
        except errors.InvalidInput as exc:
            raise RpcError("invalid_argument", str(exc)) from None
        yield {"event": {"start": {"pid": entry.pid}}}
        async for item in self._relay(events, request):
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
                     request: Request) -> AsyncIterator[dict[str, Any]]:
        """A process's events, with keepalives while it is quiet."""
        try:
            interval = float(request.headers.get("keepalive-ping-interval", "") or
                             _DEFAULT_KEEPALIVE)
        except ValueError:
            interval = _DEFAULT_KEEPALIVE
        async with events:
            while True:
                item: dict[str, Any] | None = None
                with anyio.move_on_after(max(interval, 0.05)):
                    try:
                        item = await events.receive()
                    except anyio.EndOfStream:
                        return
                if item is None:
                    yield {"event": {"keepalive": {}}}
                    continue
                if isinstance(item.get("error"), RpcError):
                    raise item["error"]
                yield item

    async def connect(self, record: SandboxRecord, message: dict[str, Any],
                      request: Request) -> AsyncIterator[dict[str, Any]]:
        entry = self.world.find_process(record, _selector(message))
        events = entry.subscribe()
        yield {"event": {"start": {"pid": entry.pid}}}
        async for item in self._relay(events, request):
            yield item

    async def list_processes(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        return {"processes": [
            {"config": e.config, "pid": e.pid, **({"tag": e.tag} if e.tag else {})}
            for e in record.processes.values() if e.ended is None]}

    async def send_input(self, record: SandboxRecord, message: dict[str, Any],
                         request: Request) -> dict[str, Any]:
        entry = self.world.find_process(record, _selector(message))
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
            entry = self.world.find_process(record, _selector(first["start"]))
            while (message := await reader.next()) is not None:
                data = message.get("data") if isinstance(message, dict) else None
                if isinstance(data, dict):
                    await entry.process.write_stdin(self._input(entry, data.get("input")))
            body = envelope({}) + end_stream()
        except RpcError as exc:
            body = end_stream(exc)
        except errors.SandboxError as exc:
            body = end_stream(_rpc_error(exc))
        return Response(200, (("content-type", "application/connect+json"),), body)

    async def send_signal(self, record: SandboxRecord, message: dict[str, Any],
                          request: Request) -> dict[str, Any]:
        entry = self.world.find_process(record, _selector(message))
        sig = _SIGNALS.get(str(message.get("signal")))
        if sig is None:
            raise RpcError("invalid_argument", f"unknown signal {message.get('signal')!r}")
        await self.world.send_signal(record, entry.pid, sig)
        return {}

    async def close_stdin(self, record: SandboxRecord, message: dict[str, Any],
                          request: Request) -> dict[str, Any]:
        entry = self.world.find_process(record, _selector(message))
        await entry.process.close_stdin()
        return {}

    async def update(self, record: SandboxRecord, message: dict[str, Any],
                     request: Request) -> dict[str, Any]:
        entry = self.world.find_process(record, _selector(message))
        if message.get("pty"):
            cols, rows = _pty_size(message["pty"])
            await self.world.resize(record, entry, cols, rows)
        return {}

    # ------------------------------------------------------------- filesystem

    def _path(self, message: dict[str, Any], key: str = "path") -> str:
        value = message.get(key)
        if not isinstance(value, str) or not value:
            raise RpcError("invalid_argument", f"{key} is required")
        return value

    async def stat(self, record: SandboxRecord, message: dict[str, Any],
                   request: Request) -> dict[str, Any]:
        path = self._path(message)
        try:
            return {"entry": entry_json(await record.sandbox.files.stat(path))}
        except errors.SandboxError as exc:
            raise _rpc_error(exc, path) from None

    async def make_dir(self, record: SandboxRecord, message: dict[str, Any],
                       request: Request) -> dict[str, Any]:
        path = self._path(message)
        try:
            await record.sandbox.files.mkdir(path, parents=True, exist_ok=False)
            return {"entry": entry_json(await record.sandbox.files.stat(path))}
        except errors.Conflict:
            raise RpcError("already_exists", f"directory '{path}' already exists") from None
        except errors.SandboxError as exc:
            raise _rpc_error(exc, path) from None

    async def move(self, record: SandboxRecord, message: dict[str, Any],
                   request: Request) -> dict[str, Any]:
        source = self._path(message, "source")
        destination = self._path(message, "destination")
        try:
            await record.sandbox.files.rename(source, destination)
            return {"entry": entry_json(await record.sandbox.files.stat(destination))}
        except errors.SandboxError as exc:
            raise _rpc_error(exc, source) from None

    async def list_dir(self, record: SandboxRecord, message: dict[str, Any],
                       request: Request) -> dict[str, Any]:
        path = self._path(message)
        depth = message.get("depth") or 1
        if not isinstance(depth, int) or depth < 1:
            raise RpcError("invalid_argument", "depth must be a positive integer")
        try:
            info = await record.sandbox.files.stat(path)
        except errors.SandboxError as exc:
            raise _rpc_error(exc, path) from None
        if info.type is not FileType.DIRECTORY:
            raise RpcError("invalid_argument", f"path '{path}' is not a directory")
        entries: list[dict[str, Any]] = []
        level = [info.path]
        for _ in range(depth):
            following = []
            for directory in level:
                try:
                    found = await record.sandbox.files.list(directory)
                except errors.NotFound:
                    continue
                for item in found:
                    entries.append(entry_json(item))
                    if item.type is FileType.DIRECTORY:
                        following.append(item.path)
            level = following
        return {"entries": entries}

    async def remove(self, record: SandboxRecord, message: dict[str, Any],
                     request: Request) -> dict[str, Any]:
        path = self._path(message)
        try:
            await record.sandbox.files.remove(path, recursive=True)
        except errors.SandboxError as exc:
            raise _rpc_error(exc, path) from None
        return {}

    async def _watcher(self, record: SandboxRecord, message: dict[str, Any]) -> _Watcher:
        path = self._path(message)
        try:
            info = await record.sandbox.files.stat(path)
        except errors.SandboxError as exc:
            raise _rpc_error(exc, path) from None
        if info.type is not FileType.DIRECTORY:
            raise RpcError("invalid_argument", f"path '{path}' is not a directory")
        watcher = _Watcher(record, info.path, bool(message.get("recursive", False)))
        watcher.seen = await watcher.listing()
        return watcher

    async def watch_dir(self, record: SandboxRecord, message: dict[str, Any],
                        request: Request) -> AsyncIterator[dict[str, Any]]:
        watcher = await self._watcher(record, message)
        yield {"start": {}}
        while True:
            await anyio.sleep(_WATCH_POLL)
            for event in await watcher.changes():
                yield {"filesystem": event}

    async def create_watcher(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        watcher = await self._watcher(record, message)
        watcher_id = secrets.token_hex(8)
        self.watchers[watcher_id] = watcher
        return {"watcherId": watcher_id}

    async def watcher_events(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        watcher = self.watchers.get(str(message.get("watcherId")))
        if watcher is None or watcher.record is not record:
            raise RpcError("not_found", f"watcher {message.get('watcherId')!r} not found")
        return {"events": await watcher.changes()}

    async def remove_watcher(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        self.watchers.pop(str(message.get("watcherId")), None)
        return {}

    # ------------------------------------------------------------------ /files

    def _files_auth(self, record: SandboxRecord, request: Request, path: str,
                    operation: str) -> Response | None:
        """A 401 unless the access token or a valid signature comes with the request."""
        token = record.access_token
        if token is None or self.token_ok(record, request):
            return None
        signature = request.query.get("signature")
        if signature:
            expiration = request.query.get("signature_expiration")
            user = request.query.get("username", "")
            raw = f"{path}:{operation}:{user}:{token}" + (f":{expiration}" if expiration
                                                          else "")
            expected = "v1_" + base64.b64encode(
                hashlib.sha256(raw.encode()).digest()).rstrip(b"=").decode()
            fresh = not expiration or (expiration.isdigit() and int(expiration) >= time.time())
            if fresh and hmac.compare_digest(signature, expected):
                return None
        return json_response(401, {"code": 401, "message": "invalid or missing access token "
                                                           "or signature"})

    async def download(self, record: SandboxRecord, request: Request) -> Response:
        path = request.query.get("path", "")
        if denied := self._files_auth(record, request, path, "read"):
            return denied
        if not path:
            return json_response(400, {"code": 400, "message": "path is required"})
        chunks = record.sandbox.files.stream(path)
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            first = b""
        except errors.NotFound:
            return json_response(404, {"code": 404, "message": f"path '{path}' does not exist"})
        except errors.IsADirectory:
            return json_response(400, {"code": 400, "message": f"path '{path}' is a directory"})
        except errors.InvalidInput as exc:
            return json_response(400, {"code": 400, "message": str(exc)})
        except errors.SandboxError as exc:
            return json_response(502, {"code": 502, "message": str(exc)})

        async def body() -> AsyncIterator[bytes]:
            try:
                yield first
                async for chunk in chunks:
                    yield chunk
            finally:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()

        # Any byte may be in a file name; header values take only printable ASCII.
        name = quote(posixpath.basename(path.rstrip("/")), safe="")
        return Response(200, (("content-type", "application/octet-stream"),
                              ("content-disposition", f"inline; filename*=UTF-8''{name}")),
                        body())

    async def upload(self, record: SandboxRecord, request: Request) -> Response:
        """``POST /files``: multipart parts or one octet-stream body, each streamed into
        the sandbox as it arrives (a gzip body inflated as it arrives, and bounded)."""
        path = request.query.get("path", "")
        if denied := self._files_auth(record, request, path, "write"):
            return denied
        content_type = request.headers.get("content-type", "")
        written: list[str] = []
        try:
            if content_type.startswith("multipart/form-data"):
                try:
                    boundary = _multipart.boundary_of(content_type)
                    async for part in _multipart.parts(request.stream(), boundary):
                        if part.name != "file":
                            continue
                        # ?path names the file when one is sent (the SDK sends it only
                        # then); further parts go where their filenames say.
                        target = path if path and not written else part.filename
                        if not target:
                            return json_response(400, {"code": 400, "message":
                                                       "a file part has no filename"})
                        await record.sandbox.files.write(target, part.chunks())
                        written.append(target)
                except _multipart.MultipartError as exc:
                    return json_response(400, {"code": 400, "message": str(exc)})
                if not written:
                    return json_response(400, {"code": 400, "message": "no file part"})
            else:
                if not path:
                    return json_response(400, {"code": 400, "message": "path is required"})
                await record.sandbox.files.write(path, request.stream())
                written.append(path)
            infos = [await record.sandbox.files.stat(p) for p in written]
        except BodyTooLarge as exc:
            return too_large(exc)
        except errors.NotFound as exc:
            return json_response(404, {"code": 404, "message": str(exc)})
        except errors.InvalidInput as exc:
            return json_response(400, {"code": 400, "message": str(exc)})
        except errors.SandboxError as exc:
            return json_response(500, {"code": 500, "message": str(exc)})
        return json_response(200, [{"path": i.path, "name": i.name, "type": "file"}
                                   for i in infos])
