"""``SandboxProvider``: the one interface business code talks to, and plugins implement.

A provider is made of role objects (:mod:`provider_sdk.roles`): a control plane and
commands, which every provider writes, files (by default derived from the commands) and
ports, each with the optional parts of the capabilities its class declares. The public
methods around them are written once, here and in ``provider_sdk._hooks``: they validate
input, check capabilities, emit events and wrap results in
:class:`~provider_sdk.sandbox.Sandbox` handles, then pass each call to its role. Roles
translate their backend's errors into the neutral tree, once.

This module owns the interface; it must not know any backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from provider_sdk._hooks import ProviderHooks, _check_id
from provider_sdk.capabilities import Capability
from provider_sdk.command_files import CommandFiles
from provider_sdk.commands import Command, OutputCallback, ProcessEvent, ProcessExit, ProcessOutput
from provider_sdk.errors import attributed
from provider_sdk.events import span
from provider_sdk.kernel_interpreter import KernelInterpreter
from provider_sdk.labels import check_labels
from provider_sdk.models import SandboxSpec, SandboxState
from provider_sdk.process_terminals import ProcessTerminals
from provider_sdk.roles import (
    CodeInterpreter,
    Commands,
    ControlPlane,
    Files,
    Ports,
    Processes,
    Roles,
    Terminals,
)
from provider_sdk.sandbox import Sandbox, SandboxCreation, Shell

__all__ = [
    "Command",
    "OutputCallback",
    "ProcessEvent",
    "ProcessExit",
    "ProcessOutput",
    "SandboxProvider",
    "exit_code_from_status",
]

def exit_code_from_status(status: int) -> int:
    """A shell's (or a container runtime's) exit status as a neutral exit code.

    Those report death by signal N as ``128 + N``; the neutral code is ``-N``. A command
    that itself exits with 129..192 reads as a signal too: backends that only report a
    status cannot tell the two apart.
    """
    return -(status - 128) if 128 < status <= 128 + 64 else status


class SandboxProvider(ProviderHooks):
    """Base class of every provider.

    Use it as an async context manager (or call :meth:`aclose`) to release client
    resources; sandboxes are not killed by closing the provider.

    Attributes:
        name: the provider's registry name (``"local"``, ``"docker"``, ...).
        capabilities: the capabilities it declares; an instance may hold fewer, where
            its mode or host decides (read ``provider.capabilities`` or ``supports()``).

    All but ``create``, ``connect`` and the shell hook is inherited from
    ``provider_sdk._hooks.ProviderHooks``, the part the handles hold.
    """

    def __init__(self, *, control: ControlPlane, commands: Commands,
                 files: Files | None = None, ports: Ports | None = None,
                 code: CodeInterpreter | None = None, terminals: Terminals | None = None,
                 parts: Iterable[object] = ()) -> None:
        """Make the provider of its roles (see :mod:`provider_sdk.roles`): ``control``
        and ``commands``, which every provider has; ``files``, without which the files
        API runs on the commands (:class:`~provider_sdk.command_files.CommandFiles`);
        ``ports`` for ``ports.expose``; ``code`` for ``code.interpreter``, without which
        a provider whose commands have background processes runs a kernel in the
        sandbox (:class:`~provider_sdk.kernel_interpreter.KernelInterpreter`);
        ``terminals`` for ``terminal.pty``, without which a commands role with
        background processes serves it
        (:class:`~provider_sdk.process_terminals.ProcessTerminals`); ``parts``,
        objects that make some optional parts themselves (a storage object with
        snapshots and volumes, say), so that a role need not pass those calls on: a
        capability's calls go to the first of them that has its part, else to its
        role.

        Raises:
            TypeError: a role lacks the part of a capability the class declares.
        """
        roles = Roles(control=control, commands=commands,
                      files=files if files is not None
                      else CommandFiles(commands, provider=self.name), ports=ports,
                      code=code if code is not None or not isinstance(commands, Processes)
                      else KernelInterpreter(commands, provider=self.name),
                      terminals=terminals if terminals is not None
                      else ProcessTerminals.over(commands, provider=self.name),
                      parts=tuple(parts))
        problems = roles.problems(type(self).capabilities)
        if problems:
            raise TypeError(f"{type(self).__name__}: {'; '.join(problems)}")
        self._roles = roles

    # ------------------------------------------------------------------ public API

    def create(self, spec: SandboxSpec | None = None, /, **fields: Any) -> SandboxCreation:
        """Create a sandbox; it is returned once its data plane answers.

        Pass a :class:`SandboxSpec`, or its fields as keywords. Await the result for a
        :class:`Sandbox`, or use it as ``async with provider.create(...) as sandbox:``
        to kill the sandbox when the block ends.
        """
        with attributed(self.name):
            if spec is None:
                spec = SandboxSpec(**fields)
            elif fields:
                spec = attrs.evolve(spec, **fields)
        return SandboxCreation(self, spec)

    async def _create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        self._check_spec(spec)
        async with span("create", self.name) as ev:
            if spec.template is not None:
                spec = attrs.evolve(spec, template=await self._template_id(spec.template))
            info = await self._create(spec)
            ev["sandbox_id"] = info.id
        return Sandbox(self, self._visible(info))

    async def connect(self, sandbox_id: str, *, resume: bool = True) -> Sandbox:
        """Open a handle on an existing sandbox, resuming it if paused and ``resume``."""
        _check_id(self.name, sandbox_id)
        async with span("connect", self.name, sandbox_id):
            info = await self._info(sandbox_id)
            if resume and info.state in (SandboxState.PAUSED, SandboxState.PAUSING):
                self.require(Capability.PAUSE, sandbox_id=sandbox_id)
                info = await self._resume(sandbox_id)
        return Sandbox(self, self._visible(info))

    # ---------------------------------------------------------- capability hooks

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        """Open a persistent shell session. (``shell.persistent``)"""
        shell: Shell = await self._part(Capability.SHELL_PERSISTENT, sandbox.id).open_shell(
            sandbox, cwd=cwd, env=env)
        return shell

    # ------------------------------------------------------------------- helpers

    def _check_spec(self, spec: SandboxSpec) -> None:
        """Refuse, before anything is created, a spec that needs an undeclared capability
        or sets one of this provider's internal labels."""
        check_labels(spec.metadata, internal=self.internal_labels, provider=self.name)
        if spec.template is not None:
            self.require(Capability.TEMPLATES, detail="SandboxSpec.template")
        if spec.snapshot is not None:
            self.require(Capability.SNAPSHOT_FILESYSTEM, detail="SandboxSpec.snapshot")
        if spec.volumes:
            self.require(Capability.VOLUMES, detail="SandboxSpec.volumes")
        if any(mount.read_only for mount in spec.volumes):
            self.require(Capability.VOLUMES_READ_ONLY, detail="VolumeMount(read_only=True)")
        for field, capability in _RESOURCES:
            if getattr(spec.resources, field) is not None:
                self.require(capability, detail=f"Resources.{field}")
        self._check_network(spec.network, None, "SandboxSpec.network")
        lifecycle = spec.lifecycle
        if lifecycle.idle_timeout is not None:
            self.require(_ON_IDLE[lifecycle.on_idle],
                         detail=f"Lifecycle(idle_timeout=..., on_idle={lifecycle.on_idle!r})")
        if lifecycle.auto_resume:
            self.require(Capability.LIFECYCLE_AUTO_RESUME, detail="Lifecycle(auto_resume=True)")


#: What each field of ``Resources`` needs when a spec sets it.
_RESOURCES = (("cpu", Capability.RESOURCES_CPU), ("memory_mb", Capability.RESOURCES_MEMORY),
              ("disk_mb", Capability.RESOURCES_DISK))
#: What ``Lifecycle(idle_timeout=...)`` needs, by ``on_idle``.
_ON_IDLE = {"pause": Capability.LIFECYCLE_AUTO_PAUSE, "kill": Capability.LIFECYCLE_AUTO_KILL}
