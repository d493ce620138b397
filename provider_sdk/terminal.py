"""Terminals in a sandbox (``sandbox.terminal``, capability ``terminal.pty``): a program,
a shell by default, on a pseudo-terminal, for agents and people that type.

::

    async with await sandbox.terminal.open(cols=100, rows=30) as term:
        await term.write(b"ls --color\\r")
        async for chunk in term:          # what the terminal prints, as it comes
            ...
        await term.resize(120, 40)        # the program gets SIGWINCH
        await term.write(b"exit 3\\r")
        code = await term.wait()          # 3

The handles check their input and the capability, then go to the provider's terminals
role (:class:`provider_sdk.roles.Terminals`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

import anyio

from provider_sdk._hooks import ProviderHooks
from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, ProcessNotFound, attributed
from provider_sdk.events import span
from provider_sdk.files import check_path
from provider_sdk.models import _env_map
from provider_sdk.terminals import TerminalSession, TerminalSpec

__all__ = ["Terminal", "Terminals"]


class _Owner(Protocol):
    """What :class:`Terminals` needs of its sandbox."""

    @property
    def provider(self) -> ProviderHooks: ...

    @property
    def id(self) -> str: ...


class Terminals:
    """A sandbox's terminals (``sandbox.terminal``)."""

    def __init__(self, sandbox: _Owner) -> None:
        self._sandbox = sandbox

    async def open(self, *, cols: int = 80, rows: int = 24,
                   cmd: str | Sequence[str] | None = None,
                   env: Mapping[str, str] | None = None,
                   cwd: str | None = None) -> Terminal:
        """Start ``cmd`` on a new terminal of ``cols`` by ``rows`` and return it at once
        (``terminal.pty``).

        ``cmd`` is an argv list, or a string run by ``/bin/bash -c``; ``None`` starts the
        sandbox user's login shell. ``env`` is set over the sandbox's defaults (``TERM``
        is ``xterm-256color`` unless given); ``cwd`` is where it starts.
        """
        provider, sandbox_id = self._sandbox.provider, self._sandbox.id
        provider.require(Capability.TERMINAL_PTY, sandbox_id=sandbox_id)
        with attributed(provider.name, sandbox_id):
            _check_size(cols, rows)
            argv = _argv(cmd)
            checked = _env_map(env)
        if cwd is not None:
            check_path(cwd, provider.name, sandbox_id)
        spec = TerminalSpec(cols=cols, rows=rows, argv=argv, env=checked, cwd=cwd)
        async with span("terminal.open", provider.name, sandbox_id):
            session = await provider._open_terminal(sandbox_id, spec)
        return Terminal(self._sandbox, session)


class Terminal:
    """An open terminal. Iterate it (``async for chunk in term``) for what it prints;
    the iteration ends once its program has exited and everything it printed is read.
    ``async with`` closes it at the end of the block.

    One task reads it at a time; :meth:`write` and :meth:`resize` may be called from
    any task meanwhile.
    """

    def __init__(self, sandbox: _Owner, session: TerminalSession) -> None:
        self._sandbox = sandbox
        self._session = session
        self._output: AsyncIterator[bytes] | None = None
        self._ended = False

    @property
    def pid(self) -> int:
        """The terminal's process in the sandbox."""
        return self._session.pid

    def __repr__(self) -> str:
        return f"<Terminal {self.pid} in {self._sandbox.id}>"

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        if self._output is None:
            self._output = self._session.output()
        async for chunk in self._output:
            yield chunk
        self._ended = True

    async def write(self, data: bytes | str) -> None:
        """Type ``data`` (text as UTF-8) into the terminal: ``"\\r"`` is Enter,
        ``"\\x03"`` Ctrl-C, ``"\\x04"`` Ctrl-D."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        provider = self._sandbox.provider
        async with span("terminal.write", provider.name, self._sandbox.id, pid=self.pid):
            await self._session.write(payload)

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal's size; the program on it gets ``SIGWINCH``."""
        provider = self._sandbox.provider
        with attributed(provider.name, self._sandbox.id):
            _check_size(cols, rows)
        async with span("terminal.resize", provider.name, self._sandbox.id, pid=self.pid):
            await self._session.resize(cols, rows)

    async def wait(self) -> int:
        """Wait for the program to exit; its exit code (``-N``: killed by signal ``N``).

        What the terminal printed and was not read is read and dropped."""
        if not self._ended:
            async for _ in self:
                pass
        return await self._session.wait()

    async def close(self) -> None:
        """End the terminal: its program, and everything it started, is killed.
        Closing twice, or after the program exited, is not an error."""
        if self._ended:
            return
        provider = self._sandbox.provider
        async with span("terminal.close", provider.name, self._sandbox.id, pid=self.pid):
            with contextlib.suppress(ProcessNotFound):  # it had ended on its own
                await self._session.kill()

    async def __aenter__(self) -> Terminal:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()


def _check_size(cols: int, rows: int) -> None:
    for name, value in (("cols", cols), ("rows", rows)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
            raise InvalidInput(f"{name}: {value!r} is not a terminal size (1-65535)")


def _argv(cmd: str | Sequence[str] | None) -> tuple[str, ...]:
    if cmd is None:
        return ()
    argv = ("/bin/bash", "-c", cmd) if isinstance(cmd, str) else tuple(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidInput(f"cmd: expected a string or a non-empty list of strings, "
                           f"got {cmd!r}")
    if any("\0" in a for a in argv) or not argv[0]:
        raise InvalidInput("cmd: an empty program, or an argument with a NUL byte")
    return argv
