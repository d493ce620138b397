"""The POSIX shell snippets the provider runs inside containers.

A template needs ``/bin/sh`` and the usual GNU tools (coreutils, findutils); nothing of
this SDK is installed into the image. Each snippet takes its inputs as positional
arguments, never spliced into its text.

Where the Engine is on this host, processes are controlled from the host (see
``_host``). Elsewhere, the fallback is the core's
:data:`~provider_sdk.scripts.KILL_MARKED`: process trees are found by the mark
(``PSDK_TREE``) that a process started by a command inherits unless it clears it.
That is cooperation, not containment: such instances do not declare ``exec.contained``.
``SUPERVISE`` marks a background process's tree ``p<pid>`` the same way.
"""

from __future__ import annotations

__all__ = ["FOLLOW", "HOLD", "KEEPALIVE", "LIST_DIR", "MKDIR", "PREPARE_PROC", "PROC_DIR", "RELAY",
           "REMOVE", "RENAME", "REPLACE", "SEND_STDIN", "SUPERVISE"]

PROC_DIR = "/tmp/.psdk/proc"

#: PID 1 of every sandbox: sleeps until the container is removed, and reaps every
#: orphan (the shell's wait reaps any child). It sets no trap, so no signal sent from
#: inside reaches it (the kernel guards a namespace's init); a killed ``sleep`` is only
#: started again. A separate init would not do: it exits when its child, which
#: ``kill -KILL -1`` inside can reach, does.
KEEPALIVE = "while :; do sleep 86400 & wait $!; done"

#: Run "$2"... once let go: the wrapper stops itself first (SIGSTOP), so the host can move
#: it into its cgroup before the command runs, then continues it (SIGCONT). It runs the
#: command only from its own cgroup, the freezer cgroup named as its ``$0``: continued
#: anywhere else (by code inside), it stops itself again; only a positive check lets it
#: go (a failed stop or an unreadable file never does). This is a second line only: code
#: of the wrapper's user can rewrite its memory, so the host never leaves a wrapper it
#: gave up on behind (``DockerCommands._kill_held``). ``kill``, ``read`` and ``[`` are
#: builtins: nothing is forked before the command. The shell sets ``PWD`` on its own;
#: "$1" puts back what the command was given: ``=VALUE``, or empty for none.
HOLD = ('g=; until [ "$g" ]; do kill -STOP $$; while read -r l; do case $l in '
        '*:*freezer*:*/"$0") g=1 ;; esac; done </proc/self/cgroup; done; '
        'case $1 in =*) export PWD="${1#=}" ;; *) unset PWD ;; esac; shift; exec "$@"')

#: Start "$@" in the background, supervised, and detach. The supervisor prints its pid
#: (the process's pid as the SDK reports it) only once stdin is held open and the
#: SIGUSR1 trap is set, so early writes and an early close are never lost. Output goes to
#: files and stdin comes from a FIFO under PROC_DIR/<pid>/, so any client can reattach;
#: SIGUSR1 closes stdin; the exit status lands in ``rc`` when the process ends. "$1" is
#: the PWD the process gets (the shell sets its own): ``=VALUE``, or empty for none.
SUPERVISE = r"""
case $1 in =*) export PWD="${1#=}" ;; *) unset PWD ;; esac; shift
d=/tmp/.psdk/proc/$$
mkdir -p "$d" && mkfifo -m 600 "$d/in" && : > "$d/out" && : > "$d/err" || exit 125
export PSDK_TREE=p$$
exec 3<>"$d/in" </dev/null
trap 'exec 3>&-; i=1' USR1
"$@" <"$d/in" >"$d/out" 2>"$d/err" 3>&- &
c=$!
echo "$$"
exec >/dev/null 2>&1
# A wait that our SIGUSR1 cut short (i=1, status 128+10) is waited again for the real
# status, even when the process has exited meanwhile (the shell keeps it until waited).
while :; do
  i=0; wait "$c"; r=$?
  [ "$i" = 1 ] && [ "$r" -eq 138 ] || break
done
echo "$r" > "$d/rc.tmp" && mv "$d/rc.tmp" "$d/rc"
"""

