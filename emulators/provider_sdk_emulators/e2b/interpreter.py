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
holds one event line at a time, at most :data:`~provider_sdk_emulators.kit.bodies.BODY_LIMIT`
bytes: a kernel whose output breaks that (code that writes to the kernel's own stdout)
is ended, and the execution reports ``KernelOutputTooLarge``.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.kit.http import Request, Response, json_response
from provider_sdk_emulators.kit.kernel import Kernel, KernelDied, KernelOutputTooLarge

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


class Interpreters:
    """The code interpreters of every sandbox of one emulator."""

    def __init__(self) -> None:
        # Keyed by record: a killed sandbox's record, and so its kernel, is let go.
        self.kernels: weakref.WeakKeyDictionary[SandboxRecord, tuple[str, Kernel]] = \
            weakref.WeakKeyDictionary()
        """Each sandbox's kernel, with the id of the backend sandbox it runs in."""

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
        for _sandbox, kernel in list(self.kernels.values()):
            await kernel.aclose()
        self.kernels.clear()

    async def _kernel(self, record: SandboxRecord) -> Kernel:
        known = self.kernels.get(record)
        if known is None or known[0] != record.sandbox.id:  # new, or rolled back
            process = await record.sandbox.start(["python3", "-u", "-c", _KERNEL])
            known = self.kernels[record] = (record.sandbox.id,
                                            Kernel(process, ends=_is_done))
        return known[1]

    async def _execute(self, record: SandboxRecord, kernel: Kernel, code: str,
                       env: dict[str, str]) -> AsyncIterator[bytes]:
        async with kernel.lock:
            try:
                async for event in kernel.execute({"code": code, "env_vars": env}):
                    if not _is_done(event):
                        yield (json.dumps(event) + "\n").encode()
            except KernelOutputTooLarge as exc:
                self.kernels.pop(record, None)
                await kernel.kill()
                yield _error("KernelOutputTooLarge", str(exc))
            except KernelDied:  # os._exit, a crash: the next execution starts afresh
                self.kernels.pop(record, None)
                await kernel.aclose()
                yield _error("KernelDied", "the interpreter exited")


def _is_done(event: dict[str, Any]) -> bool:
    return event.get("type") == _DONE


def _error(name: str, value: str) -> bytes:
    return (json.dumps({"type": "error", "name": name, "value": value,
                        "traceback": ""}) + "\n").encode()
