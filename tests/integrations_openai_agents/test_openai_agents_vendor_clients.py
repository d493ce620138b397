"""The Agents SDK's own E2B and Daytona sandbox clients, unmodified, against this
project's emulators: each pointed at 127.0.0.1 by its SDK's settings in the environment
alone (``E2B_API_URL``, ``E2B_DOMAIN``, ``E2B_SANDBOX_URL``, ``E2B_API_KEY``;
``DAYTONA_API_URL``, ``DAYTONA_API_KEY``, ``DAYTONA_TARGET``), a ``SandboxAgent``
driven by a ``ScriptedModel`` working in the sandbox they make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import RunConfig, Runner
from agents.items import ToolCallOutputItem
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.entries import File
from agents.testing import ScriptedModel, assistant_message
from agents_fixtures import exec_step
from daytona_emulator_fixtures import daytona_emulator, running
from engines import require_bwrap

pytestmark = pytest.mark.anyio

__all__ = ["daytona_emulator"]  # the session's Daytona emulator

# The emulators' sandboxes run as an unprivileged user, who may not create the vendor
# clients' default roots (/workspace, /home/daytona/workspace): a root of its own.
ROOT = "/tmp/agents-workspace"


async def _run(client: Any, options: Any) -> str:
    model = ScriptedModel([exec_step("cat seed.txt; echo made > out.txt; cat out.txt", "c1"),
                           [assistant_message("done")]])
    agent = SandboxAgent(name="vendor", model=model, instructions="work",
                         default_manifest=Manifest(root=ROOT, entries={
                             "seed.txt": File(content=b"seed\n")}))
    result = await Runner.run(agent, "go", run_config=RunConfig(
        sandbox=SandboxRunConfig(client=client, options=options), tracing_disabled=True))
    assert result.final_output == "done"
    [output] = [str(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    return output


async def test_the_agents_sdks_e2b_client_runs_on_the_e2b_emulator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.extensions.sandbox.e2b import E2BSandboxClient, E2BSandboxClientOptions
    from provider_emulators import emulator

    require_bwrap()
    with emulator("e2b", tmp_path / "backend") as em:
        for key, value in em.environment().items():
            monkeypatch.setenv(key, value)
        output = await _run(E2BSandboxClient(), E2BSandboxClientOptions(sandbox_type="e2b"))
    assert "Process exited with code 0" in output
    assert "seed\nmade" in output


async def test_the_agents_sdks_daytona_client_runs_on_the_daytona_emulator(
        monkeypatch: pytest.MonkeyPatch, daytona_emulator: Any) -> None:
    from agents.extensions.sandbox.daytona import (
        DaytonaSandboxClient,
        DaytonaSandboxClientOptions,
    )

    for key, value in running().environment().items():
        monkeypatch.setenv(key, value)
    output = await _run(DaytonaSandboxClient(), DaytonaSandboxClientOptions())
    assert "Process exited with code 0" in output
    assert "seed\nmade" in output
