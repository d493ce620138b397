"""``CommandFiles``: the files role of a provider that has only commands.

Every file operation is one or a few commands run through the provider's commands role,
as the sandbox's user, in its working directory: POSIX ``sh`` with coreutils and GNU
``find`` (as a Debian or Ubuntu image has; busybox lacks ``find -printf``). Reads and
writes go in chunks of :data:`CHUNK` bytes, so a file of any size moves without being
held whole: a read checks first (one command) that the path is a regular file it may
read, so a device, FIFO or socket is refused before any byte; a write goes to a
temporary file in the same directory, chunk by chunk through the command's stdin, and
is renamed over the target at the end, keeping the old file's mode. Errors are read
from the tools' own messages (in the C locale) into the neutral tree.

A provider whose backend has a files API of its own writes a files role instead; this
one needs nothing but ``exec`` binary-safe on stdin and stdout.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import posixpath
import secrets
from collections.abc import AsyncIterator

from provider_sdk import errors
from provider_sdk.commands import Command
from provider_sdk.models import FileInfo, FileType
from provider_sdk.roles import Commands

__all__ = ["CHUNK", "CommandFiles"]

CHUNK = 4 << 20
"""Bytes of a file each command reads or writes."""
_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LC_ALL": "C"}
_TIMEOUT = 300.0
"""Seconds any one file command may take."""

# Exit statuses the scripts use for what they find, before any tool speaks.
_MISSING, _DIRECTORY, _NOT_REGULAR, _UNREADABLE, _NOT_DIRECTORY, _EXISTS = range(10, 16)
_STATUSES: dict[int, tuple[type[errors.SandboxError], str]] = {
    _MISSING: (errors.FileNotFound, "no such file or directory"),
    _DIRECTORY: (errors.IsADirectory, "is a directory"),
    _NOT_REGULAR: (errors.NotARegularFile, "not a regular file (a device, FIFO or socket)"),
    _UNREADABLE: (errors.PermissionDenied, "permission denied"),
    _NOT_DIRECTORY: (errors.NotADirectory, "not a directory"),
    _EXISTS: (errors.FileExists, "file exists"),
}
_MESSAGES: tuple[tuple[str, type[errors.SandboxError]], ...] = (
    ("no such file", errors.FileNotFound),
    ("not a directory", errors.NotADirectory),
    ("is a directory", errors.IsADirectory),
    ("cannot overwrite directory", errors.IsADirectory),
    ("file exists", errors.FileExists),
    ("directory not empty", errors.Conflict),
    ("permission denied", errors.PermissionDenied),
    ("operation not permitted", errors.PermissionDenied),
    ("read-only file system", errors.PermissionDenied),
    ("no space left on device", errors.QuotaExceeded),
    ("disk quota exceeded", errors.QuotaExceeded),
)
"""Tools' error texts (lower case, C locale) and what they mean."""

# Says why "$1" cannot be opened, if it cannot: a component on the way that is not a
# directory, or nothing there.
_WHY_MISSING = r"""
why() {
  d=$1
  while [ "$d" != . ] && [ "$d" != / ]; do
    d=$(dirname -- "$d")
    if [ -e "$d" ] && [ ! -d "$d" ]; then exit 14; fi
  done
  exit 10
}
"""
_PROBE_READ = _WHY_MISSING + r"""
[ -e "$1" ] || why "$1"
[ -d "$1" ] && exit 11
[ -f "$1" ] || exit 12
[ -r "$1" ] || exit 13
exit 0
"""
_READ = 'exec dd if="$1" bs="$2" skip="$3" count=1 status=none'
_WRITE_FIRST = _WHY_MISSING + r"""
d=$(dirname -- "$1")
if [ ! -d "$d" ]; then
  [ -e "$d" ] && exit 14
  mkdir -p -- "$d" || exit 1
fi
[ -d "$1" ] && exit 11
exec cat > "$2"
"""
_WRITE_MORE = 'exec cat >> "$1"'
_WRITE_LAST = r"""
if [ -e "$1" ] && [ ! -L "$1" ]; then chmod "$(stat -c %a -- "$1")" -- "$2"; fi
exec mv -f -- "$2" "$1"
"""
_DISCARD = 'rm -f -- "$1"'
# type, size, mode (octal), mtime (seconds), link target, then the name: NUL-separated.
_FIELDS = r"%y\0%s\0%m\0%T@\0%l\0%p\0"
_STAT = _WHY_MISSING + r"""
[ -e "$1" ] || [ -L "$1" ] || why "$1"
printf '%s\0' "$PWD"
exec find "$1" -maxdepth 0 -printf '""" + _FIELDS + """'
"""
_LIST = _WHY_MISSING + r"""
[ -e "$1" ] || why "$1"
[ -d "$1" ] || exit 14
printf '%s\0' "$PWD"
exec find "$1" -mindepth 1 -maxdepth 1 -printf '""" + _FIELDS + """'
"""
_MKDIR = _WHY_MISSING + r"""
if [ -e "$1" ]; then
  [ -d "$1" ] && [ "$2" = yes ] && exit 0
  exit 15
fi
if [ "$3" = yes ]; then exec mkdir -p -- "$1"; fi
exec mkdir -- "$1"
"""
_REMOVE = _WHY_MISSING + r"""
[ -e "$1" ] || [ -L "$1" ] || why "$1"
if [ -d "$1" ] && [ ! -L "$1" ]; then
  if [ "$2" = yes ]; then exec rm -rf -- "$1"; fi
  exec rmdir -- "$1"
fi
exec rm -f -- "$1"
"""
_RENAME = _WHY_MISSING + r"""
[ -e "$1" ] || [ -L "$1" ] || why "$1"
exec mv -f -T -- "$1" "$2"
"""
_TYPES = {"f": FileType.FILE, "d": FileType.DIRECTORY, "l": FileType.SYMLINK}


