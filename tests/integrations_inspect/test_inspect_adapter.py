"""What ``PsdkSandboxEnvironment`` adds beyond Inspect's portable checks, on the local
provider: its config, named sandboxes, users, limits, ``exec_remote`` and
``connection()``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from engines import require_bwrap
from inspect_ai.util import (
    ExecCompleted,
    ExecRemoteAwaitableOptions,
    ExecRemoteStreamingOptions,
    ExecStdout,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxUserUnsupportedError,
)
from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_scope
from inspect_ai.util._sandbox.limits import override_max_exec_output_size
from inspect_checks import sample_environments
from provider_sdk_contract.support import eventually
from provider_sdk_inspect import PsdkConfig, PsdkSandbox, PsdkSandboxEnvironment
from pydantic import ValidationError

from provider_sdk import open_provider
from provider_sdk.errors import NotFound
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_bwrap()
    return tmp_path_factory.mktemp("psdk-inspect-adapter")


@pytest.fixture(scope="module")
async def sample(home: Path) -> AsyncIterator[dict[str, SandboxEnvironment]]:
    config = PsdkConfig(provider="local", options={"home": str(home)}, env={"ROLE": "main"},
                        sandboxes={"helper": PsdkSandbox(env={"ROLE": "helper"},
                                                         metadata={"part": "helper"})})
    async for environments in sample_environments(config):
        yield environments


@pytest.fixture
def env(sample: dict[str, SandboxEnvironment]) -> PsdkSandboxEnvironment:
    return sample["default"].as_type(PsdkSandboxEnvironment)


# ------------------------------------------------------------------- config

def test_credentials_are_refused_in_the_config() -> None:
    with pytest.raises(ValidationError, match=r"api_key.*E2B_API_KEY"):
        PsdkConfig(provider="e2b", options={"api_key": "k"})


def test_a_spec_the_sdk_refuses_is_refused_when_the_config_is_built() -> None:
    with pytest.raises(ValidationError, match="cwd"):
        PsdkConfig(cwd="relative/dir")


def test_the_config_survives_the_eval_log() -> None:
    config = PsdkConfig(provider="docker", template="img:1", env={"A": "1"},
                        sandboxes={"db": PsdkSandbox(template="db:1")})
    again = PsdkSandboxEnvironment.config_deserialize(config.model_dump())
    assert again == config
    assert hash(again) == hash(config)
    assert again.specs()["db"].template == "db:1"
    assert again.specs()["db"].env == {"A": "1"}  # what it does not set, it inherits


def test_default_is_not_a_name_for_another_sandbox() -> None:
    with pytest.raises(ValidationError, match="default"):
        PsdkConfig(sandboxes={"default": PsdkSandbox()})


async def test_a_psdk_toml_path_is_a_config(tmp_path: Path, home: Path) -> None:
    toml = tmp_path / "psdk.toml"
    toml.write_text(f'provider = "local"\n\n[providers.local]\nhome = "{home}"\n')
    envs = await PsdkSandboxEnvironment.sample_init("toml", str(toml), {})
    try:
        env = envs["default"].as_type(PsdkSandboxEnvironment)
        assert env.sandbox.provider.name == "local"
        assert env.sandbox.info.extra["home"] == str(home)
    finally:
        await PsdkSandboxEnvironment.sample_cleanup("toml", str(toml), envs, False)
    assert env.sandbox.info.state == SandboxState.KILLED


# ---------------------------------------------------------------- lifecycle

async def test_named_sandboxes_are_separate_and_default_comes_first(
        sample: dict[str, SandboxEnvironment]) -> None:
    assert list(sample) == ["default", "helper"]
    main, helper = (sample[n].as_type(PsdkSandboxEnvironment) for n in sample)
    assert main.sandbox.id != helper.sandbox.id
    assert (await main.exec(["sh", "-c", "echo $ROLE"])).stdout == "main\n"
    assert (await helper.exec(["sh", "-c", "echo $ROLE"])).stdout == "helper\n"
    await main.write_file("only-here.txt", "x")
    assert not (await helper.exec(["test", "-e", "only-here.txt"])).success
    assert helper.sandbox.metadata["part"] == "helper"
    assert helper.sandbox.metadata["inspect-sandbox"] == "psdk"


async def test_sample_cleanup_kills_every_sandbox_of_the_sample(home: Path) -> None:
    config = PsdkConfig(provider="local", options={"home": str(home)},
                        sandboxes={"b": PsdkSandbox()})
    envs = await PsdkSandboxEnvironment.sample_init("t", config, {})
    await PsdkSandboxEnvironment.sample_cleanup("t", config, envs, True)
    ids = {e.as_type(PsdkSandboxEnvironment).sandbox.id for e in envs.values()}
    assert len(ids) == 2
    assert not ids & await _live_ids(home)


async def _live_ids(home: Path) -> set[str]:
    async with open_provider("local", home=str(home)) as provider:
        return {i.id for i in await provider.list(metadata={"inspect-sandbox": "psdk"})
                if i.state != SandboxState.KILLED}


async def test_a_sandbox_that_cannot_be_made_takes_the_others_with_it(home: Path) -> None:
    config = PsdkConfig(provider="local", options={"home": str(home)},
                        sandboxes={"broken": PsdkSandbox(template="no-such-template")})
    before = await _live_ids(home)
    with pytest.raises(NotFound):
        await PsdkSandboxEnvironment.sample_init("t", config, {})
    assert await _live_ids(home) == before


async def test_task_cleanup_kills_what_samples_left_unless_told_not_to(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Within one eval batch (Inspect's lifecycle scope): the module's own sample,
    made outside it, is not this batch's and stays."""
    config = PsdkConfig(provider="local", options={"home": str(home)})
    outside = await _live_ids(home)
    assert outside  # the module's sample
    with sandbox_lifecycle_scope():
        envs = await PsdkSandboxEnvironment.sample_init("t", config, {})
        left = envs["default"].as_type(PsdkSandboxEnvironment).sandbox.id
        await PsdkSandboxEnvironment.task_cleanup("t", config, False)
        assert await _live_ids(home) == outside | {left}
        assert f"inspect sandbox cleanup psdk {left}" in capsys.readouterr().out
        await PsdkSandboxEnvironment.task_cleanup("t", config, True)
    assert await _live_ids(home) == outside


