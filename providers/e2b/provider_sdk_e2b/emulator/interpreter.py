"""The code interpreter on port 49999: ``POST /execute``, answered in NDJSON.

E2B's code-interpreter template and Cube's ``sandbox-code`` template run a Jupyter
server there; ``run_code`` posts ``{code, language, env_vars}`` and reads events, one
JSON object a line: ``stdout``/``stderr`` (``text``), ``result`` (``text``,
``is_main_result``), ``error`` (``name``, ``value``, ``traceback``) and
``number_of_executions``. Here a small Python kernel runs inside the sandbox, started
on first use and kept, so variables persist from one execution to the next as in a
notebook; only Python is served, and results are ``repr`` text.

Only the sandbox's own caller may run code here: the handler is reached once the front
door checked the sandbox's access token (E2B) or the API key (Cube). Output streams to
the client as the kernel writes it, in events of at most 64 KiB of text; the emulator
holds one event line at a time, at most :data:`~provider_sdk.emulators.BODY_LIMIT`
bytes: a kernel whose output breaks that (code that writes to the kernel's own stdout)
is ended, and the execution reports ``KernelOutputTooLarge``.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

import anyio

from provider_sdk.emulators import BODY_LIMIT
from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Process
from provider_sdk_e2b.emulator._http import Request, Response, json_response
from provider_sdk_e2b.emulator._records import SandboxRecord

__all__ = ["INTERPRETER_PORT", "Interpreters"]

INTERPRETER_PORT = 49999

_DONE = "__psdk_done__"
_MAX_LINE = BODY_LIMIT

# The kernel: reads one JSON request a line, runs it in one namespace, writes events.
_KERNEL = r'''
import ast, json, os, sys, traceback
namespace = {"__name__": "__main__"}
out = sys.__stdout__
def emit(event):
    out.write(json.dumps(event) + "\n")
    out.flush()
class Stream:
    """Output in whole lines, as a notebook's streams batch it."""
    def __init__(self, kind):
        self.kind = kind
        self.pending = ""
    def write(self, text):
        self.pending += text
        if "\n" in self.pending:
            head, _, self.pending = self.pending.rpartition("\n")
            self.send(head + "\n")
        while len(self.pending) > 65536:  # a long line goes out in pieces
            self.send(self.pending[:65536])
            self.pending = self.pending[65536:]
        return len(text)
    def send(self, text):
        for at in range(0, len(text), 65536):
            emit({"type": self.kind, "text": text[at:at + 65536]})
    def flush(self):
        if self.pending:
            self.send(self.pending)
            self.pending = ""
