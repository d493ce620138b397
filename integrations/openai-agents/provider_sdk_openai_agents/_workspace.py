"""A session's workspace as bytes (``persist_workspace``) and back (``hydrate_workspace``).

Two forms: a reference to a provider snapshot of the whole sandbox (where the provider
declares ``snapshot.filesystem``), which is restored by starting a new sandbox from it;
or a tar archive of the workspace with workspace-relative members (the Agents SDK's
portable form), moved with ``files.download_dir``/``files.upload_dir``. This module owns
both encodings and the archive's safety checks; it knows no provider by name.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path

import anyio.to_thread
from agents.sandbox.util.tar_utils import UnsafeTarMemberError, validate_tar_bytes

from provider_sdk.sandbox import Sandbox

__all__ = ["SnapshotRef", "archive_workspace", "decode_ref", "encode_ref", "unpack_archive"]

_MAGIC = b"PSDK_SANDBOX_SNAPSHOT_V1\n"


class SnapshotRef:
    """A provider snapshot standing for a workspace."""

    def __init__(self, provider: str, snapshot_id: str) -> None:
        self.provider = provider
        self.snapshot_id = snapshot_id


def encode_ref(ref: SnapshotRef) -> bytes:
    """The bytes ``persist_workspace`` returns for a provider snapshot."""
    body = json.dumps({"provider": ref.provider, "snapshot": ref.snapshot_id})
    return _MAGIC + body.encode()


def decode_ref(raw: bytes) -> SnapshotRef | None:
    """The snapshot ``raw`` refers to, or ``None`` if it is an archive."""
    if not raw.startswith(_MAGIC):
        return None
    try:
        body = json.loads(raw[len(_MAGIC):])
        return SnapshotRef(str(body["provider"]), str(body["snapshot"]))
    except (ValueError, KeyError, TypeError):
        return None


async def archive_workspace(sandbox: Sandbox, root: str, skip: Iterable[Path]) -> bytes:
    """A tar archive of the workspace ``root``, members relative to it, without the
    workspace-relative paths in ``skip`` (and what is under them)."""
    skipped = {p.as_posix().strip("/") for p in skip}
    with tempfile.TemporaryDirectory(prefix="psdk-agents-") as scratch:
        local = Path(scratch, "workspace")
        await sandbox.files.download_dir(root, local)
        return await anyio.to_thread.run_sync(_tar, local, skipped)


def _tar(local: Path, skipped: set[str]) -> bytes:
    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = member.name.removeprefix("./")
        if any(name == s or name.startswith(f"{s}/") for s in skipped):
            return None
        return member

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for entry in sorted(os.listdir(local)):
            tar.add(local / entry, arcname=entry, recursive=True, filter=keep)
    return buffer.getvalue()


async def unpack_archive(sandbox: Sandbox, root: str, raw: bytes) -> None:
    """Write the archive ``raw`` into the workspace ``root``.

    Raises:
        UnsafeTarMemberError: a member is absolute, climbs out with ``..``, or is a link
            that points outside the workspace; nothing is written.
    """
    validate_tar_bytes(raw, allow_external_symlink_targets=False)
    with tempfile.TemporaryDirectory(prefix="psdk-agents-") as scratch:
        local = Path(scratch, "workspace")
        await anyio.to_thread.run_sync(_untar, raw, local)
        await sandbox.files.upload_dir(local, root)


def _untar(raw: bytes, local: Path) -> None:
    local.mkdir()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
        try:
            tar.extractall(local, filter="data")
        except tarfile.FilterError as exc:
            raise UnsafeTarMemberError(member=getattr(exc, "tarinfo", tarfile.TarInfo()).name,
                                       reason=str(exc)) from exc
