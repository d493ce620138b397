"""Inspect's portable sandbox checks (``inspect_ai.util._sandbox.self_check``), run
unmodified against ``PsdkSandboxEnvironment``, and the helpers their module uses.

The module imports the checks and defines its ``psdk_sample`` fixture (one sample per
provider); the ``sandbox_env`` fixture here hands each check that sample's default
sandbox, and marks as a strict known failure a check that needs a capability the
provider does not declare, with a reason naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai.util import ExecCompleted, ExecStdout, SandboxEnvironment
from provider_sdk_inspect import PsdkConfig, PsdkSandboxEnvironment

from provider_sdk import Capability

#: Checks that need a capability, by name.
NEEDS: Mapping[str, Capability] = {
    "test_exec_as_user": Capability.EXEC_USER,
}

TASK = "psdk-self-check"


def known_failure(check: str, provider: str,
                  capabilities: frozenset[Capability]) -> str | None:
    """Why ``check`` cannot pass on ``provider``, or ``None`` if it must."""
    needed = NEEDS.get(check)
    if needed is not None and needed not in capabilities:
        return f"provider {provider!r} does not declare {needed.value!r}"
    return None


async def sample_environments(config: PsdkConfig) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    """The task's and one sample's lifecycle around the caller's checks."""
    await PsdkSandboxEnvironment.task_init(TASK, config)
    environments = await PsdkSandboxEnvironment.sample_init(TASK, config, {})
    try:
        yield environments
    finally:
        await PsdkSandboxEnvironment.sample_cleanup(TASK, config, environments, False)
        await PsdkSandboxEnvironment.task_cleanup(TASK, config, True)


def sandbox_env_fixture() -> Callable[..., Any]:
    """The ``sandbox_env`` fixture the checks take, over the module's ``psdk_sample``."""

    @pytest.fixture
    def sandbox_env(request: pytest.FixtureRequest,
                    psdk_sample: dict[str, SandboxEnvironment]) -> SandboxEnvironment:
        env = psdk_sample["default"].as_type(PsdkSandboxEnvironment)
        provider = env.sandbox.provider
        reason = known_failure(request.node.originalname, provider.name,
                               provider.capabilities)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        return env

    return sandbox_env


async def emulated_sample(name: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    """A sample on the ``e2b`` or ``cube`` provider, against that emulator (started for
    the module, backed by the local provider); the provider's settings, key included,
    come from the environment, and the config names only the provider."""
    from provider_emulators import emulator

    with emulator(name, tmp_path_factory.mktemp(f"inspect-{name}-backend")) as running, \
            pytest.MonkeyPatch.context() as patch:
        for key, value in running.environment().items():
            patch.setenv(key, value)
        async for environments in sample_environments(PsdkConfig(provider=name)):
            yield environments


# What the environment adds beyond Inspect's checks, on every provider: a module imports
# these beside the checks, and they take its ``sandbox_env``.

async def test_psdk_exec_remote_streams_output_and_kill_ends_it(
        sandbox_env: SandboxEnvironment) -> None:
    """``exec_remote`` streams a background process's output as it comes; ``kill()``
    ends it with nothing more to read; a finished one reports its exit status."""
    process = await sandbox_env.exec_remote(["sh", "-c", "echo started; sleep 300"])
    assert await process.__anext__() == ExecStdout(data="started\n")
    await process.kill()
    assert [event async for event in process] == []
    done = await sandbox_env.exec_remote(["sh", "-c", "printf 'a\\nb\\n'; exit 4"])
    events = [event async for event in done]
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "a\nb\n"
    assert events[-1] == ExecCompleted(exit_code=4)


async def test_psdk_connection_where_a_shell_command_can_reach_the_provider(
        sandbox_env: SandboxEnvironment) -> None:
    """``connection()`` is a ``psdk exec -i`` shell on local and docker, whose commands
    run in this sandbox; elsewhere it says why not."""
    env = sandbox_env.as_type(PsdkSandboxEnvironment)
    if env.sandbox.provider.name not in ("local", "docker"):
        with pytest.raises(NotImplementedError, match="environment"):
            await env.connection()
        return
    connection = await env.connection()
    await env.write_file("/tmp/psdk-connection.txt", "through the shell\n")
    bin_dir = Path(sys.executable).parent
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        ["/bin/sh", "-c", connection.command], input="cat /tmp/psdk-connection.txt\n",
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True, text=True, timeout=60, check=False))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "through the shell\n"
