"""The local provider against commands that attack its process model: escapes from a
timeout or a kill, output floods, reads of non-files, and reaching for the agent."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from process_trees import TREE, sleepers

from provider_sdk import (
    CommandTimeout,
    NotARegularFile,
    OperationTimeout,
    PermissionDenied,
    SandboxError,
    kernel_interpreter,
)
from provider_sdk.local import LocalProvider
from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

GRACE = 10.0  # generous: these machines are noisy


async def alive(sandbox: Sandbox, marker: str) -> list[str]:
    """The command lines of the sandbox's processes that contain ``marker``."""
    result = await sandbox.exec(["ps", "-eo", "args"])
    return [line for line in result.stdout.splitlines() if marker in line]


async def gone(sandbox: Sandbox, marker: str, timeout: float = GRACE) -> bool:
    """Whether every process with ``marker`` in its command line ends within ``timeout``."""
    with anyio.move_on_after(timeout):
        while await alive(sandbox, marker):  # noqa: ASYNC110 - processes in the sandbox
            await anyio.sleep(0.05)
        return True
    return False


async def agent_pid(sandbox: Sandbox) -> int:
    """The agent's pid inside the sandbox (the first Python running agent.py)."""
    table = (await sandbox.exec(["ps", "-eo", "pid,args"])).stdout.splitlines()[1:]
    return min(int(line.split()[0]) for line in table
               if line.split()[1].endswith("python3") and "psdk/agent.py" in line)


ESCAPES = {
    "double fork in a new session": "setsid sh -c '(sleep 424201 &) ; exit 0'; sleep 60",
    "cleared environment": "env -i /bin/sh -c '(setsid sleep 424201 &)'; sleep 60",
    "nohup": "(nohup setsid sleep 424201 >/dev/null 2>&1 &); sleep 60",
    "closed stdio": "(setsid sleep 424201 <&- >&- 2>&- &); sleep 60",
    "child holding stdout": "(setsid sleep 424201 &); sleep 60",
}


@pytest.mark.parametrize("command", ESCAPES.values(), ids=ESCAPES.keys())
async def test_timeout_returns_and_kills_every_escaped_process(
        provider: LocalProvider, command: str) -> None:
    """A command that detaches a child still times out on time, and the child dies."""
    async with provider.create() as sandbox:
        started = time.monotonic()
        with anyio.fail_after(1.5 + GRACE), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(command, timeout=1.5)
        assert time.monotonic() - started >= 1.5
        assert caught.value.result is not None
        assert caught.value.result.exit_code == -9
        assert await alive(sandbox, "424201") == []


async def test_timeout_kills_processes_whose_names_mimic_proc_stat(
        provider: LocalProvider) -> None:
    """The code chooses its processes' names: one named like the fields of
    ``/proc/PID/stat`` (``a) R 1 1 1 (b``, read from the first ``)`` as a child of pid 1)
    and one named ``a) b`` die with their command's timeout like the rest of the tree."""
    async with provider.create() as sandbox:
        with anyio.fail_after(3 + GRACE), pytest.raises(CommandTimeout):
            await sandbox.exec(TREE, timeout=3)
        assert await sleepers(sandbox) == []


async def test_a_command_that_exits_leaves_its_daemons_running(
        provider: LocalProvider) -> None:
    """Containment is for kills: a daemon started on purpose outlives its command."""
    async with provider.create() as sandbox:
        result = await sandbox.exec("(setsid sleep 424202 >/dev/null 2>&1 &); echo ok",
                                    timeout=30)
        assert result.stdout == "ok\n"
        assert len(await alive(sandbox, "424202")) == 1


async def test_process_kill_ends_what_a_background_command_daemonized(
        provider: LocalProvider) -> None:
    """Process.kill() kills the daemon a start()ed command left, not only the command."""
    async with provider.create() as sandbox:
        process = await sandbox.start(
            "(setsid sleep 424203 >/dev/null 2>&1 <&- &); echo started; sleep 60")
        with anyio.fail_after(GRACE):
            while len(await alive(sandbox, "424203")) != 1:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await process.kill()
        with anyio.fail_after(GRACE):
            result = await process.wait()
        assert result.exit_code == -9
        assert await gone(sandbox, "424203")


