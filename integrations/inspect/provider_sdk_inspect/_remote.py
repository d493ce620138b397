"""``exec_remote`` on a provider's background processes: Inspect's streaming process
handle, fed by :meth:`~provider_sdk.sandbox.Process.events` instead of Inspect's
in-sandbox tool server (nothing is injected into the sandbox).

This module owns the translation of one process's events into Inspect's
``ExecStdout``/``ExecStderr``/``ExecCompleted``; it must not start sandboxes.
"""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import AsyncIterator, Callable

import anyio
from inspect_ai.util import (
    ExecCompleted,
    ExecOutput,
    ExecRemoteProcess,
    ExecRemoteStreamingOptions,
    ExecStderr,
    ExecStdout,
    SandboxEnvironment,
)
from inspect_ai.util._sandbox.exec_remote import ExecRemoteCommonOptions

from provider_sdk.errors import NotFound, SandboxNotRunning
from provider_sdk.provider import ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.sandbox import Process, Sandbox

__all__ = ["PsdkRemoteProcess", "returncode"]


def returncode(exit_code: int) -> int:
    """A neutral exit code as Inspect (and a shell) reports it: death by signal ``N``
    (``-N``) is ``128 + N``."""
    return 128 - exit_code if exit_code < 0 else exit_code


class PsdkRemoteProcess(ExecRemoteProcess):
    """A command started by :meth:`PsdkSandboxEnvironment.exec_remote
    <provider_sdk_inspect.environment.PsdkSandboxEnvironment.exec_remote>`.

    Iterate it once for output events and a final ``ExecCompleted``; ``kill()`` ends
    the whole process tree and the iteration (no ``ExecCompleted`` follows, as in
    Inspect's own handle). Cancelling the iteration kills the process.
    """

    def __init__(self, environment: SandboxEnvironment, sandbox: Sandbox,
                 check_user: Callable[[str | None], None], cmd: list[str],
                 options: ExecRemoteStreamingOptions | ExecRemoteCommonOptions) -> None:
        """``environment`` is the Inspect environment that started it (Inspect's handle
        keeps it), ``sandbox`` its provider-sdk sandbox, and ``check_user`` refuses a
        user that sandbox cannot run commands as."""
        # Inspect's __init__ is not called: it sets up the JSON-RPC transport to its
        # tool server, which this handle does not use.
        self._sandbox = environment
        self._psdk_sandbox = sandbox
        self._check_user = check_user
        self._cmd = cmd
        self._options = options
        self._pid: int | None = None
        self._killed = False
        self._completed = False
        self._iteration_started = False
        self._pending_events: list[ExecOutput] = []
        self._process: Process | None = None
        self._events: AsyncIterator[ProcessEvent] | None = None
        self._stdin_closed = False
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace")
                          for name in ("stdout", "stderr")}

    async def _start(self) -> None:
        opts = self._options
        self._check_user(opts.user)
        process = await self._psdk_sandbox.start(list(self._cmd), env=opts.env,
                                                 cwd=opts.cwd, user=opts.user)
        self._process = process
        self._pid = process.pid
        if opts.input is not None and opts.input != b"" and opts.input != "":
            await process.write_stdin(opts.input)
        if not (isinstance(opts, ExecRemoteStreamingOptions) and opts.stdin_open):
            await process.close_stdin()
            self._stdin_closed = True

    async def __anext__(self) -> ExecOutput:
        if self._process is None:
            raise RuntimeError("Process has not been submitted yet")
        if self._pending_events:
            return self._pending_events.pop(0)
        if self._completed or self._killed:
            raise StopAsyncIteration
        if self._events is None:
            self._events = self._process.events()
        try:
            while True:
                try:
                    event = await self._events.__anext__()
                except StopAsyncIteration:
                    self._killed = True  # the stream ended with no exit status
                    raise
                if isinstance(event, ProcessOutput):
                    text = self._decoders[event.stream].decode(event.data)
                    if text:
                        return self._output(event.stream, text)
                elif isinstance(event, ProcessExit):
                    self._completed = True
                    for stream, decoder in self._decoders.items():
                        if tail := decoder.decode(b"", final=True):
                            self._pending_events.append(self._output(stream, tail))
                    if self._killed:
                        raise StopAsyncIteration
                    self._pending_events.append(
                        ExecCompleted(exit_code=returncode(event.exit_code)))
                    return self._pending_events.pop(0)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self.kill()
            raise

    @staticmethod
    def _output(stream: str, text: str) -> ExecOutput:
        return ExecStdout(data=text) if stream == "stdout" else ExecStderr(data=text)

    def _check_stdin(self, call: str) -> Process:
        if not (isinstance(self._options, ExecRemoteStreamingOptions)
                and self._options.stdin_open):
            raise RuntimeError(f"{call}() requires stdin_open=True in "
                               "ExecRemoteStreamingOptions")
        if self._process is None:
            raise RuntimeError("Process has not been submitted yet")
        return self._process

    async def write_stdin(self, data: str | bytes) -> None:
        """Write to the process's stdin (``stdin_open=True``)."""
        process = self._check_stdin("write_stdin")
        if self._completed or self._killed or self._stdin_closed:
            raise RuntimeError("Cannot write to stdin: process has terminated")
        await process.write_stdin(data)

    async def close_stdin(self) -> None:
        """Close the process's stdin (``stdin_open=True``); a second call does nothing."""
        process = self._check_stdin("close_stdin")
        if self._completed or self._killed or self._stdin_closed:
            return
        self._stdin_closed = True
        await process.close_stdin()

    async def kill(self) -> None:
        """Kill the process and everything it started; a finished one is left alone."""
        if self._process is None or self._completed or self._killed:
            return
        self._killed = True
        with contextlib.suppress(NotFound, SandboxNotRunning):  # it ended already
            await self._process.kill()
