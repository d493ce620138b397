"""What the deepagents adapter (``ProviderSandbox``) adds over the provider call it makes,
on the local provider, each a ratio against the direct call measured in the same run,
in interleaved pairs.

- ``deepagents.exec_round_trip_p50``: ``aexecute("true")`` on a backend made with
  ``acreate`` (its provider in this loop), against ``sandbox.exec`` of the same command
  line (``bash -c``, stderr joined to stdout). Goal: ratio <= 1.05.
- ``deepagents.exec_round_trip_sync_p50``: the blocking ``execute("true")`` on a backend
  made with ``create`` (its provider in a loop of its own, in a thread), against the
  same direct call in that loop. Goal: ratio <= 1.05.
- ``deepagents.file_1mib_upload_download_p50``: ``aupload_files`` then
  ``adownload_files`` of 1 MiB, against ``files.write`` then ``files.read``. Goal:
  ratio <= 1.05.

Prints one JSON object per line with ``bench/run.py``'s fields; ``ratio`` is the median
of per-pair ratios. Not a test: goals are reported, not asserted. Usage:
``python bench/deepagents_adapter.py [--rounds N]``; needs bubblewrap and
``sandbox-provider-sdk-deepagents``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import anyio
import anyio.to_thread
from manager import paired, report_paired, timed
from provider_sdk_deepagents import ProviderSandbox

from provider_sdk.portal import Portal

FILE = "/tmp/bench/one-mib.bin"
COMMAND = ["/bin/bash", "-c", "exec 2>&1\ntrue"]  # what aexecute("true") runs


async def main(rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the deepagents adapter's benchmarks need bubblewrap (bwrap)")
    data = os.urandom(1 << 20)
    with tempfile.TemporaryDirectory(prefix="psdk-bench-deepagents-") as tmp:
        options = {"home": str(tmp)}
        backend = await ProviderSandbox.acreate(provider="local", provider_options=options)
        sandbox = backend.sandbox
        try:
            async def adapter_exec() -> None:
                assert (await backend.aexecute("true")).exit_code == 0

            async def direct_exec() -> None:
                assert (await sandbox.exec(COMMAND)).exit_code == 0

            ta, tb = await paired(timed(adapter_exec), timed(direct_exec), rounds * 10)
            report_paired("deepagents.exec_round_trip_p50", ta, tb, goal=1.05)

            async def adapter_files() -> None:
                assert (await backend.aupload_files([(FILE, data)]))[0].error is None
                assert (await backend.adownload_files([FILE]))[0].content == data

            async def direct_files() -> None:
                await sandbox.files.write(FILE, data)
                assert await sandbox.files.read(FILE) == data

            ta, tb = await paired(timed(adapter_files), timed(direct_files), rounds * 5)
            report_paired("deepagents.file_1mib_upload_download_p50", ta, tb, goal=1.05)
        finally:
            await backend.adelete()

        blocking = await anyio.to_thread.run_sync(
            lambda: ProviderSandbox.create(provider="local", provider_options=options))
        loop: Portal = blocking._loop
        try:
            def direct_sync() -> None:
                assert loop.call(blocking.sandbox.exec, COMMAND).exit_code == 0

            async def sync_direct() -> float:
                start = time.perf_counter()
                await anyio.to_thread.run_sync(direct_sync)
                return time.perf_counter() - start

            async def sync_adapter() -> float:
                start = time.perf_counter()
                await anyio.to_thread.run_sync(lambda: blocking.execute("true"))
                return time.perf_counter() - start

            ta, tb = await paired(sync_adapter, sync_direct, rounds * 10)
            report_paired("deepagents.exec_round_trip_sync_p50", ta, tb, goal=1.05)
        finally:
            await anyio.to_thread.run_sync(blocking.delete)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    anyio.run(main, parser.parse_args().rounds)
