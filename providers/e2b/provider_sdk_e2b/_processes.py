"""Commands and background processes of ``E2BProvider``, over envd's process service.

Exec talks to envd directly, with bytes, and no deadline unless the caller gives one; a
timeout kills the command's whole tree (as root). Background processes keep their events
(bounded, the exit never dropped) so ``wait`` works after they exited.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import inspect
import posixpath
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
from connectrpc.errors import ConnectError
from e2b.envd.client_async import as_stream
from e2b.envd.process import process_pb
from protobuf import Oneof

from provider_sdk import errors, scripts
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import ExecResult
from provider_sdk.provider import Command, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.sandbox import EmulatedShell
from provider_sdk.tasks import TaskOwner
from provider_sdk_e2b import _shell
from provider_sdk_e2b._errors import ErrorsMixin
from provider_sdk_e2b._remote import _Handle

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["ProcessesMixin"]

T = TypeVar("T")

_STDIN_CHUNK = 1 << 16
_KEEPALIVE = {"Keepalive-Ping-Interval": "50"}
_ROOT = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
"""envd runs a request as the user its basic authorization names: the tree kill runs
as root, so it reaches processes of every user."""
_YEAR = 365 * 86400.0
_KILL_WAIT = 30.0
"""Seconds the tree kill may take before the provider gives up on it."""
_CLOSE_WAIT = 5.0
"""Seconds closing a process stream may take."""


class _Proc:
    """A background process this provider started or attached to: its events so far.

    Output is kept up to ``LIMIT`` bytes. Past that, while a reader (``wait``, a stream)
    still needs the oldest output, the pump waits (it stops reading the process's
    stream, so envd holds the process back) until the reader takes it, or for at most
    ``READER_STALL`` seconds of a reader taking nothing; with no such reader, the oldest
    output is dropped (``first`` counts the events gone). The exit is never dropped.
    """

    LIMIT = 16 << 20
    READER_STALL = 60.0

    def __init__(self) -> None:
        self.events: collections.deque[ProcessEvent | BaseException] = collections.deque()
        self.first = 0
        self.size = 0
        self.changed = anyio.Event()
        self.readers: dict[object, int] = {}
        """Each attached reader's next event (an absolute index)."""
        self.progress = anyio.Event()
        self.pump: anyio.CancelScope | None = None
        """The scope of the pump (a task of the provider's) keeping this process's
        events, once one runs."""

    @property
    def done(self) -> bool:
        return bool(self.events) and not isinstance(self.events[-1], ProcessOutput)

    def push(self, event: ProcessEvent | BaseException) -> None:
        self.events.append(event)
        if isinstance(event, ProcessOutput):
            self.size += len(event.data)
            # Drop only what every attached reader has taken (see room()).
            needed = min(self.readers.values(), default=None)
            while self.size > self.LIMIT and isinstance(self.events[0], ProcessOutput) \
                    and (needed is None or self.first < needed):
                self.size -= len(self.events.popleft().data)  # type: ignore[union-attr]
                self.first += 1
        self.changed.set()
        self.changed = anyio.Event()

    async def room(self) -> None:
        """Wait while the output kept is past ``LIMIT`` and a reader still needs its
        oldest event (each reader that takes nothing for ``READER_STALL`` seconds is
        waited for no longer)."""
        while self.size > self.LIMIT and self.readers and \
                min(self.readers.values()) <= self.first:
            progress = self.progress
            with anyio.move_on_after(self.READER_STALL) as stalled:
                await progress.wait()
            if stalled.cancelled_caught:
                behind = [r for r, at in self.readers.items() if at <= self.first]
                for reader in behind:
                    del self.readers[reader]

    def moved(self, reader: object, position: int | None) -> None:
        """A reader took events up to ``position``, or (``None``) went away."""
        if position is None:
            self.readers.pop(reader, None)
        else:
            self.readers[reader] = position
        self.progress.set()
        self.progress = anyio.Event()


