"""The data plane: envd's HTTP and Connect-RPC API, over the backend's sandbox.

What envd does, this does through the neutral API: a process request runs exactly the
argv it names (E2B's SDKs send ``/bin/bash -l -c CMD``, so the login shell, and the
``PATH`` that ``/etc/profile`` sets, are as real as on E2B); process output fans out to
every stream attached to the process; signals go to the process itself, not its
children; a request's ``Connect-Timeout-Ms`` ends its stream with ``deadline_exceeded``
when it passes, and kills the process that a ``Start`` started.

This module routes each request, checks its access token, frames Connect's unary and
streamed answers and serves ``/files``; the handlers of the two Connect services are
``_envd_process``'s and ``_envd_filesystem``'s.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import posixpath
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

from provider_sdk import errors
from provider_sdk.models import FileType
from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.e2b._connect import (
    STATUS,
    EnvelopeReader,
    RpcError,
    end_stream,
    envelope,
    rpc_error,
)
from provider_sdk_emulators.e2b._envd_entries import set_metadata
from provider_sdk_emulators.e2b._envd_filesystem import FilesystemService
from provider_sdk_emulators.e2b._envd_process import ProcessService
from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.e2b._world import World
from provider_sdk_emulators.kit import multipart
from provider_sdk_emulators.kit.bodies import BodyTooLarge
from provider_sdk_emulators.kit.http import Last, Request, Response, json_response, too_large

__all__ = ["Envd", "signed_by"]

_METADATA_HEADER = "x-metadata-"

Unary = Callable[[SandboxRecord, dict[str, Any], Request], Awaitable[dict[str, Any]]]
Streaming = Callable[[SandboxRecord, dict[str, Any], Request], AsyncIterator[dict[str, Any]]]


def _ends_process(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a process's end event, the last of its stream."""
    event = message.get("event")
    return isinstance(event, dict) and "end" in event


def signed_by(request: Request, token: str) -> bool:
    """Whether a ``/files`` request carries a signature made with ``token`` for its
    path, operation (``read`` for GET, ``write`` for POST), user and expiration, as the
    SDK signs URLs (whether the signature has expired is not checked here)."""
    signature = request.query.get("signature")
    if not signature:
        return False
    operation = "read" if request.method == "GET" else "write"
    expiration = request.query.get("signature_expiration")
    raw = (f"{request.query.get('path', '')}:{operation}:{request.query.get('username', '')}"
           f":{token}" + (f":{expiration}" if expiration else ""))
    expected = "v1_" + base64.b64encode(
        hashlib.sha256(raw.encode()).digest()).rstrip(b"=").decode()
    return hmac.compare_digest(signature.encode(), expected.encode())


async def _write_as_root(sandbox: Sandbox, path: str,
                         chunks: AsyncIterator[bytes]) -> None:
    """Write a file as envd does, as root: over a file its user may not write as well,
    which keeps its mode. The backend writes as the sandbox's user, so such a file is
    made writable for the write and given its mode back after it."""
    try:
        info = await sandbox.files.stat(path)
    except errors.SandboxError:
        info = None
    if info is None or info.type != FileType.FILE or info.mode & 0o200:
        await sandbox.files.write(path, chunks)
        return
    await sandbox.exec(["chmod", "u+w", "--", path])
    try:
        await sandbox.files.write(path, chunks)
    finally:
        await sandbox.exec(["chmod", f"{info.mode & 0o7777:o}", "--", path])


