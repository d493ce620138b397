"""``examples/openai_agents_sandbox.py`` runs unchanged on every installed provider: the
test changes one config field (``PSDK_PROVIDER``, with that provider's own settings, set
up as for ``examples/agent_workspace.py``) and runs the example as a user would, in a
subprocess, offline and with no API key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_agent_workspace import PROVIDERS, _settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_sandbox.py"


@pytest.mark.parametrize("name", PROVIDERS)
def test_the_openai_agents_example_runs_unchanged(name: str, tmp_path: Path) -> None:
    """Same script, one field changed: the agent's commands run in that provider's
    sandbox, in the workspace its manifest made."""
    pytest.importorskip("provider_sdk_openai_agents")
    with _settings(name, tmp_path) as settings:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PSDK_", "DAYTONA_",
                                                                         "E2B_", "CUBE_"))}
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--text", "alpha beta gamma delta epsilon"],
            env={**env, **settings}, cwd=tmp_path, capture_output=True, text=True,
            timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["provider"] == name
    counted, saved = outcome["commands"]
    assert "Output:\n5" in counted  # counted in the sandbox
    assert "Output:\n5" in saved
    assert outcome["answer"] == "Done: the notes are counted and the count is saved."
