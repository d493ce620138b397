"""``psdk contract``: run the shared contract suite against one provider.

It writes a three-line test module into a temporary directory and runs
``python -m pytest`` on it in a subprocess, so the suite runs exactly as a provider's own
test file would run it. The exit status is pytest's. At the end comes a summary (see
:mod:`provider_sdk.cli.contract_summary`): every skip reason with its count, every known
failure with its reason, every failure.

With ``--emulator`` the provider's emulator is started in this process (on 127.0.0.1,
with a fresh API key, backed by ``--backend``) and the subprocess gets the settings that
point the provider at it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from provider_sdk import config, emulators, registry
from provider_sdk.cli.console import CliError, Console
from provider_sdk.distributions import install_hint
from provider_sdk.portal import Portal

__all__ = ["cmd_contract", "test_module"]



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
        raise CliError("the contract suite is not installed: "
                       + install_hint("sandbox-provider-sdk-contract"))
    registry.load(name)  # an unknown provider fails here, in one line
    with tempfile.TemporaryDirectory(prefix="psdk-contract-") as tmp, \
            _environment(name, args, console) as env:
        module = Path(tmp) / "test_contract.py"
        module.write_text(test_module(name))
        command = [sys.executable, "-m", "pytest", "-p", "provider_sdk_contract.plugin",
                   "-p", "provider_sdk.cli.contract_summary", "--rootdir", tmp, str(module),
                   *args.cmd]
        console.note(f"running the contract suite against {name!r}")
        return subprocess.call(command, env=env)


@contextlib.contextmanager
def _environment(name: str, args: argparse.Namespace,
                 console: Console) -> Iterator[dict[str, str] | None]:
    """The subprocess's environment: inherited, plus the emulator's settings if asked."""
    if not args.emulator:
        yield None
        return
    options = emulators.EmulatorOptions(backend=args.backend,
                                        api_key=secrets.token_urlsafe(24))
    portal = Portal.start(name="psdk-contract-emulator")
    try:
        with portal.hold(emulators.run(name, options)) as running:
            console.note(f"{name} emulator on {running.url}, backed by {args.backend!r}")
            yield {**os.environ, **running.environment()}
    finally:
        portal.close()
