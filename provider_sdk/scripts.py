"""The shell scripts providers run inside sandboxes: one copy of each, for every provider
that drives a sandbox through a shell (E2B, Cube, Daytona; any other may use them).

- :data:`KILL_TREE` kills a process and everything it started. It is POSIX ``sh`` (it
  runs under dash, bash, busybox ``sh``) and forks nothing: ``read``, ``kill``, ``[`` and
  arithmetic are builtins, so it works in a tree that has used up its pids limit. It
  stops the tree top-down with ``SIGSTOP`` (nothing in it can fork while it is listed),
  waits until every member is really stopped, and only then sends ``SIGKILL``; then it
  sweeps again, until a sweep finds nothing new. Members are found by their parent pid in
  ``/proc/<pid>/stat``, parsed from the *last* ``)`` (the command name in between may
  hold spaces and parentheses); names and environment variables are never trusted, and
  run as root it kills processes of every user. A process that left the tree (a double
  fork into a session of its own, whose middle process exited before the kill began) is
  not found: :data:`KILL_COMMAND` finds it by its mark instead.
- :data:`KILL_MARKED` kills every process whose environment carries a mark
  (:func:`mark_env`), for a backend that starts commands where no pid of theirs is known
  inside the sandbox (an Engine exec). It is cooperation, not containment: a process that
  clears its environment is not found, nor one that changes its pid faster than a sweep
  reads the environments it listed (it forks and lets its parent exit, again and again).
- :data:`KILL_COMMAND` is the two in turn, how a provider with no pid namespace per
  command ends one (:func:`kill_command_argv`): the tree by the command's pid, then
  whatever carries the command's mark, a fresh :func:`new_mark` put in its environment
  when it started. So a double fork's orphan in a session of its own, which no parent
  link or session leads back to, dies too, unless it cleared its environment.
- :func:`export_script` exports an environment exactly (values quoted).
- :data:`PROBE_FILE` says whether a path is a regular file (following symlinks), so a
  read of a device or FIFO is refused before any byte is read.

This module owns the text of these scripts and how to call them; it knows nothing of
providers, SDKs or transports.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping

__all__ = ["KILL_COMMAND", "KILL_MARKED", "KILL_TREE", "MARK_VAR", "NO_SUCH_PROCESS",
           "PROBE_FILE", "export_script", "kill_command", "kill_command_argv",
           "kill_marked_argv", "kill_tree_argv", "kill_tree_command", "mark_env", "new_mark",
           "probe_file_command"]

NO_SUCH_PROCESS = 3
"""Exit status of :data:`KILL_TREE` when the pid does not exist."""

_TREE_FUNCTION = r"""psdk_kill_tree() {
t=$1
case $t in ''|*[!0-9]*) return 2;; esac
[ -d "/proc/$t" ] || return 3
tree=" $t " lead=" " killed=0 sweeps=0
kill -STOP "$t"
while :; do
  more=0 live=0
  for s in /proc/[0-9]*/stat; do
    IFS= read -r l < "$s" || continue
    p=${l%% *}
    [ "$p" = "$$" ] && continue
    set -- ${l##*) }
    case $1 in Z|X|x) continue;; esac
    case $tree in
      *" $p "*) ;;
      *) case $tree in
           *" $2 "*) ;;
           *) case $lead in *" $4 "*) ;; *) continue;; esac;;
         esac
         tree="$tree$p " more=1;;
    esac
    live=1
    if [ "$4" = "$p" ]; then
      case $lead in *" $p "*) ;; *) lead="$lead$p " more=1;; esac
    fi
    if [ "$killed" = 1 ]; then kill -KILL "$p"
    else case $1 in T|t) ;; *) more=1; kill -STOP "$p";; esac; fi
  done
  [ "$killed" = 1 ] && [ "$live" = 0 ] && return 0
  if [ "$more" = 0 ] || [ "$killed" = 1 ]; then kill -KILL $tree; killed=1; fi
  sweeps=$((sweeps + 1))
  [ "$sweeps" -lt 10 ] || killed=1
  [ "$sweeps" -lt 200 ] || return 0
done
}
"""

KILL_TREE = "exec 2>/dev/null\n" + _TREE_FUNCTION + 'psdk_kill_tree "$1"\n'
"""Kill ``$1`` and its descendants (``sh -c KILL_TREE name PID``); exit 0, or
:data:`NO_SUCH_PROCESS` when there is no such pid.

Why each step: a sweep lists ``/proc`` once, adding the children of members and the
members of sessions a member leads (a session is only ever entered by forking from
inside it, so an orphan a daemonizing double fork left in such a session is found
although its parent chain is broken), and stopping each. Sweeps repeat until one finds
nothing new and every member stopped, because a stop is delivered asynchronously and a
member still running could fork after it was listed. Then every member is killed at
once, and sweeps go on (killing again) until no member is alive; zombies count as dead.
A member stuck in an uninterruptible wait cannot stop, nor one that another process of
the user resumes (``SIGCONT``) again and again while the tree it runs grows: so after 10
sweeps the tree is killed as it stands, and sweeps go on killing it, each member as
soon as it is listed, what each finds new included (the children and session members
born meanwhile, which may not carry the mark), until no member is alive, for 200 sweeps
at most: waiting longer for a resumed tree to stop would let a tree that keeps forking
outgrow the kill's time."""

MARK_VAR = "PSDK_TREE"
"""The environment variable that marks a tree for :data:`KILL_MARKED`."""

