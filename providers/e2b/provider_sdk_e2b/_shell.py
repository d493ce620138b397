"""What a command looks like by the time envd runs it, and how to undo envd's defaults.

envd runs every process as ``/bin/bash -l -c <text>``. A login shell sources
``/etc/profile``, which on Debian-based images resets ``PATH``: environment passed with
the request would not reach the process as given. So the environment travels in one
variable holding a quoted ``export`` script, which the command text evaluates *after*
the profile ran, unsets, and then ``exec``\\ s the real argv. The sandbox-wide defaults
(the spec's ``env``) travel the same way in a variable set at create, so every command,
from any handle in any process, gets them back after the login shell.

This module owns that text; the scripts it runs inside sandboxes (the export, the tree
kill) are the core's, in :mod:`provider_sdk.scripts`. It knows nothing of SDKs or HTTP.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

__all__ = ["CALL_ENV", "SPEC_ENV", "command_text", "exit_code"]

SPEC_ENV = "__PSDK_SPEC_ENV"
"""Sandbox-wide variable (set at create) holding the spec's environment as a script."""
CALL_ENV = "__PSDK_ENV"
"""Per-call variable holding the call's environment as a script."""

_RESTORE = (f'eval "${{{SPEC_ENV}-}}"; eval "${{{CALL_ENV}-}}"; '
            f"unset {SPEC_ENV} {CALL_ENV}; exec ")

# Go's names for signals, as envd reports them in an end event's status
# ("signal: killed"); a signalled process has exit code -N.
_SIGNALS = {
    "hangup": 1, "interrupt": 2, "quit": 3, "illegal instruction": 4,
    "trace/breakpoint trap": 5, "aborted": 6, "bus error": 7,
    "floating point exception": 8, "killed": 9, "user defined signal 1": 10,
    "segmentation fault": 11, "user defined signal 2": 12, "broken pipe": 13,
    "alarm clock": 14, "terminated": 15,
}


def command_text(argv: Sequence[str]) -> str:
    """The text for ``bash -l -c``: restore the environment, then ``exec`` ``argv``."""
    return _RESTORE + shlex.join(argv)


def exit_code(code: int, status: str) -> int:
    """The neutral exit code: ``-N`` for a process killed by signal N."""
    if status.startswith("signal: "):
        name = status[len("signal: "):].split(" (", 1)[0].strip().lower()
        if name in _SIGNALS:
            return -_SIGNALS[name]
    return code
