"""The emulator's E2B flavor behaves as envd does where the ``e2b`` SDK's async API can
tell; each test drives the unmodified SDK and checks one behaviour of the real service."""

from __future__ import annotations

import anyio
import pytest
from e2b import AsyncSandbox
from e2b.exceptions import TimeoutException

from provider_sdk.emulators import RunningEmulator

pytestmark = pytest.mark.anyio


async def _gone(sandbox: AsyncSandbox, pid: int) -> None:
    with anyio.fail_after(10):
        while True:  # a poll with a deadline: the process list has no event to wait on
            if pid not in [p.pid for p in await sandbox.commands.list()]:
                return
            await anyio.sleep(0.1)


async def test_command_past_its_deadline_ends_with_deadline_exceeded(
        e2b_emulator: RunningEmulator) -> None:
    # envd ends the stream with the request context's error, deadline_exceeded, which
    # the SDK raises as TimeoutException; the process is killed too.
    async with await AsyncSandbox.create() as sandbox:
        with anyio.fail_after(20), pytest.raises(TimeoutException, match="deadline"):
            await sandbox.commands.run("sleep 60", timeout=1)
        handle = await sandbox.commands.run("sleep 60", background=True, timeout=1)
        with anyio.fail_after(20), pytest.raises(TimeoutException, match="deadline"):
            await handle.wait()
        await _gone(sandbox, handle.pid)


async def test_attached_stream_past_its_deadline_leaves_the_process_running(
        e2b_emulator: RunningEmulator) -> None:
    # A Connect's deadline ends that stream only: the process was not started by it.
    async with await AsyncSandbox.create() as sandbox:
        handle = await sandbox.commands.run("sleep 60", background=True, timeout=0)
        attached = await sandbox.commands.connect(handle.pid, timeout=1)
        with anyio.fail_after(20), pytest.raises(TimeoutException, match="deadline"):
            await attached.wait()
        assert handle.pid in [p.pid for p in await sandbox.commands.list()]
        assert await sandbox.commands.kill(handle.pid) is True
