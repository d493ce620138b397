"""The code interpreter on the local provider: a ``code.run("1")`` round trip in a
context already started, against ``exec("true")`` in the same sandbox, in the same run,
rounds interleaved (who goes first alternates).

Prints one JSON object per line, as ``bench/run.py`` does. Not a test: goals are
reported, not asserted. Usage: ``python bench/code_interpreter.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio

from provider_sdk import open_provider


def report(name: str, value: float, baseline: float, goal: float | None,
           unit: str = "s") -> None:
    ratio = value / baseline
    print(json.dumps({"name": name, "value": round(value, 6), "baseline": round(baseline, 6),
                      "ratio": round(ratio, 3), "goal": goal, "unit": unit,
                      "met": None if goal is None else ratio <= goal}), flush=True)


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def interleaved(first: Callable[[], Awaitable[object]],
                      second: Callable[[], Awaitable[object]],
                      rounds: int) -> tuple[float, float]:
    """The medians of ``first`` and ``second``, one of each a round, who goes first
    alternating."""
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):
        if i % 2:
            b.append(await timed(second))
            a.append(await timed(first))
        else:
            a.append(await timed(first))
            b.append(await timed(second))
    return statistics.median(a), statistics.median(b)


async def main(rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the local provider's benchmarks need bubblewrap (bwrap)")
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as home:
        async with open_provider("local", home=home) as provider, \
                provider.create() as sandbox:
            context = await sandbox.code.create_context()
            await sandbox.code.run("1", context=context)  # warm up
            await sandbox.exec("true")
            value, baseline = await interleaved(
                lambda: sandbox.code.run("1", context=context),
                lambda: sandbox.exec("true"), rounds * 10)
            report("code_run_round_trip_vs_exec_p50", value, baseline, goal=1.5)

            # Starting a context, against the same exec: what the first run costs.
            async def start_and_close() -> None:
                await sandbox.code.close_context(await sandbox.code.create_context())

            value, baseline = await interleaved(start_and_close,
                                                lambda: sandbox.exec("true"), rounds)
            report("code_context_start_vs_exec_p50", value, baseline, goal=None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median")
    anyio.run(main, parser.parse_args().rounds)
