"""envd's ``filesystem.Filesystem`` service: stat, directories, moves, removals and
watching a directory for changes, over the backend sandbox's files API.

A watch compares listings on a poll (envd uses inotify), so it sees what changed
between two looks, not each write, and tells it as inotify would have. File contents
go through ``/files``, which is ``envd``'s, as are routing and Connect framing.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio

from provider_sdk import errors
from provider_sdk.models import FileInfo, FileType
from provider_sdk_emulators.e2b._connect import RpcError, rpc_error
from provider_sdk_emulators.e2b._envd_entries import entries_json, resolve, walk
from provider_sdk_emulators.e2b._records import SandboxRecord
from provider_sdk_emulators.kit.http import Request

__all__ = ["FilesystemService"]

_WATCH_POLL = 0.2


class _Watcher:
    """Directory changes, found by comparing listings (a poll, not inotify), told as
    inotify tells them to envd: a new file that has content is a create and then a
    write (an upload puts envd's chown, a chmod, between them, and its metadata write,
    another, after); a directory whose contents change has no event of its own; a
    change of mode is a chmod. With ``include_entry``, creates, writes and chmods carry
    the entry."""

    def __init__(self, record: SandboxRecord, path: str, recursive: bool,
                 include_entry: bool) -> None:
        self.record = record
        self.path = path
        self.recursive = recursive
        self.include_entry = include_entry
        self.seen: dict[str, FileInfo] = {}
        self.attributes_seen: dict[str, int] = dict(record.attribute_changes)

    async def listing(self) -> dict[str, FileInfo]:
        found: dict[str, FileInfo] = {}
        pending = [self.path]
        while pending:
            directory = pending.pop()
            try:
                entries = await self.record.sandbox.files.list(directory)
            except errors.NotFound:
                continue
            for info in entries:
                found[info.path] = info
                if self.recursive and info.type is FileType.DIRECTORY:
                    pending.append(info.path)
        return found

    async def changes(self) -> list[dict[str, Any]]:
        current = await self.listing()
        attributes = dict(self.record.attribute_changes)
        changed: list[tuple[FileInfo, str]] = []
        for path, info in current.items():
            before = self.seen.get(path)
            # An upload is envd's chown (a chmod to inotify) before the content, and
            # its metadata write (another) after it.
            uploaded = max(attributes.get(path, 0) - self.attributes_seen.get(path, 0), 0)
            if before is None or before.type is not info.type:
                changed.append((info, "EVENT_TYPE_CREATE"))
                if uploaded:
                    changed.append((info, "EVENT_TYPE_CHMOD"))
                if info.type is FileType.FILE and info.size:
                    changed.append((info, "EVENT_TYPE_WRITE"))
            else:
                if before.mode != info.mode or uploaded:
                    changed.append((info, "EVENT_TYPE_CHMOD"))
                if info.type is not FileType.DIRECTORY and (
                        before.size, before.modified_at) != (info.size, info.modified_at):
                    changed.append((info, "EVENT_TYPE_WRITE"))
            if uploaded > 1:
                changed.append((info, "EVENT_TYPE_CHMOD"))
        entries: dict[str, dict[str, Any]] = {}
        if self.include_entry and changed:
            unique = list({info.path: info for info, _ in changed}.values())
            shown = await entries_json(self.record.sandbox, [(i, i.path) for i in unique])
            entries = {info.path: entry for info, entry in zip(unique, shown, strict=True)}
        base = self.path.rstrip("/") + "/"
        events = [{"name": info.path.removeprefix(base), "type": kind,
                   **({"entry": entries[info.path]} if info.path in entries else {})}
                  for info, kind in changed]
        events += [{"name": path.removeprefix(base), "type": "EVENT_TYPE_REMOVE"}
                   for path in self.seen if path not in current]
        self.seen = current
        self.attributes_seen = attributes
        return events


class FilesystemService:
    """The ``filesystem.Filesystem`` handlers of
    :class:`~provider_sdk_emulators.e2b.envd.Envd`."""

    watchers: dict[str, _Watcher]
    """The watchers ``CreateWatcher`` made, by id."""

    def _path(self, message: dict[str, Any], key: str = "path") -> str:
        value = message.get(key)
        if not isinstance(value, str) or not value:
            raise RpcError("invalid_argument", f"{key} is required")
        return value

    async def stat(self, record: SandboxRecord, message: dict[str, Any],
                   request: Request) -> dict[str, Any]:
        path = self._path(message)
        try:
            return {"entry": await self._entry(record, path)}
        except errors.SandboxError as exc:
            raise rpc_error(exc, path) from None

    async def _entry(self, record: SandboxRecord, path: str) -> dict[str, Any]:
        info = await record.sandbox.files.stat(path)
        return (await entries_json(record.sandbox, [(info, info.path)]))[0]

    async def make_dir(self, record: SandboxRecord, message: dict[str, Any],
                       request: Request) -> dict[str, Any]:
        path = self._path(message)
        try:
            await record.sandbox.files.mkdir(path, parents=True, exist_ok=False)
            return {"entry": await self._entry(record, path)}
        except errors.Conflict:
            raise RpcError("already_exists", f"directory '{path}' already exists") from None
        except errors.SandboxError as exc:
            raise rpc_error(exc, path) from None

    async def move(self, record: SandboxRecord, message: dict[str, Any],
                   request: Request) -> dict[str, Any]:
        source = self._path(message, "source")
        destination = self._path(message, "destination")
        try:
            await record.sandbox.files.rename(source, destination)
            return {"entry": await self._entry(record, destination)}
        except errors.SandboxError as exc:
            raise rpc_error(exc, source) from None

    async def list_dir(self, record: SandboxRecord, message: dict[str, Any],
                       request: Request) -> dict[str, Any]:
        path = self._path(message)
        depth = message.get("depth") or 1
        if not isinstance(depth, int) or depth < 1:
            raise RpcError("invalid_argument", "depth must be a positive integer")
        try:
            info = await record.sandbox.files.stat(path)
        except errors.SandboxError as exc:
            raise rpc_error(exc, path) from None
        directory, kind = info.path, info.type
        if kind is FileType.SYMLINK:  # envd lists what a link leads to, under its name
            target = (await resolve(record.sandbox, [info.path]))[info.path]
            if target.type is None:
                raise RpcError("not_found", f"path '{path}' does not exist")
            directory, kind = target.path, target.type
        if kind is not FileType.DIRECTORY:
            raise RpcError("invalid_argument", f"path '{path}' is not a directory")
        try:
            found = await walk(record.sandbox, directory, info.path, depth)
            entries = await entries_json(record.sandbox, found)
        except errors.SandboxError as exc:
            raise rpc_error(exc, path) from None
        return {"entries": entries}

    async def remove(self, record: SandboxRecord, message: dict[str, Any],
                     request: Request) -> dict[str, Any]:
        path = self._path(message)
        try:
            await record.sandbox.files.remove(path, recursive=True)
        except errors.NotFound:
            pass  # envd's os.RemoveAll: a path that is not there is already removed
        except errors.SandboxError as exc:
            raise rpc_error(exc, path) from None
        return {}

    async def _watcher(self, record: SandboxRecord, message: dict[str, Any]) -> _Watcher:
        path = self._path(message)
        try:
            info = await record.sandbox.files.stat(path)
        except errors.SandboxError as exc:
            raise rpc_error(exc, path) from None
        if info.type is not FileType.DIRECTORY:
            raise RpcError("invalid_argument", f"path '{path}' is not a directory")
        watcher = _Watcher(record, info.path, bool(message.get("recursive", False)),
                           bool(message.get("includeEntry", False)))
        watcher.seen = await watcher.listing()
        return watcher

    async def watch_dir(self, record: SandboxRecord, message: dict[str, Any],
                        request: Request) -> AsyncIterator[dict[str, Any]]:
        watcher = await self._watcher(record, message)
        yield {"start": {}}
        while True:
            await anyio.sleep(_WATCH_POLL)
            for event in await watcher.changes():
                yield {"filesystem": event}

    async def create_watcher(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        watcher = await self._watcher(record, message)
        watcher_id = secrets.token_hex(8)
        self.watchers[watcher_id] = watcher
        return {"watcherId": watcher_id}

    async def watcher_events(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        watcher = self.watchers.get(str(message.get("watcherId")))
        if watcher is None or watcher.record is not record:
            raise RpcError("not_found", f"watcher {message.get('watcherId')!r} not found")
        return {"events": await watcher.changes()}

    async def remove_watcher(self, record: SandboxRecord, message: dict[str, Any],
                             request: Request) -> dict[str, Any]:
        self.watchers.pop(str(message.get("watcherId")), None)
        return {}
