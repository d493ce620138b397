"""Running a neutral command through Daytona's one-shot ``process.exec``.

Daytona's exec merges stdout and stderr into one JSON string (lossy for bytes that are
not UTF-8), has no stdin, and reports a signal death as ``-1``. So the provider sends a
small POSIX ``sh`` wrapper instead of the bare command: it runs the argv in a subshell
with the call's environment and directory, stdin from an uploaded file (or
``/dev/null``), stdout and stderr into files, then prints one marker line with the exit
status followed by both outputs in base64 (``base64 -w0``), removing its files while
they are encoded. Outputs above :data:`INLINE_LIMIT` stay in the files, which the
provider downloads (multipart, in chunks) and removes. After a timeout (Daytona kills
the command's process group and answers 408) the partial outputs are downloaded the same
way. A cancelled call kills the command's process tree with a second exec.

Exit statuses above 128 are read as "killed by signal N" (``-N``), as a shell reports
them; a command that itself exits with 129..192 is reported the same way.
"""

from __future__ import annotations

import base64
import re
import secrets
import shlex

import attrs

from provider_sdk.provider import Command, exit_code_from_status

INLINE_LIMIT = 4 << 20
"""Bytes of combined output returned inline; more is downloaded from files."""
ROOT = "/tmp/.psdk-exec-"

_MARK = "psdk-exec-"
_REPORT = re.compile(
    rf"{_MARK}(?P<token>[0-9a-f]+) (?P<rc>\d+) (?P<how>inline|files)\n"
    r"(?P<out>[A-Za-z0-9+/=]*)\n(?P<err>[A-Za-z0-9+/=]*)\n?")

# Kills a process tree: stop it top-down (nothing forks away), then kill it.
KILL_TREE = (
    'k() { kill -STOP "$1" 2>/dev/null; for s in /proc/[0-9]*/stat; do '
    'read -r c _ _ pp _ < "$s" 2>/dev/null || continue; [ "$pp" = "$1" ] && k "$c"; done; '
    'kill -9 "$1" 2>/dev/null; }; ')


@attrs.frozen
class Run:
    """One wrapped command: the prefix of its files inside the sandbox, and its script."""

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

    def kill_script(self) -> str:
        """A command that kills what this run started and removes its files."""
        p = self.prefix
        return (f'{KILL_TREE}p=$(cat {p}.pid 2>/dev/null) && [ -n "$p" ] && k "$p"; '
                f"{self.cleanup_script()}")

    def cleanup_script(self) -> str:
        """A command that removes this run's files."""
        p = self.prefix
        return f"rm -f -- {p}.pid {p}.in {p}.out {p}.err"


def wrap(command: Command, *, cwd: str, env: dict[str, str]) -> Run:
    """The wrapper script for ``command``, run in ``cwd`` with ``env`` exported.

    Few processes besides the command's own: ``wc`` once, ``base64`` per non-empty
    output, ``rm`` once (shell builtins do the rest).
    """
    token = secrets.token_hex(8)
    p = f"{ROOT}{token}"  # hex only: nothing to quote
    exports = "".join(f"export {k}={shlex.quote(v)} && " for k, v in env.items())
    stdin = f"{p}.in" if command.stdin is not None else "/dev/null"
    script = (
        f"echo $$ > {p}.pid || exit 97\n"
        f"( cd -- {shlex.quote(cwd)} && {exports}exec {shlex.join(command.argv)} ) "
        f"< {stdin} > {p}.out 2> {p}.err\n"
        "rc=$?\n"
        f"set -- $(wc -c {p}.out {p}.err)\n"
        f'if [ "$5" -le {INLINE_LIMIT} ]; then\n'
        # Open the outputs, then remove the files while they are encoded.
        f"  exec 4< {p}.out 5< {p}.err\n"
        f"  rm -f {p}.pid {p}.in {p}.out {p}.err > /dev/null 2>&1 &\n"
        f'  printf "{_MARK}{token} %s inline\\n" "$rc"\n'
        f'  [ "$1" -gt 0 ] && base64 -w0 <&4; echo\n'
        f'  [ "$3" -gt 0 ] && base64 -w0 <&5; echo\n'
        "  exec 4<&- 5<&-; wait\n"
        f'else printf "{_MARK}{token} %s files\\n\\n\\n" "$rc"; fi\n'
    )
    return Run(token=token, prefix=p, script=script)


@attrs.frozen
class Report:
    """What the wrapper printed: the exit code, and the outputs if inline."""

    exit_code: int
    stdout: bytes | None
    stderr: bytes | None


def parse(run: Run, text: str) -> Report | None:
    """The wrapper's report in ``text``; ``None`` if it printed none (it was killed)."""
    for found in _REPORT.finditer(text):
        if found["token"] != run.token:
            continue
        code = exit_code_from_status(int(found["rc"]))
        if found["how"] == "files":
            return Report(exit_code=code, stdout=None, stderr=None)
        return Report(exit_code=code, stdout=base64.b64decode(found["out"]),
                      stderr=base64.b64decode(found["err"]))
    return None
