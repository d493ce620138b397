"""Running a neutral command through Daytona's one-shot ``process.exec``.

Daytona's exec merges stdout and stderr into one JSON string (lossy for bytes that are
not UTF-8), has no stdin, and reports a signal death as ``-1``. So the provider sends a
small shell wrapper instead of the bare command. It runs the argv in a subshell with the
call's environment and directory, stdin from an uploaded file (or ``/dev/null``), stdout
and stderr into files, then prints one marker line with the exit status, and the
outputs. Spawning a process inside a sandbox costs about as much as a loopback round
trip, so the wrapper spawns none of its own when the daemon's shell is bash (Daytona's
images have it):

- ``bash -c SCRIPT`` (what a string command is) runs as ``eval SCRIPT`` in the subshell
  instead of in a second bash;
- both outputs are read back with ``read`` (a builtin) and printed as they are, their
  byte lengths in the marker line. The provider checks what arrives: text with no
  U+FFFD and exactly those lengths is the output byte for byte. Anything else (bytes
  that are not UTF-8, a NUL, more than :data:`INLINE_LIMIT`) is downloaded from the
  files instead (multipart, binary-safe);
- the files are not removed by a process per call: the provider hands the files of
  finished calls to a later call's wrapper, which removes a batch of them in the
  background (:class:`Litter`).

Under another shell (dash, zsh) the wrapper encodes both outputs with ``base64`` and
removes its files itself. After a timeout (Daytona kills the command's process group and
answers 408) the partial outputs are downloaded the same way. A timed-out or cancelled
call kills the command's process tree with a second exec (the core's command kill,
:mod:`provider_sdk.scripts`): by the wrapper's pid, then by the run's token, which marks
the command's environment, so a double fork's orphan in a session of its own dies too.

What bounds the host's memory: the daemon answers ``process.exec`` with the whole merged
output in one JSON string, read whole by the SDK. The wrapper sends the command's own
outputs to files, so that answer holds only its report, at most :data:`INLINE_LIMIT`
bytes of each stream; what comes from the files is downloaded in chunks and only the
call's ``output_limit`` of it is kept. (Code that writes into the wrapper's own stdout,
through ``/proc``, still reaches the daemon's answer; the provider keeps at most
``output_limit`` of that too.)

Exit statuses above 128 are read as "killed by signal N" (``-N``), as a shell reports
them; a command that itself exits with 129..192 is reported the same way.
"""

from __future__ import annotations

import base64
import math
import re
import shlex
from collections.abc import Sequence

import attrs

from provider_sdk import scripts
from provider_sdk.provider import Command, exit_code_from_status

INLINE_LIMIT = 4 << 20
"""Bytes of each output returned inline; more is downloaded from files."""
ROOT = "/tmp/.psdk-exec-"
MAX_SECONDS = 2**31 - 1
"""Longest timeout sent to the daemon; a longer one is no deadline at all."""

_MARK = "psdk-exec-"
_HEADER = re.compile(
    rf"{_MARK}(?P<token>[0-9a-f]+) (?P<rc>\d+) "
    r"(?:(?P<files>files)|inline\n(?P<out>[A-Za-z0-9+/=]*)\n(?P<err>[A-Za-z0-9+/=]*)"
    r"|text (?P<out_len>\d+) (?P<err_len>\d+))\n")


def daemon_seconds(timeout: float | None) -> int | None:
    """A neutral timeout as the daemon's whole seconds; past :data:`MAX_SECONDS`, none
    (it would overflow the daemon's integer, and is no deadline anyway)."""
    if timeout is None or timeout > MAX_SECONDS:
        return None
    return math.ceil(timeout)


@attrs.frozen
class Run:
    """One wrapped command: its token (fresh and random, also the tree mark in its
    environment), the prefix of its files inside the sandbox, and its script."""

    token: str
    prefix: str
    script: str

    @property
    def stdin_path(self) -> str:
        """Where the call's stdin is uploaded before the script runs."""
        return f"{self.prefix}.in"

    @property
    def stdout_path(self) -> str:
        """Where the command's standard output is written."""
        return f"{self.prefix}.out"

    @property
    def stderr_path(self) -> str:
        """Where the command's standard error is written."""
        return f"{self.prefix}.err"

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file the run may leave behind."""
        p = self.prefix
        return (f"{p}.pid", f"{p}.in", f"{p}.out", f"{p}.err")

    def kill_script(self, *, cleanup: bool = True) -> str:
        """A command that kills what this run started (the whole tree, and what carries
        its mark) and, if ``cleanup``, removes its files."""
        p = self.prefix
        kill = scripts.kill_command('"$p"', self.token)
        # The command may have put anything where the pid was: an endless file (head
        # reads 32 bytes), a FIFO (whose open waits for a writer that never comes: it is
        # not read, and `timeout` bounds a read that meets one anyway). With no pid,
        # what carries the mark is killed all the same.
        read = f"head -c 32 {p}.pid < /dev/null 2> /dev/null"
        script = (f"p=; if [ -f {p}.pid ] && [ ! -p {p}.pid ]; then "
                  f"if command -v timeout > /dev/null 2>&1; then p=$(timeout 2 {read}); "
                  f"else p=$({read}); fi; fi; {kill}")
        return f"{script}; {self.cleanup_script()}" if cleanup else script

    def cleanup_script(self) -> str:
        """A command that removes this run's files."""
        return f"rm -f -- {' '.join(self.paths)}"


