"""``psdk demo``: every step runs, everything it made is removed, and a missing
bubblewrap means a loud unisolated run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_provider import STORE, MemoryProvider, Store
from psdk_fixtures import Psdk

from provider_sdk import registry

pytestmark = pytest.mark.slow


class _Local(MemoryProvider):
    """The memory provider posing as ``local``, accepting local's options."""

    def __init__(self, *, home: str | None = None, unisolated: bool = False,
                 **kw: Any) -> None:
        super().__init__(**kw)
        STORE.opened[-1]["unisolated"] = unisolated


@pytest.fixture
def as_local(memory: Store) -> Iterator[Store]:
    registry.register("local", _Local)
    try:
        yield memory
    finally:
        registry.unregister("local")


def test_demo_walks_every_step_and_removes_what_it_made(psdk: Psdk, as_local: Store) -> None:
    outcome = psdk("demo")
    assert outcome.code == 0, outcome.err
    steps = [ln for ln in outcome.out.splitlines() if ln.startswith("[")]
    assert [s.split("] ", 1)[1] for s in steps] == [
        "Open the provider", "Create a sandbox",
        "Run a command, its output streamed as it comes", "Files",
        "A persistent shell: cd and export carry over", "Snapshot, and a new sandbox from it",
        "Pause and resume", "Kill it"]
    assert "    | tick 3" in outcome.out
    assert "'hi there\\n'" in outcome.out
    assert as_local.boxes == {}
    assert as_local.snapshots == {}
    assert "UNISOLATED" not in outcome.err
    assert as_local.opened[-1]["unisolated"] is False


def test_demo_without_bubblewrap_is_unisolated_and_says_so(
        psdk: Psdk, as_local: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda name, *a, **k: None if name == "bwrap" else real_which(name))
    outcome = psdk("demo")
    assert outcome.code == 0, outcome.err
    assert outcome.err.startswith("!!! bubblewrap (bwrap) is not installed")
    assert "UNISOLATED" in outcome.err
    assert "open_provider('local', unisolated=True)" in outcome.out
    assert as_local.opened[-1]["unisolated"] is True


def test_demo_on_the_real_local_provider(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PSDK_PROVIDER", "PSDK_CONFIG")}
    env["PSDK_HOME"] = str(tmp_path / "home")
    result = subprocess.run([sys.executable, "-m", "provider_sdk.cli", "demo"],
                            capture_output=True, text=True, env=env, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "[8/8] Kill it" in result.stdout
    assert "    | hello from /tmp\n" in result.stdout  # cd and export carried over
    assert "went on from where the pause froze it" in result.stdout  # pause.memory
    listed = subprocess.run([sys.executable, "-m", "provider_sdk.cli", "ls", "--json",
                             "--provider", "local"],
                            capture_output=True, text=True, env=env, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert [s for s in json.loads(listed.stdout) if s["state"] != "killed"] == []


def test_demo_runs_on_the_provider_it_is_given(tmp_path: Path) -> None:
    from engines import require_docker

    require_docker()
    env = {k: v for k, v in os.environ.items() if k not in ("PSDK_PROVIDER", "PSDK_CONFIG")}
    env["PSDK_HOME"] = str(tmp_path / "home")
    result = subprocess.run([sys.executable, "-m", "provider_sdk.cli", "demo", "--provider",
                             "docker"], capture_output=True, text=True, env=env, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "on the docker provider" in result.stdout
    assert "open_provider('docker')" in result.stdout
    assert "[8/8] Kill it" in result.stdout
    assert not (tmp_path / "home" / "sandboxes").exists()  # nothing ran on local
