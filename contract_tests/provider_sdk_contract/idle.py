"""Contract: what a backend does by itself with an idle or paused sandbox
(``lifecycle.auto_pause``, ``lifecycle.auto_resume``).

The idle window is a few seconds: the smallest a sandbox can be set up within (a file
written, a process started) on a loaded machine without the backend pausing it first.
Providers round it up where their backend counts coarser (Daytona counts whole
minutes). The tests then watch the sandbox by listing it (asking for its info counts as
activity on some backends) until the backend has acted, for at most
:attr:`IdleContract.idle_within` seconds.
"""

from __future__ import annotations

import secrets
from typing import ClassVar

from provider_sdk.capabilities import Capability
from provider_sdk.models import Lifecycle, SandboxState
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.pause import counts_on_across
from provider_sdk_contract.support import eventually

__all__ = ["IDLE_SECONDS", "IdleContract"]

IDLE_SECONDS = 3.0
"""The idle window of the sandboxes these tests let go idle."""

_FILE = "psdk-idle/kept.bin"


class IdleContract(ContractBase):
    """Auto-pause of an idle sandbox (files and, with ``pause.memory``, processes kept),
    and auto-resume of a paused one on the next request.

    ``idle_within``
        seconds past the idle window within which the backend must have paused an idle
        sandbox (default 120: a backend that counts in minutes takes one, plus its
        stop). A test class against an emulator whose minutes can be shortened sets
        them short instead of raising this.
    """

    idle_within: ClassVar[float] = 120.0
    """Seconds an idle sandbox may take to be paused by its backend."""

    async def _idle_sandbox(self, factory: Factory) -> tuple[Sandbox, str]:
        """A sandbox the backend pauses when idle, and a label only it carries."""
        label = secrets.token_hex(8)
        sandbox = await factory.sandbox(
            metadata={"psdk-idle": label},
            lifecycle=Lifecycle(idle_timeout=IDLE_SECONDS, on_idle="pause"))
        return sandbox, label

    async def _paused_by_the_backend(self, sandbox: Sandbox, label: str) -> None:
        """Wait for the backend to pause the sandbox, watching it by listing (asking
        for its info is activity on some backends, and would keep it awake)."""
        async def paused() -> bool:
            found = await sandbox.provider.list(metadata={"psdk-idle": label})
            states = [i.state for i in found if i.id == sandbox.id]
            assert states, f"the idle sandbox {sandbox.id} is gone, not paused"
            assert states[0] not in (SandboxState.KILLED, SandboxState.ERROR), \
                f"the idle sandbox was not paused: it is {states[0]}"
            return states[0] == SandboxState.PAUSED

        await eventually(paused, what=f"the backend pausing {sandbox.id} when idle",
                         timeout=IDLE_SECONDS + self.idle_within, interval=0.2)

    @requires(Capability.LIFECYCLE_AUTO_PAUSE)
    async def test_idle_sandbox_is_paused_with_its_files_kept(self, factory: Factory) -> None:
        """``Lifecycle(idle_timeout=T, on_idle="pause")``: left alone, the sandbox ends up
        paused, not killed; resumed, it has the files written before."""
        sandbox, label = await self._idle_sandbox(factory)
        data = secrets.token_bytes(4096)
        await sandbox.files.write(_FILE, data)
        await self._paused_by_the_backend(sandbox, label)
        assert (await sandbox.resume()).state == SandboxState.RUNNING
        assert await sandbox.files.read(_FILE) == data

    @requires(Capability.LIFECYCLE_AUTO_PAUSE, Capability.PAUSE_MEMORY,
              Capability.PROCESS_BACKGROUND)
    async def test_idle_sandbox_is_paused_with_its_memory_kept(self, factory: Factory) -> None:
        """A process counting in memory before the backend pauses the idle sandbox goes
        on counting from its value after resume: memory was kept, not just files."""
        sandbox, label = await self._idle_sandbox(factory)

        async def paused_by_the_backend() -> None:
            await self._paused_by_the_backend(sandbox, label)

        await counts_on_across(sandbox, paused_by_the_backend)

    @requires(Capability.LIFECYCLE_AUTO_RESUME)
    async def test_a_request_to_a_paused_sandbox_resumes_it(self, factory: Factory) -> None:
        """``Lifecycle(auto_resume=True)``: a command, then a file read, sent to the
        paused sandbox each resume it and are answered, files intact."""
        sandbox = await factory.sandbox(lifecycle=Lifecycle(on_idle="pause", auto_resume=True))
        token = secrets.token_hex(8)
        await sandbox.files.write(_FILE, token)
        provider = sandbox.provider

        assert (await sandbox.pause()).state == SandboxState.PAUSED
        result = await sandbox.exec(["cat", _FILE])
        assert (result.exit_code, result.stdout) == (0, token)
        assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING

        assert (await sandbox.pause()).state == SandboxState.PAUSED
        assert await sandbox.files.read_text(_FILE) == token
        assert (await provider.get_info(sandbox.id)).state == SandboxState.RUNNING
