"""Benchmarks of the E2B provider against the raw ``e2b`` async SDK doing the same work
(create, exec, write, read, kill) on the same emulator, in the same run, rounds
interleaved operation by operation (who goes first alternates), so the ratio is what
the provider adds.

The emulator (E2B flavor, local backend) runs on its own event loop in a thread, as a
remote service would. Prints JSON lines as ``bench/run.py`` does: one per operation
(p50 of each, reported without a goal: single operations swing more than the ratio
asked for), and one for the whole sequence, whose goal is a ratio of at most 1.05. Usage:
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

import anyio
from e2b import AsyncSandbox
from provider_sdk_emulators.e2b import run_in_thread
from run import report

from provider_sdk import open_provider
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

FILE = "/tmp/psdk-bench.bin"
DATA = secrets.token_bytes(256 << 10)
OPS = ("create", "exec", "write", "read", "kill")

Timings = dict[str, list[float]]


class Raw:
    """The sequence with the ``e2b`` SDK alone."""

    def __init__(self, params: dict[str, str]) -> None:
        self.params = params
        self.sandbox: AsyncSandbox | None = None

    async def create(self) -> None:
        self.sandbox = await AsyncSandbox.create(**self.params)

    async def exec(self) -> None:
        assert self.sandbox is not None
        await self.sandbox.commands.run("true")

    async def write(self) -> None:
        assert self.sandbox is not None
        await self.sandbox.files.write(FILE, DATA)

    async def read(self) -> None:
        assert self.sandbox is not None
        assert await self.sandbox.files.read(FILE, format="bytes") == DATA

    async def kill(self) -> None:
        assert self.sandbox is not None
        await self.sandbox.kill()


class Ours:
    """The same sequence through ``E2BProvider``."""

    def __init__(self, provider: SandboxProvider) -> None:
        self.provider = provider
        self.sandbox: Sandbox | None = None

    async def create(self) -> None:
        self.sandbox = await self.provider.create()

    async def exec(self) -> None:
        assert self.sandbox is not None
        await self.sandbox.exec(["true"])

    async def write(self) -> None:
        assert self.sandbox is not None
        await self.sandbox.files.write(FILE, DATA)

    async def read(self) -> None:
        assert self.sandbox is not None
        assert await self.sandbox.files.read(FILE) == DATA

    async def kill(self) -> None:
        assert self.sandbox is not None
        await self.sandbox.kill()


async def round_pair(first: Raw | Ours, second: Raw | Ours,
                     timings: dict[int, Timings]) -> None:
    """One round of each, step by step: every operation of one is timed right next to
    the same operation of the other, so both see the same machine."""
    for op in OPS:
        for side in (first, second):
            start = time.perf_counter()
            await getattr(side, op)()
            timings[id(side)][op].append(time.perf_counter() - start)


async def main(running: RunningEmulator, rounds: int) -> None:
    settings = running.settings
    params = {"api_key": running.api_key.reveal(), "api_url": settings["E2B_API_URL"],
              "sandbox_url": settings["E2B_SANDBOX_URL"], "domain": settings["E2B_DOMAIN"]}
    async with open_provider("e2b", **params) as provider:
        raw_side, our_side = Raw(params), Ours(provider)
        timings: dict[int, Timings] = {id(raw_side): {op: [] for op in OPS},
                                       id(our_side): {op: [] for op in OPS}}
        await round_pair(raw_side, our_side, {k: {op: [] for op in OPS} for k in timings})
        for i in range(rounds):  # who goes first alternates
            await round_pair(*((raw_side, our_side) if i % 2 else (our_side, raw_side)),
                             timings)
    raw, ours = timings[id(raw_side)], timings[id(our_side)]
    for op in OPS:
        report(f"e2b_{op}_p50_vs_raw_sdk", statistics.median(ours[op]),
               statistics.median(raw[op]), goal=None)
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
