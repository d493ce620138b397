"""Commands of ``DaytonaProvider``: ``exec`` through the wrapper script (see ``_exec``) on
Daytona's one-shot ``process.exec``.

The timeout is enforced here, where the command's whole process tree can be killed; a
cancelled call kills it too, shielded. Output comes from the wrapper's report, or is
downloaded from its files (at most ``output_limit`` of each) when the report cannot carry
it. Files that finished commands leave are handed to later calls, and to ``aclose``, to
remove in batches. The wrapper's scripts stay in ``_exec``. The role passes its
background-process calls on to ``_background`` and opens shells from ``_shell``.
"""

from __future__ import annotations

import builtins
import contextlib
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import anyio
from daytona import AsyncSandbox, DaytonaError, DaytonaTimeoutError

from provider_sdk import errors
from provider_sdk.commands import Command, ProcessEvent
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult
from provider_sdk.sandbox import Sandbox, Shell
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona._background import DaytonaProcesses
from provider_sdk_daytona._calls import DaytonaCalls
from provider_sdk_daytona._errors import PROVIDER, status_of
from provider_sdk_daytona._files import DaytonaFiles
from provider_sdk_daytona._shell import DaytonaShell

__all__ = ["DaytonaCommands"]


class DaytonaCommands:
    """The commands role of ``DaytonaProvider`` (a :class:`provider_sdk.roles.Commands`),
    with its background processes (:class:`~provider_sdk.roles.Processes`, the calls of
    :class:`DaytonaProcesses`) and persistent shells (:class:`~provider_sdk.roles.Shells`,
    :class:`DaytonaShell`)."""

    name = PROVIDER

    def __init__(self, calls: DaytonaCalls, files: DaytonaFiles) -> None:
        self._calls = calls
        self._files = files
        self._processes = DaytonaProcesses(calls, files)

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        cwd = await self._calls.path(sandbox_id, command.cwd or ".")
        litter = self._calls.litter.setdefault(sandbox_id, wrapper.Litter())
        run = wrapper.wrap(command, cwd=cwd, env=dict(command.env), remove=litter.take())
        limit = wrapper.daemon_seconds(command.timeout)
        start = anyio.current_time()
        sandbox = await self._calls.sandbox(sandbox_id)
        if command.stdin is not None:
            data = command.stdin
            await self._calls.toolbox(sandbox_id, lambda s: s.fs.upload_file(data, run.stdin_path))
        # The timeout is enforced here: the provider's tree kill reaches what the
        # daemon's process-group kill misses (new sessions, their orphans). The daemon's
        # own timeout, a little later, is a backstop for a toolbox that stopped answering.
        backstop = None if limit is None else limit + 5
        outcome: builtins.list[Any] = []  # the response, or what the call raised
        finished = anyio.Event()
        # Shielded: the call stays open until the tree is killed, because the daemon
        # kills the process group on its own when the request goes away.
        open_call = anyio.CancelScope(shield=True)

        async def call() -> None:
            with open_call:
                try:
                    outcome.append(await sandbox.process.exec(run.script, timeout=backstop))
                except Exception as exc:
                    outcome.append(exc)
                finally:
                    finished.set()

        expired = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            try:
                with anyio.move_on_after(limit):
                    await finished.wait()
                if not finished.is_set():
                    expired = True
                    await self._kill_run(sandbox, run, cleanup=False)
                    with anyio.move_on_after(self._calls.request_timeout):
                        await finished.wait()
            except BaseException:
                await self._kill_run(sandbox, run)
                raise
            finally:
                open_call.cancel()
        response: Any = outcome[0] if outcome else None
        if isinstance(response, DaytonaTimeoutError) and command.timeout is not None and \
                status_of(response) in (408, None):
            expired = True
        elif isinstance(response, DaytonaError) and not expired:
            raise await self._calls.toolbox_error(sandbox_id, response) from response
        elif isinstance(response, Exception) and not expired:
            raise response
        if expired:
            partial = await self._collect(sandbox_id, run, command, exit_code=-9, start=start)
            raise errors.CommandTimeout(
                f"the command ran longer than {command.timeout:g} s and was killed",
                result=partial, provider=self.name, sandbox_id=sandbox_id)
        report = wrapper.parse(run, response.result or "")
        if report is None:
            raise errors.SandboxError(
                f"the command wrapper printed no report (exit {response.exit_code}): "
                f"{(response.result or '')[-500:]}", provider=self.name, sandbox_id=sandbox_id)
        if report.stdout is None or report.stderr is None:
            return await self._collect(sandbox_id, run, command, exit_code=report.exit_code,
                                       start=start)
        if report.left_files:
            litter.add(run, len(report.stdout) + len(report.stderr))
        out, err = command.buffers()
        out.append(report.stdout)
        err.append(report.stderr)
        return _result(report.exit_code, out, err, anyio.current_time() - start)

    async def _kill_run(self, sandbox: AsyncSandbox, run: wrapper.Run, *,
                        cleanup: bool = True) -> None:
        """Kill what a run started, and remove its files unless ``cleanup`` is false
        (shielded, within ``request_timeout``)."""
        with anyio.move_on_after(self._calls.request_timeout, shield=True), \
                contextlib.suppress(DaytonaError, aiohttp.ClientError):
            await sandbox.process.exec(run.kill_script(cleanup=cleanup), timeout=30)

    async def remove_litter(self) -> None:
        """Remove the files finished commands left, from every sandbox still running
        (within 5 s, shielded)."""
        litter, self._calls.litter = self._calls.litter, {}
        with anyio.move_on_after(5, shield=True):
            async with anyio.create_task_group() as tg:
                for sandbox_id, files in litter.items():
                    if files.paths:
                        tg.start_soon(self._remove_quietly, sandbox_id, files.paths)

    async def _remove_quietly(self, sandbox_id: str, paths: Sequence[str]) -> None:
        """Remove files left in a sandbox, if it is still there and running."""
        with contextlib.suppress(errors.SandboxError, DaytonaError), \
                anyio.move_on_after(self._calls.request_timeout):
            sandbox = await self._calls.sandbox(sandbox_id)
            await sandbox.process.exec(f"rm -f -- {shlex.join(paths)}", timeout=30)

    async def _collect(self, sandbox_id: str, run: wrapper.Run, command: Command, *,
                       exit_code: int, start: float) -> ExecResult:
        """Download a run's output files (at most ``output_limit`` of each), then remove
        them."""
        out, err = command.buffers()
        try:
            await self._files.download_into(sandbox_id, run.stdout_path, out)
            await self._files.download_into(sandbox_id, run.stderr_path, err)
        finally:
            with anyio.move_on_after(self._calls.request_timeout, shield=True), \
                    contextlib.suppress(errors.SandboxError):
                await self._calls.toolbox(sandbox_id,
                                          lambda s: s.process.exec(run.cleanup_script()))
        return _result(exit_code, out, err, anyio.current_time() - start)


    # ------------------------------------------------ background processes, shells

    async def start(self, sandbox_id: str, command: Command) -> int:
        return await self._processes.start(sandbox_id, command)

    def process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        return self._processes.events(sandbox_id, pid)

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._processes.send_stdin(sandbox_id, pid, data)

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._processes.close_stdin(sandbox_id, pid)

    async def kill_process(self, sandbox_id: str, pid: int) -> None:
        await self._processes.kill(sandbox_id, pid)

    async def open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                         env: Mapping[str, str]) -> Shell:
        # DaytonaShell calls Daytona through the roles' shared calls (a ShellHost).
        return await DaytonaShell.open(self._calls, sandbox, cwd=cwd, env=env)


def _result(exit_code: int, out: OutputBuffer, err: OutputBuffer,
            duration: float) -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                      stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                      duration=duration)
