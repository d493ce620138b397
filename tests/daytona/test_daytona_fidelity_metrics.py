"""The unmodified ``daytona`` SDK reads a sandbox's resource use from the emulator: the
daemon's latest sample, and the API's telemetry over a time range."""

from __future__ import annotations

import datetime as dt

import pytest
from daytona import AsyncDaytona, Daytona


def test_sync_get_metrics_latest_reports_the_sandbox_resources(sync_client: Daytona) -> None:
    sandbox = sync_client.create()
    try:
        sandbox.process.exec("head -c 3000000 /dev/zero > big.bin")
        sample = sandbox.get_metrics_latest()
        assert sample.cpu_count == sandbox.cpu
        assert sample.mem_used > 0
        assert sample.mem_total > 0
        assert sample.disk_total == sandbox.disk << 30
        assert sample.disk_used >= 3_000_000
        now = dt.datetime.now(dt.timezone.utc)
        assert abs((now - sample.timestamp).total_seconds()) < 30
    finally:
        sync_client.delete(sandbox)


def test_sync_get_metrics_answers_the_samples_in_the_range(sync_client: Daytona) -> None:
    """Each reading is kept; ``get_metrics(start, end)`` answers those inside the range
    (the SDK asks the API's configuration first, then its telemetry)."""
    sandbox = sync_client.create()
    try:
        first = sandbox.get_metrics_latest()
        history = sandbox.get_metrics()
        assert len(history) == 2  # the reading above, and the one get_metrics made
        assert history[0].timestamp == first.timestamp
        assert history[0].timestamp < history[1].timestamp
        assert all(m.cpu_count == sandbox.cpu for m in history)
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        assert sandbox.get_metrics(start=later, end=later + dt.timedelta(hours=1)) == []
    finally:
        sync_client.delete(sandbox)


@pytest.mark.anyio
async def test_async_get_metrics_latest_and_history(async_client: AsyncDaytona) -> None:
    sandbox = await async_client.create()
    try:
        sample = await sandbox.get_metrics_latest()
        assert sample.mem_used > 0
        history = await sandbox.get_metrics()
        assert history
        assert history[-1].mem_used > 0
    finally:
        await async_client.delete(sandbox)
