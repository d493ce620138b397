"""``KernelInterpreter``: the code-interpreter role of a provider that has background
processes with stdin and a ``python3`` in its sandboxes.

Each context is a kernel (``provider_sdk._code_kernel``, whose source the SDK ships and
starts with ``python3 -u -c``) running as a background process of the sandbox: it keeps
one namespace for its life and talks to this role over its stdin and stdout, one JSON
frame a line (the protocol is in the kernel's docstring). It needs no Jupyter and no
package in the sandbox.

What the host holds is bounded: each frame at most :data:`FRAME_LIMIT` bytes (a kernel
that writes a longer one is ended), and each of stdout, stderr and the result's text at
most the run's ``output_limit``; callbacks see all of it. A run's timeout interrupts the
code (``KeyboardInterrupt``, raised in the kernel's main thread by the kernel itself,
so every provider can do it); code that does not stop within :attr:`grace` seconds has
its kernel killed, and that context is gone. A run its caller cancels is stopped the
same way. Contexts live in this object: they belong to the provider instance that made
them.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from provider_sdk import errors
from provider_sdk.commands import Command, ProcessExit
from provider_sdk.interpreter import CodeContext, CodeError, CodeResult, CodeRun, TextCallback
from provider_sdk.limits import OutputBuffer
from provider_sdk.roles import Processes
from provider_sdk.tasks import OwnedTask, TaskOwner

__all__ = ["FRAME_LIMIT", "KERNEL_SOURCE", "KernelInterpreter"]

KERNEL_SOURCE = (Path(__file__).parent / "_code_kernel.py").read_text(encoding="utf-8")
"""The kernel's program, as it is started in the sandbox."""
FRAME_LIMIT = 1 << 20
"""Bytes of one frame the host holds: a kernel frame carries at most 64 KiB of text."""
DEFAULT = "default"
"""The id of a sandbox's default context."""
_START_TIMEOUT = 60.0
"""Seconds a new kernel may take to say it is ready."""
_FRAMES_HELD = 64
"""Frames read ahead of the run that takes them: past that the reading waits."""
_RELEASE_GRACE = 2.0
"""Seconds a killed kernel's output stream has to end by itself before it is cut."""
_STDERR_KEPT = 4096
"""Bytes of what a kernel wrote to its stderr before it took it over, kept for errors."""


class KernelInterpreter:
    """The code-interpreter role over a provider's background processes (see the
    module docstring)."""

    def __init__(self, processes: Processes, *, provider: str, grace: float = 2.0) -> None:
        """``processes`` is the provider's commands role (its ``process.background``
        part); ``grace`` is how long interrupted code has to stop before its kernel is
        killed."""
        self._processes = processes
        self._provider = provider
        self.grace = grace
        self._kernels: dict[tuple[str, str], _Kernel] = {}
        self._starting: dict[str, anyio.Lock] = {}
        """Per sandbox: held while its default context starts (a sandbox whose
        interpreter is slow to start holds up no other sandbox)."""
        self._tasks = TaskOwner(provider)

    async def create_context(self, sandbox_id: str, *, language: str, cwd: str | None,
                             env: Mapping[str, str]) -> CodeContext:
        """Start a kernel; the context it keeps."""
        kernel = await self._start(sandbox_id, cwd=cwd, env=env)
        context = CodeContext(id=secrets.token_hex(8), sandbox_id=sandbox_id,
                              language=language, cwd=cwd)
        self._kernels[(sandbox_id, context.id)] = kernel
        return context

    async def run_code(self, sandbox_id: str, run: CodeRun) -> CodeResult:
        """Run code in a context: without one, the sandbox's default context, made on
        first use, and again once its kernel has ended."""
        key = (sandbox_id, run.context_id or DEFAULT)
        if run.context_id is None:
            async with self._starting.setdefault(sandbox_id, anyio.Lock()):
                known = self._kernels.get(key)
                if known is None or known.ended is not None:  # new, or it died (a stop)
                    self._kernels[key] = await self._start(sandbox_id, cwd=None, env={})
        kernel = self._kernels.get(key)
        if kernel is None:
            raise errors.ContextNotFound(f"no code context {run.context_id!r} in this "
                                         "sandbox (closed, or made by another provider "
                                         "instance)", sandbox_id=sandbox_id)
        return await kernel.run(run, grace=self.grace)

    async def close_context(self, sandbox_id: str, context_id: str) -> None:
        """End a context's kernel; nothing to do if it is already closed."""
        kernel = self._kernels.pop((sandbox_id, context_id), None)
        if kernel is not None:
            await kernel.end("the context was closed")
            await kernel.release()

    async def _start(self, sandbox_id: str, *, cwd: str | None,
                     env: Mapping[str, str]) -> _Kernel:
        pid = await self._processes.start(sandbox_id, Command(
            argv=("python3", "-u", "-c", KERNEL_SOURCE), env=dict(env), cwd=cwd))
        kernel = _Kernel(self._processes, sandbox_id, pid)
        try:
            await kernel.open(self._tasks)
            with anyio.fail_after(_START_TIMEOUT):
                ready = await kernel.frame()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await kernel.end("it did not start")
                await kernel.release()
            if isinstance(exc, TimeoutError):
                raise errors.OperationTimeout(
                    f"the Python interpreter did not start within {_START_TIMEOUT:g} s",
                    sandbox_id=sandbox_id) from None
            raise
        if ready is None or ready.get("t") != "ready":
            await kernel.end("it did not start")
            await kernel.release()
            where = f" in {cwd!r}" if cwd is not None else ""
            raise errors.InvalidInput(
                f"cannot start a Python context{where}: the interpreter exited with "
                f"status {kernel.exit_code}: {kernel.startup_errors()}",
                sandbox_id=sandbox_id)
        return kernel


