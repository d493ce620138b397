"""The Engine's archive endpoints of a container: a path's stat (``HEAD``) and an archive
put into a directory (``PUT``), with their answers, and the error texts of the tools
inside, translated into the neutral tree.

The files role reads and writes through them; the commands role asks whether a
background process's directory is there. Reading a whole archive is ``_tar``'s.
"""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

from provider_sdk import errors
from provider_sdk_docker._labels import container_name
from provider_sdk_docker._shared import Shared

__all__ = ["MODE_DIR", "MODE_NOT_REGULAR", "MODE_SYMLINK", "file_error", "path_stat", "put"]

# Go's os.FileMode type bits, as the archive endpoint reports them.
MODE_DIR = 1 << 31
MODE_SYMLINK = 1 << 27
MODE_NOT_REGULAR = (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
_FILE_ERRORS: tuple[tuple[str, type[errors.SandboxError]], ...] = (
    ("no such file", errors.FileNotFound),
    ("not a directory", errors.NotADirectory),
    ("is a directory", errors.IsADirectory),
    ("cannot overwrite directory", errors.IsADirectory),
    ("file exists", errors.FileExists),
    ("directory not empty", errors.Conflict),
    ("permission denied", errors.PermissionDenied),
    ("read-only", errors.PermissionDenied),
    ("no space left on device", errors.QuotaExceeded),
    ("disk quota exceeded", errors.QuotaExceeded),
)
"""Error texts (lower case) from the Engine or the tools inside, and what they mean."""


class _PathMissing(Exception):
    pass


class _PathRefused(Exception):
    pass


def file_error(shared: Shared, message: str, sandbox_id: str) -> errors.SandboxError:
    """The neutral error an Engine's or a tool's message about a path means."""
    for text, cls in _FILE_ERRORS:
        if text in message.lower():
            return cls(message, provider=shared.name, sandbox_id=sandbox_id)
    return errors.SandboxError(message, provider=shared.name, sandbox_id=sandbox_id)


async def path_stat(shared: Shared, sandbox_id: str, path: str) -> dict[str, Any] | None:
    """The Engine's stat of ``path`` (the final symlink not followed), or ``None``."""
    def head() -> dict[str, Any] | None:
        client = shared.engine.client
        url = client._url("/containers/{0}/archive", container_name(sandbox_id))
        response = client.head(url, params={"path": path})
        if response.status_code == 404:  # no such path, or no such container
            raise _PathMissing
        if response.status_code == 500 and path != "/":
            raise _PathRefused(response.reason)
        client._raise_for_status(response)
        header = response.headers.get("X-Docker-Container-Path-Stat")
        if not header:
            return None
        stat: dict[str, Any] = json.loads(_b64(header))
        return stat

    try:
        return await shared.engine.call(head, what=sandbox_id, sandbox_id=sandbox_id)
    except _PathMissing:
        await shared.inspect(sandbox_id)  # the sandbox is there: the path is not
        return None
    except _PathRefused as exc:
        # A HEAD answer has no body to say why; the usual reason is a parent that
        # is not a directory, which the parent's own stat shows.
        parent = posixpath.dirname(path.rstrip("/")) or "/"
        above = await path_stat(shared, sandbox_id, parent)
        if above is not None and not int(above.get("mode", 0)) & MODE_DIR:
            raise errors.NotADirectory(f"{path}: Not a directory", provider=shared.name,
                                       sandbox_id=sandbox_id) from None
        raise file_error(shared, f"{path}: {exc}", sandbox_id) from None


async def put(shared: Shared, sandbox_id: str, directory: str,
              archive: Callable[[], Iterator[bytes]]) -> None:
    """Unpack the archive ``archive()`` makes into ``directory`` of the container."""
    def send() -> None:
        client = shared.engine.client
        url = client._url("/containers/{0}/archive", container_name(sandbox_id))
        response = client.put(url, params={"path": directory}, data=archive())
        if response.status_code == 404 and "no such container" not in response.text.lower():
            raise _PathMissing
        if response.status_code in (400, 403, 500):
            raise _PathRefused(response.text)
        client._raise_for_status(response)

    try:
        await shared.engine.call(send, what=sandbox_id, sandbox_id=sandbox_id)
    except _PathMissing:
        raise errors.FileNotFound(f"{directory}: No such file or directory",
                                  provider=shared.name, sandbox_id=sandbox_id) from None
    except _PathRefused as exc:
        raise file_error(shared, f"{directory}: {exc}", sandbox_id) from None


def _b64(text: str) -> str:
    return base64.b64decode(text + "=" * (-len(text) % 4)).decode()
