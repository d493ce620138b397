"""Benchmarks of the Daytona provider: ``DaytonaProvider`` against the raw async ``daytona``
SDK doing the same work, on the same emulator, in the same run, rounds interleaved.

Prints one JSON object per line, like ``bench/run.py``: ``name``, ``value`` (the
provider's median), ``baseline`` (the raw SDK's median), ``ratio``, ``goal``, ``unit``,
``met``. Not a test: goals are reported, not asserted. Needs bubblewrap (the emulator's
backend is the local provider). Usage: ``python bench/daytona_provider.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import anyio
from daytona import AsyncDaytona, AsyncSandbox, DaytonaConfig
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona.provider import DaytonaProvider
from run import report

from provider_sdk import emulators
from provider_sdk.models import ExecResult
from provider_sdk.provider import Command
from provider_sdk.sandbox import Sandbox

GOAL = 1.05
PAYLOAD = os.urandom(64 * 1024)
ECHO = Command(argv=("/bin/bash", "-c", "echo ready"))  # what ``exec("echo ready")`` runs


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def interleaved(name: str, raw: Callable[[], Awaitable[object]],
                      ours: Callable[[], Awaitable[object]], rounds: int,
                      goal: float | None = GOAL) -> None:
    """Median of ``ours`` against median of ``raw``, alternating which runs first."""
    raw_times: list[float] = []
    our_times: list[float] = []
    await raw()  # warm both up: connection pools, the SDK's lazy session
    await ours()
    for i in range(rounds):
        pair = [(raw, raw_times), (ours, our_times)]
        for fn, times in pair if i % 2 == 0 else reversed(pair):
            times.append(await timed(fn))
    report(name, statistics.median(our_times), statistics.median(raw_times), goal=goal)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="psdk-bench-daytona-") as home:
        os.environ["PSDK_HOME"] = home  # the emulator's local backend
        key = secrets.token_urlsafe(16)
        async with emulators.run("daytona", emulators.EmulatorOptions(api_key=key)) as em:
            url = em.settings["DAYTONA_API_URL"]
            config = DaytonaConfig(api_key=key, api_url=url, target="local")
            async with AsyncDaytona(config) as client, \
                    DaytonaProvider(api_key=key, api_url=url, target="local") as provider:
                await run_all(client, provider, rounds)


async def run_all(client: AsyncDaytona, provider: DaytonaProvider, rounds: int) -> None:
    # The whole life of a short task: create, run, write, read, delete.
    async def raw_task() -> None:
        sandbox = await client.create()
        await sandbox.process.exec("echo ready")
        await sandbox.fs.upload_file(PAYLOAD, "/tmp/bench.bin")
        assert await sandbox.fs.download_file("/tmp/bench.bin") == PAYLOAD
        await sandbox.delete()

    async def our_task() -> None:
        sandbox = await provider.create()
        await sandbox.exec("echo ready")
        await sandbox.files.write("/tmp/bench.bin", PAYLOAD)
        assert await sandbox.files.read("/tmp/bench.bin") == PAYLOAD
        await sandbox.kill()

    await interleaved("daytona_task_create_exec_files_delete_p50", raw_task, our_task,
                      rounds * 2)

    # Steady state on one running sandbox each.
    raw_sandbox: AsyncSandbox = await client.create()
    our_sandbox: Sandbox = await provider.create()
    try:
        # The same work by hand: the wrapper that separates stdout from stderr,
        # byte-exact, sent with the raw SDK and its answer parsed.
        cwd = await provider._calls.path(our_sandbox.id, ".")

        async def raw_separated() -> ExecResult:
            run = wrapper.wrap(ECHO, cwd=cwd, env={})
            report = wrapper.parse(run, (await raw_sandbox.process.exec(run.script)).result)
            assert report is not None
            assert report.stdout == b"ready\n"
            return ExecResult(exit_code=report.exit_code, stdout_bytes=report.stdout,
                              stderr_bytes=report.stderr or b"")

        await interleaved("daytona_exec_round_trip_p50", raw_separated,
                          lambda: our_sandbox.exec("echo ready"), rounds * 3)
        # What that separation costs inside the sandbox (a subshell, two files), against
        # Daytona's bare exec, whose one string merges both streams: reported, no goal.
        await interleaved("daytona_exec_vs_merged_output_p50",
                          lambda: raw_sandbox.process.exec("echo ready"),
                          lambda: our_sandbox.exec("echo ready"), rounds * 3, goal=None)
        await interleaved("daytona_file_write_read_64k_p50",
                          lambda: _raw_write_read(raw_sandbox),
                          lambda: _our_write_read(our_sandbox), rounds * 3)
    finally:
        await raw_sandbox.delete()
        await our_sandbox.kill()


async def _raw_write_read(sandbox: AsyncSandbox) -> None:
    await sandbox.fs.upload_file(PAYLOAD, "/tmp/bench.bin")
    await sandbox.fs.download_file("/tmp/bench.bin")


async def _our_write_read(sandbox: Sandbox) -> None:
    await sandbox.files.write("/tmp/bench.bin", PAYLOAD)
    await sandbox.files.read("/tmp/bench.bin")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="samples per median")
    anyio.run(main, parser.parse_args().rounds)