class ProcessesMixin(ErrorsMixin):
    """The exec and process hooks of ``E2BProvider``."""

    _request_timeout: float
    _procs: dict[tuple[str, int], _Proc]
    _tasks: TaskOwner

    if TYPE_CHECKING:
        async def _handle(self, sandbox_id: str) -> _Handle: ...

    # ------------------------------------------------------------ exec

    def _cwd(self, handle: _Handle, cwd: str | None) -> str | None:
        if cwd is None:
            return handle.workdir
        if cwd.startswith("/") or handle.workdir is None:
            return cwd
        return posixpath.join(handle.workdir, cwd)

    async def _open_process(self, sandbox_id: str, handle: _Handle, command: Command, *,
                            stdin: bool, timeout: float | None, as_root: bool = False
                            ) -> tuple[AsyncIterator[process_pb.StartResponse], int]:
        envs = {_shell.CALL_ENV: scripts.export_script(command.env)} if command.env else {}
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
            started = _payload(first)
            if isinstance(started, process_pb.ProcessEvent.StartEvent):
                return events, int(started.pid)
            await events.aclose()
            raise errors.SandboxError(f"envd did not report the process start: {first}",
                                      provider=self.name, sandbox_id=sandbox_id)

        with self._translate(sandbox_id):
            return await self._retrying(sandbox_id, start)

    async def _first(self, sandbox_id: str, events: AsyncIterator[T]) -> T:
        """The event that opens a process stream, within ``request_timeout``: a data
        plane that accepts the request and never answers does not hang the caller."""
        try:
            with anyio.fail_after(self._request_timeout):
                try:
                    return await events.__anext__()
                except ConnectError as exc:  # connectrpc wraps the scope's cancellation
                    if isinstance(exc.__cause__, anyio.get_cancelled_exc_class()):
                        raise exc.__cause__ from None
                    raise
        except TimeoutError:
            raise errors.Unavailable(f"envd did not start the process within "
                                     f"{self._request_timeout:g} s", provider=self.name,
                                     sandbox_id=sandbox_id) from None

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        handle = await self._handle(sandbox_id)
        began = time.monotonic()
        events, pid = await self._open_process(sandbox_id, handle, command,
                                               stdin=command.stdin is not None,
                                               timeout=command.timeout)
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
                await self._kill_tree(sandbox_id, handle, pid)
                await _aclose(events)
            raise
        if scope.cancelled_caught:
            with anyio.CancelScope(shield=True):
                await self._kill_tree(sandbox_id, handle, pid)
                await _aclose(events)
            partial = ExecResult(exit_code=-9, stdout_bytes=out.value(),
                                 stderr_bytes=err.value(), stdout_truncated=out.dropped,
                                 stderr_truncated=err.dropped, duration=time.monotonic() - began)
            raise errors.CommandTimeout(f"the command ran longer than {command.timeout:g} s",
                                        result=partial, provider=self.name,
                                        sandbox_id=sandbox_id)
        await _aclose(events)
        if code is None:
            raise errors.Unavailable("the command's output stream ended before its exit status",
                                     provider=self.name, sandbox_id=sandbox_id)
        return ExecResult(exit_code=code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                          stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                          duration=time.monotonic() - began)

    async def _drain(self, sandbox_id: str, events: AsyncIterator[process_pb.StartResponse],
                     out: OutputBuffer, err: OutputBuffer, command: Command) -> int | None:
        """Collect a process's output until its end event; return its exit code."""
        code = None
        with self._translate(sandbox_id, what="process"):
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
        """Write ``data`` to the process's stdin, then close it. A process that ended
        without reading it all is gone from envd: what it left is dropped."""
        with contextlib.suppress(errors.ProcessNotFound):
            for i in range(0, len(data), _STDIN_CHUNK):
                with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
                    await handle.rpc.send_input(process_pb.SendInputRequest(
                        process=_selector(pid), input=_stdin(data[i:i + _STDIN_CHUNK])))
            with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
                await handle.rpc.close_stdin(process_pb.CloseStdinRequest(
                    process=_selector(pid)))

    @contextlib.contextmanager
    def _deadline(self, sandbox_id: str) -> Iterator[None]:
        """Bound one data-plane call by ``request_timeout``: envd that accepts a request
        and never answers raises ``OperationTimeout`` instead of hanging the caller."""
        try:
            with anyio.fail_after(self._request_timeout):
                yield
        except TimeoutError:
            raise errors.OperationTimeout(
                f"envd did not answer within {self._request_timeout:g} s",
                provider=self.name, sandbox_id=sandbox_id) from None

    async def _kill_tree(self, sandbox_id: str, handle: _Handle, pid: int, *,
                         quiet: bool = True) -> bool:
        """Kill ``pid`` and everything it started (the core's tree kill, run as root);
        ``False`` if there was no such pid. Bounded: a sandbox that stops answering costs
        at most ``request_timeout`` plus :data:`_KILL_WAIT` seconds, then (unless
        ``quiet``) raises ``OperationTimeout`` or ``Unavailable``."""
        command = Command(argv=scripts.kill_tree_argv(pid), output_limit=4096)
        code = None
        with anyio.move_on_after(self._request_timeout + _KILL_WAIT) as scope:
            try:
                events, _ = await self._open_process(sandbox_id, handle, command, stdin=False,
                                                     timeout=_KILL_WAIT, as_root=True)
                with anyio.move_on_after(_KILL_WAIT):
                    code = await self._drain(sandbox_id, events, *command.buffers(), command)
                await _aclose(events)
            except (errors.SandboxNotFound, errors.SandboxNotRunning):
                return True  # the sandbox is gone or paused: nothing left to kill here
            except errors.SandboxError:
                if quiet:
                    return True
                raise
            with contextlib.suppress(ConnectError):
                await handle.rpc.send_signal(process_pb.SendSignalRequest(
                    process=_selector(pid), signal=process_pb.Signal.SIGKILL))
        if scope.cancelled_caught and not quiet:
            raise errors.OperationTimeout(
                f"killing process {pid} took longer than "
                f"{self._request_timeout + _KILL_WAIT:g} s", provider=self.name,
                sandbox_id=sandbox_id)
        return code != scripts.NO_SUCH_PROCESS

    # ------------------------------------------------------------ processes

    async def _start(self, sandbox_id: str, command: Command) -> int:
        handle = await self._handle(sandbox_id)
        events, pid = await self._open_process(sandbox_id, handle, command, stdin=True,
                                               timeout=None)
        proc = self._new_proc(sandbox_id, pid)
        try:
            proc.pump = await self._tasks.start_soon(self._pump, sandbox_id, proc, events)
        except BaseException:
            await _aclose(events)
            raise
        return pid

    def _new_proc(self, sandbox_id: str, pid: int) -> _Proc:
        """Keep a new process's events; forget the oldest finished ones past 256."""
        finished = [key for key, proc in self._procs.items() if proc.done]
        for key in finished[:max(0, len(finished) - 256)]:
            del self._procs[key]
        proc = self._procs[(sandbox_id, pid)] = _Proc()
        return proc

    async def _pump(self, sandbox_id: str, proc: _Proc, events: AsyncIterator[
            process_pb.StartResponse] | AsyncIterator[process_pb.ConnectResponse]) -> None:
        """Keep a started process's events, so ``wait`` works after it exited."""
        try:
            with self._translate(sandbox_id, what="process"):
                async for event in events:
                    for item in _to_events(event):
                        if isinstance(item, ProcessOutput):
                            await proc.room()
                        proc.push(item)
        except errors.SandboxError as exc:
            proc.push(exc)
        finally:
            await _aclose(events)
            if not proc.events or not isinstance(proc.events[-1], (ProcessExit, BaseException)):
                proc.push(errors.Unavailable("the process's output stream ended early",
                                             provider=self.name, sandbox_id=sandbox_id))

    async def _attach(self, sandbox_id: str, pid: int) -> _Proc:
        """The events of ``pid``: those kept since this provider started it, or, for a
        process started elsewhere, those from now on (kept from the first touch, so a
        ``wait`` after writing its stdin still sees its exit)."""
        proc = self._procs.get((sandbox_id, pid))
        if proc is not None:
            return proc
        handle = await self._handle(sandbox_id)

        async def attach() -> AsyncIterator[process_pb.ConnectResponse]:
            stream = as_stream(handle.rpc.connect(
                process_pb.ConnectRequest(process=_selector(pid)), headers=_KEEPALIVE))
            try:
                await self._first(sandbox_id, stream)  # the start event
            except BaseException:
                await _aclose(stream)
                raise
            return stream

        with self._translate(sandbox_id, what="process"):
            stream = await self._retrying(sandbox_id, attach)
        await self._tasks.open()  # from here to the pump's start, nothing yields
        proc = self._procs.get((sandbox_id, pid)) or self._new_proc(sandbox_id, pid)
        if proc.pump is None:
            try:
                proc.pump = await self._tasks.start_soon(self._pump, sandbox_id, proc, stream)
            except BaseException:
                await _aclose(stream)
                raise
        else:
            await _aclose(stream)
        return proc

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
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

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._attach(sandbox_id, pid)
        handle = await self._handle(sandbox_id)
        with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
            await self._retrying(sandbox_id, lambda: handle.rpc.send_input(
                process_pb.SendInputRequest(process=_selector(pid), input=_stdin(data))))

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._attach(sandbox_id, pid)
        handle = await self._handle(sandbox_id)
        try:
            with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
                await self._retrying(sandbox_id, lambda: handle.rpc.close_stdin(
                    process_pb.CloseStdinRequest(process=_selector(pid))))
        except errors.ProcessNotFound:
            # envd forgets a process once it has ended: a process this provider knows
            # has no stdin left to close.
            if (sandbox_id, pid) not in self._procs:
                raise

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        handle = await self._handle(sandbox_id)
        if not await self._kill_tree(sandbox_id, handle, pid, quiet=False):
            raise errors.ProcessNotFound(f"no process {pid}", provider=self.name,
                                         sandbox_id=sandbox_id)

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)


