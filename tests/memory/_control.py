"""The memory provider's control plane: sandboxes (create, info, list, kill), pause and
resume, filesystem snapshots (copies of a root), volumes (host directories bound in) and
metrics (read from ``/proc``)."""

from __future__ import annotations

import builtins
import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Mapping

import anyio
import attrs

from provider_sdk.errors import Conflict, SnapshotNotFound, VolumeNotFound
from provider_sdk.models import (
    Metrics,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Volume,
)

from ._box import NAME, WORKDIR, Box, public
from ._bwrap import SPAWNER, copy_tree, launch, make_root, stop
from ._paths import errors, makedirs
from ._procs import disk_usage, freeze, thaw, usage
from ._store import Store


class MemoryControl:
    """The control plane over the shared :class:`~._store.Store`, with the parts
    ``pause``, ``snapshot.filesystem``, ``volumes`` and ``metrics``. Tests that give the
    memory provider another capability subclass it with that capability's part."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------- sandboxes

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        await anyio.lowlevel.checkpoint()
        store = self.store
        source = None
        if spec.snapshot is not None:
            if spec.snapshot not in store.snapshots:
                raise SnapshotNotFound(f"no snapshot {spec.snapshot!r}", provider=NAME)
            source = store.snapshots[spec.snapshot][1]
        mounts = []
        for mount in spec.volumes:
            if mount.volume not in store.volumes:
                raise VolumeNotFound(f"no volume {mount.volume!r}", provider=NAME)
            mounts += ["--ro-bind" if mount.read_only else "--bind",
                       store.volumes[mount.volume], mount.path]
        sandbox_id = f"mem-{next(store.ids)}"
        info = SandboxInfo(id=sandbox_id, provider=NAME, state=SandboxState.RUNNING,
                           template=spec.template, metadata=spec.metadata,
                           created_at=dt.datetime.now(dt.timezone.utc))
        box = Box(info=info, root=os.path.join(store.base, sandbox_id),
                  workdir=spec.cwd or WORKDIR, env=dict(spec.env),
                  volumes=tuple(m.volume for m in spec.volumes))
        try:
            await anyio.to_thread.run_sync(make_root, box.root, source)
            await anyio.to_thread.run_sync(SPAWNER.submit(launch, box, mounts).result)
            with errors(box, box.workdir):
                os.close(makedirs(box, box.workdir))
        except BaseException:
            stop(box)
            raise
        store.boxes[sandbox_id] = box
        return public(info)

    async def info(self, sandbox_id: str) -> SandboxInfo:
        await anyio.lowlevel.checkpoint()
        return public(self.store.box(sandbox_id).info)

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        await anyio.lowlevel.checkpoint()
        return [public(b.info) for b in self.store.boxes.values()]

    async def kill(self, sandbox_id: str) -> None:
        await anyio.lowlevel.checkpoint()
        box = self.store.boxes.pop(sandbox_id, None)
        if box is not None:
            stop(box)

    # ------------------------------------------------------------------ pause

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        box = self.store.running(sandbox_id)
        freeze(box)
        box.info = attrs.evolve(box.info, state=SandboxState.PAUSED)
        return public(box.info)

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        box = self.store.box(sandbox_id)
        if box.info.state == SandboxState.PAUSED:
            thaw(box)
        box.info = attrs.evolve(box.info, state=SandboxState.RUNNING)
        return public(box.info)

    # -------------------------------------------------------------- snapshots

    async def snapshot(self, sandbox_id: str) -> Snapshot:
        box = self.store.box(sandbox_id)
        snapshot_id = f"snap-{next(self.store.ids)}"
        copy = os.path.join(self.store.base, snapshot_id)
        await anyio.to_thread.run_sync(copy_tree, box.root, copy)
        self.store.snapshots[snapshot_id] = (sandbox_id, copy)
        return Snapshot(id=snapshot_id, provider=NAME, sandbox_id=sandbox_id,
                        captures={"filesystem"})

    async def list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        return [Snapshot(id=k, provider=NAME, sandbox_id=v[0], captures={"filesystem"})
                for k, v in self.store.snapshots.items() if sandbox_id in (None, v[0])]

    async def delete_snapshot(self, snapshot_id: str) -> None:
        found = self.store.snapshots.pop(snapshot_id, None)
        if found is None:
            raise SnapshotNotFound(f"no snapshot {snapshot_id!r}", provider=NAME)
        shutil.rmtree(found[1], ignore_errors=True)

    # ---------------------------------------------------------------- volumes

    async def create_volume(self, name: str) -> Volume:
        if name in self.store.volumes:
            raise Conflict(f"volume {name!r} exists", provider=NAME)
        self.store.volumes[name] = tempfile.mkdtemp(prefix="volume-", dir=self.store.base)
        return Volume(id=name, name=name, provider=NAME)

    async def get_volume(self, name: str) -> Volume:
        if name not in self.store.volumes:
            raise VolumeNotFound(f"no volume {name!r}", provider=NAME)
        return Volume(id=name, name=name, provider=NAME)

    async def list_volumes(self) -> builtins.list[Volume]:
        return [Volume(id=name, name=name, provider=NAME) for name in self.store.volumes]

    async def delete_volume(self, name: str) -> None:
        if name not in self.store.volumes:
            raise VolumeNotFound(f"no volume {name!r}", provider=NAME)
        users = sorted(k for k, b in self.store.boxes.items() if name in b.volumes)
        if users:
            raise Conflict(f"volume {name!r} is mounted by {', '.join(users)}", provider=NAME)
        shutil.rmtree(self.store.volumes.pop(name), ignore_errors=True)

    # ---------------------------------------------------------------- metrics

    async def metrics(self, sandbox_id: str) -> Metrics:
        box = self.store.running(sandbox_id)
        memory, cpu = usage(box)
        disk = await anyio.to_thread.run_sync(disk_usage, box.root)
        return Metrics(cpu_seconds=cpu, memory_bytes=memory, disk_bytes=disk)
