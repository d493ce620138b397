"""An interpreter context of the toolbox's code interpreter: its description, and the
Python worker in the sandbox that keeps its namespace (``provider_sdk_emulators.kit.kernel``).

The worker reads one JSON request a line (``{code, envs}``) and writes one JSON chunk a
line (``stdout``, ``stderr``, ``error``, then ``control``). This module holds no HTTP:
``_interpreter`` serves the routes, and ``_store`` keeps a sandbox's contexts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import attrs

from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.kit.kernel import Kernel

Spawn = Callable[[list[str]], tuple[list[str], dict[str, str]]]
"""How a sandbox's daemon starts a process: the argv and environment to start it with."""

# The worker: one namespace for the context's life; one JSON request a line in, one
# JSON chunk a line out; SIGINT interrupts the code, SIGTERM ends the worker. A
# traceback keeps the code's own frames, named "<stdin>" by line, without source text
# (the daemon's worker has none for the code it runs either).
_WORKER = r'''
import json, os, signal, sys, traceback
namespace = {"__name__": "__main__", "__doc__": None, "__package__": None,
             "__builtins__": __builtins__}
out = sys.__stdout__
def emit(chunk):
    out.write(json.dumps(chunk) + "\n")
    out.flush()
class Stream:
    def __init__(self, kind):
        self.kind, self.parts = kind, []
    def write(self, data):
        if not data:
            return 0
        data = data if isinstance(data, str) else str(data)
        self.parts.append(data)
        if "\n" in data or sum(map(len, self.parts)) >= 1024:
            self.flush()
        return len(data)
    def flush(self):
        if self.parts:
            text, self.parts = "".join(self.parts), []
            emit({"type": self.kind, "text": text})
    def isatty(self):
        return False
    def writable(self):
        return True
    encoding = "utf-8"
def interrupt(signum, frame):
    raise KeyboardInterrupt("Execution interrupted")
signal.signal(signal.SIGINT, interrupt)
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
def user_traceback(error):
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == "<cell>"]
    head = "".join(f'  File "<stdin>", line {f.lineno}\n' + (f"    {f.line}\n" if f.line else "")
                   for f in frames)
    tail = f"{type(error).__name__}: {error}\n"
    return ("Traceback (most recent call last):\n" + head + tail) if frames else tail
for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    saved = {}
    for key, value in (request.get("envs") or {}).items():
        saved[key] = os.environ.get(key)
        os.environ[key] = str(value)
    stdout, stderr = Stream("stdout"), Stream("stderr")
    sys.stdout, sys.stderr = stdout, stderr
    control, error = "completed", None
    try:
        exec(compile(request.get("code", ""), "<cell>", "exec"), namespace)
    except KeyboardInterrupt:
        control = "interrupted"
    except SystemExit:
        pass
    except BaseException as caught:
        error = {"type": "error", "name": type(caught).__name__, "value": str(caught),
                 "traceback": user_traceback(caught)}
    finally:
        stdout.flush()
        stderr.flush()
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if error is not None:
        emit(error)
    emit({"type": "control", "text": control})
'''


def _ends(chunk: dict[str, Any]) -> bool:
    return chunk.get("type") == "control"


@attrs.define(kw_only=True, eq=False)
class InterpreterContext:
    """One context: its description, and the worker while it runs."""

    id: str
    cwd: str
    created_at: str
    language: str = "python"
    kernel: Kernel | None = None
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    """Held while an execution runs: they run one after another."""

    @property
    def active(self) -> bool:
        return self.kernel is not None and not self.kernel.exited

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "cwd": self.cwd, "createdAt": self.created_at,
                "active": self.active, "language": self.language}

    async def worker(self, spawn: Spawn, handle: Sandbox) -> Kernel:
        """The running worker, started if it is not (with the daemon's environment)."""
        if self.kernel is None or self.kernel.exited:
            if self.kernel is not None:
                await self.kernel.aclose()
            argv, env = spawn(["python3", "-u", "-c", _WORKER])
            process = await handle.start(argv, cwd=self.cwd, env=env)
            self.kernel = Kernel(process, ends=_ends)
        return self.kernel

    async def close(self) -> None:
        """End the worker."""
        if self.kernel is not None:
            await self.kernel.kill()
            self.kernel = None
