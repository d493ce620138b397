"""``psdk shell ID`` as a person meets it: psdk runs on a pseudo-terminal made here (the
test side's ``pty``), what is typed reaches the sandbox's shell, a resize of this
terminal reaches it as SIGWINCH, this terminal is raw while it runs and restored after,
and Ctrl-D at the shell ends psdk with the shell's exit code."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider_sdk.cli.shell import _raw
from provider_sdk.sync import open_provider

pytestmark = pytest.mark.slow


class _Pty:
    """psdk on a terminal of its own: what it prints, and keys typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.set_size(100, 30)
        self.process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                        env=env, start_new_session=True,
                                        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.seen = b""

    def set_size(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def until(self, needle: bytes, timeout: float = 60.0) -> None:
        start = len(self.seen)
        deadline = time.monotonic() + timeout
        while needle not in self.seen[start:]:
            left = deadline - time.monotonic()
            assert left > 0, f"never printed {needle!r}; printed {self.seen[-800:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    data = b""
                assert data, f"psdk ended before printing {needle!r}: {self.seen[-800:]!r}"
                self.seen += data

    def echoing(self) -> bool:
        return bool(termios.tcgetattr(self.master)[3] & termios.ECHO)

    def finish(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, "psdk did not end"
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):  # psdk has ended: its side is gone
                    self.seen += os.read(self.master, 65536)
        return self.process.returncode


@pytest.fixture
def shell_env(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A local sandbox and the environment that points psdk at its home."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME")}
    env.update(PSDK_HOME=str(home), PSDK_PROVIDER="local")
    with open_provider("local", home=str(home)) as provider:
        sandbox = provider.create()
        try:
            yield sandbox.id, env
        finally:
            sandbox.kill()


def test_psdk_shell_types_resizes_and_leaves_with_ctrl_d_and_the_exit_code(
        shell_env: tuple[str, dict[str, str]]) -> None:
    sandbox_id, env = shell_env
    term = _Pty([sys.executable, "-m", "provider_sdk.cli", "shell", sandbox_id], env)
    try:
        term.until(b"$ ")  # the prompt: keys typed before it may be discarded
        term.type(b"echo ready-$((20+22))\r")
        term.until(b"ready-42")
        assert not term.echoing(), "psdk's terminal is not in raw mode"
        term.type(b"stty size\r")
        term.until(b"30 100")
        term.set_size(132, 43)
        os.killpg(term.process.pid, signal.SIGWINCH)
        deadline = time.monotonic() + 30
        while b"43 132" not in term.seen:  # the resize travels on while we type
            assert time.monotonic() < deadline, f"never resized: {term.seen[-500:]!r}"
            term.type(b"stty size\r")
            term.until(b"\n")
            time.sleep(0.2)
        term.type(b"(exit 5)\r")
        term.type(b"\x04")
        assert term.finish() == 5
        assert term.echoing(), "psdk left its terminal in raw mode"
    finally:
        if term.process.poll() is None:
            term.process.kill()
        os.close(term.master)


def test_psdk_shell_drops_what_its_terminal_received_unread_when_it_ends() -> None:
    """The replies a terminal sends to queries the sandbox printed just before its shell
    ended (a title report carrying text the sandbox chose, say) reach the terminal's
    input after psdk stopped reading it: restored, the terminal holds none of them, so
    the program that reads it next (the user's own shell) never runs them."""
    master, slave = pty.openpty()
    try:
        with _raw(slave):
            os.write(master, b"\x1b]lrm -rf ~\x1b\\\n")
            deadline = time.monotonic() + 10
            while not _unread(slave):
                assert time.monotonic() < deadline, "the reply never reached the terminal"
                time.sleep(0.01)
        assert _unread(slave) == 0
    finally:
        os.close(master)
        os.close(slave)


def _unread(fd: int) -> int:
    """Bytes waiting in the terminal ``fd``'s input."""
    waiting: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    return waiting
