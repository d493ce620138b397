"""What a command looks like by the time envd runs it, and how to undo envd's defaults.

envd runs every process as ``/bin/bash -l -c <text>``. A login shell sources
``/etc/profile``, which on Debian-based images resets ``PATH``: environment passed with
the request would not reach the process as given. So the environment travels in one
variable holding a quoted ``export`` script, which the command text evaluates *after*
the profile ran, unsets, and then ``exec``\\ s the real argv. The sandbox-wide defaults
(the spec's ``env``) travel the same way in a variable set at create, so every command,
from any handle in any process, gets them back after the login shell.

This module owns that text and the in-sandbox helpers (killing a process tree); it
knows nothing of SDKs or HTTP.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

__all__ = ["CALL_ENV", "NO_SUCH_PROCESS", "SPEC_ENV", "command_text", "exit_code",
           "export_script", "kill_tree_argv"]

SPEC_ENV = "__PSDK_SPEC_ENV"
"""Sandbox-wide variable (set at create) holding the spec's environment as a script."""
CALL_ENV = "__PSDK_ENV"
"""Per-call variable holding the call's environment as a script."""
NO_SUCH_PROCESS = 3
"""Exit status of the tree-killing command when the pid does not exist."""

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

# Stops, then kills, a process and every descendant. /proc/<pid>/task/*/children is
# not on every kernel, so the parent links are read from /proc/*/stat (the command
# name may hold spaces and parentheses: the fields after the last ") " are reliable).
_KILL_TREE = r"""
t=$1; [ -d "/proc/$t" ] || exit 3; declare -A kids
for s in /proc/[0-9]*/stat; do
  IFS= read -r l < "$s" 2>/dev/null || continue
  p=${l%% *}; r=${l##*) }; set -- $r; kids[$2]+=" $p"
done
walk() { local c; kill -STOP "$1" 2>/dev/null; for c in ${kids[$1]}; do walk "$c"; done
         printf '%s\n' "$1"; }
all=$(walk "$t"); [ -n "$all" ] && kill -KILL $all 2>/dev/null; exit 0
"""


def export_script(env: Mapping[str, str]) -> str:
    """A shell script exporting ``env`` exactly (names are validated upstream)."""
    return "".join(f"export {name}={shlex.quote(value)}; " for name, value in env.items())


def command_text(argv: Sequence[str]) -> str:
    """The text for ``bash -l -c``: restore the environment, then ``exec`` ``argv``."""
    return _RESTORE + shlex.join(argv)


def kill_tree_argv(pid: int) -> tuple[str, ...]:
    """A command that kills ``pid`` and all its descendants (exit 3: no such pid)."""
    return ("/bin/bash", "-c", _KILL_TREE, "psdk-kill", str(int(pid)))


def exit_code(code: int, status: str) -> int:
    """The neutral exit code: ``-N`` for a process killed by signal N."""
    if status.startswith("signal: "):
        name = status[len("signal: "):].split(" (", 1)[0].strip().lower()
        if name in _SIGNALS:
            return -_SIGNALS[name]
    return code
