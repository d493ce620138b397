"""Resource use: the daemon's latest sample (toolbox ``GET /system/metrics``) and the
API's telemetry over a time range (``GET /api/sandbox/{id}/telemetry/metrics``), which
the SDK reaches after ``GET /api/config`` says there is no separate analytics API.

Samples come from the backend sandbox's own metrics (``provider_sdk_emulators.kit.usage``):
each request to either route reads the sandbox once, and the telemetry answers the
samples taken so far (the last 1000) inside the range asked for. Daytona collects
telemetry on its own clock; here a sandbox nobody asked about has no samples.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from provider_sdk.capabilities import Capability
from provider_sdk.errors import SandboxError
from provider_sdk_emulators.daytona._http import HttpError, context, json_response
from provider_sdk_emulators.daytona._store import DEFAULT_SNAPSHOT, SandboxRecord
from provider_sdk_emulators.daytona._toolbox import running
from provider_sdk_emulators.kit.http import Request, Response

_GIB = 1 << 30

#: Daytona's telemetry metric names, each with the sample field it reports.
METRICS = {
    "daytona.sandbox.cpu.utilization": "cpuUsedPct",
    "daytona.sandbox.cpu.limit": "cpuCount",
    "daytona.sandbox.memory.usage": "memUsed",
    "daytona.sandbox.memory.limit": "memTotal",
    "daytona.sandbox.memory.cache": "memCache",
    "daytona.sandbox.filesystem.usage": "diskUsed",
    "daytona.sandbox.filesystem.total": "diskTotal",
}


async def _sample(record: SandboxRecord) -> dict[str, Any]:
    assert record.handle is not None
    if not record.handle.provider.supports(Capability.METRICS):
        raise HttpError(500, "the emulator's backend reports no metrics", "INTERNAL_ERROR")
    try:
        return await record.usage.read(record.handle, cpu_count=record.cpu,
                                       memory_total=record.memory * _GIB,
                                       disk_total=record.disk * _GIB)
    except SandboxError as exc:
        raise HttpError(500, exc.message, "INTERNAL_ERROR") from exc


async def system_metrics(request: Request) -> Response:
    """``GET /system/metrics``: the sandbox's use now (``SystemMetrics``)."""
    record, _handle = running(request)
    sample = await _sample(record)
    return json_response({**sample, "diskFree": max(sample["diskTotal"] - sample["diskUsed"], 0)})


async def config(request: Request) -> Response:
    """``GET /api/config``: the service's configuration (``DaytonaConfiguration``); no
    analytics API, so telemetry comes from the API itself."""
    base = context(request).base_url
    return json_response({
        "version": "emulated", "oidc": {"issuer": f"{base}/oidc", "clientId": "emulator",
                                        "audience": "daytona", "provider": "emulator"},
        "linkedAccountsEnabled": False, "announcements": {},
        "proxyTemplateUrl": f"{base}/preview/{{{{PORT}}}}-{{{{sandboxId}}}}",
        "proxyToolboxUrl": f"{base}/toolbox", "defaultSnapshot": DEFAULT_SNAPSHOT,
        "dashboardUrl": base, "maxAutoArchiveInterval": 43200, "maintananceMode": False,
        "environment": "emulator", "analyticsApiUrl": None})


def _moment(request: Request, name: str, default: dt.datetime) -> float:
    raw = request.query.get(name)
    if not raw:
        return default.timestamp()
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise HttpError(400, f"{name} must be an ISO 8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.timestamp()


async def telemetry_metrics(request: Request) -> Response:
    """``GET /api/sandbox/{id}/telemetry/metrics?from=&to=&metricNames=``: one series per
    metric asked for (all of them by default), its points the samples in the range. A
    started sandbox is read first."""
    store = context(request).store
    key = request.params["sandbox"]
    record = store.sandboxes.get(key) or store.sandbox(key)
    if record is None:
        raise HttpError(404, f"Sandbox with ID {key} not found")
    if record.state == "started" and record.handle is not None:
        await _sample(record)
    now = dt.datetime.now(dt.timezone.utc)
    first = _moment(request, "from", dt.datetime.fromisoformat(record.created_at))
    last = _moment(request, "to", now)
    if first > last:
        raise HttpError(400, "from must be before to")
    names = request.query_all("metricNames") or list(METRICS)
    samples = record.usage.between(math.floor(first), last)  # samples hold whole seconds
    return json_response({"series": [
        {"metricName": name, "dataPoints": [{"timestamp": s["timestamp"], "value": s[field]}
                                            for s in samples]}
        for name in names if (field := METRICS.get(name)) is not None]})
