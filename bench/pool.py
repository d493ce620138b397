"""Benchmarks of warm pools: create-to-first-exec of a sandbox claimed from a
:class:`~provider_sdk.manager.WarmPool`, against baselines measured in the same run,
rounds interleaved (who goes first alternates).

- ``pool_local_first_exec_vs_bare_bwrap_p50``: on the local provider (pool claims
  through a SQLite store), against the cheapest isolated process, a bare bubblewrap
  start running ``/bin/true``. Goal: at most 3 times that.
- ``pool_local_first_exec_vs_cold_p50``: the same against a cold ``create`` and its
  first exec. Goal: at most 0.1.
- ``pool_e2b_emulator_first_exec_vs_cold_p50`` and
  ``pool_daytona_emulator_first_exec_vs_cold_p50``: the same through the E2B and
  Daytona providers and their emulators (each on an event loop in a thread of its own,
  as a remote service would be, backed by the local provider). Goal: at most 0.1.

The pools hand out what their last round saw running (``check_on_claim=False``). A
pool is sized for its load: each timed claim starts with the pool full (the refill
after the previous claim is awaited, untimed), and kills are not timed. The first exec
is ``/bin/true`` (the vendors' providers run it as they run any command). Prints JSON
lines as ``bench/run.py`` does (``ratio``: of the medians). Not a test:
goals are reported, not asserted. Usage: ``python bench/pool.py [--rounds N]``; needs
bubblewrap.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from run import bare_bwrap, report

from provider_sdk import open_provider
from provider_sdk.emulators import EmulatorOptions
from provider_sdk.manager import SQLiteStore, WarmPool
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

TRUE = ["/bin/true"]
Timed = Callable[[], Awaitable[float]]


async def paired(name: str, a: Timed, b: Timed, rounds: int, goal: float) -> None:
    """Report the median of ``a`` against the median of ``b``."""
    await a()  # warm both paths up
    await b()
    ta: list[float] = []
    tb: list[float] = []
    for i in range(rounds):
        if i % 2:
            tb.append(await b())
            ta.append(await a())
        else:
            ta.append(await a())
            tb.append(await b())
    report(name, statistics.median(ta), statistics.median(tb), goal=goal)


async def first_exec(make: Callable[[], Awaitable[Sandbox]]) -> float:
    start = time.perf_counter()
    sandbox = await make()
    await sandbox.exec(TRUE)
    elapsed = time.perf_counter() - start
    await sandbox.kill()
    return elapsed


def pooled(pool: WarmPool) -> Timed:
    async def run() -> float:
        await pool.wait_filled(300)
        return await first_exec(pool.claim)

    return run


def cold(provider: SandboxProvider) -> Timed:
    async def run() -> float:
        return await first_exec(lambda: provider.create())

    return run


async def bare() -> float:
    start = time.perf_counter()
    bare_bwrap()
    return time.perf_counter() - start


async def local(rounds: int, tmp: Path) -> None:
    async with open_provider("local", home=tmp / "home") as provider, \
            SQLiteStore(tmp / "pool.sqlite3") as store, \
            WarmPool(provider, size=2, store=store, check_on_claim=False) as pool:
        await paired("pool_local_first_exec_vs_bare_bwrap_p50", pooled(pool), bare,
                     rounds, goal=3.0)
        await paired("pool_local_first_exec_vs_cold_p50", pooled(pool), cold(provider),
                     rounds, goal=0.1)
    async with open_provider("local", home=tmp / "home") as provider:
        await WarmPool(provider, size=2).drain()


async def emulated(name: str, provider: SandboxProvider, rounds: int) -> None:
    async with provider:
        pool = WarmPool(provider, size=2, check_on_claim=False)
        async with pool:
            await paired(f"pool_{name}_emulator_first_exec_vs_cold_p50", pooled(pool),
                         cold(provider), rounds, goal=0.1)
        await pool.drain()


def main(rounds: int) -> None:
    from provider_sdk_emulators.e2b import run_in_thread

    with tempfile.TemporaryDirectory(prefix="psdk-bench-pool-") as tmp:
        anyio.run(local, rounds, Path(tmp))
        os.environ["PSDK_HOME"] = str(Path(tmp) / "home")  # the emulators' local backend
        key = secrets.token_urlsafe(16)
        with run_in_thread("e2b", EmulatorOptions(api_key=key)) as running:
            settings = running.settings
            provider = open_provider("e2b", api_key=key, api_url=settings["E2B_API_URL"],
                                     sandbox_url=settings["E2B_SANDBOX_URL"],
                                     domain=settings["E2B_DOMAIN"])
            anyio.run(emulated, "e2b", provider, rounds)
        with run_in_thread("daytona", EmulatorOptions(api_key=key)) as running:
            provider = open_provider("daytona", api_key=key,
                                     api_url=running.settings["DAYTONA_API_URL"],
                                     target="local")
            anyio.run(emulated, "daytona", provider, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median")
    if shutil.which("bwrap") is None:
        sys.exit("bench: the pool's benchmarks need bubblewrap (bwrap)")
    main(parser.parse_args().rounds)
