"""Benchmarks of the E2B provider against the raw ``e2b`` async SDK doing the same work
(create, exec, write, read, kill) on the same emulator, in the same run, rounds
interleaved (and their order alternated), so the ratio is what the provider adds.

The emulator (E2B flavor, local backend) runs on its own event loop in a thread, as a
remote service would. Prints JSON lines as ``bench/run.py`` does: one per operation
(p50 of each), and one for the whole sequence. Usage:
``python bench/e2b_provider.py [--rounds N]``; needs bubblewrap.
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

import anyio
from e2b import AsyncSandbox
from provider_sdk_e2b.emulator import run_in_thread
from run import report

from provider_sdk import open_provider
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.provider import SandboxProvider

FILE = "/tmp/psdk-bench.bin"
DATA = secrets.token_bytes(256 << 10)
OPS = ("create", "exec", "write", "read", "kill")

Timings = dict[str, list[float]]


async def _timed(timings: Timings, op: str, call: Callable[[], Awaitable[object]]) -> object:
    start = time.perf_counter()
    result = await call()
    timings[op].append(time.perf_counter() - start)
    return result


async def raw_round(params: dict[str, str], timings: Timings) -> None:
    """The sequence with the ``e2b`` SDK alone."""
    sandbox = await _timed(timings, "create", lambda: AsyncSandbox.create(**params))
    assert isinstance(sandbox, AsyncSandbox)
    await _timed(timings, "exec", lambda: sandbox.commands.run("true"))
    await _timed(timings, "write", lambda: sandbox.files.write(FILE, DATA))
    data = await _timed(timings, "read", lambda: sandbox.files.read(FILE, format="bytes"))
    assert data == DATA
    await _timed(timings, "kill", sandbox.kill)


async def provider_round(provider: SandboxProvider, timings: Timings) -> None:
    """The same sequence through ``E2BProvider``."""
    sandbox = await _timed(timings, "create", lambda: provider.create())
    from provider_sdk.sandbox import Sandbox
    assert isinstance(sandbox, Sandbox)
    await _timed(timings, "exec", lambda: sandbox.exec(["true"]))
    await _timed(timings, "write", lambda: sandbox.files.write(FILE, DATA))
    data = await _timed(timings, "read", lambda: sandbox.files.read(FILE))
    assert data == DATA
    await _timed(timings, "kill", sandbox.kill)


async def main(running: RunningEmulator, rounds: int) -> None:
    settings = running.settings
    params = {"api_key": running.api_key.reveal(), "api_url": settings["E2B_API_URL"],
              "sandbox_url": settings["E2B_SANDBOX_URL"], "domain": settings["E2B_DOMAIN"]}
    raw: Timings = {op: [] for op in OPS}
    ours: Timings = {op: [] for op in OPS}
    async with open_provider("e2b", **params) as provider:
        await raw_round(params, {op: [] for op in OPS})  # warm up both paths
        await provider_round(provider, {op: [] for op in OPS})
        for i in range(rounds):
            if i % 2:
                await raw_round(params, raw)
                await provider_round(provider, ours)
            else:
                await provider_round(provider, ours)
                await raw_round(params, raw)
    for op in OPS:
        report(f"e2b_{op}_p50_vs_raw_sdk", statistics.median(ours[op]),
               statistics.median(raw[op]), goal=1.05)
    total = [sum(times) for times in zip(*(ours[op] for op in OPS), strict=True)]
    baseline = [sum(times) for times in zip(*(raw[op] for op in OPS), strict=True)]
    report("e2b_create_exec_write_read_kill_p50_vs_raw_sdk", statistics.median(total),
           statistics.median(baseline), goal=1.05)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median")
    rounds = parser.parse_args().rounds
    if shutil.which("bwrap") is None:
        sys.exit("bench: the E2B benchmarks run the emulator on the local provider, "
                 "which needs bubblewrap (bwrap)")
    with tempfile.TemporaryDirectory(prefix="psdk-bench-e2b-") as home:
        os.environ["PSDK_HOME"] = home  # the emulator's backend
        with run_in_thread("e2b", EmulatorOptions(api_key=secrets.token_urlsafe(16))) as em:
            anyio.run(main, em, rounds)
