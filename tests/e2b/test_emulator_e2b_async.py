"""The unmodified ``e2b`` SDK's async API works against the emulator's E2B flavor."""

from __future__ import annotations

import anyio
import pytest
from e2b import AsyncSandbox, CommandExitException, SandboxQuery, SandboxState
from e2b.exceptions import SandboxNotRunningException

from provider_sdk.emulators import RunningEmulator

pytestmark = pytest.mark.anyio


async def test_create_run_and_kill(e2b_emulator: RunningEmulator) -> None:
    sandbox = await AsyncSandbox.create(metadata={"suite": "async"}, envs={"FOO": "bar"})
    try:
        result = await sandbox.commands.run("echo $FOO $BAZ", envs={"BAZ": "qux"})
        assert result.stdout == "bar qux\n"
        info = await sandbox.get_info()
        assert info.metadata == {"suite": "async"}
        assert info.state == SandboxState.RUNNING
    finally:
        assert await sandbox.kill() is True
    assert await AsyncSandbox.kill(sandbox.sandbox_id) is False


async def test_background_stdin_and_kill(e2b_emulator: RunningEmulator) -> None:
    async with await AsyncSandbox.create() as sandbox:
        reader = await sandbox.commands.run("read a; echo got:$a", background=True, stdin=True)
        await sandbox.commands.send_stdin(reader.pid, "one\n")
        assert (await reader.wait()).stdout == "got:one\n"
        sleeper = await sandbox.commands.run("sleep 60", background=True)
        assert await sandbox.commands.kill(sleeper.pid) is True
        with pytest.raises(CommandExitException):
            await sleeper.wait()


async def test_binary_files_and_directories(e2b_emulator: RunningEmulator) -> None:
    async with await AsyncSandbox.create() as sandbox:
        data = b"\x00\xff" * 5000 + b"\r\n\x1b"
        await sandbox.files.write("/tmp/bin/data", data)
        assert bytes(await sandbox.files.read("/tmp/bin/data", format="bytes")) == data
        assert await sandbox.files.make_dir("/tmp/bin/dir") is True
        await sandbox.files.rename("/tmp/bin/data", "/tmp/bin/dir/data")
        names = [e.name for e in await sandbox.files.list("/tmp/bin", depth=2)]
        assert sorted(names) == ["data", "dir"]
        await sandbox.files.remove("/tmp/bin/dir")
        assert await sandbox.files.exists("/tmp/bin/dir") is False


async def test_watch_dir_reports_new_files(e2b_emulator: RunningEmulator) -> None:
    async with await AsyncSandbox.create() as sandbox:
        await sandbox.files.make_dir("/tmp/watched")
        events: list[str] = []
        seen = anyio.Event()

        def on_event(event: object) -> None:
            events.append(getattr(event, "name", ""))
            seen.set()

        handle = await sandbox.files.watch_dir("/tmp/watched", on_event=on_event)
        await sandbox.files.write("/tmp/watched/new.txt", "x")
        with anyio.fail_after(10):
            await seen.wait()
        await handle.stop()
        assert "new.txt" in events


async def test_pause_refuses_data_plane_then_connect_resumes(
        e2b_emulator: RunningEmulator) -> None:
    sandbox = await AsyncSandbox.create()
    try:
        await sandbox.files.write("/tmp/state", "before")
        assert await sandbox.pause() is True
        with pytest.raises(SandboxNotRunningException):
            await sandbox.commands.run("true")
        paused = await AsyncSandbox.list(
            query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert [s.sandbox_id for s in paused] == [sandbox.sandbox_id]
        resumed = await AsyncSandbox.connect(sandbox.sandbox_id)
        assert await resumed.files.read("/tmp/state") == "before"
        assert (await resumed.get_info()).state == SandboxState.RUNNING
    finally:
        await sandbox.kill()


async def test_list_by_metadata(e2b_emulator: RunningEmulator) -> None:
    async with await AsyncSandbox.create(metadata={"team": "a"}) as mine, \
            await AsyncSandbox.create(metadata={"team": "b"}):
        found = await AsyncSandbox.list(query=SandboxQuery(metadata={"team": "a"})).next_items()
        assert [s.sandbox_id for s in found] == [mine.sandbox_id]


async def test_kill_signals_the_process_not_its_children(e2b_emulator: RunningEmulator) -> None:
    # envd signals the command's own process: a child it put in the background survives,
    # and the command's stream still ends as soon as the process itself is dead.
    async with await AsyncSandbox.create() as sandbox:
        lines: list[str] = []
        started = anyio.Event()

        def on_stdout(text: str) -> None:
            lines.append(text)
            started.set()

        handle = await sandbox.commands.run("sleep 600 & echo $!; wait", background=True,
                                            on_stdout=on_stdout, timeout=0)
        with anyio.fail_after(10):
            await started.wait()
        child = int(lines[0])
        assert await sandbox.commands.kill(handle.pid) is True
        with anyio.fail_after(10), pytest.raises(CommandExitException) as killed:
            await handle.wait()
        assert killed.value.exit_code == -1
        alive = await sandbox.commands.run(f"kill -0 {child} && echo alive")
        assert alive.stdout == "alive\n"


async def test_many_sandboxes_at_once(e2b_emulator: RunningEmulator) -> None:
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        async with await AsyncSandbox.create(metadata={"batch": "b"}) as sandbox:
            await sandbox.files.write(f"/tmp/{i}", str(i))
            results[i] = (await sandbox.commands.run(f"cat /tmp/{i}")).stdout

    # One create first: the local backend makes its shared /etc on the first create,
    # and two first creates at once in a fresh home race on it.
    await (await AsyncSandbox.create()).kill()
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
    assert results == {i: str(i) for i in range(8)}
    assert await AsyncSandbox.list(query=SandboxQuery(metadata={"batch": "b"})).next_items() \
        == []