#: Make PROC_DIR a directory any user can make its process directory in (run as root).
PREPARE_PROC = r"""
mkdir -p /tmp/.psdk/proc && chmod 1777 /tmp/.psdk /tmp/.psdk/proc
"""

#: Stream a supervised process's stdout and stderr from the start until it ends, then
#: exit with its status (137 if its supervisor was killed before it could record one).
FOLLOW = r"""
d=/tmp/.psdk/proc/$1
tail -s 0.05 --pid="$1" -c +1 -f "$d/err" >&2 &
tail -s 0.05 --pid="$1" -c +1 -f "$d/out"
wait
[ -s "$d/rc" ] && exit "$(cat "$d/rc")"
exit 137
"""

#: Copy this command's stdin to a supervised process's stdin; a process that has ended
#: takes nothing (the FIFO is opened read-write, so this never blocks on a dead reader).
SEND_STDIN = r"""
d=/tmp/.psdk/proc/$1
[ -e "$d/rc" ] && exit 0
exec 4<>"$d/in" && exec cat >&4
"""

#: Entries of directory "$1": per entry "TYPE/SIZE/MODE/MTIME/NAME\0LINK\0".
LIST_DIR = r"""
if [ ! -d "$1" ]; then
  [ -e "$1" ] && echo "$1: Not a directory" >&2 || echo "$1: No such file or directory" >&2
  exit 1
fi
exec find -H "$1" -mindepth 1 -maxdepth 1 -printf '%y/%s/%m/%T@/%f\0%l\0'
"""

#: mkdir "$1"; "$2" = 1: with parents; "$3" = 1: an existing directory is fine.
MKDIR = r"""
if [ -d "$1" ]; then
  [ "$3" = 1 ] && exit 0
  echo "$1: File exists" >&2; exit 1
fi
if [ "$2" = 1 ]; then exec mkdir -p -- "$1"; fi
exec mkdir -- "$1"
"""

#: Remove "$1"; "$2" = 1: a directory with its contents.
REMOVE = r"""
if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo "$1: No such file or directory" >&2; exit 1; fi
if [ "$2" = 1 ]; then exec rm -rf -- "$1"; fi
if [ -d "$1" ] && [ ! -L "$1" ]; then exec rmdir -- "$1"; fi
exec rm -f -- "$1"
"""

#: Move "$1" to "$2", replacing a file there.
RENAME = r"""
if [ ! -e "$1" ] && [ ! -L "$1" ]; then echo "$1: No such file or directory" >&2; exit 1; fi
exec mv -f -T -- "$1" "$2"
"""

#: Rename the file "$1" over "$2" (a file or nothing, never a directory); on failure,
#: remove "$1".
REPLACE = r"""
if [ -d "$2" ] && [ ! -L "$2" ]; then
  rm -f -- "$1"; echo "$2: Is a directory" >&2; exit 1
fi
mv -f -T -- "$1" "$2" || { rm -f -- "$1"; exit 1; }
"""


#: Relay stdin and stdout to ``127.0.0.1:$1`` inside the container (``ports.expose``),
#: with bash's ``/dev/tcp`` and ``cat``: ``+`` on stderr once connected (nothing, and
#: exit 7, if nothing answers). When either direction ends (the port closes, or stdin
#: does) the other is stopped, so the exec ends and its output with it. No step waits
#: on a trap: the shell waits for the port's direction by its pid (bash keeps the status
#: of one that has already ended), and the stdin direction, when it ends, kills the
#: port's. With ``set -m`` the stdin direction is a process group of its own, so one kill
#: stops it and its ``cat`` together. (A CHLD trap missed a direction that ended while
#: ``wait`` was between two children, about one run in a few thousand on a loaded
#: machine, and the relay then waited for a stdin its client keeps open.)
RELAY = r"""
{ exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || exit 7
exec 4<&0 0</dev/null
printf + >&2
set -m
cat <&3 2>/dev/null & r=$!
{ cat <&4 >&3 2>/dev/null; kill -9 "$r" 2>/dev/null; } >/dev/null & w=$!
exec 3>&- 4<&-
wait "$r"
kill -9 -- -"$w" 2>/dev/null
wait
"""
