"""``DockerProvider``: each sandbox is a hardened container on a Docker Engine.

Every call goes through the Engine API (the ``docker`` package over the Engine's
socket), never the ``docker`` command. A sandbox is a container named ``psdk-<id>``,
labelled ``psdk.sandbox=<id>``: any process using the same Engine sees it, and nothing
else on the Engine is listed or touched.

Exposed ports are served by a proxy on 127.0.0.1 that relays each connection through an
exec in the container (see ``_ports.py``): the container keeps network mode ``none``.

The provider is four role objects (see :mod:`provider_sdk.roles`) over one ``Shared``
(``_shared.py``: the Engine client, the settings, the caches): the control plane
(``_control.py``, with ``_snapshots.py`` and ``_volumes.py``), the commands
(``_commands.py``, processes contained from the host by ``_host.py``), the files
(``_files.py``, the Engine's archive endpoints) and the ports (``_ports.py``). This
module parses the settings and composes them.

Mapping: ``pause`` is ``docker pause`` (the cgroup freezer: memory kept); a snapshot is
``docker commit`` (the container's filesystem and its bounded directories, not its memory
or volumes); on an Engine without storage quotas, ``/tmp``, ``/home``, ``/root`` and the
working directory are bounded (see ``_bounded.py``); volumes are
Docker named volumes labelled ``psdk.volume``; metadata are labels; metrics come from the
stats API; ``build_template`` is a classic-builder image build with networking off,
cached by the content hash of the Dockerfile and its context.
"""

from __future__ import annotations

import os
from typing import ClassVar, Generic, TypeVar, overload

from provider_sdk.capabilities import Capability
from provider_sdk.provider import SandboxProvider
from provider_sdk.settings import Settings
from provider_sdk_docker import _bounded
from provider_sdk_docker._capabilities import (
    BASE_CAPABILITIES,
    BOUNDED_CAPABILITIES,
    HOST_CAPABILITIES,
    PROVIDER_CAPABILITIES,
    QUOTA_CAPABILITIES,
)
from provider_sdk_docker._commands import DockerCommands
from provider_sdk_docker._control import DockerControl
from provider_sdk_docker._engine import Engine
from provider_sdk_docker._files import DockerFiles
from provider_sdk_docker._host import engine_has_disk_quotas, host_control_possible
from provider_sdk_docker._ports import DockerPorts
from provider_sdk_docker._shared import Shared

__all__ = ["DEFAULT_TEMPLATE", "DockerProvider"]

DEFAULT_TEMPLATE = "psdk-base:bookworm-2"
DEFAULT_HOST = "unix:///var/run/docker.sock"
#: The environment variable each option is read from when not given.
SETTINGS = {"base_url": "DOCKER_HOST", "template": "PSDK_DOCKER_TEMPLATE",
            "pids_limit": "PSDK_DOCKER_PIDS_LIMIT", "memory_mb": "PSDK_DOCKER_MEMORY_MB",
            "network": "PSDK_DOCKER_NETWORK", "cpus": "PSDK_DOCKER_CPUS",
            "disk_mb": "PSDK_DOCKER_DISK_MB", "disks": "PSDK_DOCKER_DISKS"}

#: Why an instance lacks a capability, added to the error that refuses it.
_WHY_LACKING = {
    Capability.RESOURCES_DISK: "the Engine's storage has no quotas here, and no sandbox "
                               "directories are bounded",
    Capability.NETWORK_ALLOW_OUT: "Docker has no per-destination egress rules",
    Capability.NETWORK_DENY_OUT: "Docker has no per-destination egress rules",
    Capability.LIFECYCLE_AUTO_KILL: "a Docker container has no idle notion: use the "
                                    "SandboxManager's idle handling instead",
    Capability.CODE_INTERPRETER: "a background process's output files are the sandbox "
                                 "user's, so another process of the sandbox could write "
                                 "frames into a context's results",
}

T = TypeVar("T")