async def test_cancelling_an_exec_kills_its_tree(provider: LocalProvider) -> None:
    """An exec cancelled by the caller's cancel scope returns at once; its tree dies."""
    async with provider.create() as sandbox:
        with anyio.fail_after(GRACE):
            with anyio.move_on_after(1):
                await sandbox.exec("(setsid sleep 424204 &); sleep 60")
        assert await gone(sandbox, "424204")


async def test_output_past_the_limit_is_counted_and_still_streamed(
        provider: LocalProvider) -> None:
    """The result keeps output_limit bytes and counts the rest; callbacks see it all."""
    seen = bytearray()
    async with provider.create() as sandbox:
        result = await sandbox.exec("head -c 3000000 /dev/zero; echo oops >&2",
                                    output_limit=1_000_000, on_stdout=seen.extend)
    assert len(result.stdout_bytes) == 1_000_000
    assert result.stdout_truncated == 2_000_000
    assert result.stderr == "oops\n"
    assert result.stderr_truncated == 0
    assert len(seen) == 3_000_000


async def test_timed_out_result_is_bounded_too(provider: LocalProvider) -> None:
    """The partial result of a timeout says how much output it dropped."""
    async with provider.create() as sandbox:
        with pytest.raises(CommandTimeout) as caught:
            await sandbox.exec("head -c 3000000 /dev/zero; sleep 60", timeout=2,
                               output_limit=1_000_000)
    assert caught.value.result is not None
    assert len(caught.value.result.stdout_bytes) == 1_000_000
    assert caught.value.result.stdout_truncated == 2_000_000


async def test_a_slow_reader_of_a_background_flood_misses_nothing(
        provider: LocalProvider) -> None:
    """Past the replay buffer the process waits for a reader that is still reading,
    rather than dropping what the reader has not taken."""
    size = 200 << 20  # three times the replay buffer
    async with provider.create() as sandbox:
        process = await sandbox.start(["head", "-c", str(size), "/dev/zero"])
        received = 0
        exit_code = None
        async for event in process.events():
            if isinstance(event, ProcessOutput):
                if not received:
                    await anyio.sleep(3)  # the process outruns the reader meanwhile
                received += len(event.data)
            elif isinstance(event, ProcessExit):
                exit_code = event.exit_code
    assert exit_code == 0
    assert received == size


