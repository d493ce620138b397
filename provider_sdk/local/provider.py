"""``LocalProvider``: sandboxes on this machine, isolated by bubblewrap.

Each sandbox is a detached process tree in its own namespaces with a writable root
under the state directory and the host's ``/usr`` read-only; a small agent inside runs
commands and file operations. Sandboxes outlive the process that made them: everything
is in the state directory, so any process using the same home sees them.

Lifecycle mapping: ``pause`` freezes the whole tree (cgroup freezer; memory kept);
``resume`` thaws it, or restarts a sandbox whose processes are gone (after a reboot)
from its files. ``Lifecycle(idle_timeout, on_idle="kill")`` ends a sandbox after that
many seconds without requests or running background processes.

Templates (``templates.build``) are images built with Docker Engine and exported into
the home; a sandbox made from one runs on an overlay of that filesystem (see
``_templates``). Only building a new spec needs Docker, through the root filesystem
source that the distribution ``sandbox-provider-sdk-templates`` registers (this package
never imports it); listing, deleting and creating from a built template do not.

This module holds the class: what this host and mode let an instance hold, and its
roles (see :mod:`provider_sdk.roles`), which share one ``_shared.Shared``: the control
plane ``_control`` (with ``_startup``, ``_storage`` and ``_template_builds``), the
commands ``_commands``, the files ``_files`` and the ports ``_ports``, each reaching
the sandboxes' records, states and agents through ``_sandboxes``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import ClassVar

from provider_sdk import disks
from provider_sdk.capabilities import Capability
from provider_sdk.config import default_home
from provider_sdk.dockerfile import Problem, TemplateSupport
from provider_sdk.local import _ids, _seccomp, _system, _users
from provider_sdk.local._capabilities import PROVIDER_CAPABILITIES
from provider_sdk.local._cgroups import Cgroup
from provider_sdk.local._commands import LocalCommands
from provider_sdk.local._control import LocalControl, UnisolatedWarning
from provider_sdk.local._files import LocalFiles
from provider_sdk.local._home import Home
from provider_sdk.local._ports import LocalPorts
from provider_sdk.local._records import BrokenRecordWarning
from provider_sdk.local._sandboxes import Sandboxes
from provider_sdk.local._shared import Shared
from provider_sdk.local._startup import BASE_ENV
from provider_sdk.local._template_builds import TEMPLATE_SUPPORT
from provider_sdk.models import TemplateSpec
from provider_sdk.ports import PortProxy
from provider_sdk.provider import SandboxProvider
from provider_sdk.settings import Settings
from provider_sdk.templates import parsed

__all__ = ["BrokenRecordWarning", "LocalProvider", "UnisolatedWarning"]


#: What needs bubblewrap: held by isolated instances only.
_BWRAP = frozenset({Capability.VOLUMES, Capability.VOLUMES_SHARED, Capability.VOLUMES_READ_ONLY,
                    Capability.TEMPLATES, Capability.TEMPLATES_BUILD})
#: What the class declares and an instance holds only where its host and mode allow.
_PER_INSTANCE = _BWRAP | {
    Capability.RESOURCES_CPU, Capability.RESOURCES_MEMORY, Capability.RESOURCES_DISK,
    Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS, Capability.LIMITS_DISK,
    Capability.SEAL_SYSCALLS, Capability.EXEC_CONTAINED, Capability.SEAL_HOST,
    Capability.SEAL_IDS, Capability.SEAL_KNOBS, Capability.PYTHON}
_LOOPBACK = "local sandboxes have loopback only"
_WHY_LACKING = {
    **dict.fromkeys(_BWRAP, "volumes and templates need bubblewrap: this provider runs "
                            "unisolated"),
    **dict.fromkeys((Capability.NETWORK_INTERNET, Capability.NETWORK_ALLOW_OUT,
                     Capability.NETWORK_DENY_OUT), _LOOPBACK),
    **dict.fromkeys((Capability.RESOURCES_CPU, Capability.RESOURCES_MEMORY),
                    "memory and CPU limits need writable cgroup v1 controllers"),
    Capability.RESOURCES_DISK: "disk quotas need loop mounts (root) and an isolated sandbox; "
                               "here sandboxes share the state directory's filesystem",
    Capability.PYTHON: "a sandbox runs the host's programs, and the host has no python (nor, "
                       "isolated, a /usr/local/bin where the provider adds one)",
}


class LocalProvider(SandboxProvider):
    """Sandboxes on this machine, in bubblewrap namespaces.

    Args:
        home: the state directory (default ``PSDK_HOME``, else
            ``$XDG_DATA_HOME/psdk``). Every process using the same home sees the same
            sandboxes, snapshots and volumes.
        unisolated: run sandboxes without bubblewrap. Nothing is isolated: commands
            see the host's files and processes. Each create warns. Only for machines
            where bubblewrap cannot be installed.

    Limits: an isolated sandbox gets a memory limit of 2048 MiB (swap included) where
    cgroup v1 controllers are writable, a disk quota of 4096 MiB on its writable layer
    where loop mounts are possible (as root), a 64 MiB ``/dev/shm`` and a process limit;
    ``Resources.memory_mb`` and ``Resources.disk_mb`` override them. Each limit that
    holds on this instance is in its ``capabilities`` (``limits.memory``,
    ``limits.disk``, ``limits.pids``).

    Containment: run as root (with util-linux's ``unshare`` and ``setpriv``), the agent
    and the supervisors that contain each command run as a user of their own, which
    commands (the sandbox user, without capabilities) cannot signal, stop or trace:
    ``exec.contained`` is declared, and with disk quotas ``seal.host`` too.
    """

    name: ClassVar[str] = "local"
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["LocalProvider"]
    template_support: ClassVar[TemplateSupport] = TEMPLATE_SUPPORT
    start_closes_stdin: ClassVar[bool] = True

    def __init__(self, *, home: str | os.PathLike[str] | None = None,
                 unisolated: bool = False) -> None:
        settings = Settings(self.name)
        state_home = Home(settings.path("home", home) or default_home())
        unisolated = settings.switch("unisolated", unisolated, default=False)
        cgroups = Cgroup.available()
        quota = not unisolated and disks.available()
        separate = not unisolated and _users.separate_users()
        registry = _ids.Registry(_ids.host_range()) if separate else None
        self._shared = shared = Shared(
            name=self.name, home=state_home, unisolated=unisolated, cgroups=cgroups,
            quota=quota, separate=separate, registry=registry,
            ports=PortProxy(provider=self.name))
        held = set(type(self).capabilities) - _PER_INSTANCE
        if unisolated and os.geteuid() == 0:
            held.discard(Capability.FILES_PERMISSIONS)  # root's file operations, unchecked
        if not unisolated:  # bubblewrap mounts volumes and runs templates' images
            held |= _BWRAP
        if cgroups:
            held |= {Capability.RESOURCES_CPU, Capability.RESOURCES_MEMORY}
        if cgroups and not unisolated:
            held |= {Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS}
        if quota:
            held |= {Capability.LIMITS_DISK, Capability.RESOURCES_DISK}
        # Unisolated, commands run the host's programs as they are; isolated, a sandbox
        # gets a python in its /usr/local/bin where the host has none.
        if (shutil.which("python", path=BASE_ENV["PATH"]) is not None if unisolated
                else _system.has_python()):
            held.add(Capability.PYTHON)
        if not unisolated and _seccomp.supported():
            held.add(Capability.SEAL_SYSCALLS)  # only isolated sandboxes run under the filter
        if separate:
            held.add(Capability.EXEC_CONTAINED)  # commands cannot reach their supervisors
            held.add(Capability.SEAL_IDS)  # a slot of unprivileged host ids of its own
            held.add(Capability.SEAL_KNOBS)  # /proc's knobs read-only, devices its own
        if separate and quota:
            # The root and volumes are filesystems of their own (no home path in the
            # mount table), and the agent and init are out of the commands' reach.
            held.add(Capability.SEAL_HOST)
        self._hold_only(held, why=_WHY_LACKING)
        self._sandboxes = sandboxes = Sandboxes(shared)
        commands = LocalCommands(sandboxes)
        control = LocalControl(sandboxes, commands, self.require)
        super().__init__(control=control, commands=commands, files=LocalFiles(sandboxes),
                         ports=LocalPorts(sandboxes), parts=[control.storage])

    @property
    def agent_timeout(self) -> float:
        """Seconds a sandbox's agent has to accept each call (connect and acknowledge).
        Past it the call raises ``Unavailable``; a dead or stopped agent is noticed
        sooner, from its process state. Set it on an instance to change it."""
        return self._shared.agent_timeout

    @agent_timeout.setter
    def agent_timeout(self, seconds: float) -> None:
        self._shared.agent_timeout = seconds

    def __repr__(self) -> str:
        return f"<LocalProvider home={str(self._shared.home.path)!r}>"

    @property
    def home(self) -> Path:
        """The state directory in use."""
        return self._shared.home.path

    async def aclose(self) -> None:
        """Stop serving every exposed port (sandboxes keep running)."""
        await self._shared.ports.aclose()

    def check_template(self, spec: TemplateSpec) -> list[Problem]:
        """What local templates cannot do with ``spec``, with line numbers: besides the
        declared :attr:`template_support`, a ``USER`` naming a uid other than 0 or 1000
        (a user name is checked against the image's ``/etc/passwd`` at build time)."""
        found = super().check_template(spec)
        for instruction in parsed(spec).instructions:
            if instruction.keyword == "USER" and instruction.args:
                uid = instruction.args[0].partition(":")[0]
                if uid.isdigit() and int(uid) not in (0, 1000):
                    found.append(Problem(line=instruction.line, what="USER", reason=(
                        f"uid {uid}: local sandboxes always run as uid 1000 ('user')")))
        return sorted(found, key=lambda p: (p.line is None, p.line or 0))