def _selector(pid: int) -> process_pb.ProcessSelector:
    return process_pb.ProcessSelector(selector=cast(Any, Oneof("pid", pid)))


def _stdin(data: bytes) -> process_pb.ProcessInput:
    return process_pb.ProcessInput(input=cast(Any, Oneof("stdin", data)))


def _payload(event: process_pb.StartResponse | process_pb.ConnectResponse) -> Any:
    """The payload of a process event: a StartEvent, DataEvent, EndEvent or KeepAlive."""
    oneof = event.event.event if event.event is not None else None
    return oneof.value if oneof is not None else None


async def _aclose(stream: AsyncIterator[Any]) -> None:
    """Close a stream, shielded from cancellation but bounded: a data plane that stops
    answering does not hold up the provider's close."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with anyio.move_on_after(_CLOSE_WAIT, shield=True), contextlib.suppress(Exception):
            await aclose()


def _to_events(event: process_pb.StartResponse | process_pb.ConnectResponse
               ) -> list[ProcessEvent]:
    payload = _payload(event)
    if isinstance(payload, process_pb.ProcessEvent.DataEvent) and payload.output is not None:
        stream, chunk = payload.output.field, payload.output.value
        if stream in ("stdout", "stderr") and chunk:
            return [ProcessOutput(stream, bytes(chunk))]
    elif isinstance(payload, process_pb.ProcessEvent.EndEvent):
        return [ProcessExit(_shell.exit_code(payload.exit_code, payload.status))]
    return []


def _deadline(timeout: float | None) -> float | None:
    """A command's timeout as a cancel scope's delay (past a year: none)."""
    return None if timeout is None or timeout > _YEAR else timeout


async def _collect(event: process_pb.StartResponse, out: OutputBuffer, err: OutputBuffer,
                   command: Command) -> int | None:
    """Add one event's output to the bounded ``out``/``err`` (the callbacks get every
    chunk); return the exit code if it was the end event."""
    code = None
    for item in _to_events(event):
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
