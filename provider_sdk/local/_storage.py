"""Snapshots and volumes of ``LocalProvider`` (its control plane's parts): directories
in the home.

A snapshot is a copy of a sandbox's own files (its root, or its overlay layer over a
template), taken with the sandbox frozen; a volume is a directory bind-mounted into the
sandboxes that name it: where mounting is possible, the root of a filesystem of its own
(see ``_disk``).

Each has a ``meta.json`` record, written last (a directory without one is still being
made). A broken record is left out of listings with a ``BrokenRecordWarning``, refused
as ``SnapshotNotFound`` or ``VolumeNotFound`` saying why, and deleted like a good one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio

from provider_sdk import disks, errors
from provider_sdk.local import _bwrap, _disk, _ids, _launch, _records, _users
from provider_sdk.local._home import now, write_meta
from provider_sdk.local._records import SandboxRecord, SnapshotRecord, VolumeRecord
from provider_sdk.local._sandboxes import Sandboxes
from provider_sdk.local._trees import copy_confined, copy_tree
from provider_sdk.models import SandboxInfo, SandboxState, Snapshot, Volume

__all__ = ["VOLUME_NAME", "LocalStorage"]

VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class LocalStorage:
    """Snapshots and volumes in a home, for the control plane of ``LocalProvider``.

    Args:
        sandboxes: the provider's sandboxes.
        listing: lists the sandboxes (the control plane's ``list``, which also removes
            what ended meanwhile): a volume is not deleted while one mounts it.
    """

    def __init__(self, sandboxes: Sandboxes,
                 listing: Callable[[], Awaitable[list[SandboxInfo]]]) -> None:
        self._sandboxes = sandboxes
        self._shared = sandboxes.shared
        self._listing = listing

    async def snapshot(self, sandbox_id: str) -> Snapshot:
        """Copy the sandbox's own files, with nothing of it running meanwhile."""
        return await anyio.to_thread.run_sync(self._snapshot_blocking, sandbox_id)

    def _snapshot_blocking(self, sandbox_id: str) -> Snapshot:
        directory = self._shared.home.sandbox(sandbox_id)
        meta = self._sandboxes.read(sandbox_id)
        try:
            with _disk.typed_full(doing="taking a snapshot", provider=self._shared.name,
                                  sandbox_id=sandbox_id):
                return self._copy_snapshot(sandbox_id, directory, meta)
        except OSError as exc:  # not a full disk: the sandbox's files would not copy
            raise errors.SandboxError(f"taking a snapshot failed: {exc.strerror or exc}",
                                      provider=self._shared.name, sandbox_id=sandbox_id) from exc

    def _copy_snapshot(self, sandbox_id: str, directory: Path,
                       meta: SandboxRecord) -> Snapshot:
        snapshot_id = self._shared.home.new_id("snapshots")
        target = self._shared.home.snapshot(snapshot_id)
        bwrap = None if meta.unisolated else _bwrap.bwrap_path()
        try:
            with self._shared.home.lock(directory), self._still(sandbox_id, meta):
                # A template sandbox's own files are its overlay layer: the snapshot
                # keeps that, over the same template.
                files = _disk.own_files(directory, meta)
                if bwrap is None:
                    copy_tree(files, target / "root")
                else:
                    copy_confined(files, target / "root", bwrap=bwrap)
            snap = SnapshotRecord(id=snapshot_id, sandbox_id=sandbox_id, created_at=now(),
                                  template=meta.template, ids=meta.ids)
            write_meta(target, snap.to_json())

        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return self._to_snapshot(snap)

    @contextlib.contextmanager
    def _still(self, sandbox_id: str, meta: SandboxRecord) -> Iterator[None]:
        """Nothing of the sandbox runs inside the block, whatever its state says (its
        agent gone, its commands may still run): its cgroups frozen, else every process
        of its namespace stopped; as it was afterwards. A snapshot is then consistent,
        and the sandbox's code cannot change its files while they are copied."""
        cgroup = self._shared.cgroup(sandbox_id)
        if cgroup.exists():
            frozen = cgroup.frozen()
            if not frozen:
                cgroup.freeze(True)
            try:
                yield
            finally:
                if not frozen:
                    cgroup.freeze(False)
            return
        launched = meta.launch
        if launched is None or meta.unisolated or not _launch.alive(launched) \
                or (self._shared.home.sandbox(sandbox_id) / "paused").exists():
            yield
            return
        _launch.signal_all(launched, signal.SIGSTOP)
        try:
            yield
        finally:
            _launch.signal_all(launched, signal.SIGCONT)

    def _read_snapshot(self, snapshot_id: str) -> tuple[SnapshotRecord | None, str | None]:
        """A snapshot's record and why it is broken (see ``_records.read_snapshot``)."""
        if not _stored_name(snapshot_id):
            return None, None
        return _records.read_snapshot(self._shared.home.snapshot(snapshot_id), snapshot_id)

    def snapshot_record(self, snapshot_id: str) -> SnapshotRecord:
        """A snapshot's good record; ``SnapshotNotFound`` if there is none, saying why
        if its record is broken."""
        record, reason = self._read_snapshot(snapshot_id)
        if reason is not None:
            raise errors.SnapshotNotFound(
                f"snapshot {snapshot_id!r} is broken: {reason}; delete it",
                provider=self._shared.name)
        if record is None:
            raise errors.SnapshotNotFound(f"snapshot {snapshot_id!r} does not exist",
                                          provider=self._shared.name)
        return record

    async def list_snapshots(self, sandbox_id: str | None) -> list[Snapshot]:
        """Snapshots with good records, of one sandbox where ``sandbox_id`` is given."""
        found: list[Snapshot] = []
        for snapshot_id in self._shared.home.ids("snapshots"):
            record, reason = self._read_snapshot(snapshot_id)
            if reason is not None:
                _records.warn_stored("snapshot", snapshot_id, reason, self._shared.home.path)
            elif record is not None and sandbox_id in (None, record.sandbox_id):
                found.append(self._to_snapshot(record))
        return found

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot, a broken one too."""
        record, reason = self._read_snapshot(snapshot_id)
        if record is None and reason is None:
            raise errors.SnapshotNotFound(f"snapshot {snapshot_id!r} does not exist",
                                          provider=self._shared.name)
        target = self._shared.home.snapshot(snapshot_id)
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(target, ignore_errors=True))

    def _to_snapshot(self, meta: SnapshotRecord) -> Snapshot:
        return Snapshot(id=meta.id, provider=self._shared.name, sandbox_id=meta.sandbox_id,
                        captures=frozenset({"filesystem"}), created_at=meta.created_at,
                        extra={"template": meta.template})

    def _check_volume_name(self, name: str) -> None:
        if not VOLUME_NAME.fullmatch(name):
            raise errors.InvalidInput(
                f"volume name {name!r}: use letters, digits, '.', '_' and '-'",
                provider=self._shared.name)

    async def create_volume(self, name: str) -> Volume:
        """Make a volume (a filesystem of its own where quotas hold)."""
        self._check_volume_name(name)
        directory = self._shared.home.volume(name)
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            raise errors.Conflict(f"volume {name!r} already exists",
                                  provider=self._shared.name) from None
        meta = VolumeRecord(name=name, created_at=now())
        try:
            with _disk.typed_full(doing="creating a volume", provider=self._shared.name):
                if self._shared.quota:
                    blank = await anyio.to_thread.run_sync(
                        disks.blank, self._shared.home.path / "base", _disk.VOLUME_MB)
                    await anyio.to_thread.run_sync(_disk.make_volume, directory, blank)
                    meta.disk_mb = _disk.VOLUME_MB
                else:
                    (directory / "data").mkdir()
                if self._shared.separate:  # stored with the shared slot's ids; its root the user's
                    meta.ids = _ids.host_range().storage
                    user = meta.ids + _users.SANDBOX_UID
                    os.chown(directory / "data", user, user)
                write_meta(directory, meta.to_json())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._remove_volume, directory)
            raise
        return self._to_volume(meta)

    @staticmethod
    def _remove_volume(directory: Path) -> None:
        while os.path.ismount(directory / "data"):
            disks.unmount(directory / "data")
        shutil.rmtree(directory, ignore_errors=True)

    def _read_volume(self, name: str) -> tuple[VolumeRecord | None, str | None]:
        """A volume's record and why it is broken (see ``_records.read_volume``)."""
        if not _stored_name(name):
            return None, None
        return _records.read_volume(self._shared.home.volume(name), name)

    def volume_record(self, name: str) -> VolumeRecord:
        """A volume's good record; ``VolumeNotFound`` if there is none, saying why if
        its record is broken."""
        record, reason = self._read_volume(name)
        if reason is not None:
            raise errors.VolumeNotFound(f"volume {name!r} is broken: {reason}; delete it",
                                        provider=self._shared.name)
        if record is None:
            raise errors.VolumeNotFound(f"volume {name!r} does not exist",
                                        provider=self._shared.name)
        return record

    def ready_volume(self, name: str) -> None:
        """Make a volume ready to be mounted: its image mounted (after a host restart),
        and, where sandboxes have ids of their own, its files stored with the shared
        slot's ids (a volume made by an earlier version stored the sandbox user's as the
        host's root's: they move, once, under the volume's lock)."""
        directory = self._shared.home.volume(name)
        _disk.ensure_volume_mounted(directory)
        if not self._shared.separate:
            return
        storage = _ids.host_range().storage
        if self.volume_record(name).ids == storage:
            return
        with self._shared.home.lock(directory):
            meta = self.volume_record(name)
            if meta.ids != storage:
                try:
                    _ids.shift_tree(directory / "data", _ids.legacy(storage)
                                    if meta.ids is None else _ids.rebase(meta.ids, storage))
                except OSError as exc:  # a tree too deep, no descriptor to be had
                    raise errors.SandboxError(
                        f"volume {name!r}'s files could not be moved to the shared ids: "
                        f"{exc.strerror or exc}", provider=self._shared.name) from exc
                meta.ids = storage
                write_meta(directory, meta.to_json())

    async def get_volume(self, name: str) -> Volume:
        """A volume, its files mounted at ``extra["path"]``."""
        self._check_volume_name(name)
        meta = self.volume_record(name)
        # Its files reachable at extra["path"] again after a host restart.
        await anyio.to_thread.run_sync(_disk.ensure_volume_mounted, self._shared.home.volume(name))
        return self._to_volume(meta)

    async def list_volumes(self) -> list[Volume]:
        """Volumes with good records."""
        found: list[Volume] = []
        for name in self._shared.home.ids("volumes"):
            record, reason = self._read_volume(name)
            if reason is not None:
                _records.warn_stored("volume", name, reason, self._shared.home.path)
            elif record is not None:
                found.append(self._to_volume(record))
        return found

    async def delete_volume(self, name: str) -> None:
        """Delete a volume no running or paused sandbox mounts."""
        self._check_volume_name(name)
        if self._read_volume(name) == (None, None):
            raise errors.VolumeNotFound(f"volume {name!r} does not exist",
                                        provider=self._shared.name)
        for info in await self._listing():
            meta, _reason = _records.read(self._shared.home.sandbox(info.id), info.id)
            if info.state in (SandboxState.RUNNING, SandboxState.PAUSED) and meta and \
                    any(v.volume == name for v in meta.volumes):
                raise errors.Conflict(f"volume {name!r} is mounted by sandbox {info.id}",
                                      provider=self._shared.name)
        await anyio.to_thread.run_sync(self._remove_volume, self._shared.home.volume(name))

    def _to_volume(self, meta: VolumeRecord) -> Volume:
        return Volume(id=meta.name, name=meta.name, provider=self._shared.name,
                      created_at=meta.created_at,
                      extra={"path": str(self._shared.home.volume(meta.name) / "data"),
                             "disk_mb": meta.disk_mb})


def _stored_name(name: str) -> bool:
    """Whether a snapshot id or a volume name can be a record's directory in the home
    (one path component, not a hidden one)."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".")