@attrs.define
class _Collected:
    """What one run brought back so far, bounded."""

    run: CodeRun
    stdout: OutputBuffer
    stderr: OutputBuffer
    text: OutputBuffer
    has_text: bool = False
    error: CodeError | None = None
    count: int = 0

    @classmethod
    def of(cls, run: CodeRun) -> _Collected:
        limit = run.output_limit
        return cls(run, OutputBuffer(limit), OutputBuffer(limit), OutputBuffer(limit))

    async def take(self, frame: dict[str, Any]) -> bool:
        """Keep a frame of this run; whether it was the run's last."""
        kind, text = frame["t"], frame.get("x", "")
        if kind in ("stdout", "stderr"):
            (self.stdout if kind == "stdout" else self.stderr).append(text.encode())
            await _call(self.run.on_stdout if kind == "stdout" else self.run.on_stderr, text)
        elif kind == "text":
            self.has_text = True
            self.text.append(text.encode())
        elif kind == "error":
            self.error = CodeError(name=frame["name"], value=frame["value"],
                                   traceback=frame["traceback"])
        elif kind == "done":
            self.count = frame["count"]
            return True
        return False

    def result(self, duration: float) -> CodeResult:
        return CodeResult(
            text=self.text.value().decode("utf-8", "replace") if self.has_text else None,
            stdout=self.stdout.value().decode("utf-8", "replace"),
            stderr=self.stderr.value().decode("utf-8", "replace"),
            error=self.error, execution_count=self.count, duration=duration,
            stdout_truncated=self.stdout.dropped, stderr_truncated=self.stderr.dropped,
            text_truncated=self.text.dropped)


@attrs.define
class _Watch:
    """What a run's timeout did."""

    interrupted: bool = False
    killed: bool = False


