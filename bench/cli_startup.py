"""Start-up of the ``psdk`` command line: ``psdk --help`` and ``psdk providers``, each a
ratio against ``python -c pass`` (the same interpreter) measured in the same run.

Goal: both answer in under 0.3 s on the development machines, where starting the
interpreter takes about 12 ms, so the ratio stays under 25. Neither imports a vendor
SDK or a provider's modules (``providers`` reads the capabilities the plugins declare as
data), which is what keeps them there.

Prints one JSON object per line with ``bench/run.py``'s fields. Not a test: goals are
reported, not asserted. Usage: ``python bench/cli_startup.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from run import p50_sync, report

GOAL = 25.0
"""The ratio to stay under: 0.3 s over an interpreter start of about 12 ms."""


def _run(*argv: str) -> None:
    subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


def main(rounds: int) -> None:
    """Measure and report both lines."""
    _run("-m", "provider_sdk.cli", "providers")  # warm the file cache once
    for name, argv in (("cli_help_startup_p50", ("--help",)),
                       ("cli_providers_startup_p50", ("providers",))):
        baseline = p50_sync(lambda: _run("-c", "pass"), rounds)
        value = p50_sync(lambda argv=argv: _run("-m", "provider_sdk.cli", *argv), rounds)
        report(name, value, baseline, goal=GOAL)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per median")
    main(parser.parse_args().rounds)
