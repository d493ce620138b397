"""Contract: resource metrics (``metrics``)."""

from __future__ import annotations

from provider_sdk.capabilities import Capability
from provider_sdk.models import Metrics
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires


class MetricsContract(ContractBase):
    """Metrics: numbers that make sense for a running sandbox."""

    @requires(Capability.METRICS)
    async def test_metrics_report_memory_in_use(self, sandbox: Sandbox) -> None:
        """A running sandbox uses some memory, and ``memory_bytes`` says so."""
        metrics = await sandbox.metrics()
        assert isinstance(metrics, Metrics)
        assert isinstance(metrics.memory_bytes, int)
        assert metrics.memory_bytes > 0

    @requires(Capability.METRICS)
    async def test_metrics_figures_are_plausible(self, sandbox: Sandbox) -> None:
        """Every figure given is non-negative; memory in use fits within the limit."""
        await sandbox.exec(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])
        m = await sandbox.metrics()
        given = [v for v in (m.cpu_seconds, m.memory_bytes, m.memory_limit_bytes,
                             m.disk_bytes) if v is not None]
        assert all(v >= 0 for v in given), m
        limit = m.memory_limit_bytes if m.memory_limit_bytes is not None else float("inf")
        assert (m.memory_bytes or 0) <= limit, m
