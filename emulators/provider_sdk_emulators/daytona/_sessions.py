"""Daytona sessions on the neutral backend: one long-lived shell that sources each
command, as Daytona's daemon does (``{ . cmd.sh; } > stdout 2> stderr``).

On a backend with background processes the session is a real ``bash`` driver loop in the
sandbox: it reads one command directory per line on its stdin, sources that directory's
``cmd.sh`` with stdout and stderr into files there, and prints a line when it is done. So
everything carries over (``cd``, variables, functions, open file descriptors, traps),
commands run one at a time, and a bare ``exit`` ends the session, all as on Daytona.
Elsewhere the backend's persistent shell stands in (``cd`` and ``export`` carry over).

A command's logs are kept to their first :data:`LOG_LIMIT` bytes per stream, whatever
the command writes: the emulator never holds more than that for one command.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.errors import FileNotFound, SandboxError
from provider_sdk.limits import DEFAULT_OUTPUT_LIMIT
from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Process, Sandbox, Shell
from provider_sdk.tasks import OwnedTask, TaskOwner

LOG_LIMIT = DEFAULT_OUTPUT_LIMIT
"""Bytes of each of a command's streams (stdout, stderr) a session keeps."""

_DONE = "psdk-session-done"
# A synchronous command's stdin is empty, as on Daytona; an asynchronous one reads a FIFO
# (made before the command is queued, so input never finds it missing) that the driver
# holds open for writing (fd 4, which the command does not inherit), so its stdin stays
# open for input until it ends. Its streams are appended to, so input echoed
# into its stdout file lands in order.
SESSION_DRIVER = (
    'while read -r __psdk_d __psdk_m; do '
    'if [ "$__psdk_m" = async ] && exec 4<>"$__psdk_d/input"; '
    'then { . "$__psdk_d/cmd.sh"; } < "$__psdk_d/input" 4>&- '
    '>> "$__psdk_d/stdout" 2>> "$__psdk_d/stderr"; '
    'else { . "$__psdk_d/cmd.sh"; } < /dev/null >> "$__psdk_d/stdout" 2>> "$__psdk_d/stderr"; '
    'fi; '
    '__psdk_s=$?; exec 4>&-; rm -f "$__psdk_d/input"; '
    f'printf "{_DONE} %s %s\\n" "$__psdk_d" "$__psdk_s"; '
    'done'
)
_INPUT_TIMEOUT = 30.0
"""Seconds input may wait for a command that does not read it (a full pipe)."""
# Input is echoed into the command's stdout before the command can read it (so the echo
# comes before what the command answers, as it reads on Daytona), then goes to its FIFO.
_INPUT = ('[ -p "$1/input" ] || exit 3; t="$1/input.$$"; cat > "$t" || exit 3; '
          'if [ "$2" = echo ]; then cat "$t" >> "$1/stdout"; fi; '
          'cat "$t" > "$1/input"; s=$?; rm -f "$t"; exit $s')


@attrs.define(kw_only=True)
class CommandRecord:
    """One command run in a session; ``exit_code`` is ``None`` while it runs."""

    id: str
    command: str
    run_async: bool = False
    """Its stdin stays open for input (``runAsync``); a synchronous one reads nothing."""
    suppress_input_echo: bool = False
    exit_code: int | None = None
    stdout: bytearray = attrs.field(factory=bytearray)
    stderr: bytearray = attrs.field(factory=bytearray)
    output: bytearray = attrs.field(factory=bytearray)
    done: asyncio.Event = attrs.field(factory=asyncio.Event)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "command": self.command, "exitCode": self.exit_code}


async def _head(handle: Sandbox, path: str, limit: int) -> bytes:
    """The first ``limit`` bytes of a file, read no further."""
    data = bytearray()
    stream = handle.files.stream(path)
    try:
        async for chunk in stream:
            data += chunk[:limit - len(data)]
            if len(data) >= limit:
                break
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    return bytes(data)


class SessionShell(abc.ABC):
    """Where a session's commands run."""

    ended = False
    """The session's shell is gone (a command called ``exit``)."""

    @abc.abstractmethod
    async def submit(self, cmd: CommandRecord) -> None:
        """Queue ``cmd``; it is finished (``cmd.done``) when it has run."""

    async def refresh(self, cmd: CommandRecord) -> None:
        """Bring a running command's logs up to date."""

    async def send_input(self, cmd: CommandRecord, data: bytes, *, echo: bool) -> None:
        """Write ``data`` to a running asynchronous command's stdin (and, with ``echo``,
        to its stdout log).

        Raises:
            SandboxError: this kind of session takes no input.
        """
        raise SandboxError("sessions on this backend take no input")

    @abc.abstractmethod
    async def close(self) -> None:
        """End the shell and everything it started."""


async def open_shell(tasks: TaskOwner, handle: Sandbox, argv: list[str],
                     env: dict[str, str]) -> SessionShell:
    """The most faithful session the backend allows: ``argv`` (which runs
    :data:`SESSION_DRIVER`) with ``env``, or else the backend's persistent shell with
    ``env`` (there, what ``argv`` would unset stays set). What it runs in the background
    runs in ``tasks``, the emulator's."""
    if handle.provider.supports(Capability.PROCESS_BACKGROUND):
        return await DriverSession.open(tasks, handle, argv, env)
    return EmulatedSession(tasks, handle, await handle.shell(env=env))