# --------------------------------------------------------------------- exec

async def test_a_user_the_provider_cannot_run_as_names_the_capability(
        env: PsdkSandboxEnvironment) -> None:
    with pytest.raises(SandboxUserUnsupportedError, match=r"exec\.user"):
        await env.exec(["whoami"], user="root")


async def test_output_past_inspects_limit_is_an_error(env: PsdkSandboxEnvironment) -> None:
    with override_max_exec_output_size(1024), \
            pytest.raises(OutputLimitExceededError, match="1 KiB") as caught:
        await env.exec(["sh", "-c", "head -c 4096 /dev/zero | tr '\\0' a"])
    assert caught.value.truncated_output == "a" * 1024


async def test_a_large_command_leaves_no_file_behind(env: PsdkSandboxEnvironment) -> None:
    args = ["x" * 1024] * 100
    result = await env.exec(["printf", "%s", *args])
    assert result.stdout == "".join(args)
    left = await env.exec(["sh", "-c", "ls -a /tmp | grep -c psdk-argv || true"])
    assert left.stdout.strip() == "0"


# -------------------------------------------------------------- exec_remote

async def test_exec_remote_streams_output_then_the_exit_status(
        env: PsdkSandboxEnvironment) -> None:
    process = await env.exec_remote(["sh", "-c", "echo one; echo two >&2; exit 3"])
    events = [event async for event in process]
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "one\n"
    assert events[-1] == ExecCompleted(exit_code=3)


async def test_exec_remote_kill_ends_the_process_and_its_children(
        env: PsdkSandboxEnvironment) -> None:
    process = await env.exec_remote(
        ["sh", "-c", "sleep 300 & echo started; sleep 301; :"])
    first = await process.__anext__()
    assert first == ExecStdout(data="started\n")
    await process.kill()
    assert [event async for event in process] == []

    async def gone() -> bool:
        found = await env.exec(["sh", "-c", "ps -eo args | grep -c '^sleep 30[01]'"])
        return found.stdout.strip() == "0"

    await eventually(gone, what="the killed process tree to be gone", timeout=10)


async def test_exec_remote_stdin_stays_open_when_asked(env: PsdkSandboxEnvironment) -> None:
    process = await env.exec_remote(["cat"], ExecRemoteStreamingOptions(stdin_open=True))
    await process.write_stdin("hello ")
    await process.write_stdin(b"world")
    await process.close_stdin()
    events = [event async for event in process]
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "hello world"
    assert events[-1] == ExecCompleted(exit_code=0)


async def test_exec_remote_awaited_times_out(env: PsdkSandboxEnvironment) -> None:
    with pytest.raises(TimeoutError):
        await env.exec_remote(["sleep", "30"], ExecRemoteAwaitableOptions(timeout=1),
                              stream=False)
    result = await env.exec_remote(["sh", "-c", "echo done"],
                                   ExecRemoteAwaitableOptions(input=""), stream=False)
    assert (result.success, result.stdout) == (True, "done\n")


# --------------------------------------------------------------- connection

async def test_connection_is_a_psdk_exec_shell(env: PsdkSandboxEnvironment) -> None:
    connection = await env.connection()
    assert connection.type == "psdk"
    await env.write_file("seen.txt", "from the shell\n")
    bin_dir = Path(sys.executable).parent
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        ["/bin/sh", "-c", connection.command], input="cat seen.txt; echo $ROLE\n",
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True, text=True, timeout=60, check=False))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "from the shell\nmain\n"
