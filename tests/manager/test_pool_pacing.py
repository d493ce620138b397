"""A pool makes members at its own rate, however fast it is claimed from: when creates
fail it backs off (exponentially, and never before a ``RateLimited`` error's
``retry_after``), so a stream of claims on an empty pool does not turn into a stream of
creates."""

from __future__ import annotations

import time

import anyio
import pytest
from memory_provider import MemoryProvider, Store

from provider_sdk.errors import RateLimited, Unavailable
from provider_sdk.manager import MemoryStore, WarmPool
from provider_sdk.models import SandboxInfo, SandboxSpec

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SIZE = 4
INTERVAL = 1.0
CLAIMS_PER_SECOND = 20


class _Failing(MemoryProvider):
    """A provider whose every create fails with ``error``, counted with its time."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.creates: list[float] = []

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        self.creates.append(time.monotonic())
        await anyio.lowlevel.checkpoint()
        raise self.error


async def _claims_for(pool: WarmPool, seconds: float) -> float:
    """Take from the pool ``CLAIMS_PER_SECOND`` times a second; when it began."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        assert await pool.take() is None  # nothing is ever made
        await anyio.sleep(1 / CLAIMS_PER_SECOND)
    return start


async def test_failing_creates_back_off_whatever_the_claims(memory: Store) -> None:
    provider = _Failing(Unavailable("the backend is down", provider="memory"))
    async with WarmPool(provider, size=SIZE, interval=INTERVAL, store=MemoryStore()) as pool:
        start = await _claims_for(pool, 4.0)
    made = [t - start for t in provider.creates if t - start < 4.0]
    # A round at once, one after INTERVAL (or a quarter less), one after twice that
    # more: no more than three rounds of SIZE in the four seconds.
    assert len(made) <= 3 * SIZE, made
    assert pool.failures.counts["create"] == len(provider.creates)


async def test_a_rate_limit_is_waited_out(memory: Store) -> None:
    provider = _Failing(RateLimited("slow down", retry_after=5, provider="memory"))
    async with WarmPool(provider, size=SIZE, interval=INTERVAL, store=MemoryStore()) as pool:
        start = await _claims_for(pool, 3.0)
    assert len(provider.creates) == SIZE  # the first round's, then none for 5 s
    assert all(t - start < 0.5 for t in provider.creates)
