"""What every emulator's front door does, written once: check the API key, add the
latency fault, and serve the admin API under ``/_emulator/``.

The admin API: ``GET /_emulator/faults`` answers ``{"set": {name: value}, "served":
{name: times}, "known": {name: description}}``; ``POST`` (or ``PUT``) with ``{name:
value}`` changes faults while the emulator runs and answers the same. Each emulator
decides who may call it (both ask for the API key) and how its errors read; the rules
are here.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

import anyio

from provider_sdk.config import Secret
from provider_sdk.errors import ConfigError
from provider_sdk_emulators.kit.faults import Faults
from provider_sdk_emulators.kit.http import Request, Response, json_response

__all__ = ["ADMIN_PREFIX", "FAULTS_PATH", "ErrorBody", "admin", "inject_latency",
           "key_matches", "presented_key"]

ADMIN_PREFIX = "/_emulator/"
"""Where the admin API lives, on every emulator."""
FAULTS_PATH = ADMIN_PREFIX + "faults"

ErrorBody = Callable[[Request, int, str], Response]
"""How an emulator writes an error answer: the request, the status, the message."""


def presented_key(request: Request, *, header: str | None = None) -> str:
    """The key a request presents: ``Authorization: Bearer KEY``, else (when ``header``
    is given, ``X-API-Key`` say) that header's value; ``""`` for none."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get(header.lower(), "") if header else ""


def key_matches(given: str, key: Secret) -> bool:
    """Whether ``given`` is ``key`` (compared in constant time; an empty one never is)."""
    return bool(given) and hmac.compare_digest(given.encode(), key.reveal().encode())


async def inject_latency(faults: Faults, name: str = "latency") -> None:
    """Wait as long as the fault ``name`` says (seconds), counting it when it does."""
    delay = faults.value(name)
    if delay > 0:
        faults.served(name)
        await anyio.sleep(delay)


def _report(faults: Faults) -> dict[str, Any]:
    return {**faults.report(), "known": dict(faults.known)}


async def admin(request: Request, faults: Faults, error: ErrorBody, *,
                set_fault: Callable[[str, Any], None] | None = None) -> Response:
    """Serve a request under :data:`ADMIN_PREFIX` (its caller checked the key).

    Args:
        request: the request.
        faults: the emulator's faults.
        error: how the emulator writes an error answer.
        set_fault: how a fault is set, when the emulator does more than
            :meth:`Faults.set` (re-arming a counter, say).
    """
    if request.path != FAULTS_PATH:
        return error(request, 404, f"no route {request.path}; the admin API is "
                                   f"{FAULTS_PATH}")
    if request.method in ("POST", "PUT"):
        try:
            body: Any = await request.json()
        except ValueError as exc:
            return error(request, 400, f"not JSON: {exc}")
        if not isinstance(body, dict):
            return error(request, 400, "send a JSON object of fault names to values")
        try:
            for name, value in body.items():
                (set_fault or faults.set)(name, value)
        except ConfigError as exc:
            return error(request, 400, str(exc))
    elif request.method != "GET":
        return Response(405, (("allow", "GET, POST, PUT"),))
    return json_response(200, _report(faults))
