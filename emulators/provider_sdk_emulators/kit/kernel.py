"""A code-interpreter kernel in a sandbox, as the emulators' interpreters drive it.

A kernel is a background process in the sandbox (started by the emulator, with a worker
script of its vendor's flavor) that reads one JSON request a line on its stdin and
writes one JSON event a line on its stdout, ending each execution with an event of its
own. :class:`Kernel` writes a request and yields its events; it holds one event line at
a time, at most :data:`~provider_sdk_emulators.kit.bodies.BODY_LIMIT` bytes (a longer line, from
code that writes to the kernel's own stdout, raises :class:`KernelOutputTooLarge`);
lines that are not JSON objects are skipped. An execution whose reader left early is
finished first (its events skipped) before the next request is written, so executions
never see each other's events. It talks no HTTP and knows no vendor.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio

from provider_sdk.provider import ProcessExit, ProcessOutput
from provider_sdk.sandbox import Process
from provider_sdk_emulators.kit.bodies import BODY_LIMIT

__all__ = ["Kernel", "KernelDied", "KernelOutputTooLarge"]

_MAX_LINE = BODY_LIMIT


class KernelOutputTooLarge(Exception):
    """The kernel wrote a line longer than the emulator will hold."""


class KernelDied(Exception):
    """The kernel exited before it finished the execution."""


class Kernel:
    """One kernel process and the lines it has written."""

    def __init__(self, process: Process, *, ends: Callable[[dict[str, Any]], bool]) -> None:
        """``ends`` says which event is an execution's last."""
        self.process = process
        self.events = process.events()
        self._ends = ends
        self._buffer = bytearray()
        self._scanned = 0
        self.lock = anyio.Lock()
        """Held by the execution running: one at a time."""
        self._unfinished = 0
        """Executions whose reader left early: their events are still to be skipped."""
        self.exited = False

    async def aclose(self) -> None:
        """Let go of the kernel's output stream (the process itself is not killed)."""
        aclose = getattr(self.events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await aclose()

    async def kill(self) -> None:
        """End the kernel and let go of it."""
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self.process.kill()
        await self.aclose()

    async def _line(self) -> dict[str, Any] | None:
        """The kernel's next event, or ``None`` once it has exited."""
        while True:
            # Only the new bytes are searched: a long line costs linear time.
            while (end := self._buffer.find(b"\n", self._scanned)) < 0:
                self._scanned = len(self._buffer)
                if len(self._buffer) > _MAX_LINE:
                    raise KernelOutputTooLarge(f"a kernel line is longer than {_MAX_LINE} "
                                               "bytes")
                event = await anext(self.events, None)
                if event is None or isinstance(event, ProcessExit):
                    self.exited = True
                    return None
                if isinstance(event, ProcessOutput) and event.stream == "stdout":
                    self._buffer += event.data
            raw = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            self._scanned = 0
            try:
                parsed = json.loads(raw)
            except ValueError:
                continue  # bytes the code wrote past the kernel's streams
            if isinstance(parsed, dict):
                return parsed

    async def execute(self, request: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """Write ``request`` and yield the execution's events, its last one included.
        Call it holding :attr:`lock`.

        Raises:
            KernelDied: the kernel exited first (it is of no more use).
            KernelOutputTooLarge: it wrote a line longer than the emulator holds.
        """
        while self._unfinished:  # what an abandoned execution left behind
            event = await self._line()
            if event is None:
                raise KernelDied("the interpreter exited")
            if self._ends(event):
                self._unfinished -= 1
        await self.process.write_stdin((json.dumps(request) + "\n").encode())
        self._unfinished += 1
        while True:
            event = await self._line()
            if event is None:
                raise KernelDied("the interpreter exited")
            if self._ends(event):
                self._unfinished -= 1
                yield event
                return
            yield event