count = 0
for line in sys.stdin:
    request = json.loads(line)
    count += 1
    saved = dict(os.environ)
    os.environ.update(request.get("env_vars") or {})
    sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
    try:
        tree = ast.parse(request["code"], "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
            if value is not None:
                text = repr(value)
                if len(text) > 1048576:
                    text = text[:1048576] + "... [repr cut at 1 MiB]"
                emit({"type": "result", "text": text, "is_main_result": True})
    except BaseException as error:
        emit({"type": "error", "name": type(error).__name__, "value": str(error),
              "traceback": traceback.format_exc()})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        os.environ.clear()
        os.environ.update(saved)
    emit({"type": "number_of_executions", "execution_count": count})
    emit({"type": "__psdk_done__"})
'''


class _Kernel:
    """One sandbox's kernel: a background process and the lines it has written."""

    def __init__(self, sandbox_id: str, process: Process) -> None:
        self.sandbox_id = sandbox_id
        self.process = process
        self.events = process.events()
        self.buffer = bytearray()
        self.scanned = 0
        self.lock = anyio.Lock()
        self.unfinished = 0
        """Executions whose reader left early: their events are still to be skipped."""

    async def aclose(self) -> None:
        aclose = getattr(self.events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await aclose()

    async def line(self) -> dict[str, Any] | None:
        """The kernel's next event, or ``None`` once it has exited.

        Raises:
            KernelOutputTooLarge: a line longer than the emulator holds.
        """
        while True:
            # Only the new bytes are searched: a long line costs linear time.
            while (end := self.buffer.find(b"\n", self.scanned)) < 0:
                self.scanned = len(self.buffer)
                if len(self.buffer) > _MAX_LINE:
                    raise KernelOutputTooLarge(f"a kernel line is longer than {_MAX_LINE} "
                                               "bytes")
                event = await anext(self.events, None)
                if event is None or isinstance(event, ProcessExit):
                    return None
                if isinstance(event, ProcessOutput) and event.stream == "stdout":
                    self.buffer += event.data
            raw = bytes(self.buffer[:end])
            del self.buffer[:end + 1]
            self.scanned = 0
            try:
                parsed = json.loads(raw)
            except ValueError:
                continue  # bytes the cell wrote past the kernel's streams
            if isinstance(parsed, dict):
                return parsed


class KernelOutputTooLarge(Exception):
    """The kernel wrote a line longer than the emulator will hold."""


class Interpreters:
    """The code interpreters of every sandbox of one emulator."""

    def __init__(self) -> None:
        # Keyed by record: a killed sandbox's record, and so its kernel, is let go.
        self.kernels: weakref.WeakKeyDictionary[SandboxRecord, _Kernel] = \
            weakref.WeakKeyDictionary()

    async def handle(self, record: SandboxRecord, request: Request) -> Response:
        if request.method != "POST" or request.path != "/execute":
            return json_response(404, {"message": f"no route {request.path}"})
        try:
            body = await request.json()
        except ValueError as exc:
            return json_response(400, {"message": f"the request body is not JSON: {exc}"})
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            return json_response(400, {"message": "code is required"})
        language = body.get("language") or "python"
        if language != "python":
            return json_response(400, {"message": f"language {language!r} is not served; "
                                                  "the emulator runs Python only"})
        env = body.get("env_vars") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            return json_response(400, {"message": "env_vars must be an object of strings"})
        kernel = await self._kernel(record)
        return Response(200, (("content-type", "application/x-ndjson"),),
                        self._execute(record, kernel, body["code"], env))

    async def aclose(self) -> None:
        """Let go of every kernel's output stream (the emulator is stopping)."""
        for kernel in list(self.kernels.values()):
            await kernel.aclose()
        self.kernels.clear()

    async def _kernel(self, record: SandboxRecord) -> _Kernel:
        kernel = self.kernels.get(record)
        if kernel is None or kernel.sandbox_id != record.sandbox.id:  # new, or rolled back
            process = await record.sandbox.start(["python3", "-u", "-c", _KERNEL])
            kernel = self.kernels[record] = _Kernel(record.sandbox.id, process)
        return kernel

    async def _execute(self, record: SandboxRecord, kernel: _Kernel, code: str,
                       env: dict[str, str]) -> AsyncIterator[bytes]:
        async with kernel.lock:
            try:
                async for chunk in self._run(record, kernel, code, env):
                    yield chunk
            except KernelOutputTooLarge as exc:
                self.kernels.pop(record, None)
                with contextlib.suppress(Exception):
                    await kernel.process.kill()
                await kernel.aclose()
                yield (json.dumps({"type": "error", "name": "KernelOutputTooLarge",
                                   "value": str(exc), "traceback": ""}) + "\n").encode()

    async def _run(self, record: SandboxRecord, kernel: _Kernel, code: str,
                   env: dict[str, str]) -> AsyncIterator[bytes]:
        while kernel.unfinished:  # what an abandoned execution left behind
            event = await kernel.line()
            if event is None:
                break
            if event.get("type") == _DONE:
                kernel.unfinished -= 1
        request = json.dumps({"code": code, "env_vars": env}) + "\n"
        await kernel.process.write_stdin(request.encode())
        kernel.unfinished += 1
        while True:
            event = await kernel.line()
            if event is None:  # the kernel died (os._exit, a crash): start afresh
                self.kernels.pop(record, None)
                await kernel.aclose()
                yield (json.dumps({"type": "error", "name": "KernelDied",
                                   "value": "the interpreter exited",
                                   "traceback": ""}) + "\n").encode()
                return
            if event.get("type") == _DONE:
                kernel.unfinished -= 1
                return
            yield (json.dumps(event) + "\n").encode()
