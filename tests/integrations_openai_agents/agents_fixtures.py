"""A ``ProviderSandboxClient`` on each provider, and the scripted model steps the tests
drive a ``SandboxAgent`` with.

Local runs on bubblewrap, Docker where an engine answers; E2B, Cube and Daytona run
through their unmodified SDKs against their emulators (``tests/e2b``'s and
``tests/daytona``'s), backed by the local provider. Without what a provider needs, its
tests skip saying why, except under CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents import RunConfig
from agents.items import TResponseOutputItem
from agents.sandbox import LocalSnapshotSpec, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Shell
from agents.sandbox.capabilities.tools import ExecCommandTool
from agents.testing import ModelCall, function_call
from engines import require_bwrap, require_docker
from provider_sdk_openai_agents import ProviderSandboxClientOptions

PROVIDERS = ["local", "docker", "e2b", "cube", "daytona"]


@contextlib.contextmanager
def provider_setup(provider: str, tmp_path: Path) -> Iterator[tuple[dict[str, Any],
                                                                     dict[str, str]]]:
    """``ProviderSandboxClient`` options for ``provider``, and the environment that a
    process of its own needs to reach the same provider (its emulator running, if it is
    a vendor's, on 127.0.0.1)."""
    if provider == "docker":
        require_docker()
        yield {}, {}
        return
    require_bwrap()
    if provider == "local":
        home = tmp_path / "psdk-home"
        yield {"home": str(home)}, {"PSDK_HOME": str(home)}
    elif provider == "daytona":
        from daytona_emulator_fixtures import provider_options, running

        yield provider_options(), running().environment()
    else:
        from provider_emulators import emulator
        from provider_emulators import provider_options as emulated_options

        with emulator(provider, tmp_path / "backend") as running_emulator:
            yield emulated_options(running_emulator), running_emulator.environment()


def last_tool_output(call: ModelCall) -> str:
    """The output of the last tool call the model was given."""
    outputs = [item for item in call.input
               if isinstance(item, dict) and item.get("type") == "function_call_output"]
    assert outputs, "the model was given no tool output"
    output = outputs[-1]["output"]
    return output if isinstance(output, str) else str(output)


def exec_step(cmd: str, call_id: str, **more: Any) -> list[TResponseOutputItem]:
    """A model turn that runs ``cmd`` with the ``exec_command`` tool."""
    return [function_call("exec_command", {"cmd": cmd, **more}, call_id=call_id)]


def write_stdin_to_last(chars: str, call_id: str) -> Any:
    """A model turn (a responder) that types ``chars`` into the interactive process the
    previous turn started, by the session id its output named."""
    def respond(call: ModelCall) -> list[TResponseOutputItem]:
        found = re.search(r"Process running with session ID (\d+)", last_tool_output(call))
        assert found, last_tool_output(call)
        return [function_call("write_stdin", {"session_id": int(found[1]), "chars": chars,
                                              "yield_time_ms": 2000}, call_id=call_id)]
    return {"responder": respond}


async def _gated(_context: Any, params: dict[str, Any], _call_id: str) -> bool:
    return "cat notes.txt" in str(params.get("cmd", ""))


def _gate(tools: Any) -> None:
    """``exec_command`` that asks for approval before it reads the notes."""
    tools.exec_command = ExecCommandTool(session=tools.exec_command.session,
                                         user=tools.exec_command.user, needs_approval=_gated,
                                         workspace_scope=tools.workspace_scope)


def resumable_agent(model: Any) -> SandboxAgent[Any]:
    """The agent of the pause and resume tests, the same in every process: its shell
    stops the run for approval before ``cat notes.txt``."""
    return SandboxAgent(name="resumable", model=model, instructions="keep notes",
                        capabilities=[Shell(configure_tools=_gate)])


def resumable_run_config(client: Any, on_exit: str, snapshots: Path) -> RunConfig:
    """The pause and resume tests' run configuration: the workspace is persisted into a
    local snapshot when a run stops, the sandbox becomes what ``on_exit`` says."""
    return RunConfig(tracing_disabled=True, sandbox=SandboxRunConfig(
        client=client, options=ProviderSandboxClientOptions(on_exit=on_exit),  # type: ignore[arg-type]
        snapshot=LocalSnapshotSpec(base_path=snapshots)))