class _Setting(Generic[T]):
    """A setting of the provider, kept in its ``Shared`` where its roles read it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, provider: None, owner: type) -> _Setting[T]: ...
    @overload
    def __get__(self, provider: DockerProvider, owner: type) -> T: ...

    def __get__(self, provider: DockerProvider | None, owner: type) -> _Setting[T] | T:
        if provider is None:
            return self
        value: T = getattr(provider._shared, self._name)
        return value

    def __set__(self, provider: DockerProvider, value: T) -> None:
        setattr(provider._shared, self._name, value)


class DockerProvider(SandboxProvider):
    """Sandboxes as containers on a Docker Engine.

    Every option falls back to a setting in the environment.

    Args:
        base_url: the Engine's address (``DOCKER_HOST``, default
            ``unix:///var/run/docker.sock``); ``unix://`` and plain ``tcp://``.
        template: the image a sandbox starts from when the spec names none
            (``PSDK_DOCKER_TEMPLATE``, default ``psdk-base:bookworm-2``). It needs
            ``/bin/sh`` and GNU coreutils and findutils; the code interpreter and
            terminals need ``python3`` too.
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

    template: _Setting[str] = _Setting()
    """The image a sandbox starts from when its spec names none."""
    pids_limit: _Setting[int] = _Setting()
    """Most processes in one sandbox."""
    memory_mb: _Setting[int] = _Setting()
    """Memory limit (MiB) when the spec gives none."""
    network: _Setting[str] = _Setting()
    """The Docker network a sandbox joins when its spec allows internet."""
    cpus: _Setting[float] = _Setting()
    """CPU limit when the spec gives none."""
    host_control: _Setting[bool] = _Setting()
    """Whether processes are controlled from the Engine's host."""
    disk_mb: _Setting[int] = _Setting()
    """A sandbox's disk limit (MiB) when the spec gives none, where it is held."""
    disk_quota: _Setting[bool] = _Setting()
    """Whether the Engine's storage has quotas (``limits.disk``)."""

    def __init__(self, *, base_url: str | None = None, template: str | None = None,
                 pids_limit: int | None = None, memory_mb: int | None = None,
                 network: str | None = None, cpus: float | None = None,
                 host_control: bool | None = None, disk_mb: int | None = None,
                 disk_quota: bool | None = None, bounded_dirs: bool | None = None) -> None:
        settings = Settings(self.name, SETTINGS)
        url = settings.url("base_url", base_url, default=DEFAULT_HOST,
                           schemes=("unix", "http+unix", "tcp", "http"))
        assert url is not None
        engine = Engine(url, provider=self.name)
        controlled = host_control_possible(url) if host_control is None else \
            settings.switch("host_control", host_control, default=False)
        quota = settings.switch("disk_quota", disk_quota, default=False) \
            if disk_quota is not None else controlled and engine_has_disk_quotas(url)
        if bounded_dirs is None:
            bounded_dirs = controlled and not quota and _bounded.bounded_dirs_possible()
        else:
            bounded_dirs = settings.switch("bounded_dirs", bounded_dirs, default=False)
        disks = settings.path("disks", None)
        self._shared = Shared(
            name=self.name, engine=engine,
            template=settings.text("template", template, default=DEFAULT_TEMPLATE),
            pids_limit=settings.integer("pids_limit", pids_limit, default=1024),
            memory_mb=settings.integer("memory_mb", memory_mb, default=2048),
            network=settings.text("network", network, default="bridge"),
            cpus=settings.number("cpus", cpus, default=min(2.0, os.cpu_count() or 2)),
            host_control=controlled,
            disk_mb=settings.integer("disk_mb", disk_mb, default=4096),
            disk_quota=quota,
            bounded=_bounded.BoundedDirs(engine, root=disks, provider=self.name)
            if bounded_dirs and not quota else None)
        # Per instance: what holds depends on where the Engine runs (the class lists all).
        self._hold_only(BASE_CAPABILITIES
                        | (HOST_CAPABILITIES if controlled else frozenset())
                        | (QUOTA_CAPABILITIES if quota else frozenset())
                        | (BOUNDED_CAPABILITIES if self._shared.bounded else frozenset()),
                        why=_WHY_LACKING)
        commands = DockerCommands(self._shared)
        control = DockerControl(self._shared, commands)
        super().__init__(control=control, commands=commands,
                         files=DockerFiles(self._shared, commands),
                         ports=DockerPorts(self._shared, control),
                         parts=[control.snapshots, control.volumes])

    def __repr__(self) -> str:
        return f"<DockerProvider {self.engine.base_url!r} template={self.template!r}>"

    @property
    def engine(self) -> Engine:
        """The Engine this provider talks to: its calls run in worker threads and raise
        the neutral errors. For tools built on this provider (the templates
        distribution's image builder); closed by :meth:`aclose`."""
        return self._shared.engine

    async def aclose(self) -> None:
        """Stop serving every exposed port and close the Engine client's connections."""
        await self._shared.aclose()
