"""Helpers the contract tests share: unique markers, process scans inside a sandbox,
polls with a deadline. Nothing here knows a backend; everything inside a sandbox is
done with ``sh``, ``bash`` and coreutils.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio

from provider_sdk.sandbox import Sandbox

__all__ = ["MARK_VAR", "RssGrowth", "eventually", "marked_processes", "new_marker",
           "net_interfaces", "none_marked"]

MARK_VAR = "PSDK_CONTRACT_MARK"
"""Environment variable that tags a command's whole process tree: children inherit it."""

# Lists the /proc entries whose cmdline or environ contains "$1$2". The marker is passed
# in two halves so the scanning shell's own argv (NUL-separated) never matches it.
_SCAN = r"""
m="$1$2"
for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
  c=$( { tr '\0' '\n' < "$f"; } 2>/dev/null ) || continue
  case "$c" in *"$m"*) printf '%s\n' "$f" ;; esac
done
exit 0
"""


def new_marker(kind: str) -> str:
    """A marker unique to this call, safe in argv, environment and file names."""
    return f"psdk-{kind}-{secrets.token_hex(8)}"


async def marked_processes(sandbox: Sandbox, marker: str) -> list[str]:
    """The ``/proc/<pid>/{cmdline,environ}`` files inside ``sandbox`` holding ``marker``.

    Reads /proc directly rather than trusting ``ps``, which a minimal image may lack.
    """
    half = len(marker) // 2
    result = await sandbox.exec(["/bin/sh", "-c", _SCAN, "psdk-scan", marker[:half],
                                 marker[half:]])
    assert result.exit_code == 0, f"process scan failed: {result.stderr!r}"
    return result.stdout.split()


async def none_marked(sandbox: Sandbox, marker: str) -> bool:
    """Whether no process inside ``sandbox`` holds ``marker``; false while the scan
    itself cannot run (a full pids limit leaves it no process to fork)."""
    try:
        return await marked_processes(sandbox, marker) == []
    except AssertionError:
        return False


async def eventually(check: Callable[[], Awaitable[bool]], *, what: str,
                     timeout: float = 15.0, interval: float = 0.05) -> None:
    """Poll ``check`` until it returns true; fail naming ``what`` after ``timeout`` s."""
    with anyio.move_on_after(timeout):
        # The condition lives inside the sandbox: there is no event to wait on.
        while not await check():  # noqa: ASYNC110
            await anyio.sleep(interval)
        return
    raise AssertionError(f"after {timeout:g} s, still not: {what}")


def net_interfaces(proc_net_dev: str) -> set[str]:
    """Interface names listed in the text of ``/proc/net/dev``."""
    return {line.split(":", 1)[0].strip() for line in proc_net_dev.splitlines()[2:]
            if ":" in line}


def _maxrss_bytes() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage if sys.platform == "darwin" else usage * 1024  # macOS: bytes; else KiB


def _current_rss_bytes() -> int:
    """This process's resident set now; 0 where /proc is missing (the peak still counts)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class RssGrowth:
    """Measures how far this process's memory grows during a block.

    Two views: the growth of the peak (``ru_maxrss``), and the highest resident set
    sampled while the block runs over the one before it. The peak alone says nothing
    when an earlier test already pushed it higher, hence the samples.
    """

    def __init__(self) -> None:
        self.peak_growth = 0
        self.sampled_growth = 0

    @property
    def growth(self) -> int:
        """The larger of the two views, in bytes."""
        return max(self.peak_growth, self.sampled_growth)

    @contextlib.asynccontextmanager
    async def measure(self) -> AsyncIterator[RssGrowth]:
        """Measure during the ``async with`` block."""
        peak_before = _maxrss_bytes()
        rss_before = _current_rss_bytes()
        highest = rss_before

        async def sample() -> None:
            nonlocal highest
            while True:
                highest = max(highest, _current_rss_bytes())
                await anyio.sleep(0.02)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sample)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()
        highest = max(highest, _current_rss_bytes())
        self.peak_growth = _maxrss_bytes() - peak_before
        self.sampled_growth = highest - rss_before if rss_before else 0
