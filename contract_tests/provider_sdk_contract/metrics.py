"""Contract: resource metrics (``metrics``)."""

from __future__ import annotations

from provider_sdk.capabilities import Capability
from provider_sdk.models import Metrics
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import eventually

HELD = 64 << 20
"""Bytes a process of the sandbox holds, for the memory figure to show."""
# A shell that holds HELD bytes in a variable (touched, so resident) and then sleeps.
_HOLD = (f'x=$(head -c {HELD} /dev/zero | tr "\\0" a); echo held; '
         'exec 3>&-; while :; do sleep 300; done')


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

    @requires(Capability.METRICS, Capability.PROCESS_BACKGROUND)
    async def test_metrics_memory_follows_what_the_sandbox_holds(
            self, sandbox: Sandbox) -> None:
        """``memory_bytes`` grows by about what a process of the sandbox comes to hold
        (64 MiB), and falls back once that process is gone: it is the sandbox's own
        memory, not a constant or another's.

        Both figures are measured against the one taken before, with a quarter of the
        held bytes as slack either way: a figure sampled while the process is still
        filling its memory, or a few MiB of cache the sandbox keeps afterwards, must not
        decide the outcome."""
        before = (await sandbox.metrics()).memory_bytes
        assert before is not None
        process = await sandbox.start(["bash", "-c", _HOLD])
        high = before + HELD * 3 // 4

        async def grown() -> bool:
            return ((await sandbox.metrics()).memory_bytes or 0) >= high

        await eventually(grown, what=f"memory_bytes past {before} + {HELD * 3 // 4}",
                         timeout=30, interval=0.2)
        await process.kill()
        low = before + HELD // 4

        async def fallen() -> bool:
            return ((await sandbox.metrics()).memory_bytes or 0) <= low

        await eventually(fallen, what=f"memory_bytes back under {before} + {HELD // 4}",
                         timeout=30, interval=0.2)
