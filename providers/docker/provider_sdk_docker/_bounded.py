"""Bounded directories: a size limit for a sandbox's files on an Engine without quotas.

Where the Engine's storage cannot hold a container's writable layer to a size (overlay2
on ext4, the common case), and the provider runs as root on the Engine's host, the
directories a sandbox's work goes to (``/tmp``, ``/home``, ``/root`` and its working
directory) live on a filesystem of the sandbox's own: an ext4 image of ``disk_mb`` MiB
(sparse, made the way the local provider makes its disks), loop-mounted on the host
under ``<root>/<sandbox id>/mnt``. Each directory is a subdirectory of it, given to the
container as a named volume of the Engine's ``local`` driver bound to that
subdirectory, so the Engine copies the image's files there at create, as it does for
any new volume. Writes to them past ``disk_mb`` fail with ENOSPC; files written
anywhere else still land in the Engine's storage, unbounded (the docs say so).

A container snapshot (``docker commit``) leaves volumes out, so a snapshot carries the
directories' files itself: they are copied, with the container frozen, into
``/.psdk-snapshot/<snapshot id>/<n>/`` of the snapshot's image, and a sandbox made from
it gets them back in its own directories before it starts (:data:`LABEL_CARRIED`).

This module knows images, mounts and volumes; the provider decides when to use them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import shutil
import tarfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import docker.types

from provider_sdk import disks, errors
from provider_sdk.config import default_home
from provider_sdk_docker._engine import Engine
from provider_sdk_docker._labels import container_name

__all__ = ["BOUNDED", "LABEL_BOUNDED", "LABEL_CARRIED", "SNAPSHOT_FILES", "BoundedDirs",
           "bounded_dirs_possible", "carried", "carried_label", "describe", "dirs_for"]

#: The directories bounded in every sandbox, besides its working directory.
BOUNDED = ("/tmp", "/home", "/root")
#: A container's label: the directories bounded in it (JSON list).
LABEL_BOUNDED = "psdk.bounded_dirs"
#: A snapshot image's label: where it keeps each bounded directory's files (JSON).
LABEL_CARRIED = "psdk.snapshot.carried"
#: Where a snapshot's image keeps the bounded directories' files.
SNAPSHOT_FILES = "/.psdk-snapshot"
_VOLUME_LABEL = "psdk.bounded_volume"


def bounded_dirs_possible() -> bool:
    """Whether this process can make and mount the sandboxes' filesystems (root, loop
    devices, ``mkfs.ext4``)."""
    return disks.available()


def dirs_for(workdir: str | None, volume_paths: Iterable[str]) -> tuple[str, ...]:
    """The directories bounded in a sandbox working in ``workdir``: :data:`BOUNDED` and
    the working directory unless it is ``/`` or inside one of them, leaving out any
    where a volume is mounted (that volume is its own bound)."""
    taken = {posixpath.normpath(p) for p in volume_paths}
    found: list[str] = []
    for path in (*BOUNDED, posixpath.normpath(workdir or "/")):
        if path == "/" or path in taken or any(_within(path, d) for d in found):
            continue
        found.append(path)
    return tuple(found)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def carried(labels: Mapping[str, str] | None) -> tuple[str, dict[str, str]] | None:
    """What a snapshot image carries: its id and, for each bounded directory, where its
    files are in the image; ``None`` for an image that carries none."""
    raw = (labels or {}).get(LABEL_CARRIED)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return str(data["snapshot"]), {str(k): str(v) for k, v in data["dirs"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class BoundedDirs:
    """The sandboxes' bounded directories on this host, under ``root``."""

    def __init__(self, engine: Engine, *, root: Path | None = None,
                 provider: str = "docker") -> None:
        self._engine = engine
        self.root = root or (default_home() / "docker-disks")
        self._provider = provider

    def __repr__(self) -> str:
        return f"<BoundedDirs {str(self.root)!r}>"

    def _volume(self, sandbox_id: str, index: int) -> str:
        return f"psdk-{sandbox_id}-bounded-{index}"

    async def make(self, sandbox_id: str, disk_mb: int, dirs: Sequence[str], *,
                   restored: Collection[str] = ()) -> list[docker.types.Mount]:
        """Make a sandbox's filesystem of ``disk_mb`` MiB, mounted on this host, and a
        volume for each of ``dirs``; return the mounts for its container. The Engine
        copies the image's files into each, except into those ``restored`` from a
        snapshot (:meth:`restore` puts their files there)."""
        directory = self.root / sandbox_id
        await anyio.to_thread.run_sync(self._make_disk, directory, disk_mb)
        mounts = []
        try:
            for index, path in enumerate(dirs):
                name = self._volume(sandbox_id, index)
                await self._engine.api(
                    "create_volume", name, driver="local",
                    driver_opts={"type": "none", "o": "bind",
                                 "device": str(directory / "mnt" / str(index))},
                    labels={_VOLUME_LABEL: sandbox_id}, kind="volume", what=name)
                mounts.append(docker.types.Mount(target=path, source=name, type="volume",
                                                 no_copy=path in restored))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.remove(sandbox_id)
            raise
        return mounts

    def _make_disk(self, directory: Path, disk_mb: int) -> None:
        try:
            blank = disks.blank(self.root / "base", disk_mb)
            directory.mkdir(parents=True)
            (directory / "mnt").mkdir()
            disks.sparse_copy(blank, directory / disks.IMAGE)
            disks.mount(directory / disks.IMAGE, directory / "mnt")
        except FileExistsError:
            raise errors.Conflict(f"a disk for sandbox {directory.name!r} exists",
                                  provider=self._provider) from None
        except OSError as exc:
            self._drop_disk(directory)
            raise errors.SandboxError(f"making the sandbox's disk failed: {exc.strerror}",
                                      provider=self._provider) from None
        except BaseException:
            self._drop_disk(directory)
            raise
        # One directory per bounded path; the Engine binds each, copying the image's
        # files into it while it is empty.
        for index in range(len(BOUNDED) + 1):
            (directory / "mnt" / str(index)).mkdir(mode=0o755)

    async def remove(self, sandbox_id: str) -> None:
        """Remove a sandbox's volumes and filesystem (after its container is gone)."""
        found = await self._engine.api("volumes", filters={"label": f"{_VOLUME_LABEL}="
                                                                     f"{sandbox_id}"})
        for volume in found.get("Volumes") or ():
            with contextlib.suppress(errors.VolumeNotFound):
                await self._engine.api("remove_volume", volume["Name"], force=True,
                                       kind="volume", what=volume["Name"])
        await anyio.to_thread.run_sync(self._drop_disk, self.root / sandbox_id)

    @staticmethod
    def _drop_disk(directory: Path) -> None:
        if os.path.ismount(directory / "mnt"):
            disks.unmount(directory / "mnt")
        shutil.rmtree(directory, ignore_errors=True)

    def used_bytes(self, sandbox_id: str) -> int | None:
        """Bytes in use on a sandbox's filesystem; ``None`` where it has none here."""
        target = self.root / sandbox_id / "mnt"
        if not os.path.ismount(target):
            return None
        stat = os.statvfs(target)
        return (stat.f_blocks - stat.f_bfree) * stat.f_frsize

    async def carry(self, sandbox_id: str, container: str, snapshot_id: str,
                    dirs: Sequence[str]) -> dict[str, str]:
        """Copy a frozen sandbox's bounded directories into ``container`` (made from its
        commit), under :data:`SNAPSHOT_FILES`; return where each is, for
        :func:`carried_label`."""
        base = f"{SNAPSHOT_FILES}/{snapshot_id}"
        await self._engine.api("put_archive", container, "/",
                               _directories([base, *(f"{base}/{i}" for i in range(len(dirs)))]),
                               sandbox_id=sandbox_id)
        places = {}
        for index, path in enumerate(dirs):
            place = f"{base}/{index}"
            await self._engine.call(self._copy, sandbox_id, path, container, place,
                                    sandbox_id=sandbox_id)
            places[path] = f"{place}/{posixpath.basename(path)}"
        return places

    def _copy(self, source: str, path: str, target: str, place: str) -> None:
        """Stream ``path`` of container ``source`` into ``place`` of ``target``."""
        client = self._engine.client
        chunks, _ = client.get_archive(container_name(source), path, chunk_size=1 << 20)
        client.put_archive(target, place, chunks)

    async def restore(self, sandbox_id: str, container: str, image: str,
                      places: Mapping[str, str]) -> None:
        """Put a snapshot's bounded directories back into a created (not started)
        ``container`` made from its ``image``: read from a second container of that
        image, as the Engine serves one archive at a time per container."""
        staging = await self._engine.api("create_container", image, network_disabled=True,
                                         kind="snapshot", what=sandbox_id)
        try:
            for path, place in places.items():
                await self._engine.call(self._put_back, staging["Id"], place, container,
                                        posixpath.dirname(path) or "/",
                                        sandbox_id=sandbox_id)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                await self._engine.api("remove_container", staging["Id"], force=True)

    def _put_back(self, source: str, place: str, container: str, parent: str) -> None:
        client = self._engine.client
        chunks, _ = client.get_archive(source, place, chunk_size=1 << 20)
        client.put_archive(container, parent, chunks)


def carried_label(snapshot_id: str, places: Mapping[str, str]) -> str:
    """The :data:`LABEL_CARRIED` value for a snapshot."""
    return json.dumps({"snapshot": snapshot_id, "dirs": dict(places)}, sort_keys=True)


def _directories(paths: Sequence[str]) -> bytes:
    """A tar of empty directories (absolute paths, made relative to ``/``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in paths:
            entry = tarfile.TarInfo(path.lstrip("/"))
            entry.type, entry.mode = tarfile.DIRTYPE, 0o700
            archive.addfile(entry)
    return buffer.getvalue()


def describe(dirs: Any) -> tuple[str, ...]:
    """The bounded directories a container's label lists (none for a bad label)."""
    try:
        value = json.loads(dirs) if isinstance(dirs, str) else dirs
    except ValueError:
        return ()
    return tuple(str(d) for d in value) if isinstance(value, list) else ()
