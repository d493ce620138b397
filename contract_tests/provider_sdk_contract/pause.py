"""Contract: pause and resume (``pause``, ``pause.memory``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import SandboxNotFound, SandboxNotRunning
from provider_sdk.models import SandboxState
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import eventually

# Counts forever in shell memory; publishes each value atomically.
_COUNTER = ('i=0; while :; do i=$((i+1)); echo "$i" > /tmp/psdk-counter.new && '
            'mv -f /tmp/psdk-counter.new /tmp/psdk-counter; sleep 0.05; done')


async def _counter(sandbox: Sandbox) -> int:
    return int((await sandbox.files.read_text("/tmp/psdk-counter")).strip() or 0)


async def counts_on_across(sandbox: Sandbox, pause: Callable[[], Awaitable[None]]) -> None:
    """Start a counter in the sandbox, let ``pause`` pause it, resume it: the counter goes
    on from its value, so memory was kept, not just files."""
    process = await sandbox.start(["bash", "-c", _COUNTER])

    async def counted_enough() -> bool:
        return await sandbox.files.exists("/tmp/psdk-counter") and \
            await _counter(sandbox) >= 10

    await eventually(counted_enough, what="the counter reaching 10")
    await pause()
    await sandbox.resume()
    resumed_at = await _counter(sandbox)
    assert resumed_at >= 10, f"counter restarted: {resumed_at}"

    async def counting_on() -> bool:
        return await _counter(sandbox) > resumed_at

    await eventually(counting_on, what=f"the counter passing {resumed_at}")
    await process.kill()


class PauseContract(ContractBase):
    """Pause and resume: state, files kept, commands refused while paused, memory kept."""

    @requires(Capability.PAUSE)
    async def test_pause_reports_the_paused_state(self, sandbox: Sandbox) -> None:
        """After ``pause`` the sandbox is reported paused; after ``resume``, running."""
        assert (await sandbox.pause()).state == SandboxState.PAUSED
        assert (await sandbox.provider.get_info(sandbox.id)).state == SandboxState.PAUSED
        assert (await sandbox.resume()).state == SandboxState.RUNNING

    @requires(Capability.PAUSE)
    async def test_pause_keeps_files(self, sandbox: Sandbox) -> None:
        """Files written before a pause are there after resume."""
        await sandbox.files.write("psdk-pause/kept.bin", b"\x00kept\xff")
        await sandbox.pause()
        await sandbox.resume()
        assert await sandbox.files.read("psdk-pause/kept.bin") == b"\x00kept\xff"

    @requires(Capability.PAUSE)
    async def test_exec_while_paused_raises_sandbox_not_running(self, sandbox: Sandbox) -> None:
        """A command sent to a paused sandbox raises SandboxNotRunning."""
        await sandbox.pause()
        with anyio.fail_after(60), pytest.raises(SandboxNotRunning):
            await sandbox.exec(["true"])

    @requires(Capability.PAUSE)
    async def test_resume_answers_commands_at_once(self, sandbox: Sandbox) -> None:
        """``resume`` returns only when commands run again."""
        await sandbox.pause()
        await sandbox.resume()
        assert (await sandbox.exec(["echo", "back"])).stdout == "back\n"

    @requires(Capability.PAUSE)
    async def test_connect_resumes_a_paused_sandbox(
            self, sandbox: Sandbox, second_provider: SandboxProvider) -> None:
        """``connect`` to a paused sandbox resumes it and commands run."""
        await sandbox.pause()
        again = await second_provider.connect(sandbox.id)
        assert again.info.state == SandboxState.RUNNING
        assert (await again.exec(["echo", "resumed"])).stdout == "resumed\n"

    @requires(Capability.PAUSE)
    async def test_kill_a_paused_sandbox(self, factory: Factory) -> None:
        """A paused sandbox can be killed; it is then gone."""
        sandbox = await factory.sandbox()
        await sandbox.pause()
        with anyio.fail_after(30):
            await sandbox.kill()
        with pytest.raises((SandboxNotRunning, SandboxNotFound)):
            await sandbox.exec(["true"])

    @requires(Capability.PAUSE_MEMORY, Capability.PROCESS_BACKGROUND)
    async def test_pause_memory_keeps_a_process_counting(self, sandbox: Sandbox) -> None:
        """A counter running before the pause continues from its value after resume."""
        await counts_on_across(sandbox, sandbox.pause)
