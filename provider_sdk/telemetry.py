"""OpenTelemetry: every operation a span, with metrics, in the application's own tracing.

Off until :func:`enable` is called; it needs the ``otel`` extra (``opentelemetry-api``),
and the application's OpenTelemetry SDK set up as usual (or providers passed in)::

    from provider_sdk import telemetry

    telemetry.enable()                       # the global tracer and meter providers
    telemetry.enable(propagate=True)         # and TRACEPARENT into commands

Each operation that emits a ``sandbox.<op>`` event (see :mod:`provider_sdk.events`)
becomes a span named ``sandbox.<op>`` (``sandbox.exec``, ``sandbox.manager.acquire``,
...), a child of whatever span is current, with the attributes ``psdk.provider``,
``psdk.operation``, ``psdk.sandbox.id``, ``psdk.outcome`` (``complete``, ``failed`` or
``cancelled``) and the event's own fields (``psdk.owner``, ``psdk.level``, ...); a
failure sets the span's status to error with ``error.type``, the exception's class.
Never a secret: events carry no environment values, file contents, credentials or
error messages.

Metrics, from the meter ``provider_sdk``:

- ``psdk.operation.duration`` (histogram, seconds): every operation, by provider,
  operation and outcome;
- ``psdk.sandboxes.created`` and ``psdk.sandboxes.killed`` (counters), by provider;
- ``psdk.manager.acquisitions`` (counter): ``SandboxManager.acquire`` calls by the level
  of the lookup that answered (``cache``, ``store``, ``list``, ``pool``, ``create``,
  ...);
- ``psdk.pool.claims`` (counter): claims on a :class:`~provider_sdk.manager.WarmPool`,
  by pool (``psdk.pool``) and ``psdk.pool.outcome``: ``hit`` (a free member was handed
  out) or ``miss`` (none was at hand).

With ``propagate=True``, commands started by ``exec`` and ``start`` get the trace
context of their span as ``TRACEPARENT`` (and ``TRACESTATE``) in their environment, as
OpenTelemetry's environment-variable carriers name them, unless the call sets them
itself; code in the sandbox can then continue the trace.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import ConfigError

__all__ = ["disable", "enable", "enabled"]

_ATTRIBUTE = {"provider": "psdk.provider", "sandbox_id": "psdk.sandbox.id"}


class _Telemetry:
    """What :func:`enable` set up: a tracer, the instruments, and whether to propagate."""

    def __init__(self, tracer_provider: Any, meter_provider: Any, propagate: bool) -> None:
        from opentelemetry import metrics, trace

        tracer_provider = tracer_provider or trace.get_tracer_provider()
        meter_provider = meter_provider or metrics.get_meter_provider()
        self.tracer = tracer_provider.get_tracer("provider_sdk")
        meter = meter_provider.get_meter("provider_sdk")
        self.duration = meter.create_histogram(
            "psdk.operation.duration", unit="s",
            description="How long each provider-sdk operation took")
        self.created = meter.create_counter(
            "psdk.sandboxes.created", description="Sandboxes created")
        self.killed = meter.create_counter(
            "psdk.sandboxes.killed", description="Sandboxes killed")
        self.acquisitions = meter.create_counter(
            "psdk.manager.acquisitions",
            description="SandboxManager.acquire calls, by the lookup level that answered")
        self.pool_claims = meter.create_counter(
            "psdk.pool.claims",
            description="WarmPool claims, by whether a free member was at hand")
        self.propagate = propagate

    @contextmanager
    def span(self, op: str, base: Mapping[str, Any]) -> Iterator[Any]:
        """The operation's span, current while the operation runs."""
        with self.tracer.start_as_current_span(
                f"sandbox.{op}", attributes=_attributes(op, base),
                record_exception=False, set_status_on_exception=False) as span:
            yield span

    def end(self, span: Any, op: str, fields: Mapping[str, Any], seconds: float,
            error: BaseException | None) -> None:
        """Record the outcome on ``span`` and in the metrics."""
        from opentelemetry.trace import Status, StatusCode

        outcome = "complete" if error is None else \
            "failed" if isinstance(error, Exception) else "cancelled"
        span.set_attributes({**_attributes(op, fields), "psdk.outcome": outcome})
        if isinstance(error, Exception):
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        provider = {"psdk.provider": str(fields.get("provider"))}
        self.duration.record(seconds, {**provider, "psdk.operation": op,
                                       "psdk.outcome": outcome})
        if outcome != "complete":
            return
        if op == "create":
            self.created.add(1, provider)
        elif op == "kill":
            self.killed.add(1, provider)
        elif op == "manager.acquire":
            self.acquisitions.add(1, {**provider, "psdk.level": str(fields.get("level"))})
        elif op == "pool.claim":
            self.pool_claims.add(1, {**provider, "psdk.pool": str(fields.get("pool")),
                                     "psdk.pool.outcome": "hit" if fields.get("hit")
                                     else "miss"})

    def trace_context(self) -> dict[str, str]:
        """The current span's context as environment variables, when propagating."""
        if not self.propagate:
            return {}
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return {key.upper(): value for key, value in carrier.items()
                if key in ("traceparent", "tracestate")}


def _attributes(op: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"psdk.operation": op}
    for key, value in fields.items():
        if value is None:
            continue
        name = _ATTRIBUTE.get(key, f"psdk.{key}")
        if isinstance(value, (str, bool, int, float)):
            attributes[name] = value
        elif isinstance(value, (list, tuple)):
            attributes[name] = [str(v) for v in value]
        else:
            attributes[name] = str(value)
    return attributes


current: _Telemetry | None = None
"""The active set-up, or ``None`` while telemetry is off (read by the events module)."""


def enable(*, tracer_provider: Any = None, meter_provider: Any = None,
           propagate: bool = False) -> None:
    """Turn spans and metrics on for every operation from now on.

    ``tracer_provider`` and ``meter_provider`` default to OpenTelemetry's global ones;
    ``propagate`` passes the trace context into commands as ``TRACEPARENT`` (off by
    default: a command's environment is the caller's to decide). Calling it again
    replaces the set-up.

    Raises:
        ConfigError: ``opentelemetry-api`` is not installed (the ``otel`` extra).
    """
    global current
    if importlib.util.find_spec("opentelemetry") is None:
        raise ConfigError("telemetry needs opentelemetry-api, which is not installed: "
                          + install_hint(CORE, extra="otel"))
    current = _Telemetry(tracer_provider, meter_provider, propagate)


def disable() -> None:
    """Turn telemetry off; operations make no spans or metrics from now on."""
    global current
    current = None


def enabled() -> bool:
    """Whether :func:`enable` is in effect."""
    return current is not None
