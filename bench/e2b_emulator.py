"""The E2B emulator's own cost: create-to-first-exec through it, against the local
provider doing the same directly, in the same run, rounds interleaved.

Through the emulator: the unmodified ``e2b`` async SDK creates a sandbox and runs one
command (``commands.run("true")``, which the SDK sends as ``/bin/bash -l -c true``); the
emulator (E2B flavor) runs on its own event loop in a thread, as a remote service would,
backed by the local provider. Directly: the local provider creates a sandbox and runs
the same argv. Kills are not timed. The ratio is what the emulator, its HTTP and
Connect-RPC layers and the SDK's client add; there is no goal to meet, it is reported.

Prints JSON lines as ``bench/run.py`` does. Usage:
``python bench/e2b_emulator.py [--rounds N]``; needs bubblewrap.
"""

from __future__ import annotations

import argparse
import json
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

from provider_sdk import open_provider
from provider_sdk.emulators import EmulatorOptions
from provider_sdk.provider import SandboxProvider

ARGV = ["/bin/bash", "-l", "-c", "true"]


async def through_emulator() -> float:
    start = time.perf_counter()
    sandbox = await AsyncSandbox.create()
    await sandbox.commands.run("true")
    elapsed = time.perf_counter() - start
    await sandbox.kill()
    return elapsed


async def directly(provider: SandboxProvider) -> float:
    start = time.perf_counter()
    sandbox = await provider.create()
    await sandbox.exec(ARGV)
    elapsed = time.perf_counter() - start
    await sandbox.kill()
    return elapsed


async def main(rounds: int) -> None:
    emulated: list[float] = []
    direct: list[float] = []
    async with open_provider("local") as provider:
        await through_emulator()  # warm up both paths (imports, connection pools)
        await directly(provider)
        for i in range(rounds):
            if i % 2:
                emulated.append(await through_emulator())
                direct.append(await directly(provider))
            else:
                direct.append(await directly(provider))
                emulated.append(await through_emulator())
    value, baseline = statistics.median(emulated), statistics.median(direct)
    print(json.dumps({"name": "e2b_emulator.create_to_first_exec_p50",
                      "value": round(value, 6), "baseline": round(baseline, 6),
                      "ratio": round(value / baseline, 3), "goal": None, "unit": "s",
                      "met": None}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median")
    rounds = parser.parse_args().rounds
    if shutil.which("bwrap") is None:
        sys.exit("bench: the emulator's benchmark needs bubblewrap (bwrap)")
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as home:
        os.environ["PSDK_HOME"] = home  # both the emulator's backend and the direct one
        options = EmulatorOptions(api_key=secrets.token_urlsafe(16))
        with run_in_thread("e2b", options) as running:
            os.environ.update(running.environment())
            anyio.run(main, rounds)
