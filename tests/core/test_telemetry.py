"""Telemetry: each operation a span with its provider, sandbox and outcome, metrics for
durations, sandboxes created and killed and the manager's lookup levels, and the trace
context passed into commands only when asked; checked with the OpenTelemetry SDK's
in-memory exporter and reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from memory_provider import Store
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from provider_sdk import open_provider, telemetry
from provider_sdk.errors import ConfigError, SandboxNotFound
from provider_sdk.manager import SandboxManager

pytestmark = pytest.mark.anyio


class Recorded:
    """The spans and metrics one test's operations made."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans()
                if name is None or s.name == name]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """Each data point of ``metric``: its attributes and its value (a sum's value,
        or a histogram's count)."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        for point in m.data.data_points:
                            value = getattr(point, "value", None)
                            found.append((dict(point.attributes or {}),
                                          value if value is not None else point.count))
        return found


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    rec = Recorded()
    telemetry.enable(tracer_provider=rec.tracer_provider, meter_provider=rec.meter_provider)
    yield rec
    telemetry.disable()


async def test_operations_are_spans_with_provider_sandbox_and_outcome(
        memory: Store, recorded: Recorded) -> None:
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.exec(["true"])
    create, = recorded.spans("sandbox.create")
    assert create.attributes is not None
    assert create.attributes["psdk.provider"] == "memory"
    assert create.attributes["psdk.operation"] == "create"
    assert create.attributes["psdk.sandbox.id"] == sandbox.id  # known only at the end
    assert create.attributes["psdk.outcome"] == "complete"
    exec_span, = recorded.spans("sandbox.exec")
    assert exec_span.attributes is not None
    assert exec_span.attributes["psdk.sandbox.id"] == sandbox.id
    assert exec_span.status.status_code == StatusCode.UNSET
    assert [s.name for s in recorded.spans("sandbox.kill")] == ["sandbox.kill"]


async def test_a_failure_is_an_error_span_naming_only_the_error_type(
        memory: Store, recorded: Recorded) -> None:
    async with open_provider("memory") as provider:
        with pytest.raises(SandboxNotFound):
            await provider.get_info("mem-absent")
    failed, = recorded.spans("sandbox.info")
    assert failed.attributes is not None
    assert failed.attributes["psdk.outcome"] == "failed"
    assert failed.attributes["error.type"] == "SandboxNotFound"
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.events == ()  # no exception event: its message stays out of traces


async def test_spans_nest_under_the_applications_own_span(
        memory: Store, recorded: Recorded) -> None:
    tracer = recorded.tracer_provider.get_tracer("app")
    async with open_provider("memory") as provider:
        with tracer.start_as_current_span("handle-request") as parent:
            async with provider.create() as sandbox:
                await sandbox.exec(["true"])
    for name in ("sandbox.create", "sandbox.exec", "sandbox.kill"):
        span, = recorded.spans(name)
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id


async def test_no_secret_reaches_a_span(memory: Store, recorded: Recorded) -> None:
    secret = "s3cr3t-value-never-traced"
    async with open_provider("memory") as provider, \
            provider.create(env={"API_KEY": secret}) as sandbox:
        await sandbox.exec(["true"], env={"TOKEN": secret})
        await sandbox.files.write("/notes.txt", secret)
    for span in recorded.spans():
        assert secret not in repr(dict(span.attributes or {})), span.name


async def test_metrics_count_creates_kills_and_time_every_operation(
        memory: Store, recorded: Recorded) -> None:
    async with open_provider("memory") as provider:
        for _ in range(2):
            async with provider.create() as sandbox:
                await sandbox.exec(["true"])
    assert recorded.points("psdk.sandboxes.created") == [({"psdk.provider": "memory"}, 2)]
    assert recorded.points("psdk.sandboxes.killed") == [({"psdk.provider": "memory"}, 2)]
    durations = {point[0]["psdk.operation"]: point[1]
                 for point in recorded.points("psdk.operation.duration")}
    assert durations["create"] == durations["exec"] == durations["kill"] == 2


async def test_the_managers_acquisitions_are_counted_by_lookup_level(
        memory: Store, recorded: Recorded) -> None:
    async with open_provider("memory") as provider, SandboxManager(provider) as manager:
        first = await manager.acquire("alice")
        again = await manager.acquire("alice")
        assert again.id == first.id
        await manager.release("alice")
    levels = {point[0]["psdk.level"]: point[1]
              for point in recorded.points("psdk.manager.acquisitions")}
    assert levels == {"create": 1, "cache": 1}


async def test_trace_context_reaches_commands_only_when_asked(
        memory: Store, recorded: Recorded) -> None:
    printenv = ["sh", "-c", 'printf "%s" "${TRACEPARENT:-none}"']
    async with open_provider("memory") as provider, provider.create() as sandbox:
        assert (await sandbox.exec(printenv)).stdout == "none"
        telemetry.enable(tracer_provider=recorded.tracer_provider,
                         meter_provider=recorded.meter_provider, propagate=True)
        result = await sandbox.exec(printenv)
        kept = await sandbox.exec(printenv, env={"TRACEPARENT": "the caller's own"})
    exec_span = recorded.spans("sandbox.exec")[1]
    version, trace_id, span_id, flags = result.stdout.split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled
    assert int(trace_id, 16) == exec_span.context.trace_id
    assert int(span_id, 16) == exec_span.context.span_id  # the exec's own span
    assert kept.stdout == "the caller's own"


async def test_telemetry_off_makes_no_span(memory: Store, recorded: Recorded) -> None:
    telemetry.disable()
    assert not telemetry.enabled()
    async with open_provider("memory") as provider, provider.create() as sandbox:
        await sandbox.exec(["true"])
    assert recorded.spans() == []


def test_enable_without_opentelemetry_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="opentelemetry-api"):
        telemetry.enable()
    assert not telemetry.enabled()
