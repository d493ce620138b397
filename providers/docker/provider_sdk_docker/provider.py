"""``DockerProvider``: each sandbox is a hardened container on a Docker Engine.

Every call goes through the Engine API (the ``docker`` package over the Engine's
socket), never the ``docker`` command. A sandbox is a container named ``psdk-<id>``,
labelled ``psdk.sandbox=<id>``: any process using the same Engine sees it, and nothing
else on the Engine is listed or touched.

Exposed ports are served by a proxy on 127.0.0.1 that relays each connection through an
exec in the container (see ``_ports.py``): the container keeps network mode ``none``.

Mapping: ``pause`` is ``docker pause`` (the cgroup freezer: memory kept); a snapshot is
``docker commit`` (the container's filesystem and its bounded directories, not its memory
or volumes); on an Engine without storage quotas, ``/tmp``, ``/home``, ``/root`` and the
working directory are bounded (see ``_bounded.py``); volumes are
Docker named volumes labelled ``psdk.volume``; metadata are labels; metrics come from the
stats API; ``build_template`` is a classic-builder image build with networking off,
cached by the content hash of the Dockerfile and its context.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import json
import os
import re
import secrets
from collections.abc import Mapping
from typing import Any, ClassVar

import anyio
import docker.types

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.models import (
    Metrics,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Volume,
)
from provider_sdk.ports import PortProxy
from provider_sdk.provider import (
    SandboxProvider,
)
from provider_sdk.retry import Backoff, retry
from provider_sdk.settings import Settings
from provider_sdk_docker import _bounded, _scripts
from provider_sdk_docker._capabilities import (
    BASE_CAPABILITIES,
    BOUNDED_CAPABILITIES,
    HOST_CAPABILITIES,
    PROVIDER_CAPABILITIES,
    QUOTA_CAPABILITIES,
)
from provider_sdk_docker._control import HostControl, engine_has_disk_quotas, host_control_possible
from provider_sdk_docker._engine import FREEZE_FAILED, Engine, Kind
from provider_sdk_docker._files import FilesMixin
from provider_sdk_docker._labels import (
    LABEL,
    LABEL_CREATED,
    LABEL_DISK,
    LABEL_META,
    LABEL_METADATA,
    LABEL_SNAPSHOT,
    LABEL_TEMPLATE,
    LABEL_TEMPLATE_HASH,
    LABEL_VOLUME,
    SNAPSHOT_REPOSITORY,
    now,
)
from provider_sdk_docker._ports import PortsMixin
from provider_sdk_docker._processes import ProcessesMixin, container_name
from provider_sdk_docker._snapshots import SnapshotsMixin
from provider_sdk_docker._templates import TemplatesMixin

__all__ = ["DEFAULT_TEMPLATE", "DockerProvider"]

DEFAULT_TEMPLATE = "psdk-base:bookworm"
DEFAULT_HOST = "unix:///var/run/docker.sock"
#: The environment variable each option is read from when not given.
SETTINGS = {"base_url": "DOCKER_HOST", "template": "PSDK_DOCKER_TEMPLATE",
            "pids_limit": "PSDK_DOCKER_PIDS_LIMIT", "memory_mb": "PSDK_DOCKER_MEMORY_MB",
            "network": "PSDK_DOCKER_NETWORK", "cpus": "PSDK_DOCKER_CPUS",
            "disk_mb": "PSDK_DOCKER_DISK_MB", "disks": "PSDK_DOCKER_DISKS"}

#: What a shell needs, and nothing that reaches past the container.
CAPABILITIES_KEPT = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")

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


#: Why an instance lacks a capability, added to the error that refuses it.
_WHY_LACKING = {
    Capability.RESOURCES_DISK: "the Engine's storage has no quotas here, and no sandbox "
                               "directories are bounded",
    Capability.NETWORK_ALLOW_OUT: "Docker has no per-destination egress rules",
    Capability.NETWORK_DENY_OUT: "Docker has no per-destination egress rules",
    Capability.LIFECYCLE_AUTO_KILL: "a Docker container has no idle notion: use the "
                                    "SandboxManager's idle handling instead",
}


class DockerProvider(ProcessesMixin, FilesMixin, SnapshotsMixin, TemplatesMixin, PortsMixin,
                     SandboxProvider):
    """Sandboxes as containers on a Docker Engine.

    Every option falls back to a setting in the environment.

    Args:
        base_url: the Engine's address (``DOCKER_HOST``, default
            ``unix:///var/run/docker.sock``); ``unix://`` and plain ``tcp://``.
        template: the image a sandbox starts from when the spec names none
            (``PSDK_DOCKER_TEMPLATE``, default ``psdk-base:bookworm``). It needs
            ``/bin/sh`` and GNU coreutils and findutils.
        pids_limit: most processes in one sandbox (``PSDK_DOCKER_PIDS_LIMIT``, 1024).
        memory_mb: memory limit when the spec gives none (``PSDK_DOCKER_MEMORY_MB``,
            2048).
        network: the Docker network a sandbox joins when its spec allows internet
            (``PSDK_DOCKER_NETWORK``, default ``bridge``). Without that, containers
            have network mode ``none``: loopback only.
        cpus: CPU limit when the spec gives none (``PSDK_DOCKER_CPUS``, default 2, or
            the host's cores if fewer).
        host_control: control processes from the Engine's host (cgroups, ``/proc``);
            default: whenever the Engine is on a local socket and this process can
            write the cgroup v1 freezer. Only then are ``exec.contained`` and
            ``limits.memory`` declared (``capabilities`` is per instance).
        disk_mb: the size limit of a sandbox's writable layer when the spec gives none
            (``PSDK_DOCKER_DISK_MB``, 4096), where the Engine's storage has quotas.
        disk_quota: whether it has: the btrfs storage driver, or overlay2 on XFS
            mounted with project quotas (the Engine's ``storage_opt size``). Default:
            found out from the Engine's ``info`` and this host's mounts, with
            ``host_control``; otherwise ``False``.
            Only then is ``limits.disk`` declared; ``resources.disk`` is declared with
            it, or with ``bounded_dirs``.
        bounded_dirs: without quotas, hold ``/tmp``, ``/home``, ``/root`` and the
            working directory to ``disk_mb`` instead: they live on a filesystem of the
            sandbox's own, made on the Engine's host (``PSDK_DOCKER_DISKS``, default
            ``$PSDK_HOME/docker-disks``). Default: with ``host_control``, as root,
            where loop devices and ``mkfs.ext4`` are there. Files written elsewhere
            take as much of the Engine's storage as they will (see the docs' security
            page for the bounds that still hold).
    """

    name: ClassVar[str] = "docker"
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["DockerProvider"]

    def __init__(self, *, base_url: str | None = None, template: str | None = None,
                 pids_limit: int | None = None, memory_mb: int | None = None,
                 network: str | None = None, cpus: float | None = None,
                 host_control: bool | None = None, disk_mb: int | None = None,
                 disk_quota: bool | None = None, bounded_dirs: bool | None = None) -> None:
        settings = Settings(self.name, SETTINGS)
        url = settings.url("base_url", base_url, default=DEFAULT_HOST,
                           schemes=("unix", "http+unix", "tcp", "http"))
        assert url is not None
        self._engine = Engine(url, provider=self.name)
        self.template = settings.text("template", template, default=DEFAULT_TEMPLATE)
        self.pids_limit = settings.integer("pids_limit", pids_limit, default=1024)
        self.memory_mb = settings.integer("memory_mb", memory_mb, default=2048)
        self.network = settings.text("network", network, default="bridge")
        self.cpus = settings.number("cpus", cpus, default=min(2.0, os.cpu_count() or 2))
        self.host_control = host_control_possible(url) if host_control is None else \
            settings.switch("host_control", host_control, default=False)
        self.disk_mb = settings.integer("disk_mb", disk_mb, default=4096)
        self.disk_quota = settings.switch("disk_quota", disk_quota, default=False) \
            if disk_quota is not None else self.host_control and engine_has_disk_quotas(url)
        if bounded_dirs is None:
            bounded_dirs = self.host_control and not self.disk_quota and \
                _bounded.bounded_dirs_possible()
        else:
            bounded_dirs = settings.switch("bounded_dirs", bounded_dirs, default=False)
        disks = settings.path("disks", None)
        self._bounded = _bounded.BoundedDirs(
            self._engine, root=disks, provider=self.name) \
            if bounded_dirs and not self.disk_quota else None
        # Per instance: what holds depends on where the Engine runs (the class lists all).
        self._hold_only(BASE_CAPABILITIES
                        | (HOST_CAPABILITIES if self.host_control else frozenset())
                        | (QUOTA_CAPABILITIES if self.disk_quota else frozenset())
                        | (BOUNDED_CAPABILITIES if self._bounded else frozenset()),
                        why=_WHY_LACKING)
        self._workdirs: dict[str, str] = {}
        self._owners: dict[str, tuple[int, int]] = {}
        self._controls: dict[str, HostControl | None] = {}
        self._pwds: dict[str, str | None] = {}
        self._proc_ready: set[str] = set()
        self._storage_driver: str | None = None
        self._ports = PortProxy(provider=self.name)

    def __repr__(self) -> str:
        return f"<DockerProvider {self._engine.base_url!r} template={self.template!r}>"

    @property
    def engine(self) -> Engine:
        """The Engine this provider talks to: its calls run in worker threads and raise
        the neutral errors. For tools built on this provider (the templates
        distribution's image builder); closed by :meth:`aclose`."""
        return self._engine

    async def aclose(self) -> None:
        """Stop serving every exposed port and close the Engine client's connections."""
        await self._ports.aclose()
        self._engine.close()

    # ---------------------------------------------------------------- lifecycle

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        network_mode = self.network if spec.network.allow_internet else "none"
        mounts = []
        for mount in spec.volumes:
            await self._get_volume(mount.volume)
            mounts.append(docker.types.Mount(target=mount.path, source=mount.volume,
                                             type="volume", read_only=mount.read_only))
        kind: Kind = "image"
        image = shown = spec.template or self.template
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
        memory = (spec.resources.memory_mb or self.memory_mb) << 20
        disk_mb = spec.resources.disk_mb or \
            (self.disk_mb if self.disk_quota or self._bounded else None)
        host_config: dict[str, Any] = {
            "network_mode": network_mode,
            "privileged": False,
            "cap_drop": ["ALL"],
            "cap_add": list(CAPABILITIES_KEPT),
            "security_opt": ["no-new-privileges"],
            "pids_limit": self.pids_limit,
            "mem_limit": memory,
            "memswap_limit": memory,
            "mounts": mounts,
            "nano_cpus": int((spec.resources.cpu or self.cpus) * 1e9),
            "log_config": LOG_CONFIG,
        }
        places: Mapping[str, str] = {}
        if disk_mb is not None and self._bounded is not None:
            data = await self._engine.api("inspect_image", image, kind=kind, what=shown)
            config = data.get("Config") or {}
            if kind == "snapshot":
                places = (_bounded.carried(config.get("Labels")) or ("", {}))[1]
            dirs = _bounded.dirs_for(spec.cwd or config.get("WorkingDir"),
                                     [m.path for m in spec.volumes])
            mounts += await self._bounded.make(sandbox_id, disk_mb, dirs, restored=places)
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
                client.create_container, image, name=_container(sandbox_id),
                entrypoint=["/bin/sh", "-c", _scripts.KEEPALIVE], command=[], labels=labels,
                environment=dict(spec.env), working_dir=spec.cwd, hostname="sandbox",
                host_config=client.create_host_config(**host_config), kind=kind,
                what=shown))["Id"]
            if places and self._bounded is not None:
                await self._bounded.restore(sandbox_id, container_id, image, places)
            await self._engine.call(client.start, container_id, sandbox_id=sandbox_id)
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                if container_id:
                    await self._engine.call(client.remove_container, container_id, force=True)
                if self._bounded is not None:
                    await self._bounded.remove(sandbox_id)
            raise
        if spec.cwd is not None:
            self._workdirs[sandbox_id] = spec.cwd
        return SandboxInfo(
            id=sandbox_id, provider=self.name, state=SandboxState.RUNNING,
            template=spec.snapshot or image, metadata=spec.metadata, created_at=created,
            resources=Resources(cpu=spec.resources.cpu or self.cpus, memory_mb=memory >> 20,
                                disk_mb=disk_mb),
            extra=_extra(container_id, image, labels))

    async def _quota(self, image: str, disk_mb: int, kind: Kind, shown: str) -> int:
        """The ``storage_opt size`` (MiB) that leaves ``disk_mb`` for a sandbox's own
        files: btrfs counts the image's files in a container's quota too, overlay2 only
        the writable layer."""
        if self._storage_driver is None:
            info = await self._engine.api("info")
            self._storage_driver = str(info.get("Driver") or "")
        if self._storage_driver != "btrfs":
            return disk_mb
        data = await self._engine.api("inspect_image", image, kind=kind, what=shown)
        return disk_mb + -(-int(data.get("Size") or 0) >> 20)

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        data = await self._inspect(sandbox_id)
        config, host = data["Config"], data["HostConfig"]
        self._workdirs.setdefault(sandbox_id, config.get("WorkingDir") or "/")
        status = data["State"]["Status"]
        return self._to_info(sandbox_id, config.get("Labels") or {}, status,
                             extra=_extra(data["Id"], config.get("Image"), config.get("Labels")),
            resources=Resources(cpu=(host.get("NanoCpus") or 0) / 1e9 or None,
                                memory_mb=(host.get("Memory") or 0) >> 20 or None,
                                disk_mb=_int_label(config.get("Labels"), LABEL_DISK)))

    async def _inspect(self, sandbox_id: str) -> dict[str, Any]:
        data: dict[str, Any] = await self._engine.api(
            "inspect_container", _container(sandbox_id), what=sandbox_id, sandbox_id=sandbox_id)
        if (data["Config"].get("Labels") or {}).get(LABEL) != sandbox_id:
            raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=self.name,
                                         sandbox_id=sandbox_id)
        return data

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

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> builtins.list[SandboxInfo]:
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

    async def _kill(self, sandbox_id: str) -> None:
        await self._ports.drop(sandbox_id)
        with contextlib.suppress(errors.SandboxNotFound):
            data = await self._inspect(sandbox_id)
            await self._engine.api("remove_container", _container(sandbox_id), force=True,
                                   v=True, what=sandbox_id, sandbox_id=sandbox_id)
            await self._drop_orphan_image(data["Image"])
        if self._bounded is not None:
            await self._bounded.remove(sandbox_id)
        self._workdirs.pop(sandbox_id, None)
        self._owners.pop(sandbox_id, None)
        self._controls.pop(sandbox_id, None)
        self._pwds.pop(sandbox_id, None)
        self._proc_ready.discard(sandbox_id)

    async def _drop_orphan_image(self, image_id: str) -> None:
        """Remove a deleted snapshot's or template's image once its last sandbox is gone."""
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            image = await self._engine.api("inspect_image", image_id, kind="image",
                                           what=image_id)
            labels = (image.get("Config") or {}).get("Labels") or {}
            ours = LABEL_SNAPSHOT in labels or LABEL_TEMPLATE_HASH in labels
            if ours and not image.get("RepoTags"):
                await self._engine.api("remove_image", image_id, kind="image", what=image_id)

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        info = await self._info(sandbox_id)
        if info.state != SandboxState.PAUSED:
            await retry(lambda: self._engine.api("pause", _container(sandbox_id),
                                                 what=sandbox_id, sandbox_id=sandbox_id),
                        retry_on=_freeze_failed, backoff=_FREEZE_BACKOFF,
                        timeout=FREEZE_DEADLINE)
        return await self._info(sandbox_id)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        info = await self._info(sandbox_id)
        if info.state == SandboxState.PAUSED:
            await self._engine.api("unpause", _container(sandbox_id), what=sandbox_id,
                                   sandbox_id=sandbox_id)
        elif info.state != SandboxState.RUNNING:
            raise errors.SandboxNotRunning(f"sandbox {sandbox_id!r} is {info.state}",
                                           state=str(info.state), provider=self.name,
                                           sandbox_id=sandbox_id)
        # The Engine's word "running" is final only once it has caught up with the
        # pause's own event; a command run now also shows that commands run again.
        await self._settle(sandbox_id)
        return await self._info(sandbox_id)

    # ------------------------------------------------------------------ volumes

    async def _create_volume(self, name: str) -> Volume:
        if not VOLUME_NAME.fullmatch(name):
            raise errors.InvalidInput(f"volume name {name!r}: use letters, digits, '_', '.', "
                                      "'-', starting with a letter or digit",
                                      provider=self.name)
        with contextlib.suppress(errors.VolumeNotFound):
            await self._engine.api("inspect_volume", name, kind="volume", what=name)
            raise errors.Conflict(f"a volume named {name!r} exists", provider=self.name)
        data = await self._engine.api(
            "create_volume", name, labels={LABEL_VOLUME: "1", LABEL_CREATED: now().isoformat()},
            kind="volume", what=name)
        return self._to_volume(data)

    async def _get_volume(self, name: str) -> Volume:
        data = await self._engine.api("inspect_volume", name, kind="volume", what=name)
        if (data.get("Labels") or {}).get(LABEL_VOLUME) != "1":
            raise errors.VolumeNotFound(f"no volume {name!r} made by this SDK",
                                        provider=self.name)
        return self._to_volume(data)

    async def _list_volumes(self) -> builtins.list[Volume]:
        data = await self._engine.api("volumes", filters={"label": LABEL_VOLUME})
        return sorted((self._to_volume(v) for v in data.get("Volumes") or ()),
                      key=lambda v: v.name)

    async def _delete_volume(self, name: str) -> None:
        await self._get_volume(name)
        await self._engine.api("remove_volume", name, kind="volume", what=name)

    def _to_volume(self, data: Mapping[str, Any]) -> Volume:
        created = (data.get("Labels") or {}).get(LABEL_CREATED)
        return Volume(id=data["Name"], name=data["Name"], provider=self.name,
                      created_at=dt.datetime.fromisoformat(created) if created else None,
                      extra={"driver": data.get("Driver"), "mountpoint": data.get("Mountpoint")})

    # ------------------------------------------------------------------ metrics

    async def _metrics(self, sandbox_id: str) -> Metrics:
        await self._inspect(sandbox_id)
        stats = await self._engine.api("stats", _container(sandbox_id), stream=False,
                                       one_shot=True, what=sandbox_id, sandbox_id=sandbox_id)
        sizes = await self._engine.api("containers", all=True, size=True,
                                       filters={"label": f"{LABEL}={sandbox_id}"})
        bounded = self._bounded.used_bytes(sandbox_id) if self._bounded else None
        cpu = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        memory = stats.get("memory_stats") or {}
        return Metrics(
            cpu_seconds=cpu / 1e9 if cpu is not None else None,
            memory_bytes=memory.get("usage"), memory_limit_bytes=memory.get("limit"),
            disk_bytes=_disk_bytes(sizes[0].get("SizeRw") if sizes else None, bounded),
            timestamp=now())


def _freeze_failed(exc: Exception) -> bool:
    return isinstance(exc, errors.Unavailable) and FREEZE_FAILED in str(exc)


def _container(sandbox_id: str) -> str:
    return container_name(sandbox_id)


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
