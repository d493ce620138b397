"""Preview URLs: a server listening on a port inside the sandbox, reached from outside.

Daytona's API answers ``GET /sandbox/{id}/ports/{port}/preview-url`` with
``https://{port}-{sandboxId}.{proxy domain}`` and the sandbox's access token, and
``.../signed-preview-url`` with ``https://{port}-{token}.{proxy domain}``, a token that
stands for the sandbox on that port until it expires (60 s unless asked otherwise, 1 s
to 24 h) or ``.../signed-preview-url/{token}/expire`` revokes it, which also ends the
connections relayed with it. Here there is no DNS
for such names, so the label goes in the path of the emulator's preview proxy
(``_preview_proxy``, a listener of its own): ``{proxy}/preview/{port}-{sandboxId}`` and
``{proxy}/preview/{port}-{token}``; whatever follows is the path the server sees.

As Daytona's proxy, a request by sandbox id must carry the access token
(``X-Daytona-Preview-Token`` header or ``DAYTONA_SANDBOX_AUTH_KEY`` query parameter) or
the API key (``Authorization: Bearer``), which are taken off before it is forwarded;
without one it is a 401 (Daytona's proxy sends a browser to its login page instead). A
signed token is refused once expired or revoked (:func:`target`).
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Mapping

from provider_sdk_emulators.daytona._http import Context, HttpError, context, json_response
from provider_sdk_emulators.daytona._store import SandboxRecord, Store
from provider_sdk_emulators.kit.http import Request, Response

TOKEN_HEADER = "X-Daytona-Preview-Token"
TOKEN_QUERY = "DAYTONA_SANDBOX_AUTH_KEY"
AUTH_COOKIE_PREFIX = "daytona-sandbox-auth-"
"""The cookies Daytona's proxy keeps a browser's access in (``...-{sandboxId}``): the
emulator sets none, and relays none it is sent."""
_ALPHABET = string.ascii_lowercase + string.digits


def _port(request: Request) -> int:
    raw = request.params["port"]
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise HttpError(400, "Invalid port")
    return int(raw)


def _record(request: Request) -> SandboxRecord:
    key = request.params["sandbox"]
    record = context(request).store.sandbox(key)
    if record is None:
        raise HttpError(404, f"Sandbox with ID or name {key} not found")
    return record


def _url(request: Request, port: int, label: str) -> str:
    return f"{context(request).preview_url}/preview/{port}-{label}"


async def preview_url(request: Request) -> Response:
    """``GET /sandbox/{id}/ports/{port}/preview-url``: the URL and the access token."""
    port, record = _port(request), _record(request)
    return json_response({"sandboxId": record.id, "url": _url(request, port, record.id),
                          "token": record.preview_token.reveal()})


async def signed_preview_url(request: Request) -> Response:
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


async def expire_signed_preview_url(request: Request) -> Response:
    """``POST .../signed-preview-url/{token}/expire``: the token works no more."""
    port, record = _port(request), _record(request)
    previews = context(request).store.signed_previews
    key = (port, request.params["token"])
    if key in previews and previews[key][0] == record.id:
        del previews[key]
        for scope in context(request).store.preview_relays.pop(key, set()):
            scope.cancel()  # its connections end with it
    return Response(200)


def _forget_expired(store: Store) -> None:
    moment = time.time()
    for key, (_sandbox, until) in list(store.signed_previews.items()):
        if until <= moment:
            del store.signed_previews[key]


def target(ctx: Context, label: str, headers: Mapping[str, str],
           query: Mapping[str, str]) -> tuple[SandboxRecord, int]:
    """The sandbox and port a preview request is for, once its credentials are checked
    (``headers`` by lower-case name).

    Raises:
        HttpError: 400 for a malformed label, 401 for missing or wrong credentials.
    """
    store = ctx.store
    raw_port, _, key = label.partition("-")
    if not raw_port.isdigit() or not key or not 1 <= int(raw_port) <= 65535:
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
    given = (headers.get(TOKEN_HEADER.lower()) or query.get(TOKEN_QUERY)
             or headers.get("authorization", "").removeprefix("Bearer ").strip())
    if not given:
        raise HttpError(401, "missing authentication: provide a preview access token (via "
                             "header, query parameter, or cookie) or use an API key or JWT")
    if not (secrets.compare_digest(given.encode(), record.preview_token.reveal().encode())
            or secrets.compare_digest(given.encode(), ctx.api_key.reveal().encode())):
        raise HttpError(401, "authentication failed: the preview token or API key is invalid")
    return record, port
