"""``psdk contract``: run the shared contract suite against one provider.

It writes a three-line test module into a temporary directory and runs
``python -m pytest`` on it in a subprocess, so the suite runs exactly as a provider's own
test file would run it. The exit status is pytest's.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from provider_sdk import config, registry
from provider_sdk.cli.console import CliError, Console

__all__ = ["cmd_contract", "test_module"]

_INSTALL = "the contract suite is not installed: pip install provider-sdk-contract"


def test_module(provider: str) -> str:
    """The source of the test module that runs the whole suite against ``provider``."""
    return (
        "from provider_sdk_contract import ProviderContract\n\n\n"
        "class TestContract(ProviderContract):\n"
        f"    provider_name = {provider!r}\n"
    )


def cmd_contract(args: argparse.Namespace, console: Console) -> int:
    """Run the contract suite on the provider; pytest's arguments follow ``--``."""
    name = config.provider_name(args.provider)
    try:
        found = importlib.util.find_spec("provider_sdk_contract.plugin") is not None
    except ImportError:
        found = False
    if not found:
        raise CliError(_INSTALL)
    registry.load(name)  # an unknown provider fails here, in one line
    with tempfile.TemporaryDirectory(prefix="psdk-contract-") as tmp:
        module = Path(tmp) / "test_contract.py"
        module.write_text(test_module(name))
        command = [sys.executable, "-m", "pytest", "-p", "provider_sdk_contract.plugin",
                   "--rootdir", tmp, str(module), *args.cmd]
        console.note(f"running the contract suite against {name!r}")
        return subprocess.call(command)
