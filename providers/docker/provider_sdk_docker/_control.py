"""The control plane of ``DockerProvider`` (:class:`DockerControl`): the containers
themselves (create, inspect, list, remove), pause, metrics and templates, with snapshots
(``_snapshots``) and volumes (``_volumes``) as its parts.

A sandbox is a container named ``psdk-<id>``, labelled ``psdk.sandbox=<id>``, made
hardened (every capability dropped but what a shell needs, no new privileges, limits on
processes, memory and CPU, no log kept) and kept alive by a PID 1 of its own.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import json
import secrets
from collections.abc import Mapping
from typing import Any

import anyio
import docker.types

from provider_sdk import errors
from provider_sdk.models import (
    Metrics,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
)
from provider_sdk.retry import Backoff, retry
from provider_sdk_docker import _bounded, _scripts
from provider_sdk_docker._commands import DockerCommands
from provider_sdk_docker._engine import FREEZE_FAILED, Kind
from provider_sdk_docker._labels import (
    LABEL,
    LABEL_CREATED,
    LABEL_DISK,
    LABEL_META,
    LABEL_METADATA,
    LABEL_SNAPSHOT,
    LABEL_TEMPLATE,
    LABEL_TEMPLATE_HASH,
    SNAPSHOT_REPOSITORY,
    container_name,
    now,
)
from provider_sdk_docker._shared import Shared
from provider_sdk_docker._snapshots import DockerSnapshots
from provider_sdk_docker._templates import DockerTemplates
from provider_sdk_docker._volumes import DockerVolumes

__all__ = ["CAPABILITIES_KEPT", "DockerControl"]

#: What a shell needs, and nothing that reaches past the container.
CAPABILITIES_KEPT = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")

#: How long a pause the runtime gave up on (see ``FREEZE_FAILED``) is tried again.
FREEZE_DEADLINE = 10.0
_FREEZE_BACKOFF = Backoff(initial=0.05, factor=2, cap=1.0)

_STATES = {
    "created": SandboxState.STARTING,
    "restarting": SandboxState.STARTING,
    "running": SandboxState.RUNNING,
    "paused": SandboxState.PAUSED,
    "removing": SandboxState.KILLED,
    "exited": SandboxState.STOPPED,
    "dead": SandboxState.ERROR,
}
#: The container's own log: PID 1's stdout, which sandboxed code can write through
#: ``/proc/1/fd/1``. Nothing reads it, so nothing is kept on the host.
LOG_CONFIG = {"type": "none", "config": {}}


class DockerControl:
    """The containers of one ``DockerProvider``: create, info, list, kill, pause and
    resume (``pause``), metrics (``metrics``) and the template builder
    (``templates.build``); it holds the snapshots (``snapshot.filesystem``) and volumes
    (``volumes``) parts, which the provider hands the base beside it.

    Args:
        shared: the provider's Engine, settings and caches.
        commands: its commands role, which tells when the Engine has settled after a
            pause or a commit.
    """

    def __init__(self, shared: Shared, commands: DockerCommands) -> None:
        self._shared = shared
        self._engine = shared.engine
        self._commands = commands
        self.name = shared.name
        self.snapshots = DockerSnapshots(shared, commands)
        """Snapshots, a part the provider hands the base."""
        self.volumes = DockerVolumes(shared)
        """Volumes, a part the provider hands the base."""

    # ---------------------------------------------------------------- lifecycle

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create and start a sandbox's container."""
        shared = self._shared
        network_mode = shared.network if spec.network.allow_internet else "none"
        mounts = []
        for mount in spec.volumes:
            await self.volumes.get_volume(mount.volume)
            mounts.append(docker.types.Mount(target=mount.path, source=mount.volume,
                                             type="volume", read_only=mount.read_only))
        kind: Kind = "image"
        image = shown = spec.template or shared.template
        if spec.snapshot is not None:
            image, kind, shown = f"{SNAPSHOT_REPOSITORY}:{spec.snapshot}", "snapshot", \
                spec.snapshot
        sandbox_id = secrets.token_hex(6)
        created = now()
        labels = {
            LABEL: sandbox_id,
            LABEL_METADATA: json.dumps(dict(spec.metadata), sort_keys=True),
            LABEL_TEMPLATE: spec.snapshot or image,
            LABEL_CREATED: created.isoformat(),
            **{f"{LABEL_META}{k}": v for k, v in spec.metadata.items()},
        }
        memory = (spec.resources.memory_mb or shared.memory_mb) << 20
        disk_mb = spec.resources.disk_mb or \
            (shared.disk_mb if shared.disk_quota or shared.bounded else None)
        host_config: dict[str, Any] = {
            "network_mode": network_mode,
            "privileged": False,
            "cap_drop": ["ALL"],
            "cap_add": list(CAPABILITIES_KEPT),
            "security_opt": ["no-new-privileges"],
            "pids_limit": shared.pids_limit,
            "mem_limit": memory,
            "memswap_limit": memory,
            "mounts": mounts,
            "nano_cpus": int((spec.resources.cpu or shared.cpus) * 1e9),
            "log_config": LOG_CONFIG,
        }
        places: Mapping[str, str] = {}
        bounded = shared.bounded
        if disk_mb is not None and bounded is not None:
            data = await self._engine.api("inspect_image", image, kind=kind, what=shown)
            config = data.get("Config") or {}
            if kind == "snapshot":
                places = (_bounded.carried(config.get("Labels")) or ("", {}))[1]
            dirs = _bounded.dirs_for(spec.cwd or config.get("WorkingDir"),
                                     [m.path for m in spec.volumes])
            mounts += await bounded.make(sandbox_id, disk_mb, dirs, restored=places)
            labels[_bounded.LABEL_BOUNDED] = json.dumps(dirs)
            labels[LABEL_DISK] = str(disk_mb)
        elif disk_mb is not None:
            # Only some storage setups have quotas (btrfs, overlay2 on XFS with pquota);
            # the Engine refuses the option elsewhere, as InvalidInput.
            size = await self._quota(image, disk_mb, kind, shown)
            host_config["storage_opt"] = {"size": f"{size}M"}
            labels[LABEL_DISK] = str(disk_mb)
        client = await self._engine.call(lambda: self._engine.client)
        container_id = ""
        try:
            container_id = (await self._engine.call(
                client.create_container, image, name=container_name(sandbox_id),
                entrypoint=["/bin/sh", "-c", _scripts.KEEPALIVE], command=[], labels=labels,
                environment=dict(spec.env), working_dir=spec.cwd, hostname="sandbox",
                host_config=client.create_host_config(**host_config), kind=kind,
                what=shown))["Id"]
            if places and bounded is not None:
                await bounded.restore(sandbox_id, container_id, image, places)
            await self._engine.call(client.start, container_id, sandbox_id=sandbox_id)
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                if container_id:
                    await self._engine.call(client.remove_container, container_id, force=True)
                if bounded is not None:
                    await bounded.remove(sandbox_id)
            raise
        if spec.cwd is not None:
            shared.workdirs[sandbox_id] = spec.cwd
        return SandboxInfo(
            id=sandbox_id, provider=self.name, state=SandboxState.RUNNING,
            template=spec.snapshot or image, metadata=spec.metadata, created_at=created,
            resources=Resources(cpu=spec.resources.cpu or shared.cpus, memory_mb=memory >> 20,
                                disk_mb=disk_mb),
            extra=_extra(container_id, image, labels))

    async def _quota(self, image: str, disk_mb: int, kind: Kind, shown: str) -> int:
        """The ``storage_opt size`` (MiB) that leaves ``disk_mb`` for a sandbox's own
        files: btrfs counts the image's files in a container's quota too, overlay2 only
        the writable layer."""
        if self._shared.storage_driver is None:
            info = await self._engine.api("info")
            self._shared.storage_driver = str(info.get("Driver") or "")
        if self._shared.storage_driver != "btrfs":
            return disk_mb
        data = await self._engine.api("inspect_image", image, kind=kind, what=shown)
        return disk_mb + -(-int(data.get("Size") or 0) >> 20)

    async def info(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox's info, from its container's."""
        data = await self._shared.inspect(sandbox_id)
        config, host = data["Config"], data["HostConfig"]
        self._shared.note_workdir(sandbox_id, data)
        status = data["State"]["Status"]
        return self._to_info(sandbox_id, config.get("Labels") or {}, status,
                             extra=_extra(data["Id"], config.get("Image"), config.get("Labels")),
            resources=Resources(cpu=(host.get("NanoCpus") or 0) / 1e9 or None,
                                memory_mb=(host.get("Memory") or 0) >> 20 or None,
                                disk_mb=_int_label(config.get("Labels"), LABEL_DISK)))

    def _to_info(self, sandbox_id: str, labels: Mapping[str, str], status: str, *,
                 extra: Mapping[str, Any], resources: Resources | None = None) -> SandboxInfo:
        try:
            metadata = json.loads(labels.get(LABEL_METADATA) or "{}")
        except ValueError:
            metadata = {}
        created = labels.get(LABEL_CREATED)
        return SandboxInfo(
            id=sandbox_id, provider=self.name, state=_STATES.get(status, SandboxState.UNKNOWN),
            template=labels.get(LABEL_TEMPLATE), metadata=metadata,
            created_at=dt.datetime.fromisoformat(created) if created else None,
            resources=resources or Resources(), extra=extra)

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        """The sandboxes on the Engine, filtered by labels and status there."""
        # The core refuses "=" in label keys, so "key=value" is one filter here.
        wanted = [LABEL, *(f"{LABEL_META}{k}={v}" for k, v in metadata.items())]
        filters: dict[str, Any] = {"label": wanted}
        statuses = [s for s, st in _STATES.items() if st == state] if state else []
        if statuses:
            filters["status"] = statuses
        found = await self._engine.api("containers", all=True, filters=filters)
        return [self._to_info(c["Labels"][LABEL], c["Labels"], c["State"],
                              extra={"container_id": c["Id"], "image": c.get("Image")})
                for c in found]

    async def kill(self, sandbox_id: str) -> None:
        """Remove the sandbox's container, with its exposed ports and bounded
        directories, and the image of a deleted snapshot or template it was the last
        user of."""
        shared = self._shared
        await shared.proxy.drop(sandbox_id)
        with contextlib.suppress(errors.SandboxNotFound):
            data = await shared.inspect(sandbox_id)
            await self._engine.api("remove_container", container_name(sandbox_id),
                                   force=True, v=True, what=sandbox_id, sandbox_id=sandbox_id)
            await self._drop_orphan_image(data["Image"])
        if shared.bounded is not None:
            await shared.bounded.remove(sandbox_id)
        shared.forget(sandbox_id)

    async def _drop_orphan_image(self, image_id: str) -> None:
        """Remove a deleted snapshot's or template's image once its last sandbox is gone."""
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            image = await self._engine.api("inspect_image", image_id, kind="image",
                                           what=image_id)
            labels = (image.get("Config") or {}).get("Labels") or {}
            ours = LABEL_SNAPSHOT in labels or LABEL_TEMPLATE_HASH in labels
            if ours and not image.get("RepoTags"):
                await self._engine.api("remove_image", image_id, kind="image", what=image_id)

    # -------------------------------------------------------------------- pause

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        """``docker pause`` (the cgroup freezer), tried again while the runtime gives up."""
        info = await self.info(sandbox_id)
        if info.state != SandboxState.PAUSED:
            await retry(lambda: self._engine.api("pause", container_name(sandbox_id),
                                                 what=sandbox_id, sandbox_id=sandbox_id),
                        retry_on=_freeze_failed, backoff=_FREEZE_BACKOFF,
                        timeout=FREEZE_DEADLINE)
        return await self.info(sandbox_id)

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        """``docker unpause``; returns once the Engine's word "running" is final."""
        info = await self.info(sandbox_id)
        if info.state == SandboxState.PAUSED:
            await self._engine.api("unpause", container_name(sandbox_id), what=sandbox_id,
                                   sandbox_id=sandbox_id)
        elif info.state != SandboxState.RUNNING:
            raise errors.SandboxNotRunning(f"sandbox {sandbox_id!r} is {info.state}",
                                           state=str(info.state), provider=self.name,
                                           sandbox_id=sandbox_id)
        # The Engine's word "running" is final only once it has caught up with the
        # pause's own event; a command run now also shows that commands run again.
        await self._commands.settle(sandbox_id)
        return await self.info(sandbox_id)

    # ------------------------------------------------------- metrics, templates

    async def metrics(self, sandbox_id: str) -> Metrics:
        """CPU and memory from the stats API; disk from the writable layer's size and
        the bounded directories' filesystem."""
        await self._shared.inspect(sandbox_id)
        stats = await self._engine.api("stats", container_name(sandbox_id), stream=False,
                                       one_shot=True, what=sandbox_id, sandbox_id=sandbox_id)
        sizes = await self._engine.api("containers", all=True, size=True,
                                       filters={"label": f"{LABEL}={sandbox_id}"})
        bounded = self._shared.bounded
        used = bounded.used_bytes(sandbox_id) if bounded else None
        cpu = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        memory = stats.get("memory_stats") or {}
        return Metrics(
            cpu_seconds=cpu / 1e9 if cpu is not None else None,
            memory_bytes=memory.get("usage"), memory_limit_bytes=memory.get("limit"),
            disk_bytes=_disk_bytes(sizes[0].get("SizeRw") if sizes else None, used),
            timestamp=now())

    def template_builder(self) -> DockerTemplates:
        """A builder of template images on this Engine."""
        return DockerTemplates(self._engine, self.name)


def _freeze_failed(exc: Exception) -> bool:
    return isinstance(exc, errors.Unavailable) and FREEZE_FAILED in str(exc)


def _extra(container_id: str, image: Any, labels: Mapping[str, str] | None) -> dict[str, Any]:
    """A sandbox's ``SandboxInfo.extra``: its container, image and bounded directories."""
    dirs = _bounded.describe((labels or {}).get(_bounded.LABEL_BOUNDED, "[]"))
    return {"container_id": container_id, "image": image,
            **({"bounded_dirs": list(dirs)} if dirs else {})}


def _disk_bytes(layer: int | None, bounded: int | None) -> int | None:
    """A sandbox's disk use: its writable layer and its bounded directories' filesystem."""
    return None if layer is None and bounded is None else (layer or 0) + (bounded or 0)


def _int_label(labels: Mapping[str, str] | None, name: str) -> int | None:
    """A label holding a number; ``None`` when it is absent or not a number."""
    value = (labels or {}).get(name, "")
    return int(value) if value.isdigit() else None
