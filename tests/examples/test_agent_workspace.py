"""``examples/agent_workspace.py`` runs unchanged on every installed provider: the test
changes one config field (``PSDK_PROVIDER``) plus that provider's own settings, and runs
the example as a user would, in a subprocess.

Vendor providers run against their emulators (started here, on 127.0.0.1, backed by the
local provider); Docker runs where an engine answers. A provider whose plugin is not
installed is skipped, with the reason; so is Docker without an engine, except under CI
(``CI=true``), where that is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from anyio.from_thread import start_blocking_portal
from engines import require_bwrap, require_docker

from provider_sdk import emulators, registry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_workspace.py"
PROVIDERS = ["local", "daytona", "docker", "e2b", "cube"]
EMULATED = {"daytona", "e2b", "cube"}


@contextlib.contextmanager
def _settings(name: str, home: Path) -> Iterator[dict[str, str]]:
    """The environment that selects provider ``name``, with what it needs running."""
    if name not in registry.available():
        pytest.skip(f"the {name!r} provider's plugin is not installed")
    base = {"PSDK_PROVIDER": name, "PSDK_HOME": str(home)}
    if name == "docker":
        require_docker()
        yield base
        return
    require_bwrap()
    if name not in EMULATED:
        yield base
        return
    if name not in emulators.available():
        pytest.skip(f"the {name!r} emulator's plugin is not installed")
    saved = os.environ.get("PSDK_HOME")
    os.environ["PSDK_HOME"] = str(home / "emulator")  # the emulator's own backend
    options = emulators.EmulatorOptions(api_key=secrets.token_urlsafe(16))
    try:
        with start_blocking_portal() as portal, \
                portal.wrap_async_context_manager(emulators.run(name, options)) as running:
            yield {**base, **running.environment()}
    finally:
        if saved is None:
            os.environ.pop("PSDK_HOME", None)
        else:
            os.environ["PSDK_HOME"] = saved


@pytest.mark.parametrize("name", PROVIDERS)
def test_the_example_runs_unchanged(name: str, tmp_path: Path) -> None:
    """Same script, one field changed: the same outcome on every provider."""
    with _settings(name, tmp_path) as settings:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PSDK_", "DAYTONA_",
                                                                         "E2B_", "CUBE_"))}
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--user", "alice", "--text", "one two three four"],
            env={**env, **settings}, cwd=tmp_path, capture_output=True, text=True,
            timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["provider"] == name
    assert (outcome["user"], outcome["reused"]) == ("alice", False)
    assert outcome["greeting"] == "Hello, alice"
    assert outcome["words"] == 4
    provider_class = registry.load(name)
    if "snapshot.filesystem" in {str(c) for c in provider_class.capabilities}:
        assert outcome["restored_words"] == 4
    else:
        assert outcome["restored_words"] is None
