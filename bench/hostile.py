"""The caller's memory under an output flood: the peak resident set of a fresh process
that does nothing but one exec printing 1.5 GiB, against the same exec printing 16 MiB.

Each measurement is a new Python process (``--child``) that connects to a sandbox made
beforehand, runs ``head -c N /dev/zero`` once with the provider's default output limit,
and reports its own peak resident set (``VmHWM``); so imports, the client and the event
loop cost the same on both sides and the difference is what the flood adds. Runs on the local
provider, and on Docker when an Engine answers. Prints one JSON line per provider, as
``bench/run.py`` does, with ``difference`` in MiB and a goal on it (under 64 MiB apart).
Not a test: goals are reported, not asserted. Usage: ``python bench/hostile.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import anyio

from provider_sdk import open_provider
from provider_sdk.errors import SandboxError

_MiB = 1 << 20
FLOOD = 1536 * _MiB
BASELINE = 16 * _MiB
GOAL_MIB = 64.0
"""The most the flood's peak may exceed the baseline's, in MiB."""
EXEC_TIMEOUT = 900.0


async def child(provider: str, options: dict[str, Any], sandbox_id: str, size: int) -> None:
    """Run the one exec and print this process's peak resident set in bytes."""
    async with open_provider(provider, **options) as opened:
        sandbox = await opened.connect(sandbox_id)
        result = await sandbox.exec(["head", "-c", str(size), "/dev/zero"],
                                    timeout=EXEC_TIMEOUT)
        kept = len(result.stdout_bytes)
    print(json.dumps({"peak": _peak_rss(), "kept": kept, "exit_code": result.exit_code}))


def _peak_rss() -> int:
    """This process's peak resident set in bytes: ``VmHWM``, not ``ru_maxrss``, which
    keeps the peak of the process that forked this one (exec does not reset it)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status
                    if line.startswith("VmHWM:"))


def measure(provider: str, options: dict[str, Any], sandbox_id: str, size: int) -> int:
    """The peak resident set, in bytes, of a fresh process running the flood of ``size``."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", provider, json.dumps(options), sandbox_id,
         str(size)], capture_output=True, text=True, timeout=EXEC_TIMEOUT + 120)
    if done.returncode != 0:
        raise RuntimeError(f"{provider}: the measuring process failed "
                           f"({done.returncode}): {done.stderr[-2000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak"])


async def bench(provider: str, options: dict[str, Any]) -> None:
    async with open_provider(provider, **options) as opened, opened.create() as sandbox:
        big = await anyio.to_thread.run_sync(measure, provider, options, sandbox.id, FLOOD)
        small = await anyio.to_thread.run_sync(measure, provider, options, sandbox.id,
                                               BASELINE)
    difference = (big - small) / _MiB
    print(json.dumps({
        "name": f"{provider}.caller_peak_rss_1536_mib_stdout",
        "value": round(big / _MiB, 1), "baseline": round(small / _MiB, 1),
        "ratio": round(big / small, 3), "difference": round(difference, 1),
        "goal": GOAL_MIB, "goal_on": "difference", "unit": "MiB",
        "met": difference < GOAL_MIB}), flush=True)


def docker_available() -> bool:
    """Whether a Docker Engine answers (the provider and its image are then usable)."""
    try:
        import docker
    except ImportError:
        return False
    try:
        docker.from_env().ping()
    except Exception:  # the docker package raises several unrelated types
        return False
    return True


async def main() -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bench: the local provider needs bubblewrap (bwrap)")
    with tempfile.TemporaryDirectory(prefix="psdk-bench-") as home:
        await bench("local", {"home": home})
    if docker_available():
        try:
            await bench("docker", {})
        except SandboxError as exc:
            print(f"bench: docker skipped: {exc}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, raw_options, sandbox_id, size = sys.argv[2:6]
        anyio.run(child, name, json.loads(raw_options), sandbox_id, int(size))
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--rounds", type=int, default=1,
                            help="accepted as the other scripts do; one measurement each")
        parser.parse_args()
        anyio.run(main)
