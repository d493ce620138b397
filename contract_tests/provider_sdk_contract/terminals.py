"""Contract: terminals (``sandbox.terminal``, ``terminal.pty``): a program on a real
pseudo-terminal, typed into, read, resized, closed, and its exit code; and a flood
printed on one keeps the caller's memory bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, UnsupportedCapability
from provider_sdk.sandbox import Sandbox
from provider_sdk.terminal import Terminal
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import lacks, requires
from provider_sdk_contract.support import RssGrowth, eventually, new_marker, none_marked

_MiB = 1 << 20
_PROMPT = 60.0
"""Seconds within which a terminal must print what it was asked to."""
_BASH = ["bash", "--norc", "--noprofile", "-i"]
_PS1 = "psdk-ps1> "
"""The prompt of the tests that type keys whose meaning depends on what reads them: a
Ctrl-C or Ctrl-D typed while a command runs reaches the terminal's line discipline, one
typed at the prompt the shell's line editor (which reads a Ctrl-D that the line
discipline took as end of file as a NUL), so those tests wait for the prompt."""


class _Reader:
    """What a terminal printed so far, read up to what a test waits for."""

    def __init__(self, term: Terminal) -> None:
        self.term = term
        self.seen = b""
        self._looked = 0
        self._chunks: AsyncIterator[bytes] = term.__aiter__()

    async def until(self, needle: bytes) -> bytes:
        """Read until ``needle`` has been printed after the last one waited for; what
        was printed from there to the end of ``needle``."""
        start = self._looked
        with anyio.fail_after(_PROMPT):
            while (found := self.seen.find(needle, start)) < 0:
                try:
                    self.seen += await self._chunks.__anext__()
                except StopAsyncIteration:
                    raise AssertionError(f"the terminal ended before printing {needle!r}; "
                                         f"it printed {self.seen[-500:]!r}") from None
        self._looked = found + len(needle)
        return self.seen[start:self._looked]

    async def prompt(self) -> None:
        """Wait for the shell's first output (its prompt): keys typed before it has
        set up its terminal may be discarded, as on any terminal."""
        with anyio.fail_after(_PROMPT):
            while not self.seen:
                try:
                    self.seen += await self._chunks.__anext__()
                except StopAsyncIteration:
                    raise AssertionError("the terminal ended before its prompt") from None


class TerminalContract(ContractBase):
    """Terminals: a tty of the size asked for, keys typed in, output read as it comes,
    resizes seen by the program, Ctrl-C and Ctrl-D as a terminal means them, the exit
    code, and close ending the whole tree."""

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_shell_runs_what_is_typed_and_exits_with_its_code(
            self, sandbox: Sandbox) -> None:
        """The default program is the user's shell: a line typed runs, ``exit 3``
        ends it, and ``wait()`` says 3."""
        async with await sandbox.terminal.open() as term:
            reader = _Reader(term)
            await reader.prompt()
            await term.write("echo psdk-$((6*7))\r")
            await reader.until(b"psdk-42")
            await term.write(b"exit 3\r")
            with anyio.fail_after(_PROMPT):
                assert await term.wait() == 3

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_is_a_tty_of_the_size_asked_for(self, sandbox: Sandbox) -> None:
        """The program's stdin is a terminal of ``cols`` by ``rows``, TERM is set."""
        term = await sandbox.terminal.open(
            cols=91, rows=17, cmd=["sh", "-c", 'tty; stty size; echo "term=$TERM"'])
        reader = _Reader(term)
        await reader.until(b"term=xterm-256color")
        assert b"/dev/pts/" in reader.seen
        assert b"17 91" in reader.seen
        with anyio.fail_after(_PROMPT):
            assert await term.wait() == 0

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_resize_reaches_the_program_as_sigwinch(
            self, sandbox: Sandbox) -> None:
        """After ``resize``, the program gets SIGWINCH and reads the new size."""
        script = 'trap "stty size" WINCH; echo ready; while :; do sleep 0.05; done'
        async with await sandbox.terminal.open(cols=80, rows=24,
                                               cmd=["bash", "-c", script]) as term:
            reader = _Reader(term)
            await reader.until(b"ready")
            await term.resize(132, 43)
            await reader.until(b"43 132")

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_gets_env_and_cwd(self, sandbox: Sandbox) -> None:
        """``env`` is set over the sandbox's, ``TERM`` too when given; ``cwd`` is where
        the program starts."""
        term = await sandbox.terminal.open(
            cmd='echo "foo=$PSDK_FOO term=$TERM"; pwd', cwd="/tmp",
            env={"PSDK_FOO": "bar baz", "TERM": "dumb"})
        reader = _Reader(term)
        await reader.until(b"foo=bar baz term=dumb")
        await reader.until(b"/tmp")
        with anyio.fail_after(_PROMPT):
            assert await term.wait() == 0

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_ctrl_c_interrupts_the_foreground_program(
            self, sandbox: Sandbox) -> None:
        """Ctrl-C stops what runs in the foreground; the shell lives on."""
        async with await sandbox.terminal.open(cmd=_BASH, env={"PS1": _PS1}) as term:
            reader = _Reader(term)
            await reader.until(_PS1.encode())
            await term.write(b"echo sleeping-$((4+4)); sleep 300; echo slept\r")
            await reader.until(b"sleeping-8")
            await term.write(b"\x03")
            printed = await reader.until(_PS1.encode())  # the shell reads a line again
            await term.write(b"echo alive-$((1+1))\r")
            printed += await reader.until(b"alive-2")
            assert b"slept" not in printed

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_ctrl_d_at_the_shell_ends_it_with_the_last_status(
            self, sandbox: Sandbox) -> None:
        """Ctrl-D at an empty prompt is end of file: the shell exits with the status
        of its last command."""
        term = await sandbox.terminal.open(cmd=_BASH, env={"PS1": _PS1})
        reader = _Reader(term)
        await reader.until(_PS1.encode())
        await term.write(b"(exit 7); echo done-$((2+3))\r")
        await reader.until(b"done-5")
        await term.write(b"(exit 6)\r")
        await reader.until(_PS1.encode())
        await reader.until(_PS1.encode())  # at the prompt: the line editor reads the key itself
        await term.write(b"\x04")
        with anyio.fail_after(_PROMPT):
            assert await term.wait() == 6

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_wait_without_reading_returns_the_exit_code(
            self, sandbox: Sandbox) -> None:
        """``wait()`` alone reads and drops the output, then gives the code."""
        term = await sandbox.terminal.open(cmd="seq 1 20000; exit 4")
        with anyio.fail_after(_PROMPT):
            assert await term.wait() == 4

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_close_kills_the_whole_tree(self, sandbox: Sandbox) -> None:
        """``close()`` ends the program and what it started; ``wait()`` then returns;
        closing again is not an error."""
        marker = new_marker("terminal")
        term = await sandbox.terminal.open(
            cmd=["bash", "-c", "sleep 300 & sleep 301 & echo started; wait"],
            env={"PSDK_MARK": marker})
        reader = _Reader(term)
        await reader.until(b"started")
        await term.close()
        with anyio.fail_after(_PROMPT):
            assert await term.wait() != 0
        await eventually(lambda: none_marked(sandbox, marker),
                         what="no process of the closed terminal is left")
        await term.close()

    @requires(Capability.TERMINAL_PTY)
    async def test_terminal_refuses_a_size_that_is_not_one(self, sandbox: Sandbox) -> None:
        """A size of zero, a negative one or a non-integer is InvalidInput."""
        for cols, rows in ((0, 24), (80, -1), (80.5, 24), (70000, 24)):
            with pytest.raises(InvalidInput):
                await sandbox.terminal.open(cols=cols, rows=rows)  # type: ignore[arg-type]

    @requires(Capability.TERMINAL_PTY)
    async def test_hostile_terminal_flood_keeps_the_caller_memory_bounded(
            self, sandbox: Sandbox) -> None:
        """128 MiB printed on a terminal and read through: every byte arrives, and this
        process grows by less than 64 MiB meanwhile."""
        term = await sandbox.terminal.open(cmd="head -c 134217728 /dev/zero | tr '\\0' x")
        received = 0
        async with RssGrowth().measure() as rss:
            with anyio.fail_after(240):
                async for chunk in term:
                    received += len(chunk)
        assert received == 128 * _MiB
        assert await term.wait() == 0
        assert rss.growth < 64 * _MiB, f"memory grew by {rss.growth / _MiB:.0f} MiB"

    @lacks(Capability.TERMINAL_PTY)
    async def test_terminal_undeclared_raises_unsupported_capability(
            self, sandbox: Sandbox) -> None:
        """Without ``terminal.pty``, opening a terminal raises UnsupportedCapability
        naming it, before anything runs."""
        with pytest.raises(UnsupportedCapability) as raised:
            await sandbox.terminal.open()
        assert raised.value.capability == "terminal.pty"
