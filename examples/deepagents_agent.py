"""A deepagents agent whose tools run in a provider-sdk sandbox, on any provider.

The one field that picks the backend is ``provider``: ``--provider docker`` here, or
``PSDK_PROVIDER`` (or ``provider = "..."`` in ``psdk.toml``) when it is left out. Each
provider reads its own settings (``E2B_API_KEY``, ``CUBE_API_URL``, ``DAYTONA_API_KEY``
...). Nothing else changes between local, docker, e2b, cube and daytona.

So that it runs offline, the agent's model is a scripted stand-in that asks for three
tool calls (write a file, count its words with a command, read it back) and then
answers; put a real chat model in its place and nothing else changes. Run it::

    python examples/deepagents_agent.py --provider local --text "one two three"

It prints one JSON object: the provider, what each tool returned, the final answer.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from typing import Any

from deepagents import create_deep_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from provider_sdk_deepagents import ProviderSandbox

NOTES = "/tmp/agent/notes.txt"


class ScriptedModel(GenericFakeChatModel):
    """A chat model that answers with the next of its scripted messages."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


def script(text: str) -> Iterator[BaseMessage]:
    """What the stand-in model says, turn by turn."""
    def call(name: str, args: dict[str, Any]) -> AIMessage:
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": name}])

    yield call("write_file", {"file_path": NOTES, "content": text})
    yield call("execute", {"command": f"wc -w < {NOTES}"})
    yield call("read_file", {"file_path": NOTES})
    yield AIMessage(content="Done: the notes are written and counted.")


def main(provider: str | None, text: str) -> None:
    backend = ProviderSandbox.create(provider=provider)  # the one field
    try:
        agent = create_deep_agent(model=ScriptedModel(messages=script(text)),
                                  backend=backend)
        state = agent.invoke({"messages": [
            {"role": "user", "content": f"Save these notes and count their words: {text}"}]})
        tools = {m.name: str(m.content) for m in state["messages"]
                 if isinstance(m, ToolMessage)}
        print(json.dumps({"provider": backend.provider.name, "sandbox": backend.id,
                          "tools": tools, "answer": state["messages"][-1].content}))
    finally:
        backend.delete()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", help="a provider's name (default: the configured one)")
    parser.add_argument("--text", default="sandboxes on every provider")
    args = parser.parse_args()
    main(args.provider, args.text)
