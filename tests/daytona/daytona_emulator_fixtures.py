"""The Daytona emulator the tests of ``tests/daytona`` share: one per session, in a
thread with its own event loop, backed by the local provider in a temporary home."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import urllib.request
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from daytona import DaytonaConfig
from engines import require_bwrap

from provider_sdk import emulators

_RUNNING: list[emulators.RunningEmulator] = []


def running() -> emulators.RunningEmulator:
    """The session's emulator (started by the ``daytona_emulator`` fixture)."""
    if not _RUNNING:
        raise RuntimeError("the daytona_emulator fixture has not started the emulator")
    return _RUNNING[-1]


def sdk_config() -> DaytonaConfig:
    """The unmodified SDK's configuration for the session's emulator."""
    em = running()
    return DaytonaConfig(api_key=em.api_key.reveal(), api_url=em.settings["DAYTONA_API_URL"],
                         target=em.settings["DAYTONA_TARGET"])


def provider_options() -> dict[str, Any]:
    """``DaytonaProvider`` options that point it at the session's emulator."""
    em = running()
    return {"api_key": em.api_key.reveal(), "api_url": em.settings["DAYTONA_API_URL"],
            "target": em.settings["DAYTONA_TARGET"]}


def admin(faults: dict[str, float] | None = None) -> dict[str, Any]:
    """Set faults through the emulator's admin endpoint; return its report."""
    em = running()
    request = urllib.request.Request(
        f"{em.url}/_emulator/faults", method="POST" if faults is not None else "GET",
        data=json.dumps(faults).encode() if faults is not None else None,
        headers={"Authorization": f"Bearer {em.api_key.reveal()}",
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # 127.0.0.1 only
        report: dict[str, Any] = json.loads(answer.read())
    return report


@pytest.fixture(scope="session", autouse=True)
def daytona_emulator(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> emulators.RunningEmulator:
    """The Daytona emulator on 127.0.0.1, backed by a local provider of its own.

    It stays up until the session's very end, after the contract suite's final sweep,
    which still reaches it. Without bubblewrap (the local backend needs it) the tests
    skip, except under CI (``CI=true``), where that is a failure."""
    require_bwrap()
    home = tmp_path_factory.mktemp("daytona-backend")
    options = emulators.EmulatorOptions(api_key=secrets.token_urlsafe(16))
    saved = os.environ.get("PSDK_HOME")
    os.environ["PSDK_HOME"] = str(home)  # read once, when the backend is opened
    stack = contextlib.ExitStack()
    request.config.add_cleanup(stack.close)
    try:
        portal = stack.enter_context(start_blocking_portal())
        em = stack.enter_context(portal.wrap_async_context_manager(
            emulators.run("daytona", options)))
    finally:
        if saved is None:
            os.environ.pop("PSDK_HOME", None)
        else:
            os.environ["PSDK_HOME"] = saved
    _RUNNING.append(em)
    stack.callback(_RUNNING.remove, em)
    return em
