"""The code interpreter on port 49999: ``POST /execute``, answered in NDJSON.

E2B's code-interpreter template and Cube's ``sandbox-code`` template run a Jupyter
server there; ``run_code`` posts ``{code, language, env_vars}`` and reads events, one
JSON object a line: ``stdout``/``stderr`` (``text``), ``result`` (``text``,
``is_main_result``), ``error`` (``name``, ``value``, ``traceback``) and
``number_of_executions``. Here a small Python kernel runs inside the sandbox, started
on first use and kept, so variables persist from one execution to the next as in a
notebook; only Python is served, and results are ``repr`` text.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

import anyio

from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Process
from provider_sdk_e2b.emulator._http import Request, Response, json_response
from provider_sdk_e2b.emulator._world import SandboxRecord

__all__ = ["INTERPRETER_PORT", "Interpreters"]

INTERPRETER_PORT = 49999

_DONE = "__psdk_done__"

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
            emit({"type": self.kind, "text": head + "\n"})
        return len(text)
    def flush(self):
        if self.pending:
            emit({"type": self.kind, "text": self.pending})
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
                emit({"type": "result", "text": repr(value), "is_main_result": True})
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
        self.buffer = b""
        self.lock = anyio.Lock()
        self.unfinished = 0
        """Executions whose reader left early: their events are still to be skipped."""

    async def aclose(self) -> None:
        aclose = getattr(self.events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await aclose()

    async def line(self) -> dict[str, Any] | None:
        """The kernel's next event, or ``None`` once it has exited."""
        while b"\n" not in self.buffer:
            event = await anext(self.events, None)
            if event is None or isinstance(event, ProcessExit):
                return None
            if isinstance(event, ProcessOutput) and event.stream == "stdout":
                self.buffer += event.data
        raw, _, self.buffer = self.buffer.partition(b"\n")
        parsed: dict[str, Any] = json.loads(raw)
        return parsed


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
