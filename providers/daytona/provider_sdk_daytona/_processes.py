"""Background processes on Daytona sessions: the scripts the provider sends.

Each process gets a session of its own, ``psdk-proc-<token>``, running one asynchronous
command: a POSIX ``sh`` wrapper that

- makes a FIFO for the process's stdin and holds it open read-write on fd 3, so the
  process never sees end of file until :func:`close_stdin_script` signals the wrapper
  (``USR1``) to close it;
- starts the argv in the background, in its directory with its environment, stdin from
  the FIFO (fd 3 closed in the child), stdout and stderr into the session command's own
  logs;
- writes the child's pid, and a file that maps that pid back to the token, so any
  provider instance can reattach by pid;
- waits for the child and ends with its status, which is the session command's exit
  code.

Output is read from the session command's logs, which Daytona keeps as text.
"""

from __future__ import annotations

import shlex

from provider_sdk import scripts
from provider_sdk.provider import Command

PREFIX = "/tmp/.psdk-proc-"
PID_MAP = "/tmp/.psdk-pid-"


def session_id(token: str) -> str:
    """The session that runs the process of ``token``."""
    return f"psdk-proc-{token}"


def pid_path(token: str) -> str:
    """Where the wrapper writes the child's pid."""
    return f"{PREFIX}{token}.pid"


def map_path(pid: int) -> str:
    """Where the token of the process with ``pid`` is kept."""
    return f"{PID_MAP}{pid}"


def start_script(command: Command, token: str, *, cwd: str, env: dict[str, str]) -> str:
    """The session command that starts ``command`` and waits for it."""
    p = f"{PREFIX}{token}"  # hex only: nothing to quote
    exports = scripts.export_script(env)
    return (
        f"if mkfifo {p}.in && exec 3<>{p}.in; then\n"
        "  trap 'exec 3>&-; i=1' USR1\n"
        f"  ( exec 3>&-; cd -- {shlex.quote(cwd)} || exit; {exports}"
        f"exec {shlex.join(command.argv)} ) < {p}.in &\n"
        "  c=$!\n"
        # Each file is written aside and renamed into place, so a reader never
        # sees it half written.
        f'  echo "$$" > {p}.wpid; echo {token} > {p}.map && mv {p}.map {PID_MAP}"$c"\n'
        f'  echo "$c" > {p}.tmp && mv {p}.tmp {p}.pid\n'
        # A wait the USR1 interrupted (i=1) is waited again for the real status.
        '  while :; do i=0; wait "$c"; rc=$?; [ "$i" = 1 ] || break; done\n'
        "  exec 3>&-\n"
        "else rc=126; fi\n"
        '(exit "$rc")\n'
    )


def write_script(token: str, staged: str) -> str:
    """Copy the uploaded file ``staged`` into the process's stdin, then remove it."""
    s = shlex.quote(staged)
    # Opened read-write, the FIFO never blocks the writer for want of a reader.
    return f"cat {s} 1<>{PREFIX}{token}.in; rm -f -- {s}"


def close_stdin_script(token: str) -> str:
    """Tell the wrapper to close its end of the FIFO: the process sees end of file."""
    return f'kill -USR1 "$(head -c 32 {PREFIX}{token}.wpid)"'


def kill_script(pid: int) -> str:
    """Kill the process and its whole tree (exit 3: no such process)."""
    return scripts.kill_tree_command(int(pid))
