"""``examples/deepagents_agent.py`` runs unchanged on every installed provider: the test
changes one config field (``PSDK_PROVIDER``, with that provider's own settings, set up
as for ``examples/agent_workspace.py``) and runs the example as a user would, in a
subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_agent_workspace import PROVIDERS, _settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepagents_agent.py"


@pytest.mark.parametrize("name", PROVIDERS)
def test_the_deepagents_example_runs_unchanged(name: str, tmp_path: Path) -> None:
    """Same script, one field changed: the agent's tools run in that provider's
    sandbox."""
    pytest.importorskip("provider_sdk_deepagents")
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
    assert outcome["tools"]["write_file"] == "Updated file /tmp/agent/notes.txt"
    assert outcome["tools"]["execute"].startswith("5\n")  # counted in the sandbox
    assert "alpha beta gamma delta epsilon" in outcome["tools"]["read_file"]
    assert outcome["answer"] == "Done: the notes are written and counted."