_MARKED_FUNCTION = r"""psdk_kill_marked() {
m="PSDK_TREE=$1$2"
n=0
while [ "$n" -lt 20 ]; do
  n=$((n + 1)); found=
  for f in /proc/[0-9]*/environ; do
    c=$( { tr '\0' '\n' < "$f"; } 2>/dev/null ) || continue
    case "
$c
" in *"
$m
"*) p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null && found=1 ;; esac
  done
  [ -n "$found" ] || return 0
done
}
"""

KILL_MARKED = _MARKED_FUNCTION + 'psdk_kill_marked "$1" "$2"\n'
"""Kill every process whose environment holds ``PSDK_TREE=$1$2`` (the mark given in two
halves, so that no command line, the kill's own included, carries it), repeating until
a sweep finds none, so that processes forked during a sweep are caught by the next.
Call it through :func:`kill_marked_argv`."""

KILL_COMMAND = ("exec 2>/dev/null\n" + _TREE_FUNCTION + _MARKED_FUNCTION
                + 'psdk_kill_tree "$1"; rc=$?\n'
                + '[ -z "$2$3" ] || psdk_kill_marked "$2" "$3"\n'
                + 'exit "$rc"\n')
"""Kill a command: ``$1`` and its descendants (:data:`KILL_TREE`), then every process
under the command's mark ``$2$3`` (:data:`KILL_MARKED`; none when both are empty), which
finds what left the tree where the tree kill cannot follow (a double fork's orphan in a
session of its own). Exit 0, or :data:`NO_SUCH_PROCESS` when there is no pid ``$1``
(what carries the mark is killed all the same). Call it through :func:`kill_command_argv`
or :func:`kill_command`."""

PROBE_FILE = r"""if [ -f "$1" ]; then echo file
elif [ -d "$1" ]; then echo directory
elif [ -e "$1" ]; then echo other
else echo missing; fi
"""
"""Print what ``$1`` is, following symlinks: ``file``, ``directory``, ``other`` (a
device, FIFO or socket) or ``missing`` (also: not reachable by the caller)."""


def kill_tree_argv(pid: int, *, shell: str = "/bin/sh") -> tuple[str, ...]:
    """The argv that kills ``pid`` and all its descendants (exit 3: no such pid)."""
    return (shell, "-c", KILL_TREE, "psdk-kill", str(int(pid)))


def kill_tree_command(pid: int | str, *, shell: str = "/bin/sh") -> str:
    """:func:`kill_tree_argv` as one command line for a shell. ``pid`` may be a shell
    expansion such as ``"$p"`` (it is inserted as is; the script refuses a non-number)."""
    target = str(int(pid)) if isinstance(pid, int) else pid
    return f"{shell} -c {shlex.quote(KILL_TREE)} psdk-kill {target}"


def mark_env(mark: str) -> dict[str, str]:
    """The environment entry that puts a command's tree under ``mark`` (see
    :data:`KILL_MARKED`); ``mark`` is a word of letters and digits."""
    if not (mark.isascii() and mark.isalnum()):
        raise ValueError(f"a tree mark is letters and digits, not {mark!r}")
    return {MARK_VAR: mark}


def kill_marked_argv(mark: str, *, shell: str = "/bin/sh") -> tuple[str, ...]:
    """The argv that kills every process :func:`mark_env` marked with ``mark``."""
    return (shell, "-c", KILL_MARKED, "psdk-kill", *_halves(mark))


def new_mark() -> str:
    """A fresh tree mark for one command (128 random bits): what :func:`mark_env` puts
    in its environment and :func:`kill_command` finds it by."""
    return secrets.token_hex(16)


def _halves(mark: str | None) -> tuple[str, str]:
    if mark is None:
        return "", ""
    if not (mark.isascii() and mark.isalnum()):
        raise ValueError(f"a tree mark is letters and digits, not {mark!r}")
    half = len(mark) // 2
    return mark[:half], mark[half:]


def kill_command_argv(pid: int, mark: str | None, *,
                      shell: str = "/bin/sh") -> tuple[str, ...]:
    """The argv that kills a command: ``pid`` with its descendants, then what carries
    ``mark`` (:data:`KILL_COMMAND`; without a mark, the tree kill alone). Exit 3: no
    such pid."""
    return (shell, "-c", KILL_COMMAND, "psdk-kill", str(int(pid)), *_halves(mark))


def kill_command(pid: int | str, mark: str | None, *, shell: str = "/bin/sh") -> str:
    """:func:`kill_command_argv` as one command line for a shell. ``pid`` may be a shell
    expansion such as ``"$p"`` (inserted as is; the script refuses a non-number)."""
    target = str(int(pid)) if isinstance(pid, int) else pid
    first, second = _halves(mark)
    return (f"{shell} -c {shlex.quote(KILL_COMMAND)} psdk-kill {target} "
            f"{shlex.quote(first)} {shlex.quote(second)}")


def probe_file_command(path: str, *, shell: str = "/bin/sh") -> str:
    """A command line printing what ``path`` is (see :data:`PROBE_FILE`)."""
    return f"{shell} -c {shlex.quote(PROBE_FILE)} psdk-probe {shlex.quote(path)}"


def export_script(env: Mapping[str, str]) -> str:
    """Shell text exporting ``env`` exactly, ending in ``"; "`` when not empty.

    Names must be valid shell names (the core validates them); values are quoted.
    """
    return "".join(f"export {name}={shlex.quote(value)}; " for name, value in env.items())