class CommandFiles:
    """The files role over a commands role (see the module's docstring). ``provider``
    names the provider in errors."""

    def __init__(self, commands: Commands, *, provider: str) -> None:
        self._commands = commands
        self._provider = provider

    async def _run(self, sandbox_id: str, script: str, *args: str, path: str,
                   stdin: bytes | None = None) -> bytes:
        """Run ``script`` with ``args``; its stdout, or the typed error for ``path``."""
        command = Command(argv=("/bin/sh", "-c", script, "psdk-files", *args),
                          env=dict(_ENV), timeout=_TIMEOUT, stdin=stdin)
        result = await self._commands.exec(sandbox_id, command)
        if result.exit_code == 0:
            return result.stdout_bytes
        raise self._error(result.exit_code, result.stderr, path, sandbox_id)

    def _error(self, status: int, stderr: str, path: str,
               sandbox_id: str) -> errors.SandboxError:
        kind, what = _STATUSES.get(status, (errors.SandboxError, ""))
        if not what:
            said = stderr.strip().lower()
            for text, found in _MESSAGES:
                if text in said:
                    kind, what = found, text
                    break
            else:
                what = stderr.strip()[-300:] or f"exit status {status}"
        return kind(f"{path}: {what}", provider=self._provider, sandbox_id=sandbox_id)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        await self._run(sandbox_id, _PROBE_READ, path, path=path)
        block = 0
        while True:
            chunk = await self._run(sandbox_id, _READ, path, str(CHUNK), str(block),
                                    path=path)
            if chunk:
                yield chunk
            if len(chunk) < CHUNK:
                return
            block += 1

    async def write_file(self, sandbox_id: str, path: str,
                         chunks: AsyncIterator[bytes]) -> None:
        temporary = posixpath.join(posixpath.dirname(path) or ".",
                                   f".psdk-write-{secrets.token_hex(6)}")
        pending = b""
        first = True
        try:
            async for chunk in chunks:
                pending += chunk
                while len(pending) >= CHUNK or (first and pending):
                    part, pending = pending[:CHUNK], pending[CHUNK:]
                    await self._put(sandbox_id, path, temporary, part, first)
                    first = False
            if pending or first:
                await self._put(sandbox_id, path, temporary, pending, first)
            await self._run(sandbox_id, _WRITE_LAST, path, temporary, path=path)
        except BaseException:
            if not first:
                await self._discard(sandbox_id, temporary)
            raise

    async def _put(self, sandbox_id: str, path: str, temporary: str, part: bytes,
                   first: bool) -> None:
        if first:
            await self._run(sandbox_id, _WRITE_FIRST, path, temporary, path=path, stdin=part)
        else:
            await self._run(sandbox_id, _WRITE_MORE, temporary, path=path, stdin=part)

    async def _discard(self, sandbox_id: str, temporary: str) -> None:
        with contextlib.suppress(errors.SandboxError):  # the write's error is the one
            await self._run(sandbox_id, _DISCARD, temporary, path=temporary)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        out = await self._run(sandbox_id, _STAT, path, path=path)
        found = self._entries(out)
        if len(found) != 1:
            raise errors.SandboxError(f"{path}: the sandbox's find said nothing of it",
                                      provider=self._provider, sandbox_id=sandbox_id)
        return found[0]

    async def list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        return self._entries(await self._run(sandbox_id, _LIST, path, path=path))

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                    exist_ok: bool) -> None:
        await self._run(sandbox_id, _MKDIR, path, "yes" if exist_ok else "no",
                        "yes" if parents else "no", path=path)

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        await self._run(sandbox_id, _REMOVE, path, "yes" if recursive else "no", path=path)

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._run(sandbox_id, _RENAME, src, dst, path=f"{src} -> {dst}")

    @staticmethod
    def _entries(out: bytes) -> builtins.list[FileInfo]:
        """The entries ``find -printf`` described, after the working directory."""
        fields = out.split(b"\0")
        cwd, fields = fields[0].decode(errors="surrogateescape"), fields[1:]
        found = []
        for index in range(0, len(fields) - 5, 6):
            kind, size, mode, mtime, target, name = (
                f.decode(errors="surrogateescape") for f in fields[index:index + 6])
            found.append(FileInfo(
                path=posixpath.normpath(posixpath.join(cwd, name)),
                type=_TYPES.get(kind, FileType.OTHER), size=int(size), mode=int(mode, 8),
                modified_at=dt.datetime.fromtimestamp(float(mtime), dt.timezone.utc),
                symlink_target=target if kind == "l" else None))
        return found

