"""Emulators for the E2B and Cube providers' own tests: one per flavor and test module
(or, for the contract suite, per session), in a thread with its own event loop, backed
by the local provider in a temporary home. (``conftest.py``'s fixtures start one per
test, which is what the emulator's own tests want.) Provider options point at it;
faults are set through its admin API."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from provider_sdk_contract import ProviderContract
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk import emulators


@contextlib.contextmanager
def emulator(name: str, home: Path) -> Iterator[emulators.RunningEmulator]:
    """Run the ``name`` emulator (``e2b`` or ``cube``) until the block exits.

    Skips without bubblewrap (the local backend needs it), except under CI."""
    if shutil.which("bwrap") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap is missing; CI must install it")
        pytest.skip("bubblewrap (bwrap) is not installed: the emulator's backend needs it")
    options = emulators.EmulatorOptions(api_key=secrets.token_urlsafe(16))
    saved = os.environ.get("PSDK_HOME")
    os.environ["PSDK_HOME"] = str(home)  # read once, when the backend is opened
    try:
        with run_in_thread(name, options) as running:
            _restore("PSDK_HOME", saved)
            yield running
    finally:
        _restore("PSDK_HOME", saved)


def _restore(var: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = value


def provider_options(running: emulators.RunningEmulator, **extra: Any) -> dict[str, Any]:
    """Options that point the emulator's provider (``e2b`` or ``cube``) at it."""
    settings = running.settings
    if running.name == "cube":
        options: dict[str, Any] = {
            "api_url": settings["CUBE_API_URL"], "domain": settings["CUBE_SANDBOX_DOMAIN"],
            "template": settings["CUBE_TEMPLATE_ID"],
            "proxy_node_ip": settings["CUBE_PROXY_NODE_IP"],
            "proxy_port": int(settings["CUBE_PROXY_PORT_HTTP"])}
    else:
        options = {"api_url": settings["E2B_API_URL"], "domain": settings["E2B_DOMAIN"],
                   "sandbox_url": settings["E2B_SANDBOX_URL"]}
    return {"api_key": running.api_key.reveal(), **options, **extra}


def faults(running: emulators.RunningEmulator,
           values: dict[str, float] | None = None) -> dict[str, Any]:
    """Set faults through the emulator's admin endpoint; return its report."""
    request = urllib.request.Request(
        f"{running.url}/_emulator/faults", method="POST" if values is not None else "GET",
        data=json.dumps(values).encode() if values is not None else None,
        headers={"X-API-Key": running.api_key.reveal(), "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # 127.0.0.1 only
        report: dict[str, Any] = json.loads(answer.read())
    return report


class EmulatedContract(ProviderContract):
    """The contract suite against an emulator named like the provider. The emulator
    lives until the end of the session, so the suite's final sweep can still reach it."""

    _running: ClassVar[dict[str, emulators.RunningEmulator]] = {}
    @pytest.fixture(scope="class", autouse=True)
    def _emulator(self, request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> emulators.RunningEmulator:
        name = self.provider_name
        if name not in self._running:
            stack = contextlib.ExitStack()
            request.config.add_cleanup(stack.close)
            self._running[name] = stack.enter_context(
                emulator(name, tmp_path_factory.mktemp(f"{name}-backend")))
            request.config.add_cleanup(lambda: self._running.pop(name, None))
        return self._running[name]

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return provider_options(self._running[self.provider_name])
