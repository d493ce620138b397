"""Interactive processes of a session (``pty_exec_start``/``pty_write_stdin``): a command
on a terminal of the sandbox (``terminal.pty``) when the Agents SDK asks for a tty, a
background process (``process.background``) when it does not.

Each runs under a session-local id the model sees; a task pumps what it prints into a
queue the Agents SDK's own collector drains. This module owns those entries and knows
nothing of any provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.sandbox.session.pty_output import collect_pty_output
from agents.sandbox.session.pty_types import (
    PTY_PROCESSES_MAX,
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    process_id_to_prune_from_meta,
    resolve_pty_write_yield_time_ms,
)

from provider_sdk.commands import ProcessExit, ProcessOutput
from provider_sdk.errors import ProcessNotFound, SandboxError
from provider_sdk.sandbox import Process, Sandbox
from provider_sdk.terminal import Terminal

__all__ = ["PtyProcesses"]

_START_YIELD_MS = 10_000  # the Agents SDK's default wait for a new process's first output
_WRITE_YIELD_MS = 250


@dataclass
class _Entry:
    """One interactive process and what it printed and nobody read yet."""

    handle: Terminal | Process
    tty: bool
    chunks: deque[bytes] = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    notify: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None
    last_used: float = field(default_factory=time.monotonic)
    pump: asyncio.Task[None] | None = None


class PtyProcesses:
    """The interactive processes of one session's sandbox."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._lock = asyncio.Lock()

    async def start(self, sandbox: Sandbox, argv: Sequence[str], *, tty: bool,
                    env: dict[str, str], cwd: str | None, yield_time_s: float | None,
                    max_output_tokens: int | None) -> PtyExecUpdate:
        """Start ``argv`` and return what it printed within the yield time."""
        handle: Terminal | Process
        if tty:
            handle = await sandbox.terminal.open(cmd=list(argv), env=env, cwd=cwd)
        else:
            handle = await sandbox.start(list(argv), env=env, cwd=cwd, stdin=False)
        entry = _Entry(handle=handle, tty=tty)
        entry.pump = asyncio.create_task(self._pump(entry))
        async with self._lock:
            process_id = allocate_pty_process_id(set(self._entries))
            pruned = self._prune()
            self._entries[process_id] = entry
        if pruned is not None:
            await self._end(pruned)
        wait_ms = _START_YIELD_MS if yield_time_s is None else int(yield_time_s * 1000)
        return await self._collect(process_id, entry, clamp_pty_yield_time_ms(wait_ms),
                                   max_output_tokens)

    async def write(self, process_id: int, chars: str, *, yield_time_s: float | None,
                    max_output_tokens: int | None) -> PtyExecUpdate:
        """Type ``chars`` into the process; return what it printed within the yield time.

        Raises:
            PtySessionNotFoundError: no live process has that id (the caller's lookup).
            RuntimeError: the process has no terminal to type into.
        """
        entry = self._entries[process_id]
        if chars:
            if not isinstance(entry.handle, Terminal):
                raise RuntimeError("stdin is not available for this process")
            with contextlib.suppress(ProcessNotFound):  # it has just exited
                await entry.handle.write(chars)
        entry.last_used = time.monotonic()
        wait_ms = _WRITE_YIELD_MS if yield_time_s is None else int(yield_time_s * 1000)
        return await self._collect(
            process_id, entry,
            resolve_pty_write_yield_time_ms(yield_time_ms=wait_ms, input_empty=chars == ""),
            max_output_tokens)

    def live(self) -> dict[int, _Entry]:
        """The live processes by id (for the session's id lookup)."""
        return self._entries

    async def end_all(self) -> None:
        """End every process (the session stops or shuts down)."""
        async with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            await self._end(entry)

    async def _collect(self, process_id: int, entry: _Entry, yield_ms: int,
                       max_output_tokens: int | None) -> PtyExecUpdate:
        output, tokens, closed = await collect_pty_output(
            output_chunks=entry.chunks, output_lock=entry.lock, output_notify=entry.notify,
            is_done=entry.done.is_set, yield_time_ms=yield_ms,
            max_output_tokens=max_output_tokens)
        if not closed:
            return PtyExecUpdate(process_id=process_id, output=output, exit_code=None,
                                 original_token_count=tokens)
        async with self._lock:
            self._entries.pop(process_id, None)
        return PtyExecUpdate(process_id=None, output=output, exit_code=entry.exit_code,
                             original_token_count=tokens)

    async def _pump(self, entry: _Entry) -> None:
        try:
            if isinstance(entry.handle, Terminal):
                async for chunk in entry.handle:
                    await self._append(entry, chunk)
                entry.exit_code = await entry.handle.wait()
            else:
                async for event in entry.handle.events():
                    if isinstance(event, ProcessOutput):
                        await self._append(entry, event.data)
                    elif isinstance(event, ProcessExit):
                        entry.exit_code = event.exit_code
        except SandboxError as exc:  # the sandbox went away: the process is over
            await self._append(entry, f"\n[process lost: {type(exc).__name__}]\n".encode())
            entry.exit_code = -1
        finally:
            entry.done.set()
            entry.notify.set()

    @staticmethod
    async def _append(entry: _Entry, chunk: bytes) -> None:
        async with entry.lock:
            entry.chunks.append(chunk)
        entry.notify.set()

    def _prune(self) -> _Entry | None:
        if len(self._entries) < PTY_PROCESSES_MAX:
            return None
        meta = [(pid, e.last_used, e.done.is_set()) for pid, e in self._entries.items()]
        victim = process_id_to_prune_from_meta(meta)
        return None if victim is None else self._entries.pop(victim, None)

    @staticmethod
    async def _end(entry: _Entry) -> None:
        if not entry.done.is_set():
            with contextlib.suppress(SandboxError):
                if isinstance(entry.handle, Terminal):
                    await entry.handle.close()
                else:
                    await entry.handle.kill()
        if entry.pump is not None:
            entry.pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, SandboxError):
                await entry.pump

