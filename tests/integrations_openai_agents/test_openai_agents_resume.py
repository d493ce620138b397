"""A run stopped for approval, serialised with ``RunState.to_json()`` and resumed from
that JSON in a fresh process, finds its workspace: in the same sandbox, paused between
the runs, or, when the first run killed it, in a new one restored from the run's
snapshot."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Runner
from agents.testing import ScriptedModel
from agents_fixtures import (
    PROVIDERS,
    exec_step,
    provider_setup,
    resumable_agent,
    resumable_run_config,
)
from daytona_emulator_fixtures import daytona_emulator
from provider_sdk_openai_agents import ProviderSandboxClient
from resume_child import sandbox_id

from provider_sdk import open_provider
from provider_sdk.capabilities import Capability
from provider_sdk.errors import NotFound
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio

__all__ = ["daytona_emulator"]  # the session's Daytona emulator, for the daytona cases

HERE = Path(__file__).resolve().parent
CHILD = HERE / "resume_child.py"


def _child_env(settings: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSDK_")}
    path = os.pathsep.join([str(HERE), str(HERE.parent)])
    return {**env, "PYTHONPATH": path, **settings}


async def _state_of(provider: str, options: dict[str, Any], sandbox: str) -> SandboxState:
    async with open_provider(provider, **options) as p:
        try:
            return (await p.get_info(sandbox)).state
        except NotFound:
            return SandboxState.KILLED


async def _kill(provider: str, options: dict[str, Any], sandbox: str) -> None:
    async with open_provider(provider, **options) as p:
        await p.kill(sandbox)


@pytest.mark.parametrize("on_exit", ["pause", "kill"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_run_resumed_from_json_in_another_process_finds_its_workspace(
        provider: str, on_exit: str, tmp_path: Path, daytona_emulator: Any) -> None:
    """``pause``: the second process reattaches to the sandbox of the first (resumed if
    the provider paused it). ``kill``: the sandbox is gone, and the second process's
    new one gets the workspace back from the snapshot the first run persisted."""
    snapshots = tmp_path / "snapshots"
    with provider_setup(provider, tmp_path) as (options, settings):
        model = ScriptedModel([exec_step("echo kept > notes.txt", "c1"),
                               exec_step("cat notes.txt", "c2")])
        agent = resumable_agent(model)
        async with ProviderSandboxClient(provider, provider_options=options) as client:
            stopped = await Runner.run(agent, "take notes", run_config=resumable_run_config(
                client, on_exit, snapshots))
        state_json = stopped.to_state().to_json()
        first = sandbox_id(state_json)
        assert first is not None
        made = {first}
        try:
            assert [i.raw_item.call_id for i in stopped.interruptions] == ["c2"]  # type: ignore[union-attr]
            resumed = await _resume_elsewhere(provider, options, settings, on_exit, first,
                                              state_json, tmp_path)
            made.add(resumed["sandbox_id"])
            assert resumed["final"] == "resumed"
            approved = resumed["outputs"][-1]  # after the first run's, which the state holds
            assert "Process exited with code 0" in approved
            assert "kept" in approved
            if on_exit == "kill":
                assert resumed["sandbox_id"] != first
                # The state says kill: the second run killed its sandbox too.
                assert await _state_of(provider, options, resumed["sandbox_id"]) == \
                    SandboxState.KILLED
            else:
                assert resumed["sandbox_id"] == first
        finally:
            for sandbox in made:
                await _kill(provider, options, sandbox)


async def _resume_elsewhere(provider: str, options: dict[str, Any], settings: dict[str, str],
                            on_exit: str, first: str, state_json: dict[str, Any],
                            tmp_path: Path) -> dict[str, Any]:
    """Check what became of the first run's sandbox, then resume the run in a child
    process; what it reports."""
    between = await _state_of(provider, options, first)
    async with open_provider(provider, **options) as p:
        can_pause = p.supports(Capability.PAUSE)
    if on_exit == "kill":
        assert between == SandboxState.KILLED
    else:
        assert between == (SandboxState.PAUSED if can_pause else SandboxState.RUNNING)
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(state_json))
    with anyio.fail_after(300):
        done = await anyio.run_process(
            [sys.executable, str(CHILD), provider, str(state_path), str(tmp_path / "snapshots")],
            env=_child_env(settings), cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    resumed: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return resumed