class _Kernel:
    """One kernel process: its frames, read in order by a task of the role's own (so a
    run that is cancelled never cuts the process's output stream)."""

    def __init__(self, processes: Processes, sandbox_id: str, pid: int) -> None:
        self._processes = processes
        self.sandbox_id = sandbox_id
        self.pid = pid
        self._sender, self._frames = anyio.create_memory_object_stream[dict[str, Any]](
            _FRAMES_HELD)
        self._task: OwnedTask | None = None
        self._runs = 0
        self._stderr = OutputBuffer(_STDERR_KEPT)
        self.exit_code: int | None = None
        self.ended: str | None = None
        """Why the kernel is gone, once it is."""
        self.lock = anyio.Lock()
        """Held by the run in progress: a context runs one at a time."""

    async def open(self, tasks: TaskOwner) -> None:
        """Start reading the kernel's output."""
        self._task = await tasks.start(self._pump)

    def startup_errors(self) -> str:
        return self._stderr.value().decode("utf-8", "replace").strip() or "(no output)"

    async def frame(self) -> dict[str, Any] | None:
        """The next frame; ``None`` once the kernel has exited."""
        try:
            return await self._frames.receive()
        except anyio.EndOfStream:
            return None

    async def _pump(self) -> None:
        """Turn the process's output into frames until it exits (or is cut off)."""
        buffer = bytearray()
        scanned = 0
        events = self._processes.process_events(self.sandbox_id, self.pid)
        try:
            async with self._sender:
                async for event in events:
                    if isinstance(event, ProcessExit):
                        self.exit_code = event.exit_code
                        break
                    if event.stream == "stderr":
                        self._stderr.append(event.data)
                        continue
                    buffer += event.data
                    while 0 <= (end := buffer.find(b"\n", scanned)) <= FRAME_LIMIT:
                        frame = _parse(bytes(buffer[:end]))
                        del buffer[:end + 1]
                        scanned = 0
                        if frame is not None:
                            await self._sender.send(frame)
                    scanned = len(buffer)
                    if scanned > FRAME_LIMIT:
                        await self.end(f"it wrote a frame longer than {FRAME_LIMIT} bytes")
                        break
        except errors.SandboxError as exc:  # the sandbox went away under it
            self.ended = self.ended or f"its output was cut off: {exc.message}"
        finally:
            self.ended = self.ended or f"its interpreter exited with status {self.exit_code}"
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await aclose()

    async def send(self, request: dict[str, Any]) -> None:
        await self._processes.send_stdin(self.sandbox_id, self.pid,
                                         (json.dumps(request) + "\n").encode())

    async def run(self, run: CodeRun, *, grace: float) -> CodeResult:
        async with self.lock:
            if self.ended is not None:
                raise errors.ContextNotFound(f"code context {run.context_id!r} has ended: "
                                             f"{self.ended}", sandbox_id=self.sandbox_id)
            self._runs += 1
            execution = self._runs
            collected = _Collected.of(run)
            watch = _Watch()
            start = anyio.current_time()
            finished = done = False
            try:
                await self.send({"op": "run", "e": execution, "code": run.code,
                                 "env": dict(run.env)})
                async with anyio.create_task_group() as tg:
                    if run.timeout is not None:
                        tg.start_soon(self._watch, execution, run.timeout, grace, watch,
                                      tg.cancel_scope)
                    done = await self._collect(execution, collected)
                    tg.cancel_scope.cancel()
                finished = True
            finally:
                if not finished:  # cancelled, or a callback raised: stop the code
                    await self._stop(execution, grace)
        result = collected.result(anyio.current_time() - start)
        if watch.killed or not done:
            await self.end("it stopped answering")
            await self.release()
            if watch.interrupted:
                raise errors.CodeTimeout(
                    f"the code ran past its timeout of {run.timeout} s and did not stop "
                    f"when interrupted: its context is gone", result=result,
                    context_kept=False, sandbox_id=self.sandbox_id)
            return attrs.evolve(result, error=CodeError(
                name="ContextEnded", value=f"the context ended: {self.ended}",
                traceback=""))
        # Code that ended just as the interrupt came is no timeout.
        if watch.interrupted and result.error is not None \
                and result.error.name == "KeyboardInterrupt":
            raise errors.CodeTimeout(
                f"the code ran past its timeout of {run.timeout} s and was "
                f"interrupted; its context is kept", result=result,
                context_kept=True, sandbox_id=self.sandbox_id)
        return result

    async def _stop(self, execution: int, grace: float) -> None:
        """Interrupt a run its caller left, and wait ``grace`` seconds for its end (its
        frames dropped); code that goes on loses its kernel, as it would hold every
        later run of the context."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(grace):
                with contextlib.suppress(errors.SandboxError):
                    await self.send({"op": "interrupt", "e": execution})
                while (frame := await self.frame()) is not None:
                    if frame.get("e") == execution and frame["t"] == "done":
                        return
            await self.end("it did not stop when its run was left")
            await self.release()

    async def _collect(self, execution: int, collected: _Collected) -> bool:
        """Read the run's frames to its last; ``False`` if the kernel went first."""
        while (frame := await self.frame()) is not None:
            if frame.get("e") == execution and await collected.take(frame):
                return True
        return False

    async def _watch(self, execution: int, timeout: float, grace: float, watch: _Watch,
                     scope: anyio.CancelScope) -> None:
        await anyio.sleep(timeout)
        watch.interrupted = True
        with contextlib.suppress(errors.SandboxError):
            await self.send({"op": "interrupt", "e": execution})
        await anyio.sleep(grace)
        watch.killed = True
        await self.end("it did not stop when its run's timeout interrupted it")
        await anyio.sleep(grace)
        scope.cancel()  # its output never ended: stop waiting for it

    async def release(self) -> None:
        """Stop reading the kernel's output (it has been killed: give the stream a
        moment to end by itself)."""
        if self._task is not None:
            await self._task.stop(grace=_RELEASE_GRACE)

    async def end(self, why: str) -> None:
        """Kill the kernel (its output stream then ends); ``why`` is kept in
        :attr:`ended`."""
        self.ended = self.ended or why
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(errors.SandboxError):
                await self._processes.kill_process(self.sandbox_id, self.pid)


_FIELDS: dict[str, dict[str, type[object]]] = {
    "ready": {}, "stdout": {"x": str}, "stderr": {"x": str}, "text": {"x": str},
    "error": {"name": str, "value": str, "traceback": str}, "done": {"count": int}}
"""Each kind of frame, and the type of each field the host reads of it."""


def _parse(line: bytes) -> dict[str, Any] | None:
    """The frame ``line`` holds, or ``None`` for bytes that are none: code can write
    to the frames' descriptor, so a line of the wrong shape, or nested past the
    parser's depth, is skipped rather than trusted."""
    try:
        frame = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(frame, dict):
        return None
    fields = _FIELDS.get(str(frame.get("t")))
    if fields is None or ("e" in frame and type(frame["e"]) is not int):
        return None
    if not all(type(frame.get(name)) is kind for name, kind in fields.items()):
        return None
    return frame


async def _call(callback: TextCallback | None, text: str) -> None:
    if callback is not None:
        outcome = callback(text)
        if inspect.isawaitable(outcome):
            await outcome
