"""The in-memory test provider runs the shared contract suite like every other provider.

The core's, the CLI's and the manager's tests stand on ``MemoryProvider``; the suite
holds it to what it declares. It runs on asyncio only: the local and Docker providers'
second runs on trio are what show that the SDK is anyio throughout. It is registered
here under a name of its own, while the module is collected (the suite reads its
capabilities then), so the ``memory`` fixture, which registers and forgets ``memory``
around each test, leaves it alone.
"""

from __future__ import annotations

import anyio
import pytest
from memory_provider import MemoryProvider
from provider_sdk_contract import ProviderContract
from provider_sdk_contract.support import eventually, new_marker, none_marked

from provider_sdk import registry
from provider_sdk.errors import CommandTimeout
from provider_sdk.sandbox import Sandbox

registry.register("memory-contract", MemoryProvider)


class TestMemoryContract(ProviderContract):
    provider_name = "memory-contract"

    async def test_a_timeout_kills_a_child_holding_the_output_of_a_command_that_ended(
            self, sandbox: Sandbox) -> None:
        """A detached child left holding stdout by a command that has already exited
        (so it is in no tree of the command's) dies when the call times out."""
        marker = new_marker("late-holder")
        script = ('( setsid /bin/bash -c \'exec -a "$0" sleep 300\' "$1" & ); '
                  'echo started')
        with anyio.fail_after(30), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["/bin/bash", "-c", script, "psdk-holder", marker],
                               timeout=1.5)
        assert "started" in caught.value.result.stdout

        async def gone() -> bool:
            return await none_marked(sandbox, marker)

        await eventually(gone, what=f"no process marked {marker} alive", timeout=10)

