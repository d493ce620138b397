"""What every role of one ``DockerProvider`` holds: the Engine client, the settings, the
bounded directories, the port proxy and the caches of what each sandbox is.

The roles (``_control``, ``_commands``, ``_files``, ``_ports``) hold one :class:`Shared`
each and nothing of one another's but what they are given. It makes no decision of its
own: the two look-ups here (a sandbox's container, a path in it) are the ones every role
makes.
"""

from __future__ import annotations

import posixpath
from typing import Any

import attrs

from provider_sdk import errors
from provider_sdk.ports import PortProxy
from provider_sdk_docker._bounded import BoundedDirs
from provider_sdk_docker._engine import Engine
from provider_sdk_docker._host import HostControl
from provider_sdk_docker._labels import LABEL, container_name

__all__ = ["Shared"]


@attrs.define(kw_only=True, eq=False)
class Shared:
    """One provider's Engine, settings and per-sandbox caches (see the module).

    The settings are the provider's (``DockerProvider`` documents each); it reads and
    writes them here, so a change reaches every role.
    """

    name: str
    """The provider's name, for errors."""
    engine: Engine
    template: str
    pids_limit: int
    memory_mb: int
    network: str
    cpus: float
    host_control: bool
    disk_mb: int
    disk_quota: bool
    bounded: BoundedDirs | None
    """The sandboxes' bounded directories, where they are bounded (``bounded_dirs``)."""
    proxy: PortProxy = attrs.field(init=False)
    """Serves the exposed ports; a kill stops serving the sandbox's."""
    workdirs: dict[str, str] = attrs.field(init=False, factory=dict)
    """Each sandbox's working directory, once known."""
    owners: dict[str, tuple[int, int]] = attrs.field(init=False, factory=dict)
    """The uid and gid of each sandbox's user, once asked."""
    controls: dict[str, HostControl | None] = attrs.field(init=False, factory=dict)
    """Each sandbox's processes as the host controls them, once located."""
    pwds: dict[str, str | None] = attrs.field(init=False, factory=dict)
    """The ``PWD`` each container's environment sets, once read."""
    proc_ready: set[str] = attrs.field(init=False, factory=set)
    """Sandboxes whose background-process directory any user may write."""
    storage_driver: str | None = attrs.field(init=False, default=None)
    """The Engine's storage driver, once asked."""

    def __attrs_post_init__(self) -> None:
        self.proxy = PortProxy(provider=self.name)

    async def inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The Engine's inspection of a sandbox's container; ``SandboxNotFound`` for a
        container this SDK did not make as that sandbox."""
        data: dict[str, Any] = await self.engine.api(
            "inspect_container", container_name(sandbox_id), what=sandbox_id,
            sandbox_id=sandbox_id)
        if (data["Config"].get("Labels") or {}).get(LABEL) != sandbox_id:
            raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=self.name,
                                         sandbox_id=sandbox_id)
        return data

    def note_workdir(self, sandbox_id: str, data: dict[str, Any]) -> None:
        """Keep the working directory of an inspected container, unless known."""
        self.workdirs.setdefault(sandbox_id, data["Config"].get("WorkingDir") or "/")

    async def resolve(self, sandbox_id: str, path: str) -> str:
        """``path`` made absolute against the sandbox's working directory, normalized."""
        if not path.startswith("/"):
            workdir = self.workdirs.get(sandbox_id)
            if workdir is None:
                self.note_workdir(sandbox_id, await self.inspect(sandbox_id))
                workdir = self.workdirs[sandbox_id]
            path = posixpath.join(workdir, path)
        return posixpath.normpath("/" + path.lstrip("/"))

    def forget(self, sandbox_id: str) -> None:
        """Drop what is cached of a sandbox that is gone."""
        self.workdirs.pop(sandbox_id, None)
        self.owners.pop(sandbox_id, None)
        self.controls.pop(sandbox_id, None)
        self.pwds.pop(sandbox_id, None)
        self.proc_ready.discard(sandbox_id)

    async def aclose(self) -> None:
        """Stop serving every exposed port and close the Engine client's connections."""
        await self.proxy.aclose()
        self.engine.close()
