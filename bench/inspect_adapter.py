"""What the Inspect sandbox environment adds over the direct provider call, on the
local provider, in the same run, rounds interleaved: an exec round trip, and a 1 MiB
upload plus download (``write_file`` then ``read_file`` against ``files.write`` then
``files.read``).

Both sides use one sandbox, so the ratio is the adapter's own work: argument and
result translation and Inspect's limits. The local provider declares
``files.permissions``, so the adapter leaves permission checks to it and makes no
``stat`` of its own (it does on providers that do not declare it). Prints
JSON lines as ``bench/run.py`` does. Usage: ``python bench/inspect_adapter.py
[--rounds N]``; needs bubblewrap and inspect-ai.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio
from provider_sdk_inspect import PsdkConfig, PsdkSandboxEnvironment
from run import report

FILE_SIZE = 1 << 20
GOAL = 1.05


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def main(rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the local provider's benchmarks need bubblewrap (bwrap)")
    data = os.urandom(FILE_SIZE)
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as home:
        config = PsdkConfig(provider="local", options={"home": home})
        envs = await PsdkSandboxEnvironment.sample_init("bench", config, {})
        env = envs["default"].as_type(PsdkSandboxEnvironment)
        sandbox = env.sandbox
        try:
            async def adapter_exec() -> None:
                assert (await env.exec(["true"])).success

            async def direct_exec() -> None:
                assert (await sandbox.exec(["true"])).ok

            async def adapter_file() -> None:
                await env.write_file("big.bin", data)
                assert await env.read_file("big.bin", text=False) == data

            async def direct_file() -> None:
                await sandbox.files.write("big.bin", data)
                assert await sandbox.files.read("big.bin") == data

            for fn in (adapter_exec, direct_exec, adapter_file, direct_file):
                await fn()  # warm both paths
            for name, adapter, direct, count in (
                    ("inspect.exec_round_trip_p50", adapter_exec, direct_exec, rounds * 10),
                    ("inspect.file_1mib_write_read_p50", adapter_file, direct_file,
                     rounds * 3)):
                via_adapter, via_direct = [], []
                for i in range(count):
                    # Each side goes first in every other round: the first of a pair
                    # finds the file the other just wrote, which is no cost of either.
                    pair = [(adapter, via_adapter), (direct, via_direct)]
                    for fn, times in pair if i % 2 else pair[::-1]:
                        times.append(await timed(fn))
                report(name, statistics.median(via_adapter), statistics.median(via_direct),
                       GOAL)
        finally:
            await PsdkSandboxEnvironment.sample_cleanup("bench", config, envs, False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    anyio.run(main, parser.parse_args().rounds)
