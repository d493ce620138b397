"""``LocalFiles``: the files role of ``LocalProvider``: each call one call to the running
sandbox's agent, which acts on files as the sandbox user (see ``_fileops``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from provider_sdk.local._sandboxes import Sandboxes
from provider_sdk.models import FileInfo, FileType

__all__ = ["LocalFiles"]


class LocalFiles:
    """The files of a running local sandbox, through its agent."""

    def __init__(self, sandboxes: Sandboxes) -> None:
        self._sandboxes = sandboxes

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """A file's bytes in chunks."""
        client = self._sandboxes.running(sandbox_id)
        async for chunk in client.read(path):
            yield chunk

    async def write_file(self, sandbox_id: str, path: str,
                         chunks: AsyncIterator[bytes]) -> None:
        """Write a file whole from chunks, making its parent directories."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.write(path, chunks))

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        """A directory's entries."""
        entries = await self._sandboxes.agent(sandbox_id, lambda c: c.call("list", path=path))
        return [_to_file_info(e) for e in entries]

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        """Stat without following a final symlink."""
        return _to_file_info(await self._sandboxes.agent(
            sandbox_id, lambda c: c.call("stat", path=path)))

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                    exist_ok: bool) -> None:
        """Make a directory."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.call(
            "mkdir", path=path, parents=parents, exist_ok=exist_ok))

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        """Remove a file, or a directory (its contents too if ``recursive``)."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.call("remove", path=path,
                                                                 recursive=recursive))

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``."""
        await self._sandboxes.agent(sandbox_id, lambda c: c.call("rename", src=src, dst=dst))


def _to_file_info(entry: dict[str, Any]) -> FileInfo:
    return FileInfo(path=entry["path"], type=FileType(entry["type"]), size=entry["size"],
                    mode=entry["mode"],
                    modified_at=dt.datetime.fromtimestamp(entry["mtime"], dt.timezone.utc),
                    symlink_target=entry["target"])
