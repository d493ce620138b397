"""A Daytona session on a backend that starts no background process runs its commands
one at a time in the backend's persistent shell, as tasks of the emulator's; closing
the session cancels what is still running."""

from __future__ import annotations

import anyio
import pytest
from memory_provider import MemoryProvider
from provider_sdk_emulators.daytona._sessions import CommandRecord, EmulatedSession

from provider_sdk.tasks import TaskOwner

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_commands_run_in_order_and_a_close_cancels_the_running_one() -> None:
    tasks = TaskOwner("test")
    async with MemoryProvider() as provider:
        sandbox = await provider.create()
        session = EmulatedSession(tasks, sandbox, await sandbox.shell())
        first = CommandRecord(id="1", command="echo one")
        second = CommandRecord(id="2", command="echo two")
        await session.submit(first)
        await session.submit(second)
        with anyio.fail_after(10):
            await second.done.wait()
        assert (first.exit_code, bytes(first.stdout)) == (0, b"one\n")
        assert (second.exit_code, bytes(second.stdout)) == (0, b"two\n")
        stuck = CommandRecord(id="3", command="sleep 300")
        await session.submit(stuck)
        await anyio.sleep(0.2)
        with anyio.fail_after(10):
            await session.close()
            await stuck.done.wait()
        assert stuck.exit_code == -1
    await tasks.aclose()
