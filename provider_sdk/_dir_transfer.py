"""Directory trees in and out of a sandbox (``files.upload_dir``, ``files.download_dir``),
as a tar archive streamed through the files role and unpacked or made by the sandbox's
own ``tar`` through the commands role, so every provider has it.

Upload: the local tree is archived as it is walked (:mod:`provider_sdk._tar_write`),
the archive written to a temporary file in the sandbox in chunks, then unpacked there by
GNU ``tar`` into the destination (permissions kept, owners the sandbox user's), and the
file removed. ``tar`` replaces a link or file in the destination where the archive has a
directory or file, so nothing is written through a link the sandbox already held.

Download: the sandbox's ``tar`` archives the tree into a temporary file, which is read
in chunks and unpacked locally as it arrives (:mod:`provider_sdk._tar_extract`, which
reads the archive as hostile), then removed. ``tar`` is found on the sandbox's own
``PATH``; the temporary archives are hidden files in the sandbox's ``/tmp``.

Neither side holds the tree, or the archive, in memory.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
from typing import BinaryIO

import anyio

from provider_sdk._hooks import ProviderHooks
from provider_sdk._tar_extract import extract_archive
from provider_sdk._tar_pipe import consumed, produced
from provider_sdk._tar_write import archive_tree
from provider_sdk.commands import Command
from provider_sdk.errors import (
    FileNotFound,
    NotADirectory,
    PermissionDenied,
    QuotaExceeded,
    SandboxError,
)
from provider_sdk.results import ExecResult

__all__ = ["download_dir", "upload_dir"]

_ENV = {"LC_ALL": "C"}
"""The scripts' environment over the sandbox's: its ``PATH`` finds ``tar``."""
_TIMEOUT = 3600.0
"""Seconds the sandbox's ``tar`` may take for one tree."""
_MISSING, _NOT_DIRECTORY = 10, 14
# "$1" is the tree, "$2" the archive.
_UNPACK = r"""
trap 'rm -f -- "$2"' EXIT
if [ -e "$1" ] || [ -L "$1" ]; then
  [ -d "$1" ] || exit 14
else
  mkdir -p -- "$1" || exit 1
fi
tar -x -p --no-same-owner -f "$2" -C "$1"
"""
_PACK = r"""
[ -e "$1" ] || exit 10
[ -d "$1" ] || exit 14
a=$(mktemp /tmp/.psdk-dir-XXXXXXXX) || exit 1
tar -c -f "$a" -C "$1" . || { s=$?; rm -f -- "$a"; exit $s; }
printf '%s' "$a"
"""
_MESSAGES: tuple[tuple[str, type[SandboxError]], ...] = (
    ("permission denied", PermissionDenied),
    ("read-only file system", PermissionDenied),
    ("operation not permitted", PermissionDenied),
    ("no space left on device", QuotaExceeded),
    ("disk quota exceeded", QuotaExceeded),
    ("not a directory", NotADirectory),
    ("no such file", FileNotFound),
)


async def upload_dir(provider: ProviderHooks, sandbox_id: str, local: str,
                     remote: str) -> None:
    """Copy the local tree ``local`` to ``remote`` in the sandbox (see the module)."""
    if not await anyio.Path(local).is_dir():
        if not await anyio.Path(local).exists():
            raise FileNotFoundError(2, "No such file or directory", local)
        raise NotADirectory(f"{local}: not a directory", provider=provider.name,
                            sandbox_id=sandbox_id)
    archive = f"/tmp/.psdk-dir-{secrets.token_hex(8)}"
    refused: list[BaseException] = []

    def walk(out: BinaryIO) -> None:
        try:
            archive_tree(local, out)
        except BrokenPipeError:
            raise  # the write stopped reading: its error is the one
        except BaseException as exc:
            refused.append(exc)
            raise

    chunks = produced(walk)
    try:
        await provider._write_file(sandbox_id, archive, chunks)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _remove_quietly(provider, sandbox_id, archive)
        if refused:  # the tree's own error, whatever the write made of it
            raise refused[0] from None
        raise
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    result = await _run(provider, sandbox_id, _UNPACK, remote, archive)
    _check(provider, sandbox_id, result, remote)


async def download_dir(provider: ProviderHooks, sandbox_id: str, remote: str,
                       local: str) -> None:
    """Copy the tree at ``remote`` in the sandbox to the local ``local`` (see the module)."""
    result = await _run(provider, sandbox_id, _PACK, remote)
    _check(provider, sandbox_id, result, remote)
    archive = result.stdout
    try:
        chunks = provider._read_file(sandbox_id, archive)
        try:
            await consumed(chunks, functools.partial(extract_archive, dest=local))
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await _remove_quietly(provider, sandbox_id, archive)


async def _run(provider: ProviderHooks, sandbox_id: str, script: str,
               *args: str) -> ExecResult:
    return await provider._exec(sandbox_id, Command(
        argv=("/bin/sh", "-c", script, "psdk-dir", *args), env=dict(_ENV),
        timeout=_TIMEOUT))


def _check(provider: ProviderHooks, sandbox_id: str, result: ExecResult, path: str) -> None:
    """Raise the typed error of a failed script."""
    if result.exit_code == 0:
        return
    if result.exit_code == _MISSING:
        kind: type[SandboxError] = FileNotFound
        what = "no such file or directory"
    elif result.exit_code == _NOT_DIRECTORY:
        kind, what = NotADirectory, "not a directory"
    else:
        said = result.stderr.strip()
        kind = next((k for text, k in _MESSAGES if text in said.lower()), SandboxError)
        what = said[-300:] or f"tar: exit status {result.exit_code}"
    raise kind(f"{path}: {what}", provider=provider.name, sandbox_id=sandbox_id)


async def _remove_quietly(provider: ProviderHooks, sandbox_id: str, path: str) -> None:
    """Remove a temporary archive; the transfer's own error, if any, is the one raised."""
    with contextlib.suppress(SandboxError):
        await _run(provider, sandbox_id, 'rm -f -- "$1"', path)
