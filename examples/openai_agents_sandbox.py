"""An OpenAI Agents SDK ``SandboxAgent`` whose workspace is a provider-sdk sandbox, on
any provider.

The one field that picks the backend is ``provider``: ``--provider docker`` here, or
``PSDK_PROVIDER`` (or ``provider = "..."`` in ``psdk.toml``) when it is left out. Each
provider reads its own settings (``E2B_API_KEY``, ``CUBE_API_URL``, ``DAYTONA_API_KEY``
...). Nothing else changes between local, docker, e2b, cube and daytona.

So that it runs offline, with no API key, the agent's model is the Agents SDK's
``ScriptedModel``: it asks for two commands (count the words of the notes the manifest
put in the workspace, then save the count) and answers. Put a real model in its place
(``model="gpt-5.1"``) and nothing else changes. Run it::

    python examples/openai_agents_sandbox.py --provider local --text "one two three"

It prints one JSON object: the provider, what each command printed, the final answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from agents import RunConfig, Runner
from agents.items import ToolCallOutputItem
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.entries import File
from agents.testing import ScriptedModel, assistant_message, function_call
from provider_sdk_openai_agents import ProviderSandboxClient, ProviderSandboxClientOptions


def scripted_model() -> ScriptedModel:
    """What the stand-in model says, turn by turn."""
    return ScriptedModel([
        [function_call("exec_command", {"cmd": "wc -w < notes.txt"}, call_id="count")],
        [function_call("exec_command", {"cmd": "wc -w < notes.txt > count.txt && cat count.txt"},
                       call_id="save")],
        [assistant_message("Done: the notes are counted and the count is saved.")],
    ])


async def main(provider: str | None, text: str) -> None:
    agent = SandboxAgent(
        name="notes", model=scripted_model(),
        instructions="Count the words of notes.txt and save the count in count.txt.",
        default_manifest=Manifest(entries={"notes.txt": File(content=text.encode())}))
    async with ProviderSandboxClient(provider) as client:  # the one field
        result = await Runner.run(agent, "Count my notes.", run_config=RunConfig(
            tracing_disabled=True,  # offline: no traces leave the machine
            sandbox=SandboxRunConfig(client=client,
                                     options=ProviderSandboxClientOptions(timeout=60))))
    outputs = [str(item.output) for item in result.new_items
               if isinstance(item, ToolCallOutputItem)]
    print(json.dumps({"provider": client.provider_name, "commands": outputs,
                      "answer": result.final_output}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default=None,
                        help="local, docker, e2b, cube, daytona (default: PSDK_PROVIDER)")
    parser.add_argument("--text", default="the quick brown fox", help="the notes")
    args = parser.parse_args()
    asyncio.run(main(args.provider, args.text))
