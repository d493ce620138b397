"""Preview URLs: a server listening on a port inside the sandbox, reached from outside.

Daytona's API answers ``GET /sandbox/{id}/ports/{port}/preview-url`` with
``https://{port}-{sandboxId}.{proxy domain}`` and the sandbox's access token, and
``.../signed-preview-url`` with ``https://{port}-{token}.{proxy domain}``, a token that
stands for the sandbox on that port until it expires (60 s unless asked otherwise, 1 s
to 24 h) or ``.../signed-preview-url/{token}/expire`` revokes it. Here there is no DNS
for such names, so the label goes in the path: ``{base}/preview/{port}-{sandboxId}`` and
``{base}/preview/{port}-{token}``; whatever follows is the path the server sees.

As Daytona's proxy, a request by sandbox id must carry the access token
(``X-Daytona-Preview-Token`` header or ``DAYTONA_SANDBOX_AUTH_KEY`` query parameter) or
the API key (``Authorization: Bearer``), which are taken off before it is forwarded;
without one it is a 401 (Daytona's proxy sends a browser to its login page instead). A
signed token is refused once expired or revoked.

Forwarding: the request, with ``Connection: close``, goes into the sandbox through the
backend's ``exec`` (a ``bash`` relay to ``127.0.0.1:PORT`` on the sandbox's own
loopback: nothing leaves the machine), and the answer comes back the same way. Bodies
are bounded both ways (16 MiB); there are no WebSockets, nor streaming: the answer is
sent once the server has closed the connection. Nothing listening is a 502.
"""

from __future__ import annotations

import http.client
import io
import secrets
import string
import time
import urllib.parse

from aiohttp import web
from multidict import CIMultiDict

from provider_sdk.emulators import BODY_LIMIT
from provider_sdk.errors import CommandTimeout, SandboxError
from provider_sdk_daytona.emulator._http import HttpError, context, json_response
from provider_sdk_daytona.emulator._store import SandboxRecord, Store

TOKEN_HEADER = "X-Daytona-Preview-Token"
TOKEN_QUERY = "DAYTONA_SANDBOX_AUTH_KEY"
_RELAY_TIMEOUT = 60.0
# Connects on the sandbox's loopback, copies the request in, then the answer out.
_RELAY = 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 97; cat >&3; cat <&3'
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                  "transfer-encoding", "upgrade", "host", "content-length",
                  "authorization", TOKEN_HEADER.lower()})
_ALPHABET = string.ascii_lowercase + string.digits


def _port(request: web.Request) -> int:
    raw = request.match_info["port"]
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise HttpError(400, "Invalid port")
    return int(raw)


def _record(request: web.Request) -> SandboxRecord:
    key = request.match_info["sandbox"]
    record = context(request).store.sandbox(key)
    if record is None:
        raise HttpError(404, f"Sandbox with ID or name {key} not found")
    return record


def _url(request: web.Request, port: int, label: str) -> str:
    return f"{context(request).base_url}/preview/{port}-{label}"


async def preview_url(request: web.Request) -> web.Response:
    """``GET /sandbox/{id}/ports/{port}/preview-url``: the URL and the access token."""
    port, record = _port(request), _record(request)
    return json_response({"sandboxId": record.id, "url": _url(request, port, record.id),
                          "token": record.preview_token.reveal()})


async def signed_preview_url(request: web.Request) -> web.Response:
    """``GET .../signed-preview-url?expiresInSeconds=``: a URL that holds its token."""
    port, record = _port(request), _record(request)
    raw = request.query.get("expiresInSeconds") or "60"
    try:
        seconds = int(raw)
    except ValueError:
        raise HttpError(400, "expiresInSeconds must be a number") from None
    if not 1 <= seconds <= 24 * 60 * 60:
        raise HttpError(400, "expiresInSeconds must be between 1 second and 24 hours")
    store = context(request).store
    _forget_expired(store)
    token = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    store.signed_previews[(port, token)] = (record.id, time.time() + seconds)
    return json_response({"sandboxId": record.id, "port": port, "token": token,
                          "url": _url(request, port, token)})


