"""A terminal as the framework hands it to a provider's terminals role, and what that role
hands back: the plain data the hooks and the handles speak (``terminal.pty``), in a
module that imports neither, as :mod:`provider_sdk.commands` is for commands.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["TerminalSession", "TerminalSpec"]


@attrs.frozen(kw_only=True)
class TerminalSpec:
    """A terminal to open: its size, what runs on it, where and with what environment."""

    cols: int
    rows: int
    argv: tuple[str, ...] = ()
    """The program and its arguments; empty: the sandbox user's login shell."""
    env: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    """Set over the sandbox's defaults (``TERM`` is ``xterm-256color`` unless set)."""
    cwd: str | None = None


@runtime_checkable
class TerminalSession(Protocol):
    """One open terminal, as a terminals role serves it. The core's
    :class:`~provider_sdk.terminal.Terminal` is the caller's handle on it."""

    @property
    def pid(self) -> int:
        """The terminal's process in the sandbox."""

    def output(self) -> AsyncIterator[bytes]:
        """What the terminal prints, as it comes, until its process has exited and
        the terminal is drained; called once."""

    async def write(self, data: bytes) -> None:
        """Type ``data`` into the terminal (keys as bytes: ``b"\\x03"`` is Ctrl-C)."""

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size; the program on it gets ``SIGWINCH``."""

    async def wait(self) -> int:
        """Once :meth:`output` has ended: the exit code (``-N``: killed by signal ``N``)."""

    async def kill(self) -> None:
        """End the terminal's process and everything it started."""
