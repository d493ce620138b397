"""``psdk shell ID``: a person's terminal in a sandbox (``terminal.pty``).

This terminal is put in raw mode, so every key (Ctrl-C, arrows, Tab) goes to the
sandbox's terminal as typed, and restored when the shell ends, however it ends, with
the input it holds unread dropped: a reply of this terminal to an escape sequence the
sandbox printed last is never typed into the program that reads it next. Each
``SIGWINCH`` (this window resized) resizes the sandbox's terminal. The shell ends as a
shell does (Ctrl-D at an empty prompt, ``exit``), and ``psdk`` exits with its code
(``128 + N`` when it was killed by signal ``N``). Standard input that is not a terminal
is typed in as it is, then Ctrl-D at its end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator

import anyio

from provider_sdk.cli.commands import connect_resuming, provider_holding
from provider_sdk.cli.console import Console
from provider_sdk.terminal import Terminal

__all__ = ["cmd_shell"]

_READ = 1 << 16


async def cmd_shell(args: argparse.Namespace, console: Console) -> int:
    """Open the sandbox user's shell on a terminal and connect this one to it."""
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    is_tty = os.isatty(stdin)
    cols, rows = _size(stdout if os.isatty(stdout) else stdin)
    async with provider_holding(args, "sandbox", args.id) as provider:
        sandbox = await connect_resuming(provider, args.id, console)
        async with await sandbox.terminal.open(cols=cols, rows=rows, env=dict(args.env),
                                               cwd=args.cwd) as term:
            with _raw(stdin) if is_tty else contextlib.nullcontext():
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_type_in, term, stdin, is_tty)
                    if is_tty:
                        tg.start_soon(_follow_size, term, stdout)
                    async for chunk in term:
                        await _write_all(stdout, chunk)
                    tg.cancel_scope.cancel()
            code = await term.wait()
    return 128 - code if code < 0 else code


async def _type_in(term: Terminal, fd: int, is_tty: bool) -> None:
    """Type what this process reads into the terminal; at the end of input that is not
    a terminal, Ctrl-D."""
    os.set_blocking(fd, False)
    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                continue
            if not data:
                if not is_tty:
                    await term.write(b"\x04")
                return
            await term.write(data)
    finally:
        os.set_blocking(fd, True)


async def _follow_size(term: Terminal, fd: int) -> None:
    """Resize the terminal each time this one is resized."""
    with anyio.open_signal_receiver(signal.SIGWINCH) as signals:
        async for _ in signals:
            await term.resize(*_size(fd))


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 80, 24
    return max(size.columns, 1), max(size.lines, 1)


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """``fd`` raw for the block, then as it was, with what it received and nothing read
    dropped: the replies of this terminal to what the sandbox printed last (a title or
    status report) would otherwise be read as typed by the program after psdk."""
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


async def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` whole (a terminal's stdout shares its stdin's non-blocking mode)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await anyio.wait_writable(fd)