class Envd(ProcessService, FilesystemService):
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
        self.watchers = {}

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
            error = rpc_error(exc)
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
            failed = rpc_error(exc)

        async def body() -> AsyncIterator[bytes]:
            # The end of the stream goes out with the end of the response (Last), and
            # a process's end event, which nothing follows, with both: one write, one
            # wake-up of the client.
            try:
                if failed is not None:
                    raise failed
                if items is not None:
                    async for item in items:
                        if _ends_process(item):
                            yield Last(envelope(item) + end_stream())
                            return
                        yield envelope(item)
            except RpcError as exc:
                yield Last(end_stream(exc))
                return
            except errors.SandboxError as exc:
                yield Last(end_stream(rpc_error(exc)))
                return
            finally:
                aclose = getattr(items, "aclose", None)
                if aclose is not None:
                    await aclose()
            yield Last(end_stream())

        # The first message goes out with the head, as it is known already.
        opening = envelope(first) if first is not None and failed is None else b""
        return Response(200, (("content-type", "application/connect+json"),), body(),
                        opening=opening)

    # ------------------------------------------------------------------ /files

    def _files_auth(self, record: SandboxRecord, request: Request) -> Response | None:
        """A 401 unless the access token or a valid signature comes with the request."""
        token = record.access_token
        if token is None or self.token_ok(record, request):
            return None
        message = "invalid or missing access token or signature"
        if signed_by(request, token):
            # envd checks the signature first, then its expiration: only a caller who
            # holds a real signature learns that it has expired.
            expiration = request.query.get("signature_expiration")
            if not expiration or (expiration.isdigit() and int(expiration) >= time.time()):
                return None
            message = "signature is already expired"
        return json_response(401, {"code": 401, "message": message})

    async def download(self, record: SandboxRecord, request: Request) -> Response:
        path = request.query.get("path", "")
        if denied := self._files_auth(record, request):
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
            return json_response(400, {"code": 400, "message": exc.message})
        except errors.SandboxError as exc:
            # envd's own failure (opening the file, say) is a 500: a 502 is the proxy's
            # answer for an envd it cannot reach, which a client rightly retries.
            return json_response(500, {"code": 500, "message": f"error opening file "
                                                               f"'{path}': {exc}"})

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
        if denied := self._files_auth(record, request):
            return denied
        content_type = request.headers.get("content-type", "")
        # X-Metadata-<key> headers: kept on each file written, the keys lower-cased.
        metadata = {name[len(_METADATA_HEADER):]: value
                    for name, value in request.headers.items()
                    if name.startswith(_METADATA_HEADER) and len(name) > len(_METADATA_HEADER)}
        written: list[str] = []
        try:
            if content_type.startswith("multipart/form-data"):
                try:
                    boundary = multipart.boundary_of(content_type)
                    async for part in multipart.parts(request.stream(), boundary):
                        if part.name != "file":
                            continue
                        # ?path names the file when one is sent (the SDK sends it only
                        # then); further parts go where their filenames say.
                        target = path if path and not written else part.filename
                        if not target:
                            return json_response(400, {"code": 400, "message":
                                                       "a file part has no filename"})
                        await _write_as_root(record.sandbox, target, part.chunks())
                        written.append(target)
                except multipart.MultipartError as exc:
                    return json_response(400, {"code": 400, "message": str(exc)})
                if not written:
                    return json_response(400, {"code": 400, "message": "no file part"})
            else:
                if not path:
                    return json_response(400, {"code": 400, "message": "path is required"})
                await _write_as_root(record.sandbox, path, request.stream())
                written.append(path)
            if metadata:
                for target in written:
                    await set_metadata(record.sandbox, target, metadata)
            infos = [await record.sandbox.files.stat(p) for p in written]
            for info in infos:  # envd chowns each file it writes, then sets its metadata
                record.note_attribute_changes(info.path, 2 if metadata else 1)
        except BodyTooLarge as exc:
            return too_large(exc)
        except errors.NotFound as exc:
            return json_response(404, {"code": 404, "message": exc.message})
        except errors.InvalidInput as exc:
            return json_response(400, {"code": 400, "message": exc.message})
        except errors.SandboxError as exc:
            return json_response(500, {"code": 500, "message": exc.message})
        return json_response(200, [{"path": i.path, "name": i.name, "type": "file",
                                    **({"metadata": metadata} if metadata else {})}
                                   for i in infos])
