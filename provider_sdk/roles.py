"""The parts a provider is made of: role objects, each a small protocol, composed by the
base class.

A provider hands :class:`~provider_sdk.provider.SandboxProvider` its roles::

    class AcmeProvider(SandboxProvider):
        name = "acme"
        capabilities = frozenset({Capability.PROCESS_BACKGROUND})

        def __init__(self) -> None:
            client = AcmeClient()
            super().__init__(control=AcmeControl(client), commands=AcmeCommands(client))

- a :class:`ControlPlane` (required): create, look up, list and kill sandboxes; and,
  where the backend has them, the parts of the control plane below (pause and resume,
  snapshots, volumes, labels, metrics, network updates, templates);
- :class:`Commands` (required): run a command to completion; and, where the backend has
  them, background processes (:class:`Processes`) and shell sessions (:class:`Shells`);
- :class:`Files`: the files API; without one the base uses
  :class:`~provider_sdk.command_files.CommandFiles`, built on the commands role with the
  toolkit's POSIX shell scripts;
- :class:`Ports` (``ports.expose``);
- a :class:`CodeInterpreter` (``code.interpreter``); without one the base uses
  :class:`~provider_sdk.kernel_interpreter.KernelInterpreter`, a kernel in the sandbox
  over the commands role's background processes;
- :class:`Terminals` (``terminal.pty``); without one, a provider whose commands role has
  background processes gets :class:`~provider_sdk.process_terminals.ProcessTerminals`,
  a terminal relayed by a small python3 program in the sandbox.

An optional part is a set of methods a role object has: :data:`PARTS` says which part
each capability needs, and the base checks, when the provider is made, that a role has
the part of every capability the class declares. Calls the provider does not declare
never reach a role (the base raises ``UnsupportedCapability``), so one role object can
serve variants of a provider that declare less.
Roles translate their backend's errors into the neutral tree, once. A variant of a
provider is a different role, not a subclass in a stack: Cube is E2B with a Cube control
plane.

This module defines the protocols; it holds no behaviour.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from provider_sdk.capabilities import Capability
from provider_sdk.commands import Command, ProcessEvent
from provider_sdk.interpreter import CodeContext, CodeResult, CodeRun
from provider_sdk.models import (
    ExecResult,
    ExposedPort,
    FileInfo,
    Metrics,
    NetworkPolicy,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Volume,
)
from provider_sdk.templates import TemplateBuilder
from provider_sdk.terminals import TerminalSession, TerminalSpec

__all__ = ["PARTS", "CodeInterpreter", "Commands", "ControlPlane", "Files", "Labels",
           "MetricsReader", "NetworkUpdates", "Part", "Pausing", "Ports", "Processes",
           "Rollback", "Roles", "Shells", "Snapshots", "TemplateBuilding", "Terminals",
           "Volumes"]


@runtime_checkable
class ControlPlane(Protocol):
    """The sandboxes themselves (required)."""

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create and start a sandbox; return once its data plane answers."""

    async def info(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox's info; ``SandboxNotFound`` if unknown."""

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        """Sandboxes, filtered on the backend as far as it can (the base narrows the
        rest)."""

    async def kill(self, sandbox_id: str) -> None:
        """Kill the sandbox; nothing to do if it is already gone."""


@runtime_checkable
class Pausing(Protocol):
    """Pause and resume (``pause``), on the control plane."""

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        """Pause; return once paused."""

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        """Resume; return once the data plane answers."""


@runtime_checkable
class Snapshots(Protocol):
    """Filesystem snapshots (``snapshot.filesystem``), on the control plane."""

    async def snapshot(self, sandbox_id: str) -> Snapshot:
        """Snapshot the sandbox."""

    async def list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        """Snapshots, of one sandbox where ``sandbox_id`` is given."""

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; ``SnapshotNotFound`` if unknown."""


@runtime_checkable
class Rollback(Protocol):
    """Restoring a sandbox in place (``snapshot.rollback``), on the control plane."""

    async def rollback(self, sandbox_id: str, snapshot_id: str) -> SandboxInfo:
        """Restore the sandbox from the snapshot; its info after."""


@runtime_checkable
class Volumes(Protocol):
    """Named volumes (``volumes``), on the control plane."""

    async def create_volume(self, name: str) -> Volume:
        """Create a volume; ``Conflict`` if it exists."""

    async def get_volume(self, name: str) -> Volume:
        """A volume by name; ``VolumeNotFound`` if unknown."""

    async def list_volumes(self) -> builtins.list[Volume]:
        """Every volume."""

    async def delete_volume(self, name: str) -> None:
        """Delete a volume; ``Conflict`` while a running sandbox mounts it."""


@runtime_checkable
class Labels(Protocol):
    """Changing a sandbox's labels (``metadata.update``), on the control plane."""

    async def set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        """Set ``labels``, keeping the sandbox's others (internal ones too); its info."""

    async def set_metadata_as_seen(self, sandbox_id: str,
                                   labels: Mapping[str, str]) -> SandboxInfo:
        """:meth:`set_metadata` without reading the labels first (``reread=False``):
        where the backend takes labels only whole, merge into those last seen.
        A role that saves nothing by it calls :meth:`set_metadata`."""


@runtime_checkable
class MetricsReader(Protocol):
    """Resource use (``metrics``), on the control plane."""

    async def metrics(self, sandbox_id: str) -> Metrics:
        """A reading of the sandbox's resource use."""


@runtime_checkable
class NetworkUpdates(Protocol):
    """Changing a running sandbox's network policy (``network.update``), on the control
    plane."""

    async def update_network(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        """Apply ``policy`` to the running sandbox."""


@runtime_checkable
class TemplateBuilding(Protocol):
    """Templates from Dockerfiles (``templates.build``), on the control plane."""

    def template_builder(self) -> TemplateBuilder:
        """The builder (the same object each time, or a cheap new one)."""


@runtime_checkable
class Commands(Protocol):
    """Running commands (required)."""

    async def exec(self, sandbox_id: str, command: Command) -> ExecResult:
        """Run a command to completion.

        Stream output to ``command.on_stdout``/``on_stderr`` where ``exec.stream`` is
        declared. On ``command.timeout`` kill the whole tree and raise
        ``CommandTimeout`` with the partial result; if cancelled, kill the process."""


@runtime_checkable
class Processes(Protocol):
    """Background processes (``process.background``), on the commands role."""

    async def start(self, sandbox_id: str, command: Command) -> int:
        """Start a background process; its pid."""

    def process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        """Its output, then its exit (output from before may be replayed);
        ``ProcessNotFound`` for an unknown pid."""

    async def send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        """Write to its stdin."""

    async def close_stdin(self, sandbox_id: str, pid: int) -> None:
        """Close its stdin."""

    async def kill_process(self, sandbox_id: str, pid: int) -> None:
        """Kill it and its whole tree."""


@runtime_checkable
class Shells(Protocol):
    """Persistent shell sessions (``shell.persistent``), on the commands role."""

    async def open_shell(self, sandbox: Any, *, cwd: str | None,
                         env: Mapping[str, str]) -> Any:
        """A :class:`~provider_sdk.sandbox.Shell` for the
        :class:`~provider_sdk.sandbox.Sandbox` given, in which ``cd`` and ``export``
        carry over (an :class:`~provider_sdk.sandbox.EmulatedShell` where the backend
        has none). Typed loosely: the handles import this module."""


@runtime_checkable
class Files(Protocol):
    """The files API of a sandbox: paths are checked by the core before they come here
    (absolute or relative to the working directory, never empty or holding NUL)."""

    def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """A file's bytes in chunks; ``NotARegularFile`` before any byte for a device,
        FIFO or socket."""

    async def write_file(self, sandbox_id: str, path: str,
                         chunks: AsyncIterator[bytes]) -> None:
        """Write a file whole from chunks, making its parent directories."""

    async def list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        """A directory's entries (not recursive)."""

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        """Stat without following a final symlink; ``FileNotFound`` if absent."""

    async def mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                    exist_ok: bool) -> None:
        """Make a directory."""

    async def remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        """Remove a file, or a directory (with its contents if ``recursive``)."""

    async def rename(self, sandbox_id: str, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing a file there."""


@runtime_checkable
class Ports(Protocol):
    """Exposed ports (``ports.expose``); a host-side proxy can use
    :class:`provider_sdk.ports.PortProxy`."""

    async def expose(self, sandbox_id: str, port: int) -> ExposedPort:
        """Serve the port at an address that needs a token; exposing it again returns
        the same."""

    async def unexpose(self, sandbox_id: str, port: int) -> None:
        """Stop serving the port; nothing to do if it is not exposed."""


@runtime_checkable
class CodeInterpreter(Protocol):
    """Stateful code contexts (``code.interpreter``): the core checks the language, the
    paths and the limits before a call comes here."""

    async def create_context(self, sandbox_id: str, *, language: str, cwd: str | None,
                             env: Mapping[str, str]) -> CodeContext:
        """Start a context of ``language`` in ``cwd`` with ``env`` in its environment."""

    async def run_code(self, sandbox_id: str, run: CodeRun) -> CodeResult:
        """Run code in ``run.context_id`` (the sandbox's default context if ``None``,
        made on first use); ``ContextNotFound`` for one closed or unknown. On
        ``run.timeout`` interrupt the code, keeping the context where the code stops,
        and raise ``CodeTimeout`` with the partial result."""

    async def close_context(self, sandbox_id: str, context_id: str) -> None:
        """End a context; nothing to do if it is already closed."""


@runtime_checkable
class Terminals(Protocol):
    """Terminals on a pseudo-terminal (``terminal.pty``)."""

    async def open_terminal(self, sandbox_id: str, spec: TerminalSpec) -> TerminalSession:
        """Start ``spec``'s program on a new terminal of ``spec``'s size; the session."""


@attrs.frozen
class Part:
    """The role a capability's calls go to, and the protocol that role must meet."""

    role: str
    protocol: type


PARTS: dict[Capability, Part] = {
    Capability.PAUSE: Part("control", Pausing),
    Capability.SNAPSHOT_FILESYSTEM: Part("control", Snapshots),
    Capability.SNAPSHOT_ROLLBACK: Part("control", Rollback),
    Capability.VOLUMES: Part("control", Volumes),
    Capability.METADATA_UPDATE: Part("control", Labels),
    Capability.METRICS: Part("control", MetricsReader),
    Capability.NETWORK_UPDATE: Part("control", NetworkUpdates),
    Capability.TEMPLATES_BUILD: Part("control", TemplateBuilding),
    Capability.PROCESS_BACKGROUND: Part("commands", Processes),
    Capability.SHELL_PERSISTENT: Part("commands", Shells),
    Capability.PORTS_EXPOSE: Part("ports", Ports),
    Capability.CODE_INTERPRETER: Part("code", CodeInterpreter),
    Capability.TERMINAL_PTY: Part("terminals", Terminals),
}
"""Each capability that is a set of calls, and the role part that makes them."""


@attrs.frozen
class Roles:
    """A provider's role objects, as the base holds them."""

    control: ControlPlane
    commands: Commands
    files: Files
    ports: Ports | None = None
    code: CodeInterpreter | None = None
    terminals: Terminals | None = None
    parts: tuple[object, ...] = ()
    """Objects that make optional parts of their own (snapshots and volumes, say): a
    capability's calls go to the first of them that has its part, else to its role."""

    def serving(self, capability: Capability) -> Any:
        """The object that makes ``capability``'s calls: the first of :attr:`parts`
        with its part, else its role (which may lack it: see :meth:`problems`)."""
        part = PARTS[capability]
        for candidate in self.parts:
            if isinstance(candidate, part.protocol):
                return candidate
        return getattr(self, part.role)

    def problems(self, declared: frozenset[Capability]) -> builtins.list[str]:
        """How these roles fall short of ``declared``: each capability declared whose
        part no role has, and each required role that is not what it must be. A part
        whose capability is not declared is no problem: its calls never reach it."""
        found = []
        for capability, part in PARTS.items():
            role = self.serving(capability)
            if capability in declared and not (role is not None
                                               and isinstance(role, part.protocol)):
                found.append(f"{capability} is declared, but its {part.role} role has no "
                             f"{part.protocol.__name__} part")
        for name, protocol in (("control", ControlPlane), ("commands", Commands),
                               ("files", Files)):
            if not isinstance(getattr(self, name), protocol):
                found.append(f"its {name} role is not a {protocol.__name__}")
        return found
