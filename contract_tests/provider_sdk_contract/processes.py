"""Contract: background processes (``process.background``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import ProcessNotFound
from provider_sdk.provider import ProcessEvent, ProcessExit, ProcessOutput, SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import MARK_VAR, eventually, marked_processes, new_marker

_TREE = '(exec -a "$1" sleep 300) & (exec -a "$1" sleep 300) & echo started; wait'

# Far above any pid a fresh sandbox uses, and above the default pid_max of 32768.
_UNKNOWN_PID = 4_000_000


async def _aclose(events: AsyncIterator[ProcessEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


class ProcessContract(ContractBase):
    """Background processes: start, stream, stdin, wait, kill, reattach."""

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_start_returns_a_process_with_a_pid(self, sandbox: Sandbox) -> None:
        """``start`` returns at once with a positive pid while the process runs."""
        with anyio.fail_after(30):
            process = await sandbox.start(["sleep", "300"])
        try:
            assert isinstance(process.pid, int)
            assert process.pid > 0
        finally:
            await process.kill()

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_events_stream_output_before_exit(self, sandbox: Sandbox) -> None:
        """``events()`` yields output while the process is still running."""
        process = await sandbox.start(["sh", "-c", "echo ready; exec sleep 300"])
        events = process.events()
        seen = b""
        try:
            with anyio.fail_after(30):
                async for event in events:
                    assert not isinstance(event, ProcessExit), "exited before its output"
                    assert isinstance(event, ProcessOutput)
                    assert event.stream == "stdout"
                    seen += event.data
                    if b"ready\n" in seen:
                        break
        finally:
            await _aclose(events)
            await process.kill()
        assert seen == b"ready\n"

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_stdin_write_then_close(self, sandbox: Sandbox) -> None:
        """Writes to stdin reach the process; closing stdin gives it end of file."""
        process = await sandbox.start(["cat"])
        await process.write_stdin(b"hello ")
        await process.write_stdin("wörld\n")
        await process.close_stdin()
        with anyio.fail_after(30):
            result = await process.wait()
        assert (result.exit_code, result.stdout) == (0, "hello wörld\n"), result

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_started_without_stdin_reads_end_of_file(
            self, sandbox: Sandbox) -> None:
        """``start(stdin=False)``: the process reads end of file at once, with no
        ``close_stdin``."""
        process = await sandbox.start(["/bin/sh", "-c", "cat; echo done"], stdin=False)
        with anyio.fail_after(30):
            result = await process.wait()
        assert (result.exit_code, result.stdout) == (0, "done\n"), result

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_wait_returns_exit_code_and_output(self, sandbox: Sandbox) -> None:
        """``wait`` returns the exit code with stdout and stderr kept apart."""
        process = await sandbox.start(["sh", "-c", "echo out; echo err >&2; exit 5"])
        with anyio.fail_after(30):
            result = await process.wait()
        assert (result.exit_code, result.stdout, result.stderr) == (5, "out\n", "err\n")

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_gets_env_and_cwd(self, sandbox: Sandbox) -> None:
        """``start`` passes ``env`` (PATH included) and ``cwd`` to the process."""
        process = await sandbox.start(
            ["sh", "-c", 'printf "%s|%s|%s" "$PSDK_BG" "$PATH" "$PWD"'],
            env={"PSDK_BG": "b g", "PATH": "/opt/psdk-bg:/usr/bin:/bin"}, cwd="/tmp")
        with anyio.fail_after(30):
            result = await process.wait()
        assert result.stdout == "b g|/opt/psdk-bg:/usr/bin:/bin|/tmp"

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_kill_kills_the_whole_tree(self, sandbox: Sandbox) -> None:
        """Killing a process kills everything it started."""
        marker = new_marker("bgtree")
        process = await sandbox.start(["bash", "-c", _TREE, "psdk-tree", marker],
                                      env={MARK_VAR: marker})

        async def running() -> bool:
            return len(await marked_processes(sandbox, marker)) >= 3

        async def none_left() -> bool:
            return await marked_processes(sandbox, marker) == []

        await eventually(running, what="the process and its two children running")
        await process.kill()
        await eventually(none_left, what=f"no process marked {marker}", timeout=10)

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_wait_returns_after_kill(self, sandbox: Sandbox) -> None:
        """``wait`` on a killed process returns, with a failing exit code."""
        process = await sandbox.start(["sleep", "300"])
        await process.kill()
        with anyio.fail_after(30):
            result = await process.wait()
        assert result.exit_code != 0

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_process_reattach_by_pid_from_a_second_handle(
            self, sandbox: Sandbox, second_provider: SandboxProvider) -> None:
        """Another provider instance reattaches by pid: writes stdin, waits, gets the exit."""
        process = await sandbox.start(["sh", "-c", 'read line; echo "got:$line"; exit 4'])
        other = await second_provider.connect(sandbox.id)
        again = other.process(process.pid)
        await again.write_stdin(b"psdk\n")
        with anyio.fail_after(30):
            result = await again.wait()
        assert result.exit_code == 4
        assert "got:psdk\n" in result.stdout

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_unknown_pid_raises_process_not_found(self, sandbox: Sandbox) -> None:
        """Waiting on a pid that does not exist raises ProcessNotFound."""
        with anyio.fail_after(30), pytest.raises(ProcessNotFound):
            await sandbox.process(_UNKNOWN_PID).wait()
