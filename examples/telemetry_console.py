"""Each sandbox operation as an OpenTelemetry span, printed by a console exporter.

Needs the ``otel`` extra and the OpenTelemetry SDK (``opentelemetry-sdk``). Runs on the
configured provider (the local one by default)::

    python examples/telemetry_console.py
"""

from __future__ import annotations

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from provider_sdk import open_provider, telemetry


async def main() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    meter_provider = MeterProvider(metric_readers=[
        PeriodicExportingMetricReader(ConsoleMetricExporter())])
    telemetry.enable(tracer_provider=tracer_provider, meter_provider=meter_provider,
                     propagate=True)

    tracer = tracer_provider.get_tracer("example")
    with tracer.start_as_current_span("handle-request"):
        async with open_provider() as provider, provider.create() as sandbox:
            result = await sandbox.exec(["sh", "-c", 'echo "traceparent: $TRACEPARENT"'])
            print(result.stdout, end="")
    meter_provider.shutdown()  # prints the metrics once more, then stops


if __name__ == "__main__":
    anyio.run(main)
