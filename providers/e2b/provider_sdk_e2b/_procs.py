"""The background processes the commands role of ``E2BProvider`` keeps (:class:`Proc`:
their events, bounded, the exit never dropped, so ``wait`` works after they exited), and
the shapes of envd's process service: selectors, stdin, events.

This module makes no request; the commands role (``_commands``) does.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import anyio
from e2b.envd.process import process_pb
from protobuf import Oneof

from provider_sdk.provider import ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk_e2b import _shell

__all__ = ["Proc", "aclose", "payload", "as_input", "selector", "to_events"]

_CLOSE_WAIT = 5.0
"""Seconds closing a process stream may take."""


class Proc:
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
        """The scope of the pump (a task of the session's) keeping this process's
        events, once one runs."""
        self.mark: str | None = None
        """The tree mark this provider started the process with (see
        :func:`provider_sdk.scripts.mark_env`); ``None`` for one started elsewhere."""

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


def selector(pid: int) -> process_pb.ProcessSelector:
    """envd's name for the process ``pid``."""
    return process_pb.ProcessSelector(selector=cast(Any, Oneof("pid", pid)))


def as_input(data: bytes) -> process_pb.ProcessInput:
    """``data`` as input for a process's stdin."""
    return process_pb.ProcessInput(input=cast(Any, Oneof("stdin", data)))


def payload(event: process_pb.StartResponse | process_pb.ConnectResponse) -> Any:
    """The payload of a process event: a StartEvent, DataEvent, EndEvent or KeepAlive."""
    oneof = event.event.event if event.event is not None else None
    return oneof.value if oneof is not None else None


async def aclose(stream: AsyncIterator[Any]) -> None:
    """Close a stream, shielded from cancellation but bounded: a data plane that stops
    answering does not hold up the provider's close."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        with anyio.move_on_after(_CLOSE_WAIT, shield=True), contextlib.suppress(Exception):
            await close()


def to_events(event: process_pb.StartResponse | process_pb.ConnectResponse
              ) -> list[ProcessEvent]:
    """The neutral events of one of envd's (none for a start event or a keepalive)."""
    found = payload(event)
    if isinstance(found, process_pb.ProcessEvent.DataEvent) and found.output is not None:
        stream, chunk = found.output.field, found.output.value
        if stream in ("stdout", "stderr") and chunk:
            return [ProcessOutput(stream, bytes(chunk))]
    elif isinstance(found, process_pb.ProcessEvent.EndEvent):
        return [ProcessExit(_shell.exit_code(found.exit_code, found.status))]
    return []