async def expire_signed_preview_url(request: web.Request) -> web.Response:
    """``POST .../signed-preview-url/{token}/expire``: the token works no more."""
    port, record = _port(request), _record(request)
    previews = context(request).store.signed_previews
    key = (port, request.match_info["token"])
    if key in previews and previews[key][0] == record.id:
        del previews[key]
    return web.Response(status=200)


def _forget_expired(store: Store) -> None:
    moment = time.time()
    for key, (_sandbox, until) in list(store.signed_previews.items()):
        if until <= moment:
            del store.signed_previews[key]


def _target(request: web.Request) -> tuple[SandboxRecord, int]:
    """The sandbox and port a preview request is for, once its credentials are checked."""
    store = context(request).store
    label = request.match_info["label"]
    raw_port, _, key = label.partition("-")
    if not raw_port.isdigit() or not key:
        raise HttpError(400, "sandbox ID or signed token is required")
    port = int(raw_port)
    record = store.sandboxes.get(key)
    if record is None:  # a signed token
        _forget_expired(store)
        signed = store.signed_previews.get((port, key))
        record = store.sandboxes.get(signed[0]) if signed is not None else None
        if record is None:
            raise HttpError(401, "authentication failed: Invalid or expired token")
        return record, port
    ctx = context(request)
    given = (request.headers.get(TOKEN_HEADER) or request.query.get(TOKEN_QUERY)
             or request.headers.get("Authorization", "").removeprefix("Bearer ").strip())
    if not given:
        raise HttpError(401, "missing authentication: provide a preview access token (via "
                             "header, query parameter, or cookie) or use an API key or JWT")
    if not (secrets.compare_digest(given.encode(), record.preview_token.reveal().encode())
            or secrets.compare_digest(given.encode(), ctx.api_key.reveal().encode())):
        raise HttpError(401, "authentication failed: the preview token or API key is invalid")
    return record, port


def _raw_request(request: web.Request, port: int, body: bytes) -> bytes:
    query = [(k, v) for k, v in request.query.items() if k != TOKEN_QUERY]
    target = "/" + urllib.parse.quote(request.match_info.get("tail", ""), safe="/%:@!$&'()*+,;=")
    if query:
        target += "?" + urllib.parse.urlencode(query)
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{k}: {v}" for k, v in request.headers.items() if k.lower() not in _HOP]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1", "replace") + body


class _Answer(io.BytesIO):
    """What ``http.client`` reads a response from: the relay's output."""

    def makefile(self, *_args: object, **_kwargs: object) -> _Answer:
        return self


async def forward(request: web.Request) -> web.Response:
    """``* /preview/{port}-{sandboxIdOrToken}/{path}``: the server's answer."""
    record, port = _target(request)
    if record.handle is None or record.state != "started":
        raise HttpError(502, f"sandbox {record.id} is {record.state}, not started")
    body = await request.content.read(BODY_LIMIT + 1)
    if len(body) > BODY_LIMIT:
        raise HttpError(413, f"the request body is larger than {BODY_LIMIT} bytes")
    try:
        result = await record.handle.exec(["bash", "-c", _RELAY, "relay", str(port)],
                                          stdin=_raw_request(request, port, body),
                                          timeout=_RELAY_TIMEOUT, output_limit=BODY_LIMIT)
    except CommandTimeout:
        raise HttpError(504, f"the server on port {port} did not answer in time") from None
    except SandboxError as exc:
        raise HttpError(502, exc.message) from exc
    if result.stdout_truncated:
        raise HttpError(502, f"the answer of the server on port {port} is larger than "
                             f"{BODY_LIMIT} bytes")
    if result.exit_code == 127:
        raise HttpError(502, "the sandbox has no bash to reach its port through")
    if result.exit_code == 97 or not result.stdout_bytes:
        raise HttpError(502, f"nothing is listening on port {port} in the sandbox")
    answer = http.client.HTTPResponse(_Answer(result.stdout_bytes))  # type: ignore[arg-type]
    try:
        answer.begin()
        content = answer.read()
    except (http.client.HTTPException, ValueError) as exc:
        raise HttpError(502, f"the server on port {port} answered badly: {exc}") from exc
    headers: CIMultiDict[str] = CIMultiDict()
    for key, value in answer.getheaders():
        if key.lower() not in _HOP:
            headers.add(key, value)
    return web.Response(status=answer.status, reason=answer.reason, headers=headers,
                        body=content)
