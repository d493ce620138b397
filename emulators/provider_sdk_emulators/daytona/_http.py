"""The emulator's front door, on the core's emulator kit: the bearer-token check, fault
injection, the admin API, routing, and error envelopes. Handlers raise
:class:`HttpError`; the front door writes it in the envelope of the plane that raised it
(the API's, or the toolbox daemon's with a ``code``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs

from provider_sdk.config import Secret
from provider_sdk_emulators.daytona._store import Store, now
from provider_sdk_emulators.kit import service
from provider_sdk_emulators.kit.bodies import BodyTooLarge
from provider_sdk_emulators.kit.faults import Faults
from provider_sdk_emulators.kit.http import NotAWebSocket, Request, Response
from provider_sdk_emulators.kit.http import json_response as _json
from provider_sdk_emulators.kit.routing import Router
from provider_sdk_emulators.kit.websocket import WebSocket

Handler = Callable[[Request], Awaitable[Response]]

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

    @property
    def toolbox_url(self) -> str:
        """What sandbox DTOs carry as ``toolboxProxyUrl``."""
        return f"{self.base_url}/toolbox"

    def take(self, fault: str) -> bool:
        """Whether to inject a counted fault now (and count it down if so)."""
        return self.faults.take(fault)


def context(request: Request) -> Context:
    """The emulator's context, from any handler."""
    ctx = request.state["context"]
    assert isinstance(ctx, Context)
    return ctx


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON answer."""
    return _json(status, data)


UPGRADED = Response(101)
"""What a handler returns once it served its request as a WebSocket (nothing is sent)."""


def websocket(request: Request, protocol: str | None = None) -> AbstractAsyncContextManager[
        WebSocket]:
    """Take the request over as a WebSocket (see the kit's ``Request.websocket``).

    Raises:
        HttpError: 400, the request is no WebSocket handshake.
    """
    try:
        return request.websocket(protocol)
    except NotAWebSocket as exc:
        raise HttpError(400, str(exc), "BAD_REQUEST") from None


def _envelope(request: Request, error: HttpError) -> dict[str, Any]:
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


def error_response(request: Request, error: HttpError) -> Response:
    """The plane's error envelope for ``error``."""
    headers = {"Retry-After": "1"} if error.status == 429 else None
    return _json(error.status, _envelope(request, error), headers)


def unknown_route(request: Request, feature: str | None = None) -> Response:
    """Daytona's answer to a route it does not know (whatever the method): the API's
    404 ``Cannot METHOD PATH``, or the toolbox daemon's plain ``404 page not found``.
    ``feature``, when given, is named after it: what the route belongs to, which this
    emulator does not serve."""
    why = f" ({feature}: not served by this emulator)" if feature else ""
    if request.path.startswith("/toolbox/"):
        return Response(404, (("content-type", "text/plain; charset=utf-8"),),
                        f"404 page not found{why}".encode())
    return json_response({"path": request.target, "timestamp": now(), "statusCode": 404,
                          "error": "Not Found",
                          "message": f"Cannot {request.method} {request.target}{why}"},
                         status=404)


SIGNED_ROUTE = re.compile(r"/toolbox/[^/]+/files/(download|upload-v2)")
"""The toolbox routes on which a signed URL's signature stands in for the API key."""
EVENTS_ROUTE = "/api/socket.io/"
"""The notification gateway (``_events``), whose clients present the key in Socket.IO."""


def _check_key(request: Request, ctx: Context) -> None:
    """Refuse a request without ``Authorization: Bearer <the emulator's key>``, unless
    it is a signed file URL (``_signed`` checks its signature)."""
    if "signature" in request.query and SIGNED_ROUTE.fullmatch(request.path):
        return  # a signed file URL: its handler checks it
    if request.path == EVENTS_ROUTE:
        return  # the notification gateway: the key comes in its CONNECT packet
    given = request.headers.get("authorization", "")
    if not (given.startswith("Bearer ") and service.key_matches(given[7:], ctx.api_key)):
        what = "missing" if not given else "invalid"
        raise HttpError(401, f"Unauthorized: {what} API key (send Authorization: Bearer "
                             "<DAYTONA_API_KEY>)")


def _admin_error(request: Request, status: int, message: str) -> Response:
    return error_response(request, HttpError(status, message))


def front_door(ctx: Context, router: Router) -> Handler:
    """The handler the server runs for every request: the key, then faults (latency
    and 429s; the admin API and the notification gateway are exempt), then the route;
    errors in their envelope."""

    async def handle(request: Request) -> Response:
        request.state["context"] = ctx
        try:
            _check_key(request, ctx)
            if request.path.startswith(service.ADMIN_PREFIX):
                return await service.admin(request, ctx.faults, _admin_error)
            if request.path != EVENTS_ROUTE:  # faults are for the API's calls
                await service.inject_latency(ctx.faults)
                if request.path.startswith("/api/") and ctx.take("rate_limit_429"):
                    raise HttpError(429, "ThrottlerException: Too Many Requests")
            found = router.resolve(request.method, request.path)
            if found.handler is None:
                return unknown_route(request)
            request.params = found.params
            return await found.handler(request)
        except HttpError as error:
            return error_response(request, error)
        except BodyTooLarge as exc:
            return error_response(request, HttpError(413, exc.message, "REQUEST_TOO_LARGE"))

    return handle


def state_change(request: Request) -> None:
    """Answer 502, changing nothing, while fault ``transition_502`` has counts left."""
    if context(request).take("transition_502"):
        raise HttpError(502, "Bad Gateway: failed to reach the runner")


def state_changed(request: Request) -> None:
    """After a state change took effect: answer 502 anyway while fault
    ``transition_502_after`` has counts left (the client cannot tell it worked)."""
    if context(request).take("transition_502_after"):
        raise HttpError(502, "Bad Gateway: the runner did not answer in time")
