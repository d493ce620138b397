"""The code-interpreter kernel: the program :mod:`provider_sdk.kernel_interpreter` runs
inside a sandbox with ``python3 -u -c`` (its source, not this module, travels; the SDK
never imports it). It needs the standard library of Python 3.8 or later, nothing else.

Protocol, one JSON object a line both ways:

- requests on the kernel's stdin: ``{"op": "run", "e": N, "code": ..., "env": {...}}``
  runs ``code`` in the kernel's one namespace; ``{"op": "interrupt", "e": N}`` raises
  ``KeyboardInterrupt`` in run ``N`` if it is still running (and does nothing else).
  End of file ends the kernel.
- frames on the kernel's stdout, each with a sequence number ``s`` counting up from 1
  (a host that reads the output again from its start skips what it has seen):
  ``{"t": "ready"}`` once, then per run ``stdout``/``stderr`` (``x``: text), ``text``
  (``x``: a piece of the last expression's ``repr``), ``error`` (``name``, ``value``,
  ``traceback``) and last ``done`` (``count``: runs so far), each with the run's ``e``.

The code's output, and that of every process it starts, goes through descriptors 1 and
2, which are pipes the kernel reads (a thread turns what arrives into frames as it
arrives); the frames travel on a copy of the original stdout no code is given, and the
code's stdin is ``/dev/null``. Each frame holds at most 64 KiB of text. The host bounds
what it keeps.

The kernel makes itself not dumpable before anything else: its ``/proc`` entries are
then root's, and it cannot be traced, so code in another context (another process of
the same user) cannot reach its descriptors to write frames into its channel.
"""

from __future__ import annotations

import ast
import builtins
import codecs
import contextlib
import json
import linecache
import os
import queue
import select
import signal
import sys
import threading
import traceback
from typing import Any

CHUNK = 65536
"""Bytes read from an output pipe at once, and characters of text a frame holds."""


class Channel:
    """Frames to the host, on a descriptor of their own."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.seq = 0

    def send(self, frame: dict[str, Any]) -> None:
        with self.lock:
            self.seq += 1
            frame["s"] = self.seq
            view = memoryview((json.dumps(frame) + "\n").encode())
            while view:
                view = view[os.write(self.fd, view):]

    def text(self, kind: str, execution: int, text: str) -> None:
        for at in range(0, len(text), CHUNK):
            self.send({"t": kind, "e": execution, "x": text[at:at + CHUNK]})


class Output:
    """Descriptors 1 and 2 as pipes, read into frames tagged with the current run."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.lock = threading.Lock()
        self.execution = 0
        self.pipes: dict[int, tuple[str, codecs.IncrementalDecoder]] = {}
        for fd, name in ((1, "stdout"), (2, "stderr")):
            read, write = os.pipe()
            os.dup2(write, fd)
            os.close(write)
            os.set_blocking(read, False)
            self.pipes[read] = (name, codecs.getincrementaldecoder("utf-8")("replace"))

    def pump(self) -> None:
        """Send output as it arrives (a thread of its own, for the kernel's life)."""
        while True:
            ready, _, _ = select.select(list(self.pipes), [], [])
            with self.lock:
                for fd in ready:
                    self._read(fd, once=True)

    def drain(self) -> None:
        """Send everything written so far (the run's end)."""
        with self.lock:
            for fd in self.pipes:
                self._read(fd, once=False)

    def _read(self, fd: int, *, once: bool) -> None:
        name, decoder = self.pipes[fd]
        while True:
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                return
            text = decoder.decode(data)
            if text:
                self.channel.text(name, self.execution, text)
            if once or not data:
                return


class Kernel:
    """One namespace, and the runs that share it, one at a time."""

    def __init__(self, channel: Channel, output: Output) -> None:
        self.channel = channel
        self.output = output
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.count = 0
        self.running = 0
        """The run ``KeyboardInterrupt`` may be raised in; 0 between runs."""
        self.lock = threading.Lock()
        self.work: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.main = threading.main_thread().ident

    def on_sigint(self, signum: int, frame: object) -> None:
        if self.running:
            raise KeyboardInterrupt("interrupted")

    def read_requests(self, fd: int) -> None:
        """Queue runs, and interrupt the one an interrupt names (a thread of its own)."""
        with os.fdopen(fd, "rb") as stream:
            for line in stream:
                try:
                    request = json.loads(line)
                except (ValueError, RecursionError):  # code can write here too
                    continue
                if not isinstance(request, dict):
                    continue
                if request.get("op") == "interrupt":
                    with self.lock:
                        if self.running and self.running == request.get("e") \
                                and self.main is not None:
                            signal.pthread_kill(self.main, signal.SIGINT)
                elif request.get("op") == "run":
                    self.work.put(request)
        self.work.put(None)

    def serve(self) -> None:
        self.channel.send({"t": "ready"})
        while True:
            request = self.work.get()
            if request is None:
                return
            self.run(request)

    def run(self, request: dict[str, Any]) -> None:
        execution = int(request.get("e", 0))
        self.count += 1
        self.output.execution = execution
        env = request.get("env") or {}
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        text, error = None, None
        try:
            with self.lock:
                self.running = execution
            try:
                text = self.execute(str(request.get("code", "")))
            finally:
                with self.lock:
                    self.running = 0
        except BaseException as caught:  # the code's own, KeyboardInterrupt included
            error = describe(caught)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a stream the code replaced and broke
                stream.flush()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.output.drain()
        if text is not None:
            self.channel.text("text", execution, text)
        if error is not None:
            self.channel.send({"t": "error", "e": execution, **error})
        self.channel.send({"t": "done", "e": execution, "count": self.count})

    def execute(self, code: str) -> str | None:
        """Run ``code``; the ``repr`` of its last expression's value, unless ``None``."""
        name = f"<cell-{self.count}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body[-1].value)
            del tree.body[-1]
        exec(compile(tree, name, "exec"), self.namespace)
        if last is None:
            return None
        value = eval(compile(last, name, "eval"), self.namespace)
        if value is None:
            return None
        self.namespace["_"] = value
        return repr(value)


def describe(error: BaseException) -> dict[str, str]:
    """An exception as the host reports it: the code's own frames only."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if f.filename.startswith("<cell-")]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] \
        if frames else []
    lines += traceback.format_exception_only(type(error), error)
    try:
        value = str(error)
    except Exception:  # a __str__ that raises
        value = f"<unprintable {type(error).__name__}>"
    return {"name": type(error).__name__, "value": value[:CHUNK],
            "traceback": "".join(lines)[-CHUNK:]}


def private() -> None:
    """Keep processes of the same user out of this one (``PR_SET_DUMPABLE`` 0); a
    Python without ``ctypes`` goes without."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


def main() -> None:
    private()
    channel = Channel(os.dup(1))
    requests = os.dup(0)
    quiet = os.open(os.devnull, os.O_RDONLY)
    os.dup2(quiet, 0)
    os.close(quiet)
    output = Output(channel)
    kernel = Kernel(channel, output)
    signal.signal(signal.SIGINT, kernel.on_sigint)
    threading.Thread(target=output.pump, daemon=True).start()
    threading.Thread(target=kernel.read_requests, args=(requests,), daemon=True).start()
    kernel.serve()


if __name__ == "__main__":
    main()