class DriverSession(SessionShell):
    """A bash loop in the sandbox sourcing one command at a time."""

    _reader: OwnedTask

    def __init__(self, handle: Sandbox, process: Process, root: str) -> None:
        self._handle = handle
        self._process = process
        self._root = root
        self._running: dict[str, CommandRecord] = {}

    @classmethod
    async def open(cls, tasks: TaskOwner, handle: Sandbox, argv: list[str],
                   env: dict[str, str]) -> DriverSession:
        process = await handle.start(argv, env=env)
        session = cls(handle, process, f"/tmp/.daytona-sessions/{secrets.token_hex(8)}")
        session._reader = await tasks.start(session._read)
        return session

    def _dir(self, cmd: CommandRecord) -> str:
        return f"{self._root}/{cmd.id}"

    async def submit(self, cmd: CommandRecord) -> None:
        if self.ended:
            raise SandboxError("the session has ended")
        directory = self._dir(cmd)
        await self._handle.files.write(f"{directory}/cmd.sh", cmd.command)
        self._running[directory] = cmd
        mode = "async" if cmd.run_async else "sync"
        if cmd.run_async:
            made = await self._handle.exec(["mkfifo", "-m", "600", f"{directory}/input"])
            if made.exit_code != 0:
                raise SandboxError(f"failed to make the input pipe: {made.stderr.strip()}")
        await self._process.write_stdin(f"{directory} {mode}\n")

    async def send_input(self, cmd: CommandRecord, data: bytes, *, echo: bool) -> None:
        result = await self._handle.exec(
            ["sh", "-c", _INPUT, "sh", self._dir(cmd), "echo" if echo else "quiet"],
            stdin=data, timeout=_INPUT_TIMEOUT)
        if result.exit_code != 0:
            raise SandboxError(f"failed to write to input pipe: {result.stderr.strip()}")

    async def refresh(self, cmd: CommandRecord) -> None:
        if cmd.done.is_set():
            return
        await self._collect(cmd)

    async def _collect(self, cmd: CommandRecord) -> None:
        directory = self._dir(cmd)
        outputs = []
        for name in ("stdout", "stderr"):
            try:
                outputs.append(await _head(self._handle, f"{directory}/{name}", LOG_LIMIT))
            except FileNotFound:
                outputs.append(b"")
        cmd.stdout[:] = outputs[0]
        cmd.stderr[:] = outputs[1]
        cmd.output[:] = outputs[0] + outputs[1]

    async def _finish(self, cmd: CommandRecord, code: int) -> None:
        with contextlib.suppress(SandboxError):
            await self._collect(cmd)
        cmd.exit_code = code
        cmd.done.set()

    async def _read(self) -> None:
        """Follow the driver: each done line finishes a command; its end ends them all."""
        pending = b""
        code = -1
        try:
            async for event in self._process.events():
                if isinstance(event, ProcessOutput) and event.stream == "stdout":
                    pending += event.data
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        mark, _, rest = line.decode(errors="replace").partition(" ")
                        directory, _, status = rest.rpartition(" ")
                        cmd = self._running.pop(directory, None)
                        if mark == _DONE and cmd is not None:
                            await self._finish(cmd, int(status))
                elif isinstance(event, ProcessExit):
                    code = event.exit_code
        except SandboxError:
            pass
        finally:
            self.ended = True
            # A command that ended the shell (``exit N``) ends with the shell's status.
            for cmd in self._running.values():
                await self._finish(cmd, code if code >= 0 else -1)
            self._running.clear()

    async def close(self) -> None:
        with contextlib.suppress(SandboxError):
            await self._process.kill()
        await self._reader.stop()


class EmulatedSession(SessionShell):
    """The backend's persistent shell, one command at a time."""

    def __init__(self, tasks: TaskOwner, handle: Sandbox, shell: Shell) -> None:
        self._tasks = tasks
        self._handle = handle
        self._shell = shell
        self._lock = anyio.Lock()
        self._runs: set[OwnedTask] = set()

    async def submit(self, cmd: CommandRecord) -> None:
        self._runs = {run for run in self._runs if not run.ended.is_set()}
        self._runs.add(await self._tasks.start(self._run, cmd))

    async def _run(self, cmd: CommandRecord) -> None:
        def keep(stream: bytearray) -> Callable[[bytes], None]:
            def on_output(chunk: bytes) -> None:
                room = LOG_LIMIT - len(stream)
                if room > 0:
                    stream.extend(chunk[:room])
                    cmd.output.extend(chunk[:room])
            return on_output

        try:
            async with self._lock:
                if self._handle.provider.supports(Capability.EXEC_STREAM):
                    result = await self._shell.run(cmd.command, on_stdout=keep(cmd.stdout),
                                                   on_stderr=keep(cmd.stderr))
                else:
                    # (the shell's result is bounded by the backend's own output limit)
                    result = await self._shell.run(cmd.command)
                    keep(cmd.stdout)(result.stdout_bytes)
                    keep(cmd.stderr)(result.stderr_bytes)
            cmd.exit_code = result.exit_code if result.exit_code >= 0 else -1
        except SandboxError as exc:
            cmd.stderr.extend(exc.message.encode())
        finally:
            if cmd.exit_code is None:
                cmd.exit_code = -1
            cmd.done.set()

    async def close(self) -> None:
        for run in self._runs:
            run.scope.cancel()
        with contextlib.suppress(SandboxError):
            await self._shell.aclose()
