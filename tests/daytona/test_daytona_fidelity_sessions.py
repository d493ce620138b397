"""The unmodified ``daytona`` SDK sends input to session commands in the emulator as
Daytona's daemon takes it (to an asynchronous command's stdin, echoed into its output),
and changes the daemon's environment for what it spawns next."""

from __future__ import annotations

import asyncio
import time

import pytest
from daytona import (
    AsyncDaytona,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaCommandAlreadyCompletedError,
    Sandbox,
    SessionExecuteRequest,
)


def _finished(sandbox: Sandbox, session: str, command: str) -> int:
    deadline = time.monotonic() + 30
    while (code := sandbox.process.get_session_command(session, command).exit_code) is None:
        assert time.monotonic() < deadline, "the command never finished"
        time.sleep(0.05)
    return code


def test_input_reaches_an_async_command_and_is_echoed(sandbox: Sandbox) -> None:
    sandbox.process.create_session("input-echo")
    started = sandbox.process.execute_session_command("input-echo", SessionExecuteRequest(
        command='read name; read age; echo "hello $name, $age"', run_async=True))
    sandbox.process.send_session_command_input("input-echo", started.cmd_id, "ada")
    sandbox.process.send_session_command_input("input-echo", started.cmd_id, "36\n")
    assert _finished(sandbox, "input-echo", started.cmd_id) == 0
    logs = sandbox.process.get_session_command_logs("input-echo", started.cmd_id)
    assert logs.stdout == "ada\n36\nhello ada, 36\n"


def test_input_is_not_echoed_when_the_command_says_so(sandbox: Sandbox) -> None:
    sandbox.process.create_session("input-quiet")
    started = sandbox.process.execute_session_command("input-quiet", SessionExecuteRequest(
        command='read secret; echo "${#secret} characters"', run_async=True,
        suppress_input_echo=True))
    sandbox.process.send_session_command_input("input-quiet", started.cmd_id, "hunter2")
    assert _finished(sandbox, "input-quiet", started.cmd_id) == 0
    logs = sandbox.process.get_session_command_logs("input-quiet", started.cmd_id)
    assert logs.stdout == "7 characters\n"


def test_a_sync_command_reads_an_empty_stdin(sandbox: Sandbox) -> None:
    sandbox.process.create_session("input-sync")
    result = sandbox.process.execute_session_command("input-sync", SessionExecuteRequest(
        command='if read line; then echo "got $line"; else echo eof; fi'))
    assert result.stdout == "eof\n"


def test_input_to_a_finished_command_is_refused(sandbox: Sandbox) -> None:
    sandbox.process.create_session("input-done")
    started = sandbox.process.execute_session_command("input-done", SessionExecuteRequest(
        command="true", run_async=True))
    _finished(sandbox, "input-done", started.cmd_id)
    with pytest.raises(DaytonaCommandAlreadyCompletedError,
                       match="command has already completed with exit code 0"):
        sandbox.process.send_session_command_input("input-done", started.cmd_id, "late")


def test_the_session_keeps_state_around_a_command_that_read_input(sandbox: Sandbox) -> None:
    sandbox.process.create_session("input-state")
    started = sandbox.process.execute_session_command("input-state", SessionExecuteRequest(
        command="read value; export KEPT=$value", run_async=True))
    sandbox.process.send_session_command_input("input-state", started.cmd_id, "yes")
    _finished(sandbox, "input-state", started.cmd_id)
    after = sandbox.process.execute_session_command("input-state", SessionExecuteRequest(
        command='echo "$KEPT"'))
    assert after.stdout == "yes\n"


@pytest.mark.anyio
async def test_async_send_session_command_input(async_client: AsyncDaytona,
                                                sandbox: Sandbox) -> None:
    twin = await async_client.get(sandbox.id)
    await twin.process.create_session("input-async")
    started = await twin.process.execute_session_command("input-async", SessionExecuteRequest(
        command="read x; echo $((x * 2))", run_async=True))
    await twin.process.send_session_command_input("input-async", started.cmd_id, "21")
    deadline = time.monotonic() + 30
    while (await twin.process.get_session_command("input-async", started.cmd_id)
           ).exit_code is None:
        assert time.monotonic() < deadline, "the command never finished"
        await asyncio.sleep(0.05)
    logs = await twin.process.get_session_command_logs("input-async", started.cmd_id)
    assert logs.stdout == "21\n42\n"


def test_update_env_reaches_processes_spawned_after_it(sync_client: Daytona) -> None:
    """The daemon's environment changes for what it starts next (commands, code runs,
    sessions, the interpreter), not for what runs; a stop resets it."""
    sandbox = sync_client.create(CreateSandboxFromSnapshotParams(env_vars={"OLD": "old"}))
    try:
        sandbox.process.create_session("before")
        sandbox.update_env({"NEW": "new"}, unset=["OLD"])
        assert sandbox.process.exec('echo "${NEW-none} ${OLD-none}"').result == "new none\n"
        assert sandbox.process.exec('echo "$NEW"', env={"NEW": "mine"}).result == "mine\n"
        assert sandbox.process.code_run(
            'import os\nprint(os.environ.get("NEW"))').result == "new\n"
        assert sandbox.code_interpreter.run_code(
            'import os\nprint(os.environ.get("OLD", "none"))').stdout == "none\n"
        sandbox.process.create_session("after")
        command = SessionExecuteRequest(command='echo "${NEW-none}"')
        assert sandbox.process.execute_session_command("after", command).stdout == "new\n"
        assert sandbox.process.execute_session_command("before", command).stdout == "none\n"
        sandbox.stop()
        sandbox.start()
        assert sandbox.process.exec('echo "${NEW-none} ${OLD-none}"').result == "none old\n"
    finally:
        sync_client.delete(sandbox)
