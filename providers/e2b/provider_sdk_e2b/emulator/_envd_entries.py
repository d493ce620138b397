"""envd's ``EntryInfo`` for the backend sandbox's files, and ``ListDir``'s walk.

envd describes a symlink by what it points to: ``type`` and ``mode`` are the target's,
``symlinkTarget`` is the target's absolute path with every link on the way resolved
(the link's own path when it leads nowhere, and then the type is unspecified), while
``size``, ``modifiedTime`` and ``permissions`` (Go's mode string, ``L`` for a link) are
the link's own. The backend's files API reports links without following them, so the
targets are resolved inside the sandbox, all of one answer's in one command.

``ListDir`` walks depth first, each directory's entries in name order, without entering
linked directories, as Go's ``filepath.WalkDir`` does. Nothing here serves a request:
``_envd_filesystem`` does.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Sequence
from typing import Any

import attrs

from provider_sdk import errors
from provider_sdk.models import FileInfo, FileType
from provider_sdk.sandbox import Sandbox

__all__ = ["Target", "entries_json", "entry_json", "resolve", "walk"]

_TYPES = {FileType.FILE: "FILE_TYPE_FILE", FileType.DIRECTORY: "FILE_TYPE_DIRECTORY",
          FileType.SYMLINK: "FILE_TYPE_SYMLINK"}
_KINDS = {"d": FileType.DIRECTORY, "f": FileType.FILE, "o": FileType.OTHER}
_BATCH = 256  # links resolved per command: well inside any argument-length limit
_RESOLVE_TIMEOUT = 30.0  # seconds; past it (a hung mount, say) the links stay unresolved

# For each link: its target's kind (d, f, o; empty when it leads nowhere), permission
# bits and fully resolved path, NUL-separated. The "x" keeps a name's trailing newlines.
_RESOLVE = r"""
for p do
  r=$(readlink -f -- "$p" && printf x) && r=${r%?x} || r=
  if [ -n "$r" ] && [ -e "$r" ]; then
    if [ -d "$r" ]; then k=d; elif [ -f "$r" ]; then k=f; else k=o; fi
    m=$(stat -c %a -- "$r") || m=0
  else k=; m=0; r=
  fi
  printf '%s\0%s\0%s\0' "$k" "$m" "$r"
done
"""


@attrs.frozen
class Target:
    """Where a symlink leads: the target's type and permission bits, and its path."""

    type: FileType | None
    """``None`` when the link leads nowhere (broken, or a loop)."""
    mode: int
    path: str


async def resolve(sandbox: Sandbox, links: Sequence[str]) -> dict[str, Target]:
    """Where each of ``links`` (absolute paths of symlinks) leads, as envd reports it;
    a link the sandbox cannot resolve in time is reported as leading nowhere."""
    found: dict[str, Target] = {}
    for start in range(0, len(links), _BATCH):
        batch = list(links[start:start + _BATCH])
        try:
            result = await sandbox.exec(["/bin/sh", "-c", _RESOLVE, "sh", *batch],
                                        timeout=_RESOLVE_TIMEOUT)
            fields = result.stdout_bytes.decode("utf-8", "surrogateescape").split("\0")
        except errors.SandboxError:
            fields = []
        for i, link in enumerate(batch):
            kind, mode, path = [*fields[3 * i:3 * i + 3], "", "", ""][:3]
            if kind in _KINDS and path:
                try:
                    bits = int(mode, 8) & 0o777
                except ValueError:
                    bits = 0
                found[link] = Target(_KINDS[kind], bits, path)
            else:
                found[link] = Target(None, 0, link)
    return found


def _permissions(info: FileInfo) -> str:
    """Go's ``FileMode.String()`` of the entry itself (``L`` for a symlink)."""
    kind = {FileType.DIRECTORY: "d", FileType.SYMLINK: "L"}.get(info.type, "-")
    bits = "".join(ch if info.mode & (1 << (8 - i)) else "-"
                   for i, ch in enumerate("rwxrwxrwx"))
    return kind + bits


def entry_json(info: FileInfo, *, path: str | None = None,
               target: Target | None = None) -> dict[str, Any]:
    """envd's ``EntryInfo`` for a neutral :class:`FileInfo` (shown at ``path`` when
    given); a symlink's ``target`` says what it points to."""
    kind: FileType | None = info.type
    mode = info.mode
    if info.type is FileType.SYMLINK:
        if target is None:
            target = Target(None, 0, info.path)
        kind, mode = target.type, target.mode
    shown = path or info.path
    entry: dict[str, Any] = {
        "name": posixpath.basename(shown.rstrip("/")) or "/",
        "type": _TYPES.get(kind, "FILE_TYPE_UNSPECIFIED") if kind else
        "FILE_TYPE_UNSPECIFIED",
        "path": shown, "size": str(info.size), "mode": mode,
        "permissions": _permissions(info),
    }
    if info.modified_at is not None:
        entry["modifiedTime"] = info.modified_at.astimezone(dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ")
    if target is not None:
        entry["symlinkTarget"] = target.path
    return entry


async def entries_json(sandbox: Sandbox,
                       shown: Sequence[tuple[FileInfo, str]]) -> list[dict[str, Any]]:
    """``EntryInfo`` for each ``(info, path it is shown at)``, symlinks resolved."""
    links = await resolve(sandbox, [i.path for i, _ in shown if i.type is FileType.SYMLINK])
    return [entry_json(info, path=path, target=links.get(info.path)) for info, path in shown]


async def walk(sandbox: Sandbox, directory: str, shown: str,
               depth: int) -> list[tuple[FileInfo, str]]:
    """The entries under ``directory`` down to ``depth`` levels, depth first in name
    order, each with the path it is shown at (under ``shown``). A directory that
    vanishes on the way is skipped."""
    found: list[tuple[FileInfo, str]] = []

    async def visit(directory: str, shown: str, level: int) -> None:
        try:
            items = await sandbox.files.list(directory)
        except (errors.NotFound, errors.InvalidInput):
            return
        for item in sorted(items, key=lambda i: i.name.encode("utf-8", "surrogateescape")):
            path = posixpath.join(shown, item.name)
            found.append((item, path))
            if item.type is FileType.DIRECTORY and level < depth:
                await visit(item.path, path, level + 1)

    await visit(directory, shown, 1)
    return found
