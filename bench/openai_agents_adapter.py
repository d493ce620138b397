"""What the OpenAI Agents SDK client (``ProviderSandboxClient``) adds over the provider
calls it makes, on the local provider, each a ratio against the direct call measured in
the same run, in interleaved pairs.

- ``openai_agents.exec_round_trip_p50``: ``session.exec("true")`` on a started session
  (the Agents SDK's wrapper, which runs it with ``sh -lc``), against ``sandbox.exec`` of
  the same command line in the same sandbox, environment and directory. Goal:
  ratio <= 1.05.
- ``openai_agents.file_1mib_write_read_p50``: ``session.write`` then ``session.read`` of
  1 MiB in the workspace, against ``files.write`` then ``files.read`` of the same path.
  The session checks each path in the sandbox by the Agents SDK's rules (a link may not
  lead out of the workspace): one command more per call. Goal: ratio <= 1.05.

Prints one JSON object per line with ``bench/run.py``'s fields; ``ratio`` is the median
of per-pair ratios. Not a test: goals are reported, not asserted. Usage:
``python bench/openai_agents_adapter.py [--rounds N]``; needs bubblewrap and
``sandbox-provider-sdk-openai-agents``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

import anyio
from agents.sandbox.session import SandboxSession
from manager import paired, report_paired, timed
from provider_sdk_openai_agents import ProviderSandboxClient, ProviderSandboxSession


async def main(rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the OpenAI Agents SDK client's benchmarks need bubblewrap (bwrap)")
    data = os.urandom(1 << 20)
    with tempfile.TemporaryDirectory(prefix="psdk-bench-openai-agents-") as tmp:
        async with ProviderSandboxClient("local", provider_options={"home": tmp}) as client:
            session = await client.create()
            try:
                await session.start()
                await _measure(session, data, rounds)
            finally:
                await session.aclose()
                await client.delete(session)


async def _measure(session: SandboxSession, data: bytes, rounds: int) -> None:
    inner = session._inner
    assert isinstance(inner, ProviderSandboxSession)
    sandbox, root = inner.sandbox, inner.state.manifest.root
    env = {**inner.state.env, **await inner.state.manifest.environment.resolve()}

    async def client_exec() -> None:
        assert (await session.exec("true")).exit_code == 0

    async def direct_exec() -> None:
        done = await sandbox.exec(["sh", "-lc", "true"], env=env, cwd=root)
        assert done.exit_code == 0

    ta, tb = await paired(timed(client_exec), timed(direct_exec), rounds * 10)
    report_paired("openai_agents.exec_round_trip_p50", ta, tb, goal=1.05)

    async def client_files() -> None:
        await session.write(Path("bench.bin"), io.BytesIO(data))
        assert (await session.read(Path("bench.bin"))).read() == data

    async def direct_files() -> None:
        await sandbox.files.write(f"{root}/bench.bin", data)
        assert await sandbox.files.read(f"{root}/bench.bin") == data

    ta, tb = await paired(timed(client_files), timed(direct_files), rounds * 5)
    report_paired("openai_agents.file_1mib_write_read_p50", ta, tb, goal=1.05)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    anyio.run(main, parser.parse_args().rounds)