@attrs.define
class Litter:
    """Files of finished runs in one sandbox, removed in batches by later wrappers.

    A run whose outputs came back inline leaves its files; removing them at once would
    cost a process per call. Once :data:`BATCH` runs or :data:`BATCH_BYTES` bytes have
    gathered, the next wrapper removes them all, in the background.
    """

    BATCH = 32
    BATCH_BYTES = 1 << 20

    paths: list[str] = attrs.field(factory=list)
    runs: int = 0
    size: int = 0

    def add(self, run: Run, size: int) -> None:
        """Record the files ``run`` left, ``size`` bytes in all."""
        self.paths.extend(run.paths)
        self.runs += 1
        self.size += size

    def take(self) -> list[str]:
        """The files to remove now: all of them once a batch is due, else none."""
        if self.runs < self.BATCH and self.size < self.BATCH_BYTES:
            return []
        taken, self.paths, self.runs, self.size = self.paths, [], 0, 0
        return taken


def wrap(command: Command, *, cwd: str, env: dict[str, str],
         remove: Sequence[str] = ()) -> Run:
    """The wrapper script for ``command``, run in ``cwd`` with ``env`` exported.

    ``remove`` names files of earlier runs to delete in the background.
    """
    token = scripts.new_mark()
    p = f"{ROOT}{token}"  # hex only: nothing to quote
    enter = f"cd -- {shlex.quote(cwd)} || exit; " + scripts.export_script(
        {**env, **scripts.mark_env(token)})
    run_it = f"exec {shlex.join(command.argv)}"
    argv = command.argv
    in_bash = (f"eval {shlex.quote(argv[2])}"
               if len(argv) == 3 and argv[0] in ("/bin/bash", "bash") and argv[1] == "-c"
               else run_it)
    redirect = (f"< {p}.in" if command.stdin is not None else "< /dev/null") + \
        f" > {p}.out 2> {p}.err"
    limit = INLINE_LIMIT + 1
    script = (
        '[ -n "${ZSH_VERSION-}" ] && emulate sh\n'
        + (f"rm -f -- {shlex.join(remove)} < /dev/null > /dev/null 2>&1 &\n" if remove else "")
        + f"echo $$ > {p}.pid || exit 97\n"
        'if [ -n "${BASH_VERSION-}" ]; then\n'
        f"  ( {enter}{in_bash} ) {redirect}\n"
        "  psdk_rc=$?; LC_ALL=C\n"
        # read succeeds only if it stopped early: at a NUL, or past the limit.
        f"  if IFS= read -r -d '' -n {limit} psdk_o < {p}.out ||"
        f" IFS= read -r -d '' -n {limit} psdk_e < {p}.err; then\n"
        f'    printf "{_MARK}{token} %s files\\n" "$psdk_rc"\n'
        "  else\n"
        f'    printf "{_MARK}{token} %s text %s %s\\n%s%s" "$psdk_rc" "${{#psdk_o}}" '
        '"${#psdk_e}" "$psdk_o" "$psdk_e"\n'
        "  fi\n"
        "else\n"
        f"  ( {enter}{run_it} ) {redirect}\n"
        "  rc=$?\n"
        f"  set -- $(wc -c {p}.out {p}.err)\n"
        f'  if [ "$1" -le {INLINE_LIMIT} ] && [ "$3" -le {INLINE_LIMIT} ]; then\n'
        # Open the outputs, then remove the files while they are encoded.
        f"    exec 4< {p}.out 5< {p}.err\n"
        f"    rm -f {p}.pid {p}.in {p}.out {p}.err > /dev/null 2>&1 &\n"
        f'    printf "{_MARK}{token} %s inline\\n" "$rc"\n'
        f'    [ "$1" -gt 0 ] && base64 -w0 <&4; echo\n'
        f'    [ "$3" -gt 0 ] && base64 -w0 <&5; echo\n'
        "    exec 4<&- 5<&-; wait\n"
        f'  else printf "{_MARK}{token} %s files\\n" "$rc"; fi\n'
        "fi\n"
    )
    return Run(token=token, prefix=p, script=script)


@attrs.frozen
class Report:
    """What the wrapper printed: the exit code, and the outputs if they came inline.

    ``left_files`` says the run's files are still in the sandbox (the outputs came as
    text); ``None`` outputs must be downloaded from the files.
    """

    exit_code: int
    stdout: bytes | None
    stderr: bytes | None
    left_files: bool = False


def parse(run: Run, text: str) -> Report | None:
    """The wrapper's report in ``text``; ``None`` if it printed none (it was killed)."""
    for found in _HEADER.finditer(text):
        if found["token"] != run.token:
            continue
        code = exit_code_from_status(int(found["rc"]))
        if found["files"]:
            return Report(exit_code=code, stdout=None, stderr=None)
        if found["out_len"] is None:
            return Report(exit_code=code, stdout=base64.b64decode(found["out"]),
                          stderr=base64.b64decode(found["err"]))
        # Text is exact when nothing was replaced on the way (no U+FFFD) and the byte
        # counts match; else the files, still there, hold the truth.
        rest = text[found.end():]
        out_len, err_len = int(found["out_len"]), int(found["err_len"])
        data = rest.encode()
        if "\ufffd" in rest or len(data) != out_len + err_len:
            return Report(exit_code=code, stdout=None, stderr=None)
        return Report(exit_code=code, stdout=data[:out_len], stderr=data[out_len:],
                      left_files=True)
    return None
