"""envd's ``EntryInfo`` for the backend sandbox's files, and ``ListDir``'s walk.

envd describes a symlink by what it points to: ``type`` and ``mode`` are the target's,
``symlinkTarget`` is the target's absolute path with every link on the way resolved
(the link's own path when it leads nowhere, and then the type is unspecified), while
``size``, ``modifiedTime`` and ``permissions`` (Go's mode string, ``L`` for a link) are
the link's own. The backend's files API reports links without following them, so the
targets are resolved inside the sandbox, all of one answer's in one question to the
helper kept there (:mod:`._inside`), or in one command where there is none.

Every entry also names its owner and group, and carries the user metadata kept on the
file as extended attributes in the ``user.e2b.`` namespace (set by an upload's
``X-Metadata-*`` headers, or by anyone inside), read inside the sandbox for all of one
answer's entries in one question to the helper or, without one, in one command:
``stat`` for the names, ``python3`` for the attributes (an image without it shows no
metadata).

``ListDir`` walks depth first, each directory's entries in name order, without entering
linked directories, as Go's ``filepath.WalkDir`` does. Nothing here serves a request:
``_envd_filesystem`` does.
"""

from __future__ import annotations

import datetime as dt
import json
import posixpath
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs

from provider_sdk import errors
from provider_sdk.models import FileInfo, FileType
from provider_sdk.sandbox import Sandbox
from provider_sdk_emulators.e2b._inside import ask_helper

__all__ = ["METADATA_PREFIX", "Details", "Target", "describe", "entries_json", "entry_json",
           "resolve", "set_metadata", "walk"]

METADATA_PREFIX = "user.e2b."
"""The extended attributes that hold a file's user metadata, as envd keeps it."""

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

# For each path: its name as given, then "owner:group" (stat skips a path that is gone);
# an empty field ends that part. Then, when python3 is there, each path's user.e2b.
# attributes as a JSON object, in order.
_DESCRIBE = r"""
stat --printf '%n\0%U:%G\0' -- "$@" 2>/dev/null
printf '\0'
command -v python3 >/dev/null 2>&1 || exit 0
exec python3 -c '
import json, os, sys
for path in sys.argv[1:]:
    found = {}
    try:
        for name in os.listxattr(path, follow_symlinks=False):
            if name.startswith("user.e2b."):
                found[name[9:]] = os.getxattr(path, name, follow_symlinks=False).decode(
                    "utf-8", "replace")
    except OSError:
        pass
    sys.stdout.write(json.dumps(found) + "\0")
' "$@"
"""
# Sets user.e2b.<key> = value on one file, for each key and value after its path.
_SET_METADATA = """
import os, sys
path = sys.argv[1]
for key, value in zip(sys.argv[2::2], sys.argv[3::2]):
    os.setxattr(path, "user.e2b." + key, value.encode())
"""


@attrs.frozen
class Details:
    """What envd tells of an entry beyond its stat: owner, group and user metadata."""

    owner: str = ""
    group: str = ""
    metadata: dict[str, str] = attrs.Factory(dict)


async def _batches(sandbox: Sandbox, script: str, function: str,
                   paths: Sequence[str]) -> AsyncIterator[tuple[list[str], list[str]]]:
    """Ask the in-sandbox helper's ``function`` (see :mod:`._inside`) or, where there is
    none, run ``script`` (``sh``, the paths as its arguments) over ``paths`` in batches;
    yield each batch with the fields it printed (none if it failed or took too long)."""
    for start in range(0, len(paths), _BATCH):
        batch = list(paths[start:start + _BATCH])
        helped = await ask_helper(sandbox, function, batch, timeout=_RESOLVE_TIMEOUT)
        if helped is not None:
            yield batch, helped
            continue
        try:
            result = await sandbox.exec(["/bin/sh", "-c", script, "sh", *batch],
                                        timeout=_RESOLVE_TIMEOUT)
            fields = result.stdout_bytes.decode("utf-8", "surrogateescape").split("\0")
        except errors.SandboxError:
            fields = []
        yield batch, fields


async def describe(sandbox: Sandbox, paths: Sequence[str]) -> dict[str, Details]:
    """Owner, group and metadata of each of ``paths``; one that cannot be read in time
    (or is gone) has none."""
    found: dict[str, Details] = {}
    async for batch, fields in _batches(sandbox, _DESCRIBE, "_psdk_describe", paths):
        owners: dict[str, tuple[str, str]] = {}
        index = 0
        while index + 1 < len(fields) and fields[index]:
            owner, _, group = fields[index + 1].partition(":")
            owners[fields[index]] = (owner, group)
            index += 2
        attributes = fields[index + 1:index + 1 + len(batch)]
        for i, path in enumerate(batch):
            metadata: dict[str, str] = {}
            if i < len(attributes):
                try:
                    parsed = json.loads(attributes[i])
                except ValueError:
                    parsed = {}
                if isinstance(parsed, dict):
                    metadata = {str(k): str(v) for k, v in parsed.items()}
            owner, group = owners.get(path, ("", ""))
            found[path] = Details(owner, group, metadata)
    return found


async def set_metadata(sandbox: Sandbox, path: str, metadata: Mapping[str, str]) -> None:
    """Keep ``metadata`` on the file at ``path`` as envd does, as ``user.e2b.``
    extended attributes.

    Raises:
        SandboxError: the attributes could not be set (no ``python3`` in the image, or
            a filesystem without user attributes).
    """
    args = [part for pair in metadata.items() for part in pair]
    result = await sandbox.exec(["python3", "-c", _SET_METADATA, path, *args],
                                timeout=_RESOLVE_TIMEOUT)
    if result.exit_code != 0:
        raise errors.SandboxError(f"cannot keep the metadata of '{path}': "
                                  f"{result.stderr.strip()[-300:]}")


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
    async for batch, fields in _batches(sandbox, _RESOLVE, "_psdk_resolve", links):
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


def entry_json(info: FileInfo, *, path: str | None = None, target: Target | None = None,
               details: Details | None = None) -> dict[str, Any]:
    """envd's ``EntryInfo`` for a neutral :class:`FileInfo` (shown at ``path`` when
    given); a symlink's ``target`` says what it points to, ``details`` whose it is."""
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
    if details is not None:
        entry["owner"], entry["group"] = details.owner, details.group
        if details.metadata:
            entry["metadata"] = dict(details.metadata)
    return entry


async def entries_json(sandbox: Sandbox,
                       shown: Sequence[tuple[FileInfo, str]]) -> list[dict[str, Any]]:
    """``EntryInfo`` for each ``(info, path it is shown at)``, symlinks resolved."""
    links = await resolve(sandbox, [i.path for i, _ in shown if i.type is FileType.SYMLINK])
    details = await describe(sandbox, [i.path for i, _ in shown]) if shown else {}
    return [entry_json(info, path=path, target=links.get(info.path),
                       details=details.get(info.path)) for info, path in shown]


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
