"""Daytona's errors as neutral ones: the provider's one translation table.

Most specific first: the daemon's error codes, then the SDK's exception classes, then
the HTTP status. Messages are the SDK's, which never carry the API key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daytona import (
    DaytonaAuthenticationError,
    DaytonaConflictError,
    DaytonaError,
    DaytonaNotFoundError,
    DaytonaRateLimitError,
    DaytonaTimeoutError,
)

from provider_sdk import errors

PROVIDER = "daytona"
TRANSIENT = frozenset({502, 503, 504})
"""Statuses retried, for a bounded window, around state changes and data-plane probes."""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a Daytona error, if it has one."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def code_of(exc: BaseException) -> str | None:
    """The daemon's error code (``FILE_NOT_FOUND`` ...), if any."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def is_transient(exc: BaseException) -> bool:
    """A 502/503/504 or a dropped connection: worth retrying for a while."""
    if status_of(exc) in TRANSIENT:
        return True
    return isinstance(exc, DaytonaError) and type(exc).__name__ in (
        "DaytonaConnectionError", "DaytonaBadGatewayError", "DaytonaServiceUnavailableError")


def _retry_after(headers: Mapping[str, Any] | None) -> float | None:
    if not headers:
        return None
    for key, value in headers.items():
        if str(key).lower() == "retry-after":
            try:
                return float(value)
            except (TypeError, ValueError):
                return None
    return None


def neutral(exc: DaytonaError, *, sandbox_id: str | None = None,
            not_found: type[errors.NotFound] = errors.SandboxNotFound) -> errors.SandboxError:
    """The neutral error for ``exc``; a 404 becomes ``not_found``."""
    where: dict[str, Any] = {"provider": PROVIDER, "sandbox_id": sandbox_id}
    message = str(exc) or type(exc).__name__
    status = status_of(exc)
    code = code_of(exc)
    if code == "FILE_NOT_FOUND":
        return errors.FileNotFound(message, **where)
    if code == "FILE_ACCESS_DENIED":
        return errors.PermissionDenied(message, **where)
    if isinstance(exc, DaytonaAuthenticationError) or status in (401, 403):
        return errors.AuthenticationError(message, **where)
    if isinstance(exc, DaytonaNotFoundError) or status == 404:
        return not_found(message, **where)
    if isinstance(exc, DaytonaRateLimitError) or status == 429:
        return errors.RateLimited(message, retry_after=_retry_after(exc.headers), **where)
    if is_transient(exc):
        return errors.Unavailable(message, **where)
    if isinstance(exc, DaytonaTimeoutError) or status == 408:
        return errors.OperationTimeout(message, **where)
    if isinstance(exc, DaytonaConflictError) or status == 409:
        return errors.Conflict(message, **where)
    if status in (400, 422):
        if "quota" in message.lower() or "limit exceeded" in message.lower():
            return errors.QuotaExceeded(message, **where)
        # The daemon answers a path under a file with 400 and the OS's words.
        if "not a directory" in message.lower():
            return errors.NotADirectory(message, **where)
        return errors.InvalidInput(message, **where)
    return errors.SandboxError(message, **where)