def test_an_output_flood_keeps_the_callers_memory_bounded(home: Path) -> None:
    """1.5 GiB of stdout costs the calling process about the output limit, not 1.5 GiB."""
    script = textwrap.dedent(f"""
        import anyio
        from provider_sdk.local import LocalProvider

        async def main():
            async with LocalProvider(home={str(home)!r}).create() as sandbox:
                result = await sandbox.exec("head -c 1500M /dev/zero", timeout=300)
            assert result.stdout_truncated == (1500 << 20) - len(result.stdout_bytes)
            # VmHWM, not ru_maxrss: the latter keeps the peak of the process that
            # forked this one (pytest's), which exec does not reset.
            with open("/proc/self/status") as status:
                print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

        anyio.run(main)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    peak_mib = int(done.stdout) / 1024
    assert peak_mib < 192, f"the caller peaked at {peak_mib:.0f} MiB"


NON_FILES = {
    "a device": "true",
    "a FIFO": "mkfifo /home/user/target",
    "a socket": "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind("
                "'/home/user/target')\"",
    "a symlink to a device": "ln -s /dev/zero /home/user/target",
}


@pytest.mark.parametrize("make", NON_FILES.values(), ids=NON_FILES.keys())
async def test_reading_a_non_file_is_refused_at_once(provider: LocalProvider,
                                                     make: str) -> None:
    """A device, FIFO or socket (or a link to one) is NotARegularFile before any read."""
    target = "/dev/zero" if make == "true" else "/home/user/target"
    async with provider.create() as sandbox:
        assert (await sandbox.exec(make)).exit_code == 0
        with anyio.fail_after(GRACE), pytest.raises(NotARegularFile):
            await sandbox.files.read(target)


async def test_sandboxed_code_cannot_read_the_agents_environment_or_descriptors(
        provider: LocalProvider) -> None:
    """The agent is not dumpable: its /proc files are closed to the commands."""
    async with provider.create() as sandbox:
        agent = await agent_pid(sandbox)
        for probe in (f"cat /proc/{agent}/environ", f"readlink /proc/{agent}/fd/0",
                      f"cat /proc/{agent}/fd/0 </dev/null",
                      f"python3 -c 'import os; os.pidfd_getfd(os.pidfd_open({agent}), 0)'"):
            result = await sandbox.exec(probe)
            assert result.exit_code != 0, probe
            assert result.stdout == "", probe


async def test_a_snapshots_symlink_does_not_lead_the_working_directory_onto_the_host(
        provider: LocalProvider, tmp_path: Path) -> None:
    """A snapshot holding a symlink to a host path, and a sandbox made from it whose
    working directory runs through that link: the directory is not made on the host."""
    outside = tmp_path / "outside"
    async with provider.create() as sandbox:
        made = await sandbox.exec(["ln", "-s", str(outside), "/home/user/link"])
        assert made.exit_code == 0, made
        snapshot = await sandbox.snapshot()
    try:
        with contextlib.suppress(SandboxError):
            async with provider.create(snapshot=snapshot.id,
                                       cwd="/home/user/link/made/here"):
                pass
        assert not await anyio.Path(outside).exists()
    finally:
        await provider.delete_snapshot(snapshot.id)


async def test_a_write_over_what_code_made_a_fifo_or_a_read_only_link_cannot_hang_or_escape(
        provider: LocalProvider) -> None:
    """The permission check before a write never opens a FIFO (which would block until
    a reader came) and follows a link only as the sandbox user: a FIFO is replaced, and
    a link to a file the user may not write is refused, its target left as it was."""
    async with provider.create() as sandbox:
        made = await sandbox.exec(["sh", "-c", "mkfifo /tmp/pipe && ln -s /etc/passwd /tmp/link"])
        assert made.exit_code == 0, made.stderr
        with anyio.fail_after(10):
            await sandbox.files.write("/tmp/pipe", b"not blocked")
        assert await sandbox.files.read("/tmp/pipe") == b"not blocked"
        before = await sandbox.files.read("/etc/passwd")
        with anyio.fail_after(10), pytest.raises(PermissionDenied):
            await sandbox.files.write("/tmp/link", b"root::0:0::/:/bin/sh\n")
        assert await sandbox.files.read("/etc/passwd") == before


async def test_an_interpreter_that_never_starts_is_a_typed_timeout(
        provider: LocalProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``python3`` that never answers makes the first run an ``OperationTimeout``
    once the start's bound is past, not a bare ``TimeoutError``."""
    monkeypatch.setattr(kernel_interpreter, "_START_TIMEOUT", 2.0)
    hostile_bin = "/tmp/psdk-hostile-bin"
    sandbox = await provider.create(env={"PATH": f"{hostile_bin}:/usr/bin:/bin"})
    await sandbox.files.write(f"{hostile_bin}/python3", "#!/bin/sh\nexec sleep 3600\n")
    assert (await sandbox.exec(["chmod", "755", f"{hostile_bin}/python3"])).ok
    with anyio.fail_after(60), pytest.raises(OperationTimeout):
        await sandbox.code.run("1")


async def test_a_kernel_frame_past_the_limit_ends_its_context(
        provider: LocalProvider) -> None:
    """A line one byte longer than ``FRAME_LIMIT`` on the kernel's frames descriptor,
    however it arrives, ends the context rather than being held and parsed."""
    sandbox = await provider.create()
    code = (f"import os\nos.write(3, b'x' * {kernel_interpreter.FRAME_LIMIT + 1} + b'\\n')\n"
            "print('after')")
    with anyio.fail_after(60):
        result = await sandbox.code.run(code)
    assert result.error is not None, result
    assert result.error.name == "ContextEnded"
    assert "longer than" in result.error.value
