"""The memory provider's commands: exec (output through pipes of its own, so that what
still holds them after a timeout or a cancellation is found and killed), background
processes (output to host files, read a chunk at a time) and the core's emulated shell."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import anyio
import anyio.abc

from provider_sdk.commands import Command, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.errors import CommandTimeout
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult
from provider_sdk.sandbox import EmulatedShell, Sandbox, Shell

from ._box import CHUNK, NAME, Box, Proc
from ._bwrap import enter, environment
from ._procs import END_GRACE, kill_holders, kill_inside, killpg, spawn
from ._store import Store


class MemoryCommands:
    """Commands over the shared :class:`~._store.Store`, with background processes and
    shells."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ exec

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        box = self.store.running(sandbox_id)
        out, err = command.buffers()
        start = anyio.current_time()
        # The output pipes are this provider's own, so that after a timeout or a
        # cancellation it finds whatever still holds them open (a child that left the
        # command's tree after the command ended) and kills that too.
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(2)]
        try:
            async with await anyio.open_process(
                    enter(box, command), env=environment(box, command),
                    stdin=subprocess.PIPE, stdout=pipes[0][1], stderr=pipes[1][1],
                    start_new_session=True) as proc:
                for _read, write in pipes:
                    os.close(write)
                pipes = [(read, -1) for read, _write in pipes]
                code, timed_out = await _run(box, proc, command, pipes, (out, err))
        finally:
            for read, write in pipes:
                for fd in (read, write):
                    if fd >= 0:
                        os.close(fd)
        result = ExecResult(exit_code=code if not timed_out else -9,
                            stdout_bytes=out.value(), stderr_bytes=err.value(),
                            stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                            duration=anyio.current_time() - start)
        if timed_out:
            raise CommandTimeout(f"command timed out after {command.timeout:g}s",
                                 result=result, provider=NAME, sandbox_id=sandbox_id)
        return result

    # ------------------------------------------------------------- processes

    async def start(self, sandbox_id: str, command: Command) -> int:
        box = self.store.running(sandbox_id)
        fd_out, out_path = tempfile.mkstemp(dir=self.store.base)
        fd_err, err_path = tempfile.mkstemp(dir=self.store.base)
        popen = spawn(enter(box, command), environment(box, command), fd_out, fd_err)
        box.procs[popen.pid] = Proc(popen, out_path, err_path)
        return popen.pid

    async def process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        proc = self.store.proc(sandbox_id, pid)
        # Read from files on the host, a chunk at a time: whatever the process prints,
        # this holds one chunk, and a reader that pauses loses nothing.
        fds: dict[Literal["stdout", "stderr"], int] = {
            "stdout": os.open(proc.out_path, os.O_RDONLY | os.O_CLOEXEC),
            "stderr": os.open(proc.err_path, os.O_RDONLY | os.O_CLOEXEC)}
        try:
            while True:
                code = proc.popen.poll()
                idle = True
                for stream, fd in fds.items():
                    data = os.read(fd, CHUNK)
                    if data:
                        idle = False
                        yield ProcessOutput(stream, data)
                if not idle:
                    await anyio.lowlevel.checkpoint()
                elif code is not None:
                    yield ProcessExit(code)
                    return
                else:
                    await anyio.sleep(0.01)
        finally:
            for fd in fds.values():
                os.close(fd)

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        stdin = self.store.proc(sandbox_id, pid).popen.stdin
        assert stdin is not None
        stdin.write(data)
        stdin.flush()

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        stdin = self.store.proc(sandbox_id, pid).popen.stdin
        assert stdin is not None
        stdin.close()

    async def kill_process(self, sandbox_id: str, pid: int) -> None:
        proc = self.store.proc(sandbox_id, pid)
        if await anyio.to_thread.run_sync(kill_inside, pid):
            with anyio.move_on_after(END_GRACE):
                while proc.popen.poll() is None:  # noqa: ASYNC110 (no event to wait on)
                    await anyio.sleep(0.01)
        killpg(pid)  # and whatever the tree kill missed, in its group
        await anyio.to_thread.run_sync(proc.popen.wait)

    # ----------------------------------------------------------------- shells

    async def open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                         env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)


async def _run(box: Box, proc: anyio.abc.Process, command: Command,
               pipes: list[tuple[int, int]],
               sinks: tuple[OutputBuffer, OutputBuffer]) -> tuple[int, bool]:
    """Feed, read and wait for an exec's process: its exit status, and whether it timed
    out. Unless it ended by itself, its tree and every holder of its output are killed
    before this returns or raises."""
    async def pump(fd: int, sink: OutputBuffer, callback: Any) -> None:
        os.set_blocking(fd, False)
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                return
            sink.append(chunk)
            if callback is not None:
                maybe = callback(chunk)
                if maybe is not None:
                    await maybe

    async def feed() -> None:
        # A command may end without reading it all: what it left is dropped.
        assert proc.stdin is not None
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                 OSError):
            try:
                if command.stdin:
                    await proc.stdin.send(command.stdin)
            finally:
                await proc.stdin.aclose()

    ended = False
    try:
        with anyio.move_on_after(command.timeout) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                tg.start_soon(pump, pipes[0][0], sinks[0], command.on_stdout)
                tg.start_soon(pump, pipes[1][0], sinks[1], command.on_stderr)
                await proc.wait()
        ended = not scope.cancelled_caught
    finally:
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                if await anyio.to_thread.run_sync(kill_inside, proc.pid):
                    with anyio.move_on_after(END_GRACE):
                        await proc.wait()
                killpg(proc.pid)  # and whatever the tree kill missed, in its group
            if not ended:
                held = {os.fstat(read).st_ino for read, _write in pipes}
                await anyio.to_thread.run_sync(kill_holders, box, held)
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, not ended
