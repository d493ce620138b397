"""No wedges: a local sandbox whose agent was killed or stopped is reported truthfully,
every call to it ends in a typed error within a bound, and ``resume()`` brings it back
with its files; the idle kill cannot be forged from inside."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from provider_sdk import (
    Lifecycle,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxState,
    Unavailable,
)
from provider_sdk.local import LocalProvider, _cgroups, _launch
from provider_sdk.local._home import read_meta
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

BOUND = 20.0  # seconds: generous for a loaded machine, far below "hangs forever"


def _launched(provider: LocalProvider, sandbox: Sandbox) -> _launch.Launched:
    meta = read_meta(provider.home / "sandboxes" / sandbox.id)
    assert meta is not None
    return _launch.Launched(**meta["launch"])


def _agent_pid(provider: LocalProvider, sandbox: Sandbox) -> int:
    """The agent's host pid: the child of the sandbox's init (bubblewrap's) that runs
    the agent, found from the host's /proc."""
    init = _launched(provider, sandbox).init_pid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[stat.rindex(b")") + 2:].split()[1]) == init and b"agent.py" in cmdline:
            return int(name)
    raise AssertionError("no agent process found")


async def _state(provider: LocalProvider, sandbox: Sandbox) -> SandboxState:
    return (await provider.get_info(sandbox.id)).state


async def test_killed_agent_stops_the_sandbox_which_resumes(
        provider: LocalProvider) -> None:
    """Agent SIGKILLed from the host while a background process runs: the sandbox
    stops (nothing is left to end that process at a timeout, so it ends too; the state
    may read ``error`` for the moment this takes), exec raises a typed error at once,
    and resume() starts the sandbox again with its files."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/home/user/kept.txt", b"still here")
        await sandbox.start("sleep 600")
        os.kill(_agent_pid(provider, sandbox), signal.SIGKILL)
        with anyio.fail_after(BOUND):
            while await _state(provider, sandbox) != SandboxState.STOPPED:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            with pytest.raises(SandboxNotRunning, match="stopped"):
                await sandbox.exec("true")
        with anyio.fail_after(BOUND + 15):
            info = await sandbox.resume()
        assert info.state == SandboxState.RUNNING
        assert await sandbox.files.read("/home/user/kept.txt") == b"still here"
        result = await sandbox.exec("pgrep -c sleep || true")
        assert result.stdout.strip() == "0"  # the leftover did not survive the restart


async def test_killed_sandbox_is_stopped_and_resumes(provider: LocalProvider) -> None:
    """The whole sandbox killed from the host: stopped, and back with resume()."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/home/user/kept.txt", b"x")
        os.kill(_launched(provider, sandbox).init_pid, signal.SIGKILL)
        with anyio.fail_after(BOUND):
            while await _state(provider, sandbox) != SandboxState.STOPPED:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            await sandbox.resume()
        assert await sandbox.files.read("/home/user/kept.txt") == b"x"


async def test_agent_killed_mid_exec_ends_the_call(provider: LocalProvider) -> None:
    """A call in progress when the agent dies ends in a typed error, not a hang."""
    async with provider.create() as sandbox:
        await sandbox.start("sleep 600")  # keeps the namespace alive after the agent

        async def kill_soon() -> None:
            await anyio.sleep(1)
            os.kill(_agent_pid(provider, sandbox), signal.SIGKILL)

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_soon)
            with anyio.fail_after(BOUND), pytest.raises((Unavailable, SandboxNotRunning)):
                await sandbox.exec("sleep 300")


async def test_stopped_agent_fails_fast_and_resume_continues_it(
        provider: LocalProvider) -> None:
    """SIGSTOP of the agent: exec raises Unavailable within a bound (no hang until the
    caller's deadline), even for a call already waiting; resume() continues it."""
    provider.agent_timeout = 5
    async with provider.create() as sandbox:
        agent = _agent_pid(provider, sandbox)

        async def stop_soon() -> None:
            await anyio.sleep(1)
            os.kill(agent, signal.SIGSTOP)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_soon)
                with anyio.fail_after(BOUND), pytest.raises(Unavailable, match="stopped"):
                    await sandbox.exec("sleep 4; echo late")
            with anyio.fail_after(BOUND), pytest.raises(Unavailable, match="stopped"):
                await sandbox.files.read("/etc/hostname")
            assert await _state(provider, sandbox) == SandboxState.RUNNING
            with anyio.fail_after(BOUND):
                await sandbox.resume()
            assert (await sandbox.exec("echo back")).stdout == "back\n"
        finally:
            os.kill(agent, signal.SIGCONT)


async def test_unacknowledged_call_times_out(provider: LocalProvider) -> None:
    """An agent that takes no call within agent_timeout (here: all its threads frozen
    by a cgroup freeze the provider did not make, so its state looks normal) ends
    the call with Unavailable."""
    if not _cgroups.Cgroup.available():
        pytest.skip("cgroup v1 freezer is not writable here")
    provider.agent_timeout = 1.5
    async with provider.create() as sandbox:
        client = provider._sandboxes.running(sandbox.id)
        cgroup = provider._shared.cgroup(sandbox.id)
        cgroup.freeze(True)
        try:
            with anyio.fail_after(BOUND), pytest.raises(Unavailable, match="did not take"):
                await client.call("ping")
        finally:
            cgroup.freeze(False)


async def test_paused_sandbox_still_reports_paused(provider: LocalProvider) -> None:
    """A pause is not a wedge: the state is paused and resume() thaws it."""
    async with provider.create() as sandbox:
        await sandbox.pause()
        assert await _state(provider, sandbox) == SandboxState.PAUSED
        await sandbox.resume()
        assert (await sandbox.exec("echo ok")).stdout == "ok\n"


async def test_idle_kill_cannot_be_forged_from_inside(provider: LocalProvider) -> None:
    """Writing the old idle marker to every descriptor and writable file inside, then
    the sandbox dying for another reason, leaves it listed as stopped (not silently
    removed as if its idle timeout had ended it)."""
    sandbox = await provider.create(lifecycle=Lifecycle(idle_timeout=120, on_idle="kill"))
    try:
        forge = ("for f in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2 /tmp/x /home/user/x; do "
                 "echo 'psdk-agent: idle timeout reached, ending the sandbox' >> $f; "
                 "done 2>/dev/null; exit 75")
        await sandbox.exec(["sh", "-c", forge])
        os.kill(_launched(provider, sandbox).init_pid, signal.SIGKILL)
        with anyio.fail_after(BOUND):
            while await _state(provider, sandbox) != SandboxState.STOPPED:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert sandbox.id in [i.id for i in await provider.list()]
    finally:
        await provider.kill(sandbox.id)


async def test_idle_kill_still_ends_the_sandbox(provider: LocalProvider) -> None:
    """The agent's idle exit, recorded by the host-side launcher, removes the sandbox."""
    sandbox = await provider.create(lifecycle=Lifecycle(idle_timeout=0.5, on_idle="kill"))
    directory = provider.home / "sandboxes" / sandbox.id
    token = _launched(provider, sandbox).token
    with anyio.fail_after(BOUND):
        while not (directory / f"exit-{token}").exists():  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert (directory / f"exit-{token}").read_text().strip() == str(_launch.IDLE_EXIT)
    with pytest.raises(SandboxNotFound):
        await provider.get_info(sandbox.id)
    assert not await anyio.Path(directory).exists()
