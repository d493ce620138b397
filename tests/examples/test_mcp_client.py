"""``examples/mcp_client.py`` runs as a user would run it, on the local provider: it
starts ``psdk mcp`` on stdio with the ``mcp`` package's client and uses its tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from engines import require_bwrap

from provider_sdk.local import LocalProvider

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_client.py"


@pytest.mark.slow
def test_the_example_drives_the_server_through_its_tools(tmp_path: Path) -> None:
    require_bwrap()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSDK_")}
    env.update(PSDK_HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = subprocess.run([sys.executable, str(EXAMPLE)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["provider"] == "local"
    assert "sandbox_exec" in outcome["tools"]
    assert (outcome["exit_code"], outcome["stdout"]) == (0, "counted 4 words\n")
    assert outcome["result"] == {"words": 4, "python": 3}
    assert outcome["interpreter"] == "40"
    assert outcome["timeout_is_error"] is True
    assert outcome["partial_output"] == "started\n"
    assert (tmp_path / "home").is_dir()  # the server ran its sandbox there ...
    assert anyio.run(sandboxes_in, tmp_path / "home") == []  # ... and killed it


async def sandboxes_in(home: Path) -> list[str]:
    async with LocalProvider(home=home) as provider:
        return [info.id for info in await provider.list()]
