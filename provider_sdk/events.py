"""Structured events: ``sandbox.<op>.started|complete|failed``.

Every public operation is wrapped in :func:`span`, which logs through structlog with
``provider``, ``sandbox_id`` and ``duration_ms``. The library never configures logging:
events are emitted only once the application has configured structlog
(``structlog.is_configured()``), so an application that has not sees nothing and pays
almost nothing. Fields never include environment values, file contents or credentials.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import structlog

__all__ = ["logger", "span"]

logger = structlog.get_logger("provider_sdk")


def span(op: str, provider: str, sandbox_id: str | None = None,
         **fields: Any) -> AbstractAsyncContextManager[dict[str, Any]]:
    """Log ``sandbox.<op>.started``, then ``.complete`` or ``.failed`` with the duration.

    Yields a dict; keys added to it (e.g. a new ``sandbox_id``) go on the closing event.
    """
    if not structlog.is_configured():
        return _QUIET
    return _logged(op, {"provider": provider, "sandbox_id": sandbox_id, **fields})


class _Quiet:
    """The span of an application that has not configured structlog: it logs nothing
    and costs two empty awaits."""

    __slots__ = ()

    async def __aenter__(self) -> dict[str, Any]:
        return {}

    async def __aexit__(self, *exc_info: object) -> None:
        return None


_QUIET = _Quiet()


@asynccontextmanager
async def _logged(op: str, base: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    extra: dict[str, Any] = {}
    logger.debug(f"sandbox.{op}.started", **base)
    start = time.perf_counter()
    try:
        yield extra
    except BaseException as exc:
        logger.debug(f"sandbox.{op}.failed", **{**base, **extra},
                     duration_ms=round((time.perf_counter() - start) * 1000, 3),
                     error=type(exc).__name__)
        raise
    logger.debug(f"sandbox.{op}.complete", **{**base, **extra},
                 duration_ms=round((time.perf_counter() - start) * 1000, 3))
