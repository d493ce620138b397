"""Signed file URLs: each sandbox's signing key (``GET /api/sandbox/{id}/signing-key``,
``POST .../signing-key/rotate``), and the toolbox's single-file routes they lead to,
``GET /files/download`` and ``POST /files/upload-v2``.

A signed URL carries ``path``, ``expires`` (unix seconds; 0: never) and ``signature``:
``v1_`` and the unpadded URL-safe base64 of the HMAC-SHA256, under the sandbox's key, of
``v1:files:METHOD:PATH:EXPIRES``. Such a request needs no API key: the signature is
checked instead, and a wrong one, an expired one, or one made with a key since rotated
is a 401. Without a signature the routes take the API key, as every toolbox route does.
The keys are :class:`~provider_sdk.config.Secret`: never in a repr or a log.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import posixpath
import secrets
import time
from collections.abc import AsyncIterator

from provider_sdk.config import Secret
from provider_sdk.errors import SandboxError
from provider_sdk_emulators.daytona._http import HttpError, context, json_response
from provider_sdk_emulators.daytona._store import SandboxRecord
from provider_sdk_emulators.daytona._toolbox import file_error, file_size, running
from provider_sdk_emulators.kit import multipart
from provider_sdk_emulators.kit.bodies import BodyTooLarge
from provider_sdk_emulators.kit.http import Request, Response


def signature(key: Secret, method: str, path: str, expires: int) -> str:
    """The signature of a URL for ``method`` on ``path`` until ``expires``."""
    canonical = f"v1:files:{method}:{path}:{expires}".encode()
    digest = hmac.new(key.reveal().encode(), canonical, hashlib.sha256).digest()
    return "v1_" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _check(request: Request, record: SandboxRecord) -> None:
    """Refuse a signed request whose signature, under the sandbox's key now, does not
    match, or whose time has passed. A request without one was let in by its API key."""
    given = request.query.get("signature")
    if given is None:
        return
    raw = request.query.get("expires", "")
    if not raw.isdigit():
        raise HttpError(401, "invalid signed URL: expires must be a unix time", "UNAUTHORIZED")
    expires = int(raw)
    expected = signature(record.signing_key, request.method, request.query.get("path", ""),
                         expires)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise HttpError(401, "invalid signed URL: the signature does not match",
                        "UNAUTHORIZED")
    if expires and expires < time.time():
        raise HttpError(401, "invalid signed URL: it has expired", "UNAUTHORIZED")


def _record(request: Request) -> SandboxRecord:
    key = request.params["sandbox"]
    record = context(request).store.sandbox(key)
    if record is None:
        raise HttpError(404, f"Sandbox with ID {key} not found")
    return record


async def signing_key(request: Request) -> Response:
    """``GET /api/sandbox/{id}/signing-key``: the key, a JSON string."""
    return json_response(_record(request).signing_key.reveal())


async def rotate_signing_key(request: Request) -> Response:
    """``POST /api/sandbox/{id}/signing-key/rotate``: a new key; every URL signed with
    the old one is refused from now on."""
    record = _record(request)
    record.signing_key = Secret(secrets.token_urlsafe(32))
    return json_response(record.signing_key.reveal())


def _path(request: Request) -> str:
    path = request.query.get("path")
    if not path:
        raise HttpError(400, "query parameter path is required", "INVALID_FILE_PATH")
    return path


async def download_file(request: Request) -> Response:
    """``GET /files/download?path=``: the file's bytes, streamed."""
    record, handle = running(request)
    _check(request, record)
    path = _path(request)
    stream = handle.files.stream(path)

    async def close() -> None:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(SandboxError):
                await aclose()

    try:
        first = await anext(stream, b"")  # errors surface before the answer starts
        size = await file_size(handle, path)
    except SandboxError as exc:
        await close()
        raise file_error(exc) from exc
    name = posixpath.basename(path.rstrip("/")) or "file"

    async def body() -> AsyncIterator[bytes]:
        try:
            yield first
            async for chunk in stream:
                yield chunk
        finally:
            await close()

    return Response(200, (("content-type", "application/octet-stream"),
                          ("content-length", str(size)),
                          ("content-disposition", f'attachment; filename="{name}"')), body())


async def upload_file(request: Request) -> Response:
    """``POST /files/upload-v2?path=``: the multipart field ``file``, or the raw body,
    streamed to ``path`` (parents made, an existing file replaced)."""
    record, handle = running(request)
    _check(request, record)
    path = _path(request)
    content_type = request.headers.get("content-type", "")
    try:
        if content_type.startswith("multipart/"):
            async for part in multipart.parts(request.stream(),
                                              multipart.boundary_of(content_type)):
                if part.name == "file":
                    await handle.files.write(path, part.chunks())
                    break
            else:
                raise HttpError(400, "the form has no field named file", "BAD_REQUEST")
        else:
            await handle.files.write(path, request.stream())
    except BodyTooLarge:
        raise
    except multipart.MultipartError as exc:
        raise HttpError(400, f"malformed multipart body: {exc}", "BAD_REQUEST") from None
    except SandboxError as exc:
        raise file_error(exc) from exc
    return json_response({"name": posixpath.basename(path), "path": path, "type": "file"})
