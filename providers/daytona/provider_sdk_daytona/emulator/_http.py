"""The emulator's HTTP plumbing: error envelopes, the bearer-token check, fault injection
and the admin endpoint. Handlers raise :class:`HttpError`; one middleware writes it in the
envelope of the plane that raised it (the API's, or the toolbox daemon's with a ``code``).
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from aiohttp import web

from provider_sdk.config import Secret
from provider_sdk.emulators import Faults
from provider_sdk.errors import ConfigError
from provider_sdk_daytona.emulator._store import Store, now

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The faults this emulator injects (``--fault NAME=VALUE``, or the admin endpoint).
FAULTS = {
    "latency": "seconds added before every API and toolbox response",
    "rate_limit_429": "the next N API requests answer 429 (Retry-After: 1)",
    "transition_502": "the next N state changes (create, start, stop, delete, archive, "
                      "snapshot) answer 502 and change nothing",
    "transition_502_after": "the next N state changes take effect, then answer 502",
    "toolbox_502_after_start": "after each create or start, the sandbox's first N toolbox "
                               "requests answer 502",
    "start_delay": "seconds a created or started sandbox reports 'starting' before 'started'",
    "minute_seconds": "the length, in seconds, of the minutes that auto-stop and auto-delete "
                      "intervals count (0: a real minute)",
}


class HttpError(Exception):
    """An error answer: ``status``, a message, and the daemon's ``code`` if any."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


@attrs.define(kw_only=True)
class Context:
    """What every handler needs: the store, the faults, the key and the base URL."""

    store: Store
    faults: Faults
    api_key: Secret
    base_url: str = ""
    preview_url: str = ""
    """The preview proxy's base URL (``_preview_proxy``)."""
    tasks: set[asyncio.Task[None]] = attrs.field(factory=set)

    @property
    def toolbox_url(self) -> str:
        """What sandbox DTOs carry as ``toolboxProxyUrl``."""
        return f"{self.base_url}/toolbox"

    def take(self, fault: str) -> bool:
        """Whether to inject a counted fault now (and count it down if so)."""
        left = self.faults.count(fault)
        if left <= 0:
            return False
        self.faults.set(fault, left - 1)
        self.faults.served(fault)
        return True


CONTEXT = web.AppKey("context", Context)
"""Where the application keeps the emulator's :class:`Context`."""


def context(request: web.Request) -> Context:
    """The emulator's context, from any handler."""
    return request.app[CONTEXT]


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON answer."""
    return web.json_response(data, status=status)


def _envelope(request: web.Request, error: HttpError) -> dict[str, Any]:
    body: dict[str, Any] = {"statusCode": error.status, "message": error.message,
                            "path": request.path, "timestamp": now()}
    if request.path.startswith("/toolbox/"):
        body.update(code=error.code or "INTERNAL_ERROR", source="DAYTONA_DAEMON",
                    method=request.method)
    else:
        body["error"] = _REASONS.get(error.status, "Error")
    if request.path.endswith("/files/bulk-upload"):
        body["errors"] = [error.message]  # what the SDK reads from a failed upload
    return body


_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            408: "Request Timeout", 409: "Conflict", 413: "Payload Too Large",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway"}


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn :class:`HttpError` into the plane's error envelope."""
    try:
        return await handler(request)
    except HttpError as error:
        headers = {"Retry-After": "1"} if error.status == 429 else None
        return web.json_response(_envelope(request, error), status=error.status,
                                 headers=headers)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):  # no such route
        return unknown_route(request)
    except web.HTTPException as exc:  # aiohttp's own
        if exc.status < 400:
            raise
        plain = HttpError(exc.status, f"{exc.reason}: {request.method} {request.path}")
        return web.json_response(_envelope(request, plain), status=exc.status)


def unknown_route(request: web.Request, feature: str | None = None) -> web.Response:
    """Daytona's answer to a route it does not know (whatever the method): the API's
    404 ``Cannot METHOD PATH``, or the toolbox daemon's plain ``404 page not found``.
    ``feature``, when given, is named after it: what the route belongs to, which this
    emulator does not serve."""
    why = f" ({feature}: not served by this emulator)" if feature else ""
    if request.path.startswith("/toolbox/"):
        return web.Response(status=404, text=f"404 page not found{why}")
    return web.json_response({"path": str(request.rel_url), "timestamp": now(),
                              "statusCode": 404, "error": "Not Found",
                              "message": f"Cannot {request.method} {request.rel_url}{why}"},
                             status=404)


SIGNED_ROUTE = re.compile(r"/toolbox/[^/]+/files/(download|upload-v2)")
"""The toolbox routes on which a signed URL's signature stands in for the API key."""


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a request without ``Authorization: Bearer <the emulator's key>``, unless
    it is a signed file URL (``_signed`` checks its signature)."""
    ctx = context(request)
    if "signature" in request.query and SIGNED_ROUTE.fullmatch(request.path):
        return await handler(request)  # a signed file URL: its handler checks it
    given = request.headers.get("Authorization", "")
    expected = f"Bearer {ctx.api_key.reveal()}"
    if not hmac.compare_digest(given.encode(), expected.encode()):
        what = "missing" if not given else "invalid"
        raise HttpError(401, f"Unauthorized: {what} API key (send Authorization: Bearer "
                             "<DAYTONA_API_KEY>)")
    return await handler(request)


@web.middleware
async def faults_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Inject latency and 429s; the admin endpoint is exempt."""
    ctx = context(request)
    if request.path.startswith("/_emulator/"):
        return await handler(request)
    delay = ctx.faults.value("latency")
    if delay > 0:
        ctx.faults.served("latency")
        await asyncio.sleep(delay)
    if request.path.startswith("/api/") and ctx.take("rate_limit_429"):
        raise HttpError(429, "ThrottlerException: Too Many Requests")
    return await handler(request)


def state_change(request: web.Request) -> None:
    """Answer 502, changing nothing, while fault ``transition_502`` has counts left."""
    if context(request).take("transition_502"):
        raise HttpError(502, "Bad Gateway: failed to reach the runner")


def state_changed(request: web.Request) -> None:
    """After a state change took effect: answer 502 anyway while fault
    ``transition_502_after`` has counts left (the client cannot tell it worked)."""
    if context(request).take("transition_502_after"):
        raise HttpError(502, "Bad Gateway: the runner did not answer in time")


async def get_faults(request: web.Request) -> web.Response:
    """``GET /_emulator/faults``: what is set and what was served."""
    ctx = context(request)
    return json_response({**ctx.faults.report(), "known": ctx.faults.known})


async def set_faults(request: web.Request) -> web.Response:
    """``POST /_emulator/faults`` with ``{name: value}``: change faults while running."""
    ctx = context(request)
    body = await request.json()
    if not isinstance(body, dict):
        raise HttpError(400, "expected a JSON object of fault names to values")
    try:
        for name, value in body.items():
            ctx.faults.set(name, value)
    except ConfigError as exc:
        raise HttpError(400, str(exc)) from None
    return json_response({**ctx.faults.report(), "known": ctx.faults.known})
