"""Idle pause for providers without native auto-pause, resume on the next acquire, and
the owner's environment carried from an install phase to a run phase."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from provider_sdk.errors import Conflict, InvalidInput
from provider_sdk.local import LocalProvider
from provider_sdk.manager import MemoryStore, SandboxManager, SQLiteStore
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio


def _level(logs: list[dict[str, Any]]) -> str:
    done = [e for e in logs if e["event"] == "sandbox.manager.acquire.complete"]
    assert len(done) == 1, logs
    return str(done[0]["level"])


async def _state(provider: LocalProvider, sandbox_id: str) -> SandboxState:
    return (await provider.get_info(sandbox_id)).state


# ------------------------------------------------------------------- idle


async def test_an_idle_sandbox_is_paused_then_resumed_by_acquire(
        provider: LocalProvider, store: SQLiteStore) -> None:
    # Idle for a second: long enough that the sweep does not pause it again between
    # the acquire that resumes it and the checks after, however loaded the machine.
    async with SandboxManager(provider, store, idle_pause=1.0,
                              sweep_interval=0.05) as manager:
        sandbox = await manager.acquire("alice")
        await sandbox.exec("echo $$ > /tmp/pid; sleep 1000 >/dev/null 2>&1 &")
        # The sweep marks the binding paused, pauses the sandbox, then stops the cache
        # vouching for its handle: the pause's span ends after all three.
        with capture_logs() as sweep, anyio.fail_after(10):
            # The log is a list the sweep appends to: there is no event to wait on.
            while not any(e["event"] == "sandbox.manager.pause.complete"  # noqa: ASYNC110
                          for e in sweep):
                await anyio.sleep(0.05)
        binding = await store.get("alice")
        assert binding is not None
        assert binding.paused
        assert await _state(provider, sandbox.id) == SandboxState.PAUSED
        with capture_logs() as logs:
            again = await manager.acquire("alice")
        assert _level(logs) == "store"  # the cache no longer vouches for a paused one
        assert again.id == sandbox.id
        assert await _state(provider, sandbox.id) == SandboxState.RUNNING
        assert (await again.exec("pgrep -x sleep")).ok  # memory kept: still running
        binding = await store.get("alice")
        assert binding is not None
        assert not binding.paused


@pytest.mark.slow
async def test_a_sandbox_in_use_is_not_paused(provider: LocalProvider,
                                              store: SQLiteStore) -> None:
    async with SandboxManager(provider, store, idle_pause=1.0,
                              sweep_interval=0.05) as manager:
        sandbox = await manager.acquire("alice")
        # A command running longer than the idle time keeps it in use.
        with anyio.fail_after(10):
            result = await sandbox.exec("sleep 1.5; echo done")
        assert result.stdout == "done\n"
        assert await manager.pause_idle() == []  # just used
        assert await _state(provider, sandbox.id) == SandboxState.RUNNING


async def test_a_command_on_a_handle_paused_elsewhere_resumes_it(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    sandbox = await manager.acquire("alice")
    await (await provider.connect(sandbox.id)).pause()  # another replica paused it
    with capture_logs() as logs:
        result = await sandbox.exec("echo awake")
    assert result.stdout == "awake\n"
    assert "sandbox.manager.resume.complete" in [e["event"] for e in logs]
    assert await _state(provider, sandbox.id) == SandboxState.RUNNING


@pytest.mark.slow
async def test_a_long_command_in_one_replica_is_not_paused_by_anothers_sweep(
        provider: LocalProvider, store: SQLiteStore) -> None:
    other = SandboxManager(provider, store, idle_pause=1.0)  # another replica's sweeps
    async with SandboxManager(provider, store, idle_pause=1.0) as manager:
        sandbox = await manager.acquire("alice")
        paused: list[str] = []

        async def sweep_meanwhile() -> None:
            while True:
                paused.extend(await other.pause_idle())
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sweep_meanwhile)
            with anyio.fail_after(10):
                result = await sandbox.exec("sleep 3; echo done")
            tg.cancel_scope.cancel()
        assert result.stdout == "done\n"
        assert paused == []
    # Once it is idle (its lease runs out between idle_pause and half as long again
    # after its last use), the other replica does pause it.
    idle_since = anyio.current_time()
    with anyio.fail_after(5):
        while await other.pause_idle() != ["alice"]:  # noqa: ASYNC110 (a poll)
            await anyio.sleep(0.05)
    assert anyio.current_time() - idle_since >= 1.0
    assert await _state(provider, sandbox.id) == SandboxState.PAUSED


async def test_a_file_operation_on_a_handle_paused_elsewhere_resumes_it(
        provider: LocalProvider, store: SQLiteStore) -> None:
    sandbox = await SandboxManager(provider, store).acquire("alice")
    await (await provider.connect(sandbox.id)).pause()
    await sandbox.files.write("/home/user/a.txt", "written after a pause")
    assert await sandbox.files.read_text("/home/user/a.txt") == "written after a pause"
    assert await _state(provider, sandbox.id) == SandboxState.RUNNING


async def test_idle_pause_on_a_provider_with_native_auto_pause_is_left_to_it(
        provider: LocalProvider) -> None:
    manager = SandboxManager(provider, MemoryStore(), idle_pause=60)
    assert manager.spec.lifecycle.idle_timeout is None  # local has no auto_pause
    assert await manager.pause_idle() == []


# -------------------------------------------------------------------- env


async def test_env_set_in_the_install_phase_is_there_in_the_run_phase(
        provider: LocalProvider, store: SQLiteStore) -> None:
    install = await SandboxManager(provider, store).acquire("alice")
    assert (await install.exec("mkdir -p /home/user/venv/bin")).ok
    await install.set_env(VIRTUAL_ENV="/home/user/venv",
                          PATH="/home/user/venv/bin:/usr/bin:/bin")
    # The run phase: another manager (another process, after a restart).
    run = await SandboxManager(provider, store).acquire("alice")
    result = await run.exec('printf "%s|%s" "$VIRTUAL_ENV" "$PATH"')
    assert result.stdout == "/home/user/venv|/home/user/venv/bin:/usr/bin:/bin"
    assert run.env == {"VIRTUAL_ENV": "/home/user/venv",
                       "PATH": "/home/user/venv/bin:/usr/bin:/bin"}


async def test_a_calls_own_env_wins_over_the_owners(provider: LocalProvider,
                                                    store: SQLiteStore) -> None:
    sandbox = await SandboxManager(provider, store).acquire("alice")
    await sandbox.set_env({"MODE": "owner", "KEEP": "yes"})
    result = await sandbox.exec('echo "$MODE $KEEP"', env={"MODE": "call"})
    assert result.stdout == "call yes\n"


async def test_background_processes_and_shells_get_the_owners_env(
        provider: LocalProvider, store: SQLiteStore) -> None:
    sandbox = await SandboxManager(provider, store).acquire("alice")
    await sandbox.set_env(GREETING="hello")
    assert (await (await sandbox.start("echo $GREETING")).wait()).stdout == "hello\n"
    async with await sandbox.shell() as shell:
        assert (await shell.run("echo $GREETING")).stdout == "hello\n"


async def test_unset_env_removes_a_variable_for_later_calls(
        provider: LocalProvider, store: SQLiteStore) -> None:
    sandbox = await SandboxManager(provider, store).acquire("alice")
    await sandbox.set_env(A="1", B="2")
    await sandbox.unset_env("A", "NEVER_SET")
    again = await SandboxManager(provider, store).acquire("alice")
    assert (await again.exec('echo "${A-unset} $B"')).stdout == "unset 2\n"


async def test_the_owners_env_survives_a_replacement(provider: LocalProvider,
                                                     store: SQLiteStore) -> None:
    first = await SandboxManager(provider, store).acquire("alice")
    await first.set_env(TOKEN="abc")
    await provider.kill(first.id)
    again = await SandboxManager(provider, store).acquire("alice")
    assert again.id != first.id
    assert (await again.exec("echo $TOKEN")).stdout == "abc\n"


async def test_a_malformed_variable_is_refused_and_nothing_is_stored(
        provider: LocalProvider, store: SQLiteStore) -> None:
    sandbox = await SandboxManager(provider, store).acquire("alice")
    with pytest.raises(InvalidInput, match="1BAD"):
        await sandbox.set_env({"1BAD": "x"})
    binding = await store.get("alice")
    assert binding is not None
    assert dict(binding.env) == {}


async def test_setting_env_on_a_handle_whose_owner_moved_on_is_a_conflict(
        provider: LocalProvider, store: SQLiteStore) -> None:
    manager = SandboxManager(provider, store)
    old = await manager.acquire("alice")
    await manager.release("alice")
    await manager.acquire("alice")
    with pytest.raises(Conflict):
        await old.set_env(X="1")
