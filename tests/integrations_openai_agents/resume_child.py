"""Resume, in a process of its own, a run of ``resumable_agent`` that stopped for
approval: ``python resume_child.py PROVIDER STATE_JSON SNAPSHOTS``. The provider's
settings come from the environment. Prints one JSON object: the approved command's
output, the run's final output, and the sandbox it ran in."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agents import Runner
from agents.items import ToolCallOutputItem
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message
from agents_fixtures import resumable_agent, resumable_run_config
from provider_sdk_openai_agents import ProviderSandboxClient


def sandbox_id(state_json: Any) -> str | None:
    """The ``sandbox_id`` in a serialised run state."""
    if isinstance(state_json, dict):
        if isinstance(state_json.get("sandbox_id"), str):
            return str(state_json["sandbox_id"])
        values: Any = state_json.values()
    elif isinstance(state_json, list):
        values = state_json
    else:
        return None
    for value in values:
        found = sandbox_id(value)
        if found is not None:
            return found
    return None


async def main(provider: str, state_json: dict[str, Any], snapshots: Path) -> None:
    model = ScriptedModel([[assistant_message("resumed")]])
    agent = resumable_agent(model)
    state = await RunState.from_json(agent, state_json)
    [pending] = state.get_interruptions()
    state.approve(pending)
    async with ProviderSandboxClient(provider) as client:
        result = await Runner.run(agent, state, run_config=resumable_run_config(
            client, "kill", snapshots))
    outputs = [str(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    print(json.dumps({"outputs": outputs, "final": result.final_output,
                      "sandbox_id": sandbox_id(result.to_state().to_json())}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(Path(sys.argv[2]).read_text()),
                     Path(sys.argv[3])))
