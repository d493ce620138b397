"""A process tree built to escape a kill, and how to find what is left of it: shared by
the vendor providers' hostile tests (each runs it through its own provider); and the
state of a host process, as /proc shows it, for the tests that stop or end one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from provider_sdk.sandbox import Sandbox

__all__ = ["ENDED", "ODD", "ODD_NAMES", "TREE", "first_chunk", "host_state", "oddly_named",
           "sleepers", "until_started"]

ODD = "a) R 1 1 1 (b"
"""A command name that a parse of /proc/PID/stat from the first ")" reads as child of 1."""
ODD_NAMES = (ODD, "a) b", ") (", "x)", "(y", "z) Z 1 1 1 (", "tab\tand space")
"""Command names that a parse of ``/proc/PID/stat`` from the first ``)`` gets wrong."""
TREE = (
    f"cp /bin/sleep '/tmp/{ODD}' && '/tmp/{ODD}' 600 & "
    "(exec -a 'a) b' sleep 601) & "
    "setsid sh -c '(sleep 602 &); exec sleep 603' & "
    "sleep 604")
"""A tree whose every process sleeps 600..604 s; the test looks for those after a kill."""


async def sleepers(sandbox: Sandbox) -> list[str]:
    """The stat lines of live processes of :data:`TREE` (found by their sleep argument)."""
    found = await sandbox.exec(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
        "grep -qE ' 60[0-4] ?$' && ! grep -q ') Z' $p/stat && cat $p/stat; done; true")
    return [line for line in found.stdout.splitlines() if line]


async def until_started(sandbox: Sandbox, count: int) -> None:
    """Wait until ``count`` processes of :data:`TREE` run (fail after 30 s)."""
    for _ in range(300):
        if len(await sleepers(sandbox)) >= count:
            return
        await anyio.sleep(0.1)
    pytest.fail(f"fewer than {count} processes of the tree started")


async def first_chunk(sandbox: Sandbox, path: str) -> bytes:
    """The first chunk a stream of ``path`` yields."""
    async for chunk in sandbox.files.stream(path):
        return chunk
    return b""


ENDED = frozenset({"Z", "X", "x"})
"""States of a process that has ended and cannot run again: a zombie (not yet reaped
by its parent) and a dead one."""


def host_state(pid: int) -> str | None:
    """The state letter of host process ``pid`` in ``/proc/PID/stat`` (``R``, ``S``,
    ``T``, ``Z``...), or ``None`` once it is gone. The state follows the last ``)``:
    the command name before it may hold any character."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[0]


@contextlib.contextmanager
def oddly_named(where: Path, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """A host shell named ``name`` (the name of the file it runs as, in ``where``),
    with a child ``sleep`` of its own; both are killed on exit, found by their process
    group (not by any parse of /proc)."""
    link = where / name
    link.symlink_to("/bin/sh")
    shell = subprocess.Popen([str(link), "-c", "sleep 60 & echo $!; wait"],
                             stdout=subprocess.PIPE, start_new_session=True)
    assert shell.stdout is not None
    with shell.stdout:
        child = int(shell.stdout.readline())
        deadline = time.monotonic() + 10
        # Forked, the child has its parent's name until it runs sleep.
        while Path(f"/proc/{child}/comm").read_text() != "sleep\n":
            assert time.monotonic() < deadline, "the child never ran sleep"
            time.sleep(0.005)
        try:
            yield shell
        finally:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
