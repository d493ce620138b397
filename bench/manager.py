"""Benchmarks of the sandbox manager on the local provider and the default SQLite store,
each a ratio against a baseline measured in the same run.

- ``manager_acquire_cache_hit_p50``: ``acquire`` answered by the cache, against a plain
  dict lookup plus the provider's cheapest call (``get_info``), which is what a
  hand-rolled cache that checks its sandbox costs. Goal: at most that (ratio <= 1).
- ``manager_acquire_store_hit_vs_connect_p50``: ``acquire`` by a fresh manager (as after
  a restart: empty cache, answered by the store), against a raw ``provider.connect``.
  The manager also reads the store and probes the data plane, which ``connect`` alone
  does not, so on a provider whose ``connect`` is a local file read this ratio is large;
  it is reported without a goal, and the next line isolates what the manager adds.
- ``manager_acquire_store_hit_overhead_p50``: the same ``acquire``, against the same
  work done by hand, with the same guarantee: read the binding from the store,
  ``connect``, probe with a ``stat``, all under one deadline (``acquire_timeout``, which
  ``acquire`` keeps too). Goal: the manager adds under 5% (ratio <= 1.05).

Prints one JSON object per line with ``bench/run.py``'s fields; ``ratio`` is the median
of per-pair ratios (see :func:`report_paired`). Not a test: goals are reported,
not asserted. Usage: ``python bench/manager.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from provider_sdk.local import LocalProvider
from provider_sdk.manager import SandboxManager, SQLiteStore

Timed = Callable[[], Awaitable[float]]


def timed(fn: Callable[[], Awaitable[object]]) -> Timed:
    """``fn`` as a function returning the seconds it took."""
    async def run() -> float:
        start = time.perf_counter()
        await fn()
        return time.perf_counter() - start

    return run


async def paired(a: Timed, b: Timed, rounds: int) -> tuple[list[float], list[float]]:
    """Times of ``a`` and ``b`` measured in pairs, in alternating order (so load that
    changes during the run hits both alike), with garbage collected between pairs only,
    after one untimed warm-up call of each."""
    await a()
    await b()
    ta: list[float] = []
    tb: list[float] = []
    gc.disable()  # a collection lands on whichever call is unlucky: collect between pairs
    try:
        for i in range(rounds):
            if i % 20 == 0:
                gc.collect()
            if i % 2:
                tb.append(await b())
                ta.append(await a())
            else:
                ta.append(await a())
                tb.append(await b())
    finally:
        gc.enable()
    return ta, tb


def report_paired(name: str, ta: list[float], tb: list[float], goal: float | None) -> None:
    """One JSON line like ``bench/run.py``'s; ``value`` and ``baseline`` are medians and
    ``ratio`` is the median of the per-pair ratios, which a noisy neighbour moves least."""
    value, baseline = statistics.median(ta), statistics.median(tb)
    ratio = statistics.median(x / y for x, y in zip(ta, tb, strict=True))
    print(json.dumps({"name": name, "value": round(value, 6), "baseline": round(baseline, 6),
                      "ratio": round(ratio, 3), "goal": goal, "unit": "s",
                      "met": None if goal is None else ratio <= goal}), flush=True)


async def main(rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the manager's benchmarks need bubblewrap (bwrap)")
    with tempfile.TemporaryDirectory(prefix="psdk-bench-manager-") as tmp:
        provider = LocalProvider(home=Path(tmp) / "home")
        async with provider, SQLiteStore(Path(tmp) / "bindings.sqlite3") as store:
            async with SandboxManager(provider, store) as manager:
                sandbox = await manager.acquire("alice")
                plain = {"alice": sandbox.id}

                async def dict_and_info() -> None:
                    await provider.get_info(plain["alice"])

                ta, tb = await paired(timed(lambda: manager.acquire("alice")),
                                      timed(dict_and_info), rounds * 50)
                report_paired("manager_acquire_cache_hit_p50", ta, tb, goal=1.0)

            async def fresh_acquire() -> float:
                # A new manager: an empty cache, as after a restart of the application.
                # Only acquire is timed, not the housekeeping it leaves in the background.
                async with SandboxManager(provider, store) as restarted:
                    start = time.perf_counter()
                    await restarted.acquire("alice")
                    return time.perf_counter() - start

            async def by_hand() -> None:
                with anyio.fail_after(300):
                    binding = await store.get("alice")
                    assert binding is not None
                    opened = await provider.connect(binding.sandbox_id)
                    await opened.files.stat("/")

            async def raw_connect() -> None:
                await provider.connect(sandbox.id)

            ta, tb = await paired(fresh_acquire, timed(raw_connect), rounds * 10)
            report_paired("manager_acquire_store_hit_vs_connect_p50", ta, tb, goal=None)
            ta, tb = await paired(fresh_acquire, timed(by_hand), rounds * 10)
            report_paired("manager_acquire_store_hit_overhead_p50", ta, tb, goal=1.05)
            await provider.kill(sandbox.id)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median (x10, x50)")
    anyio.run(main, parser.parse_args().rounds)
