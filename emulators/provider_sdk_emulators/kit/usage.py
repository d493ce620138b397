"""Resource use as the vendors' in-sandbox daemons report it, for the emulators.

E2B's envd and Daytona's daemon answer a usage sample in one shape (``cpuCount``,
``cpuUsedPct``, ``memUsed``, ``memTotal``, ``memCache``, ``diskUsed``, ``diskTotal``,
``timestamp``, ``timestampUnix``). A :class:`UsageMeter` makes those samples from a
neutral sandbox's :meth:`~provider_sdk.sandbox.Sandbox.metrics` readings (the CPU
percentage from the CPU time used since the previous reading) and keeps the last
:data:`KEPT` of them, for the APIs that answer a time range. It talks no HTTP.
"""

from __future__ import annotations

import collections
import datetime as dt
from typing import Any

import attrs

from provider_sdk.sandbox import Sandbox

__all__ = ["KEPT", "UsageMeter"]

KEPT = 1000
"""Samples kept per sandbox (the oldest go first)."""


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.define(kw_only=True)
class UsageMeter:
    """One sandbox's usage samples, oldest first."""

    samples: collections.deque[dict[str, Any]] = attrs.Factory(
        lambda: collections.deque(maxlen=KEPT))
    _last_cpu: tuple[float, float] | None = None
    """(clock, CPU seconds) of the previous reading."""

    async def read(self, sandbox: Sandbox, *, cpu_count: int, memory_total: int,
                   disk_total: int) -> dict[str, Any]:
        """Read ``sandbox`` now; keep and return the sample. ``memory_total`` (bytes)
        stands where the backend reports no memory limit; ``disk_total`` (bytes) is the
        disk the sandbox was given."""
        reading = await sandbox.metrics()
        moment = reading.timestamp or dt.datetime.now(dt.timezone.utc)
        clock = moment.timestamp()
        cpu_pct = 0.0
        if reading.cpu_seconds is not None:
            if self._last_cpu is not None and clock > self._last_cpu[0]:
                cpu_pct = 100.0 * (reading.cpu_seconds - self._last_cpu[1]) / (
                    (clock - self._last_cpu[0]) * cpu_count)
            self._last_cpu = (clock, reading.cpu_seconds)
        sample = {
            "timestamp": _iso(moment), "timestampUnix": int(clock),
            "cpuCount": cpu_count, "cpuUsedPct": round(max(cpu_pct, 0.0), 2),
            "memUsed": reading.memory_bytes or 0,
            "memTotal": reading.memory_limit_bytes or memory_total, "memCache": 0,
            "diskUsed": reading.disk_bytes or 0, "diskTotal": disk_total,
        }
        self.samples.append(sample)
        return sample

    def between(self, first: float, last: float) -> list[dict[str, Any]]:
        """The kept samples taken from ``first`` to ``last`` (unix seconds, both
        included)."""
        return [s for s in self.samples if first <= s["timestampUnix"] <= last]
