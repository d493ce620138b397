"""Structured events: ``sandbox.<op>.started|complete|failed``.

Every public operation is wrapped in :func:`span`, which logs through structlog with
``provider``, ``sandbox_id`` and ``duration_ms``. The library never configures logging:
events are emitted only once the application has configured structlog
(``structlog.is_configured()``), so an application that has not sees nothing and pays
almost nothing. Fields never include environment values, file contents or credentials.
:mod:`provider_sdk.telemetry` turns the same operations into OpenTelemetry spans.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import structlog

from provider_sdk import telemetry
from provider_sdk.errors import attribute

__all__ = ["logger", "span", "trace_context"]

logger = structlog.get_logger("provider_sdk")


def span(op: str, provider: str, sandbox_id: str | None = None,
         **fields: Any) -> AbstractAsyncContextManager[dict[str, Any]]:
    """Log ``sandbox.<op>.started``, then ``.complete`` or ``.failed`` with the duration;
    with :mod:`provider_sdk.telemetry` enabled, the operation is also a span.

    Yields a dict; keys added to it (e.g. a new ``sandbox_id``) go on the closing event.
    """
    logged = structlog.is_configured()
    traced = telemetry.current
    if not logged and traced is None:
        return _Quiet(provider, sandbox_id)
    return _observed(op, {"provider": provider, "sandbox_id": sandbox_id, **fields},
                     logged, traced)


def trace_context() -> dict[str, str]:
    """``TRACEPARENT``/``TRACESTATE`` for a command started in the current operation,
    where telemetry is enabled with ``propagate=True``; otherwise empty."""
    traced = telemetry.current
    return traced.trace_context() if traced is not None else {}


class _Quiet:
    """The span of an application that has neither configured structlog nor enabled
    telemetry: it logs nothing and costs two empty awaits."""

    __slots__ = ("_provider", "_sandbox_id")

    def __init__(self, provider: str, sandbox_id: str | None) -> None:
        self._provider = provider
        self._sandbox_id = sandbox_id

    async def __aenter__(self) -> dict[str, Any]:
        return {}

    async def __aexit__(self, exc_type: object, exc: BaseException | None,
                        tb: object) -> None:
        if exc is not None:
            attribute(exc, self._provider, self._sandbox_id)


@asynccontextmanager
async def _observed(op: str, base: dict[str, Any], logged: bool,
                    traced: telemetry._Telemetry | None) -> AsyncIterator[dict[str, Any]]:
    extra: dict[str, Any] = {}
    if logged:
        logger.debug(f"sandbox.{op}.started", **base)
    with traced.span(op, base) if traced is not None else nullcontext() as otel_span:
        start = time.perf_counter()
        try:
            yield extra
        except BaseException as exc:
            attribute(exc, base["provider"], base["sandbox_id"])
            seconds = time.perf_counter() - start
            if logged:
                logger.debug(f"sandbox.{op}.failed", **{**base, **extra},
                             duration_ms=round(seconds * 1000, 3), error=type(exc).__name__)
            if traced is not None:
                traced.end(otel_span, op, {**base, **extra}, seconds, exc)
            raise
        seconds = time.perf_counter() - start
        if logged:
            logger.debug(f"sandbox.{op}.complete", **{**base, **extra},
                         duration_ms=round(seconds * 1000, 3))
        if traced is not None:
            traced.end(otel_span, op, {**base, **extra}, seconds, None)
