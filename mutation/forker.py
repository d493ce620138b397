"""Runs pytest for each mutant in a fork of one process that has already imported the
libraries the tests use (pytest, trio, hypothesis...), never this project's code: a
mutant's module is imported fresh, from the mutated file, in each fork.

Reads one JSON list of pytest arguments and a timeout per line on stdin; answers one
JSON object per line: the exit status, or ``"timeout"``. Ended (SIGTERM, or Ctrl-C), it
ends the test run under way, with what that run started, before it exits. Used by
``run.py`` only.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import time

import anyio  # noqa: F401  (imported ahead, for every fork)
import attrs  # noqa: F401
import hypothesis  # noqa: F401
import pytest
import trio  # noqa: F401

# The libraries, and the pytest plugins of the installed ones with their lazily imported
# parts (pytest rewrites the asserts of a plugin's package as it imports it: once here,
# not in every fork).
for _name in ("httpx", "structlog", "rich.console", "docker", "e2b", "redis", "psycopg",
              "h11", "requests", "connectrpc", "anyio.pytest_plugin",
              "anyio._backends._asyncio", "anyio._backends._trio", "_hypothesis_pytestplugin",
              "hypothesis.extra.pytestplugin", "platformdirs.pytest_plugin"):
    with contextlib.suppress(ImportError):
        __import__(_name)
# What was imported here is never garbage: each fork's collections (pytest runs a few at
# its end) skip it.
gc.freeze()


def _child(args: list[str], log: str) -> None:
    os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        code = pytest.main(args)
    except BaseException:
        code = 99
    os._exit(int(code))


def _end(pid: int) -> None:
    """End the test run ``pid`` and what it left running (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request["args"], request["log"])
        try:
            deadline = time.monotonic() + request["timeout"]
            status: int | str = "timeout"
            while time.monotonic() < deadline:
                done, raw = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = os.waitstatus_to_exitcode(raw)
                    break
                time.sleep(0.01)
        finally:
            _end(pid)  # a hung run, or what the tests left running
        print(json.dumps({"status": status}), flush=True)


if __name__ == "__main__":
    main()
