"""Background processes of ``DaytonaProvider``, each a Daytona session of its own running
one asynchronous command (the scripts it sends are ``_processes``'); a process's pid is the
real pid inside the sandbox, and any provider instance finds it again by that pid.

Output is read back from the process's files piece by piece, so a reader holds one piece
at a time; stdin is staged as a file and written into the process's FIFO. Nothing here
runs a one-shot command for the caller: that is ``_commands``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Literal

from daytona import SessionExecuteRequest

from provider_sdk import errors, scripts
from provider_sdk.limits import OutputBuffer
from provider_sdk.provider import (
    Command,
    ProcessEvent,
    ProcessExit,
    ProcessOutput,
    exit_code_from_status,
)
from provider_sdk.retry import Attempts, Backoff
from provider_sdk_daytona import _processes as procs
from provider_sdk_daytona._calls import DaytonaCalls
from provider_sdk_daytona._errors import PROVIDER
from provider_sdk_daytona._files import DaytonaFiles
from provider_sdk_daytona._shell import DaytonaShell

__all__ = ["DaytonaProcesses"]

_SMALL_READ = 4096
"""Most the provider reads of its own small files (pids, tokens) in a sandbox."""
_PID_POLL = Backoff(initial=0.01, factor=1, cap=0.01)
"""How often a new process's pid file is looked for."""
_OUTPUT_POLL = Backoff(initial=0.02, factor=1.5, cap=0.25)
"""How often a process's output is polled while it brings nothing new."""
_STREAMS: tuple[Literal["stdout", "stderr"], ...] = ("stdout", "stderr")


