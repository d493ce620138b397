"""Background processes on Daytona sessions: the scripts the provider sends.

Each process gets a session of its own, ``psdk-proc-<token>``, running one asynchronous
command: a POSIX ``sh`` wrapper that

- makes a FIFO for the process's stdin and holds it open read-write on fd 3, so the
  process never sees end of file until :func:`close_stdin_script` signals the wrapper
  (``USR1``) to close it;
- starts the argv in the background, in its directory with its environment, stdin from
  the FIFO (fd 3 closed in the child), stdout and stderr into files of its own
  (``.out``, ``.err``);
- writes the child's pid, and a file that maps that pid back to the token, so any
  provider instance can reattach by pid;
- waits for the child and ends with its status, which is the session command's exit
  code.

Output is read from those files in pieces of at most :data:`CHUNK` bytes
(:func:`chunk_script` cuts the next piece of each into a file of its own, which is
downloaded), so a reader holds one piece at a time however much the process prints, and
bytes stay bytes (the session command's logs are text). The files stay until the
sandbox goes, so any reader can read the output again from the start.
"""

from __future__ import annotations

import re
import shlex

from provider_sdk import scripts
from provider_sdk.provider import Command

PREFIX = "/tmp/.psdk-proc-"
PID_MAP = "/tmp/.psdk-pid-"
CHUNK = 4 << 20
"""The most bytes of each stream one poll of a process's output downloads."""
TOKEN = re.compile(r"[0-9a-f]{32}")
"""A token as :func:`provider_sdk.scripts.new_mark` makes it: what is read back from a
pid map (a file code inside may rewrite) is taken for one only if it is one."""

# The mark process {pid} was started with, as the two halves the command kill takes ($a,
# $b): from the environment it was exec'd with while it runs, else, only once it has
# ended (gone, or a zombie: its orphans may live on), from its pid map, if that is a
# regular file holding a token; both empty when neither has one. A process that runs
# without a mark in its environment is killed without one: its map, which it may have
# rewritten, must not name another process's mark to kill.
_MARK_OF = ("m=$(tr '\\0' '\\n' < /proc/{pid}/environ 2>/dev/null | "
            "sed -n 's/^PSDK_TREE=\\([0-9a-f]\\{{32\\}}\\)$/\\1/p' | head -n 1); "
            "s=$(cat /proc/{pid}/stat 2>/dev/null); s=${{s##*) }}; s=${{s%% *}}; "
            "case $s in ''|Z|X|x) s=;; esac; "
            "f={map}; if [ -z \"$m$s\" ] && [ -f \"$f\" ] && [ ! -p \"$f\" ]; then "
            "m=$(head -c 32 \"$f\" < /dev/null 2>/dev/null); fi; "
            "case $m in *[!0-9a-f]*) m=;; esac; [ ${{#m}} = 32 ] || m=; "
            "a=${{m%????????????????}}; b=${{m#????????????????}}; ")


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
    exports = scripts.export_script({**env, **scripts.mark_env(token)})
    return (
        f"if mkfifo {p}.in && exec 3<>{p}.in; then\n"
        "  trap 'exec 3>&-; i=1' USR1\n"
        f"  ( exec 3>&-; cd -- {shlex.quote(cwd)} || exit; {exports}"
        f"exec {shlex.join(command.argv)} ) < {p}.in > {p}.out 2> {p}.err &\n"
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


def output_path(token: str, stream: str) -> str:
    """The file the process of ``token`` writes ``stream`` (``stdout``/``stderr``) to."""
    return f"{PREFIX}{token}.{'out' if stream == 'stdout' else 'err'}"


def piece_path(token: str, stream: str) -> str:
    """Where :func:`chunk_script` puts the next piece of ``stream``."""
    return output_path(token, stream) + ".piece"


def chunk_script(token: str, sent: dict[str, int]) -> str:
    """Print the sizes of the process's stdout and stderr files (``"<out> <err>"``), and
    cut the next :data:`CHUNK` bytes of each past ``sent[stream]`` into its
    :func:`piece_path`."""
    lines = []
    for stream, var in (("stdout", "o"), ("stderr", "e")):
        f, piece = output_path(token, stream), piece_path(token, stream)
        offset = int(sent[stream])
        lines.append(f"{var}=$(wc -c < {f} 2>/dev/null) || {var}=0")
        lines.append(f'if [ "${var}" -gt {offset} ]; then tail -c +{offset + 1} {f} | '
                     f"head -c {CHUNK} > {piece}; fi")
    lines.append('echo "$o $e"')
    return "\n".join(lines) + "\n"


def write_script(token: str, staged: str) -> str:
    """Copy the uploaded file ``staged`` into the process's stdin, then remove it."""
    s = shlex.quote(staged)
    # Opened read-write, the FIFO never blocks the writer for want of a reader.
    return f"cat {s} 1<>{PREFIX}{token}.in; rm -f -- {s}"


def close_stdin_script(token: str) -> str:
    """Tell the wrapper to close its end of the FIFO: the process sees end of file.
    Code inside may have rewritten the wrapper's pid file: only a pid read from a
    regular file is signalled (``-1`` would be every process the daemon may signal)."""
    f = f"{PREFIX}{token}.wpid"
    return (f"w=; [ -f {f} ] && [ ! -p {f} ] && w=$(head -c 32 {f} < /dev/null); "
            'case $w in ""|*[!0-9]*) exit 3;; esac; kill -USR1 "$w"')


def kill_script(pid: int, token: str | None) -> str:
    """Kill the process and its whole tree, then what carries its mark (the token: a
    double fork's orphan in a session of its own); exit 3: no such process. Without
    ``token`` (the process was started by another provider instance) the mark is the
    one the process was started with, read from its environment (or, once it has
    ended, from its pid map): the process is killed by its pid whatever its map says."""
    if token is not None:
        return scripts.kill_command(int(pid), token)
    return (_MARK_OF.format(pid=int(pid), map=map_path(int(pid)))
            + f"/bin/sh -c {shlex.quote(scripts.KILL_COMMAND)} "
            f'psdk-kill {int(pid)} "$a" "$b"')
