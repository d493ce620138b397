"""Benchmarks of the local provider, each a ratio against a baseline measured in the same
run (these machines are noisy, so absolute times mean little).

Prints one JSON object per line: ``name``, ``value``, ``baseline``, ``ratio``, ``goal``
(the ratio to stay under, or ``null`` for a line that only informs), ``unit`` and
``met`` (``null`` without a goal). Not a test: goals are reported, not
asserted. Usage: ``python bench/run.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio

from provider_sdk import open_provider
from provider_sdk.provider import SandboxProvider


def report(name: str, value: float, baseline: float, goal: float | None,
           unit: str = "s") -> None:
    ratio = value / baseline
    print(json.dumps({"name": name, "value": round(value, 6), "baseline": round(baseline, 6),
                      "ratio": round(ratio, 3), "goal": goal, "unit": unit,
                      "met": None if goal is None else ratio <= goal}), flush=True)


def p50_sync(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def p50_async(fn: Callable[[], Awaitable[object]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bare_bwrap() -> None:
    """The cheapest isolated process: bubblewrap with fresh namespaces running /bin/true."""
    subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr",
                    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                    "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
                    "/bin/true"], check=True)


async def create_exec_kill(provider: SandboxProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.exec(["/bin/true"])


async def create_to_first_exec(provider: SandboxProvider) -> float:
    """Seconds from asking for a sandbox to its first command's result (kill untimed)."""
    start = time.perf_counter()
    sandbox = await provider.create()
    await sandbox.exec(["/bin/true"])
    elapsed = time.perf_counter() - start
    await sandbox.kill()
    return elapsed


async def main(rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the local provider's benchmarks need bubblewrap (bwrap)")
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as home:
        async with open_provider("local", home=home) as provider:
            # Exec round trip on a running sandbox, against fork+exec of /bin/true here.
            async with provider.create() as sandbox:
                await sandbox.exec(["/bin/true"])  # warm up
                value = await p50_async(lambda: sandbox.exec(["/bin/true"]), rounds * 10)
            baseline = p50_sync(lambda: subprocess.run(["/bin/true"], check=True), rounds * 10)
            report("exec_round_trip_p50", value, baseline, goal=3)

            # Create to first exec, against a bare bubblewrap run.
            value = statistics.median([await create_to_first_exec(provider)
                                       for _ in range(rounds)])
            baseline = p50_sync(bare_bwrap, rounds)
            report("create_to_first_exec_p50", value, baseline, goal=10)

            # 20 create+exec+kill at once, against the same 20 one after another.
            start = time.perf_counter()
            for _ in range(20):
                await create_exec_kill(provider)
            sequential = time.perf_counter() - start
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(create_exec_kill, provider)
            concurrent = time.perf_counter() - start
            report("concurrent_20_create_exec_kill", concurrent, sequential, goal=0.7)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median")
    anyio.run(main, parser.parse_args().rounds)
