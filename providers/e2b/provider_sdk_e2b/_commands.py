"""The commands role of ``E2BProvider`` (and ``CubeProvider``): exec, background
processes and shells, over envd's process service.

Exec talks to envd directly, with bytes, and no deadline unless the caller gives one; a
timeout kills the command's whole tree (as root). Background processes keep their events
(:class:`~provider_sdk_e2b._procs.Proc`, in the session) so ``wait`` works after they
exited. Shells are the core's emulated ones, over exec.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import posixpath
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

import anyio
from connectrpc.errors import ConnectError
from e2b.envd.client_async import as_stream
from e2b.envd.process import process_pb

from provider_sdk import errors, scripts
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult
from provider_sdk.provider import Command, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.sandbox import EmulatedShell
from provider_sdk_e2b import _shell
from provider_sdk_e2b._procs import Proc, aclose, as_input, payload, selector, to_events
from provider_sdk_e2b._remote import Handles, _Handle
from provider_sdk_e2b._session import Session

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["E2BCommands"]

T = TypeVar("T")

_STDIN_CHUNK = 1 << 16
_KEEPALIVE = {"Keepalive-Ping-Interval": "50"}
_ROOT = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
"""envd runs a request as the user its basic authorization names: the tree kill runs
as root, so it reaches processes of every user."""
_YEAR = 365 * 86400.0
_KILL_WAIT = 30.0
"""Seconds the tree kill may take before the provider gives up on it."""


class E2BCommands:
    """The commands role, with its processes and shells parts (see the module).

    Args:
        session: what the provider's roles share.
        handles: opens a sandbox's data-plane clients (the control plane does).
    """

    def __init__(self, session: Session, handles: Handles) -> None:
        self.session = session
        self.handles = handles

    # ------------------------------------------------------------ exec

    def _cwd(self, handle: _Handle, cwd: str | None) -> str | None:
        if cwd is None:
            return handle.workdir
        if cwd.startswith("/") or handle.workdir is None:
            return cwd
        return posixpath.join(handle.workdir, cwd)

    async def _open_process(self, sandbox_id: str, handle: _Handle, command: Command, *,
                            stdin: bool, timeout: float | None, mark: str | None,
                            as_root: bool = False
                            ) -> tuple[AsyncIterator[process_pb.StartResponse], int]:
        """Start ``command`` through envd; its event stream and pid. ``mark`` (see
        :func:`~provider_sdk.scripts.mark_env`) goes into its environment, after the
        call's own, so the kill finds what left its tree: in envd's environment (where
        another provider instance reads it back) and again in the call's, which is
        restored after ``bash -l`` has read the user's login profile (a profile written
        inside could unset it)."""
        marked = scripts.mark_env(mark) if mark is not None else {}
        envs = {**marked, _shell.CALL_ENV: scripts.export_script({**command.env, **marked})} \
            if command.env or marked else {}
        request = process_pb.StartRequest(
            process=process_pb.ProcessConfig(
                cmd="/bin/bash", args=["-l", "-c", _shell.command_text(command.argv)],
                envs=envs, cwd=self._cwd(handle, command.cwd)),
            stdin=stdin)
        # envd's own deadline is a backstop for a client that went away; the command's
        # timeout is enforced here, where the whole tree can be killed.
        # A timeout past a year is no deadline at all (and would overflow the header).
        backstop = None if timeout is None or timeout > _YEAR else int((timeout + 30) * 1000)
        headers = {**_KEEPALIVE, **(_ROOT if as_root else {})}

        async def start() -> tuple[AsyncIterator[process_pb.StartResponse], int]:
            events = as_stream(handle.rpc.start(request, headers=headers,
                                                timeout_ms=backstop))
            try:
                first = await self._first(sandbox_id, events)
            except BaseException:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await events.aclose()
                raise
            started = payload(first)
            if isinstance(started, process_pb.ProcessEvent.StartEvent):
                return events, int(started.pid)
            await events.aclose()
            raise errors.SandboxError(f"envd did not report the process start: {first}",
                                      provider=self.session.name, sandbox_id=sandbox_id)

        with self.session.translate(sandbox_id):
            return await self.session.retrying(start)

    async def _first(self, sandbox_id: str, events: AsyncIterator[T]) -> T:
        """The event that opens a process stream, within ``request_timeout``: a data
        plane that accepts the request and never answers does not hang the caller."""
        try:
            with anyio.fail_after(self.session.options.request_timeout):
                try:
                    return await events.__anext__()
                except ConnectError as exc:  # connectrpc wraps the scope's cancellation
                    if isinstance(exc.__cause__, anyio.get_cancelled_exc_class()):
                        raise exc.__cause__ from None
                    raise
        except TimeoutError:
            raise errors.Unavailable(f"envd did not start the process within "
                                     f"{self.session.options.request_timeout:g} s",
                                     provider=self.session.name,
                                     sandbox_id=sandbox_id) from None

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        handle = await self.handles.handle(sandbox_id)
        began = time.monotonic()
        mark = scripts.new_mark()
        events, pid = await self._open_process(sandbox_id, handle, command,
                                               stdin=command.stdin is not None,
                                               timeout=command.timeout, mark=mark)
        out, err = command.buffers()
        code: int | None = None
        try:
            with anyio.move_on_after(_deadline(command.timeout)) as scope:
                if command.stdin is None:
                    code = await self._drain(sandbox_id, events, out, err, command)
                else:
                    code = await self._drain_feeding(sandbox_id, handle, pid, events, out,
                                                     err, command, command.stdin)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._kill_tree(sandbox_id, handle, pid, mark)
                await aclose(events)
            raise
        if scope.cancelled_caught:
            with anyio.CancelScope(shield=True):
                await self._kill_tree(sandbox_id, handle, pid, mark)
                await aclose(events)
            partial = ExecResult(exit_code=-9, stdout_bytes=out.value(),
                                 stderr_bytes=err.value(), stdout_truncated=out.dropped,
                                 stderr_truncated=err.dropped, duration=time.monotonic() - began)
            raise errors.CommandTimeout(f"the command ran longer than {command.timeout:g} s",
                                        result=partial, provider=self.session.name,
                                        sandbox_id=sandbox_id)
        await aclose(events)
        if code is None:
            raise errors.Unavailable("the command's output stream ended before its exit status",
                                     provider=self.session.name, sandbox_id=sandbox_id)
        return ExecResult(exit_code=code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                          stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                          duration=time.monotonic() - began)

    async def _drain(self, sandbox_id: str, events: AsyncIterator[process_pb.StartResponse],
                     out: OutputBuffer, err: OutputBuffer, command: Command) -> int | None:
        """Collect a process's output until its end event; return its exit code."""
        code = None
        with self.session.translate(sandbox_id, what="process"):
            async for event in events:
                ended = await _collect(event, out, err, command)
                code = ended if ended is not None else code
        return code

    async def _drain_feeding(self, sandbox_id: str, handle: _Handle, pid: int,
                             events: AsyncIterator[process_pb.StartResponse], out: OutputBuffer,
                             err: OutputBuffer, command: Command, data: bytes) -> int | None:
        """:meth:`_drain` while writing ``data`` to stdin (then closing it): reading and
        writing at once, so a command echoing a large input never blocks on its output."""
        codes: list[int | None] = []
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._feed, sandbox_id, handle, pid, data)
                codes.append(await self._drain(sandbox_id, events, out, err, command))
        except BaseExceptionGroup as group:  # one failure: raise it, not a group
            raise group.exceptions[0] from None
        return codes[0]

    async def _feed(self, sandbox_id: str, handle: _Handle, pid: int, data: bytes) -> None:
        """Write ``data`` to the process's stdin, then close it. What the process does not
        read is dropped, as a pipe to a shell would drop it: a process that ended is gone
        from envd (``ProcessNotFound``), and one that closed its stdin, ended or not, has
        envd refuse the write (``InvalidInput``: a broken pipe, so nothing was written)."""
        with contextlib.suppress(errors.ProcessNotFound, errors.InvalidInput):
            for i in range(0, len(data), _STDIN_CHUNK):
                with self._deadline(sandbox_id), self.session.translate(sandbox_id, what="process"):
                    await handle.rpc.send_input(process_pb.SendInputRequest(
                        process=selector(pid), input=as_input(data[i:i + _STDIN_CHUNK])))
            with self._deadline(sandbox_id), self.session.translate(sandbox_id, what="process"):
                await handle.rpc.close_stdin(process_pb.CloseStdinRequest(
                    process=selector(pid)))

    @contextlib.contextmanager
    def _deadline(self, sandbox_id: str) -> Iterator[None]:
        """Bound one data-plane call by ``request_timeout``: envd that accepts a request
        and never answers raises ``OperationTimeout`` instead of hanging the caller."""
        try:
            with anyio.fail_after(self.session.options.request_timeout):
                yield
        except TimeoutError:
            raise errors.OperationTimeout(
                f"envd did not answer within {self.session.options.request_timeout:g} s",
                provider=self.session.name, sandbox_id=sandbox_id) from None

    async def _kill_tree(self, sandbox_id: str, handle: _Handle, pid: int, mark: str | None,
                         *, quiet: bool = True) -> bool:
        """Kill ``pid`` and everything it started, then every process under ``mark`` (the
        core's command kill, run as root: a double fork's orphan in a session of its own
        carries the mark, not a parent link); ``False`` if there was no such pid.
        Bounded: a sandbox that stops answering costs at most ``request_timeout`` plus
        :data:`_KILL_WAIT` seconds, then (unless ``quiet``) raises ``OperationTimeout``
        or ``Unavailable``."""
        command = Command(argv=scripts.kill_command_argv(pid, mark), output_limit=4096)
        code = None
        with anyio.move_on_after(self.session.options.request_timeout + _KILL_WAIT) as scope:
            try:
                events, _ = await self._open_process(sandbox_id, handle, command, stdin=False,
                                                     timeout=_KILL_WAIT, mark=None,
                                                     as_root=True)
                with anyio.move_on_after(_KILL_WAIT):
                    code = await self._drain(sandbox_id, events, *command.buffers(), command)
                await aclose(events)
            except (errors.SandboxNotFound, errors.SandboxNotRunning):
                return True  # the sandbox is gone or paused: nothing left to kill here
            except errors.SandboxError:
                if quiet:
                    return True
                raise
            with contextlib.suppress(ConnectError):
                await handle.rpc.send_signal(process_pb.SendSignalRequest(
                    process=selector(pid), signal=process_pb.Signal.SIGKILL))
        if scope.cancelled_caught and not quiet:
            raise errors.OperationTimeout(
                f"killing process {pid} took longer than "
                f"{self.session.options.request_timeout + _KILL_WAIT:g} s",
                provider=self.session.name, sandbox_id=sandbox_id)
        return code != scripts.NO_SUCH_PROCESS

    # ------------------------------------------------------------ processes

    async def start(self, sandbox_id: str, command: Command) -> int:
        handle = await self.handles.handle(sandbox_id)
        mark = scripts.new_mark()
        events, pid = await self._open_process(sandbox_id, handle, command, stdin=True,
                                               timeout=None, mark=mark)
        proc = self._new_proc(sandbox_id, pid)
        proc.mark = mark
        try:
            proc.pump = await self.session.tasks.start_soon(self._pump, sandbox_id, proc, events)
        except BaseException:
            await aclose(events)
            raise
        return pid

    def _new_proc(self, sandbox_id: str, pid: int) -> Proc:
        """Keep a new process's events; forget the oldest finished ones past 256."""
        finished = [key for key, proc in self.session.procs.items() if proc.done]
        for key in finished[:max(0, len(finished) - 256)]:
            del self.session.procs[key]
        proc = self.session.procs[(sandbox_id, pid)] = Proc()
        return proc

    async def _pump(self, sandbox_id: str, proc: Proc, events: AsyncIterator[
            process_pb.StartResponse] | AsyncIterator[process_pb.ConnectResponse]) -> None:
        """Keep a started process's events, so ``wait`` works after it exited."""
        try:
            with self.session.translate(sandbox_id, what="process"):
                async for event in events:
                    for item in to_events(event):
                        if isinstance(item, ProcessOutput):
                            await proc.room()
                        proc.push(item)
        except errors.SandboxError as exc:
            proc.push(exc)
        finally:
            await aclose(events)
            if not proc.events or not isinstance(proc.events[-1], (ProcessExit, BaseException)):
                proc.push(errors.Unavailable("the process's output stream ended early",
                                             provider=self.session.name, sandbox_id=sandbox_id))

    async def _attach(self, sandbox_id: str, pid: int) -> Proc:
        """The events of ``pid``: those kept since this provider started it, or, for a
        process started elsewhere, those from now on (kept from the first touch, so a
        ``wait`` after writing its stdin still sees its exit)."""
        proc = self.session.procs.get((sandbox_id, pid))
        if proc is not None:
            return proc
        handle = await self.handles.handle(sandbox_id)

        async def attach() -> AsyncIterator[process_pb.ConnectResponse]:
            stream = as_stream(handle.rpc.connect(
                process_pb.ConnectRequest(process=selector(pid)), headers=_KEEPALIVE))
            try:
                await self._first(sandbox_id, stream)  # the start event
            except BaseException:
                await aclose(stream)
                raise
            return stream

        with self.session.translate(sandbox_id, what="process"):
            stream = await self.session.retrying(attach)
        await self.session.tasks.open()  # from here to the pump's start, nothing yields
        proc = self.session.procs.get((sandbox_id, pid)) or self._new_proc(sandbox_id, pid)
        if proc.pump is None:
            try:
                proc.pump = await self.session.tasks.start_soon(self._pump, sandbox_id, proc,
                                                                stream)
            except BaseException:
                await aclose(stream)
                raise
        else:
            await aclose(stream)
        return proc

    async def process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        proc = await self._attach(sandbox_id, pid)
        index = 0
        reader = object()
        proc.moved(reader, proc.first)
        try:
            while True:
                changed = proc.changed
                while index < proc.first + len(proc.events):
                    index = max(index, proc.first)  # output beyond the limit was dropped
                    item = proc.events[index - proc.first]
                    index += 1
                    if isinstance(item, BaseException):
                        raise item
                    yield item
                    proc.moved(reader, index)
                    if isinstance(item, ProcessExit):
                        return
                await changed.wait()
        finally:
            proc.moved(reader, None)

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._attach(sandbox_id, pid)
        handle = await self.handles.handle(sandbox_id)
        with self._deadline(sandbox_id), self.session.translate(sandbox_id, what="process"):
            await self.session.retrying(lambda: handle.rpc.send_input(
                process_pb.SendInputRequest(process=selector(pid), input=as_input(data))))

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._attach(sandbox_id, pid)
        handle = await self.handles.handle(sandbox_id)
        try:
            with self._deadline(sandbox_id), self.session.translate(sandbox_id, what="process"):
                await self.session.retrying(lambda: handle.rpc.close_stdin(
                    process_pb.CloseStdinRequest(process=selector(pid))))
        except errors.ProcessNotFound:
            # envd forgets a process once it has ended: a process this provider knows
            # has no stdin left to close.
            if (sandbox_id, pid) not in self.session.procs:
                raise

    async def kill_process(self, sandbox_id: str, pid: int) -> None:
        handle = await self.handles.handle(sandbox_id)
        mark = await self._mark_of(sandbox_id, handle, pid)
        if not await self._kill_tree(sandbox_id, handle, pid, mark, quiet=False):
            raise errors.ProcessNotFound(f"no process {pid}", provider=self.session.name,
                                         sandbox_id=sandbox_id)

    async def _mark_of(self, sandbox_id: str, handle: _Handle, pid: int) -> str | None:
        """The tree mark of background process ``pid``: kept since this provider started
        it, else the one envd started it with (a process started elsewhere); ``None``
        when envd knows no such process or it has no mark."""
        proc = self.session.procs.get((sandbox_id, pid))
        if proc is not None and proc.mark is not None:
            return proc.mark
        with self._deadline(sandbox_id), self.session.translate(sandbox_id, what="process"):
            listed = await self.session.retrying(
                lambda: handle.rpc.list(process_pb.ListRequest()))
        for info in listed.processes:
            if info.pid == pid and info.config is not None:
                mark = info.config.envs.get(scripts.MARK_VAR)
                return mark if mark and mark.isascii() and mark.isalnum() else None
        return None

    async def open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)


def _deadline(timeout: float | None) -> float | None:
    """A command's timeout as a cancel scope's delay (past a year: none)."""
    return None if timeout is None or timeout > _YEAR else timeout


async def _collect(event: process_pb.StartResponse, out: OutputBuffer, err: OutputBuffer,
                   command: Command) -> int | None:
    """Add one event's output to the bounded ``out``/``err`` (the callbacks get every
    chunk); return the exit code if it was the end event."""
    code = None
    for item in to_events(event):
        if isinstance(item, ProcessExit):
            code = item.exit_code
            continue
        (out if item.stream == "stdout" else err).append(item.data)
        callback = command.on_stdout if item.stream == "stdout" else command.on_stderr
        if callback is not None:
            result = callback(item.data)
            if inspect.isawaitable(result):
                await result
    return code