class DaytonaProcesses:
    """Background processes: the :class:`~provider_sdk.roles.Processes` part of
    ``DaytonaProvider``'s commands role, which passes its calls on to this object.
    Output is read with the files role."""

    name = PROVIDER

    def __init__(self, calls: DaytonaCalls, files: DaytonaFiles) -> None:
        self._calls = calls
        self._files = files

    async def _run_quietly(self, sandbox_id: str, script: str) -> str:
        """Run a helper script with Daytona's plain exec; its merged output (bounded)."""
        done = await self._calls.toolbox(sandbox_id, lambda s: s.process.exec(script, timeout=60),
                                   wait=60 + self._calls.request_timeout)
        return (done.result or "")[-_SMALL_READ:]

    async def start(self, sandbox_id: str, command: Command) -> int:
        cwd = await self._calls.path(sandbox_id, command.cwd or ".")
        token = scripts.new_mark()  # also the mark of the process's tree
        session = procs.session_id(token)
        script = procs.start_script(command, token, cwd=cwd, env=dict(command.env))
        await self._calls.toolbox(sandbox_id, lambda s: s.process.create_session(session))
        started = await self._calls.toolbox(sandbox_id, lambda s: s.process.execute_session_command(
            session, SessionExecuteRequest(command=DaytonaShell.EXIT + script, run_async=True)))
        # The wrapper writes the pid as soon as the child exists.
        async for _ in Attempts(_PID_POLL, timeout=self._calls.window):
            # The state first: a quick child that has ended had its pid written already.
            state = await self._calls.toolbox(sandbox_id, lambda s: s.process.get_session_command(
                session, started.cmd_id))
            with contextlib.suppress(errors.FileNotFound, ValueError):
                pid = int((await self._read_all(sandbox_id, procs.pid_path(token))).strip())
                self._calls.processes[(sandbox_id, pid)] = (token, started.cmd_id)
                return pid
            if state.exit_code is not None:
                break
        logs = await self._calls.toolbox(sandbox_id, lambda s: (
            s.process.get_session_command_logs(session, started.cmd_id)))
        raise errors.SandboxError(f"the process did not start (exit "
                                  f"{state.exit_code}): {logs.stderr or logs.output}",
                                  provider=self.name, sandbox_id=sandbox_id)

    async def _read_all(self, sandbox_id: str, path: str) -> bytes:
        """One of the provider's small files (a pid, a token): its first bytes only,
        whatever the sandbox put there."""
        kept = OutputBuffer(_SMALL_READ)
        await self._files.download_into(sandbox_id, path, kept, missing_ok=False)
        return kept.value()

    async def _process(self, sandbox_id: str, pid: int) -> tuple[str, str]:
        """The token and session command of the background process ``pid``."""
        found = self._calls.processes.get((sandbox_id, pid))
        if found is not None:
            return found
        try:
            saved = await self._read_all(sandbox_id, procs.map_path(pid))
        except errors.FileNotFound:
            saved = b""
        # Code inside may have rewritten the map: only a token is taken for one.
        token = saved.decode("ascii", "replace").strip()
        if not procs.TOKEN.fullmatch(token):
            raise errors.ProcessNotFound(f"no background process {pid}", provider=self.name,
                                         sandbox_id=sandbox_id)
        session = await self._calls.toolbox(sandbox_id,
                                      lambda s: s.process.get_session(procs.session_id(token)))
        found = (token, session.commands[0].id)
        self._calls.processes[(sandbox_id, pid)] = found
        return found

    async def events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        token, command_id = await self._process(sandbox_id, pid)
        session = procs.session_id(token)
        sent = {"stdout": 0, "stderr": 0}
        end: dict[str, int] | None = None  # the sizes seen once the process had ended
        code = 0
        polls = Attempts(_OUTPUT_POLL)
        async for _ in polls:
            # Status first: sizes read after the exit is seen are final (but for a
            # daemon the process left holding its output: only what it wrote by then).
            state = await self._calls.toolbox(sandbox_id, lambda s: s.process.get_session_command(
                session, command_id))
            sizes = await self._output_sizes(sandbox_id, token, sent)
            if state.exit_code is not None and end is None:
                end, code = sizes, state.exit_code
            moved = False
            for stream in _STREAMS:
                wanted = sizes[stream] if end is None else min(sizes[stream], end[stream])
                if wanted <= sent[stream]:
                    continue
                piece = OutputBuffer(min(procs.CHUNK, wanted - sent[stream]))
                await self._files.download_into(sandbox_id, procs.piece_path(token, stream), piece)
                if len(piece):
                    yield ProcessOutput(stream, piece.value())
                    sent[stream] += len(piece)
                    moved = True
            # Once it has ended, a poll that brings nothing new is the end too: the
            # files shrank, or the sizes the sandbox's own tools reported were false.
            if end is not None and (not moved or all(sent[k] >= end[k] for k in sent)):
                yield ProcessExit(exit_code_from_status(code))
                return
            if moved:
                polls.reset()

    async def _output_sizes(self, sandbox_id: str, token: str,
                            sent: dict[str, int]) -> dict[str, int]:
        """The sizes of a process's output files, with the next piece of each cut."""
        said = (await self._run_quietly(sandbox_id, procs.chunk_script(token, sent))).split()
        try:
            return {"stdout": int(said[-2]), "stderr": int(said[-1])}
        except (IndexError, ValueError):
            raise errors.SandboxError(f"the output of a background process could not be "
                                      f"measured: {' '.join(said)[-200:]!r}",
                                      provider=self.name, sandbox_id=sandbox_id) from None

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        token, _command = await self._process(sandbox_id, pid)
        staged = f"{procs.PREFIX}{token}.w-{secrets.token_hex(4)}"
        await self._calls.toolbox(sandbox_id, lambda s: s.fs.upload_file(data, staged))
        await self._run_quietly(sandbox_id, procs.write_script(token, staged))

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        token, _command = await self._process(sandbox_id, pid)
        await self._run_quietly(sandbox_id, procs.close_stdin_script(token))

    async def kill(self, sandbox_id: str, pid: int) -> None:
        # A process another instance started is killed by its pid, and by the mark it
        # was started with: not by its pid map, which code inside may remove or rewrite
        # (to name another process's token).
        found = self._calls.processes.get((sandbox_id, pid))
        script = procs.kill_script(pid, found[0] if found is not None else None)
        done = await self._calls.toolbox(sandbox_id, lambda s: s.process.exec(script, timeout=60),
                                         wait=60 + self._calls.request_timeout)
        if found is None and done.exit_code == scripts.NO_SUCH_PROCESS:
            raise errors.ProcessNotFound(f"no process {pid}", provider=self.name,
                                         sandbox_id=sandbox_id)
