"""``ProviderHooks``: :class:`~provider_sdk.provider.SandboxProvider` without the
methods that make handles, so that the handles (:class:`~provider_sdk.sandbox.Sandbox`
and its files) can hold it.

It holds the provider's name, capabilities and limits, the label visibility, every
public call that makes no handle (``get_info``, ``list``, ``kill``, volumes, snapshots,
templates, ``aclose``), and the hooks a provider author implements: the required core
(create, info, list, kill, exec and six file operations) and the hooks of each
capability (see :data:`provider_sdk.capabilities.HOOKS`), which raise
``UnsupportedCapability`` here. ``SandboxProvider`` derives from it and adds ``create``,
``connect`` and the shell hook; providers subclass ``SandboxProvider``, never this class.

This module imports no handle, so the handles can import it.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

import anyio
import attrs

from provider_sdk.capabilities import IMPLIES, Capability
from provider_sdk.commands import Command, ProcessEvent
from provider_sdk.dockerfile import Problem, TemplateSupport
from provider_sdk.errors import (
    InvalidInput,
    SandboxError,
    TemplateBuildError,
    UnsupportedCapability,
)
from provider_sdk.events import span
from provider_sdk.interpreter import CodeContext, CodeResult, CodeRun
from provider_sdk.labels import check_labels, visible
from provider_sdk.limits import DEFAULT_OUTPUT_LIMIT, DEFAULT_READ_LIMIT
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
    Template,
    TemplateSpec,
    Volume,
)
from provider_sdk.roles import Roles
from provider_sdk.templates import TemplateBuilder, content_hash, problems
from provider_sdk.terminals import TerminalSession, TerminalSpec

__all__ = ["ProviderHooks"]

T = TypeVar("T")


class ProviderHooks:
    """A provider as its handles see it: all of it but ``create``, ``connect`` and the
    shell hook.

    The base of :class:`~provider_sdk.provider.SandboxProvider`, which documents them.
    """

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    """Bytes of each output stream an exec result keeps when the call gives no
    ``output_limit`` (set it on an instance to change it for every call)."""
    read_limit: int = DEFAULT_READ_LIMIT
    """Largest file ``files.read`` loads into memory when the call gives no ``limit``."""
    internal_labels: ClassVar[frozenset[str]] = frozenset()
    """Label keys this provider sets on its sandboxes for its own bookkeeping: refused in
    what callers pass and never shown in :attr:`SandboxInfo.metadata
    <provider_sdk.models.SandboxInfo.metadata>` (see :mod:`provider_sdk.labels`)."""
    start_closes_stdin: ClassVar[bool] = False
    """Whether ``_start`` starts a process with its stdin closed when the command's
    ``keep_stdin`` is false; else :meth:`Sandbox.start
    <provider_sdk.sandbox.Sandbox.start>` closes it with ``_close_stdin`` right after."""
    _why_lacking: Mapping[Capability, str] = MappingProxyType({})
    _roles: Roles | None = None
    """The role objects calls go to (see :mod:`provider_sdk.roles`)."""
    template_support: ClassVar[TemplateSupport] = TemplateSupport()
    """What this provider's template builder does with a Dockerfile (``templates.build``):
    :meth:`check_template` reports the rest, with line numbers, before a build."""

    def _hold_only(self, held: Iterable[Capability],
                   why: Mapping[Capability, str] | None = None) -> None:
        """Narrow this instance's capabilities to ``held``, for a provider whose mode or
        host decides what holds (the class declares everything it can hold; the registry
        checks hooks against that). ``held`` must be a subset of the class's, and keep
        what each capability it holds needs (``IMPLIES``). ``why`` says, for a capability
        left out, why this instance lacks it: :meth:`require` adds it to the error."""
        narrowed = frozenset(held)
        extra = narrowed - type(self).capabilities
        if extra:
            raise TypeError(f"{type(self).__name__} does not declare "
                            f"{', '.join(sorted(map(str, extra)))}")
        for cap, needs in IMPLIES.items():
            if cap in narrowed and not needs <= narrowed:
                raise TypeError(f"{type(self).__name__}: {cap} needs "
                                f"{', '.join(sorted(map(str, needs - narrowed)))}")
        vars(self)["capabilities"] = narrowed
        self._why_lacking = {c: r for c, r in (why or {}).items() if c not in narrowed}

    def supports(self, capability: Capability | str) -> bool:
        """Whether this provider instance holds ``capability`` (its class's declaration,
        narrowed where the instance's mode or host decides)."""
        return Capability(capability) in self.capabilities

    def require(self, capability: Capability, *, sandbox_id: str | None = None,
                detail: str = "") -> None:
        """Raise :class:`UnsupportedCapability` unless this instance holds ``capability``."""
        if capability not in self.capabilities:
            why = self._why_lacking.get(capability)
            raise UnsupportedCapability(str(capability), provider=self.name,
                                        sandbox_id=sandbox_id,
                                        detail=f"{detail} ({why})" if detail and why
                                        else detail or why or "")

    async def get_info(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox's current state and details; ``SandboxNotFound`` if unknown."""
        _check_id(self.name, sandbox_id)
        async with span("info", self.name, sandbox_id):
            return self._visible(await self._info(sandbox_id))

    async def kill(self, sandbox_id: str) -> None:
        """Kill a sandbox and delete its resources.

        Idempotent: killing twice, or an id the provider does not know, is not an error.
        """
        _check_id(self.name, sandbox_id)
        async with span("kill", self.name, sandbox_id):
            await self._kill(sandbox_id)

    async def list(self, *, metadata: Mapping[str, str] | None = None,
                   state: SandboxState | str | None = None) -> builtins.list[SandboxInfo]:
        """Sandboxes whose metadata contains every given pair, optionally in one state.

        The pairs follow the label rules of :mod:`provider_sdk.labels`."""
        wanted = dict(metadata or {})
        check_labels(wanted, internal=self.internal_labels, provider=self.name)
        try:
            st = SandboxState(state) if state is not None else None
        except ValueError:
            raise InvalidInput(f"state: {state!r} is not one of "
                               f"{', '.join(s.value for s in SandboxState)}",
                               provider=self.name) from None
        async with span("list", self.name):
            found = await self._list(metadata=wanted, state=st)
        # Backends that filter coarsely are narrowed here, so every provider agrees.
        return [self._visible(i) for i in found
                if all(i.metadata.get(k) == v for k, v in wanted.items())
                and (st is None or i.state == st)]

    async def create_volume(self, name: str) -> Volume:
        """Create a named volume; ``Conflict`` if it exists."""
        self.require(Capability.VOLUMES)
        _check_name(self.name, "volume", name)
        async with span("volume.create", self.name):
            return await self._create_volume(name)

    async def get_volume(self, name: str) -> Volume:
        """A volume by name; ``VolumeNotFound`` if unknown."""
        self.require(Capability.VOLUMES)
        _check_name(self.name, "volume", name)
        async with span("volume.get", self.name):
            return await self._get_volume(name)

    async def list_volumes(self) -> builtins.list[Volume]:
        """Every volume of this provider."""
        self.require(Capability.VOLUMES)
        async with span("volume.list", self.name):
            return await self._list_volumes()

    async def delete_volume(self, name: str) -> None:
        """Delete a volume and its data; ``Conflict`` while a running sandbox mounts it."""
        self.require(Capability.VOLUMES)
        _check_name(self.name, "volume", name)
        async with span("volume.delete", self.name):
            await self._delete_volume(name)

    async def list_snapshots(self, *, sandbox_id: str | None = None) -> builtins.list[Snapshot]:
        """Snapshots, optionally only those taken from one sandbox."""
        self.require(Capability.SNAPSHOT_FILESYSTEM)
        async with span("snapshot.list", self.name, sandbox_id):
            return await self._list_snapshots(sandbox_id)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; ``SnapshotNotFound`` if unknown."""
        self.require(Capability.SNAPSHOT_FILESYSTEM)
        _check_id(self.name, snapshot_id, "snapshot_id")
        async with span("snapshot.delete", self.name):
            await self._delete_snapshot(snapshot_id)

    async def build_template(
        self, spec: TemplateSpec, *, force: bool = False,
        on_progress: Callable[[str], None] | None = None,
    ) -> Template:
        """Build a template; an unchanged spec is not rebuilt unless ``force``.

        What this provider's builder cannot do (:meth:`check_template`) is refused first,
        as one :class:`~provider_sdk.errors.TemplateBuildError` (step ``check``) that
        lists every problem with its line. Then the spec's content hash
        (:func:`~provider_sdk.templates.content_hash`) is computed, once: a template the
        builder already has with that hash is returned as it is, without a build and
        without progress. ``on_progress`` receives build log lines.
        """
        self.require(Capability.TEMPLATES_BUILD)
        found = self.check_template(spec)
        if found:
            raise TemplateBuildError(
                f"the {self.name} builder cannot build {spec.name!r}: "
                + "; ".join(str(p) for p in found), step="check",
                log_tail="\n".join(str(p) for p in found), provider=self.name)
        async with span("template.build", self.name) as extra:
            builder = self._template_builder()
            digest = await anyio.to_thread.run_sync(content_hash, spec)
            if not force and (built := await builder.find(spec, digest)) is not None:
                extra["cached"] = True
                return built
            return await builder.build(spec, digest, force=force, on_progress=on_progress)

    def check_template(self, spec: TemplateSpec) -> builtins.list[Problem]:
        """What this provider's template builder cannot do with ``spec``, with Dockerfile
        line numbers; empty when it can build it. Raises ``TemplateBuildError`` (step
        ``parse``) for a Dockerfile that does not parse."""
        self.require(Capability.TEMPLATES_BUILD)
        return problems(spec, self.template_support)

    async def list_templates(self) -> builtins.list[Template]:
        """Templates this provider built or knows."""
        self.require(Capability.TEMPLATES_BUILD)
        async with span("template.list", self.name):
            return await self._template_builder().list()

    async def delete_template(self, template_id: str) -> None:
        """Delete a template, by its id or by its name: a name deletes every build of
        that name this provider has. ``TemplateNotFound`` if there is none."""
        self.require(Capability.TEMPLATES_BUILD)
        async with span("template.delete", self.name):
            builder = self._template_builder()
            built = await builder.list()
            if any(t.id == template_id for t in built):
                await builder.delete(template_id)
                return
            named = [t.id for t in built if t.name == template_id]
            if not named:  # the builder's own answer, for an id it knows but did not list
                await builder.delete(template_id)
            for found in named:
                await builder.delete(found)

    async def _template_id(self, template: str) -> str:
        """The template ``SandboxSpec.template`` means: itself when it is the id of a
        template this provider built, or when none is named so (an image or a template
        the backend knows by itself); otherwise the newest build named ``template``."""
        if Capability.TEMPLATES_BUILD not in self.capabilities:
            return template
        built = await self._template_builder().list()
        if any(t.id == template for t in built):
            return template
        named = [t for t in built if t.name == template]
        if not named:
            return template
        newest = max(named, key=lambda t: (t.created_at is not None, t.created_at or 0, t.id))
        return newest.id

    async def aclose(self) -> None:
        """Release client resources (connections, threads). Safe to call twice."""

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # ------------------------------------------------------------ required hooks
    # What the public calls above and the handles call, each passed to a role (see
    # provider_sdk.roles); the core's checks are done before any of them runs.

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create and start a sandbox; return once its data plane answers."""
        return await self._composed().control.create(spec)

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox's info; ``SandboxNotFound`` if unknown."""
        return await self._composed().control.info(sandbox_id)

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> builtins.list[SandboxInfo]:
        """Sandboxes, filtered on the backend as far as it can."""
        return await self._composed().control.list(metadata=metadata, state=state)

    async def _kill(self, sandbox_id: str) -> None:
        """Kill the sandbox; nothing to do if it is already gone."""
        await self._composed().control.kill(sandbox_id)

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        """Run a command to completion (see :meth:`provider_sdk.roles.Commands.exec`)."""
        return await self._composed().commands.exec(sandbox_id, command)

    def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """A file's bytes in chunks."""
        return self._composed().files.read_file(sandbox_id, path)

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        """Write a file from chunks, making its parents, replacing it whole."""
        await self._composed().files.write_file(sandbox_id, path, chunks)

    async def _list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        """A directory's entries (not recursive)."""
        return await self._composed().files.list_dir(sandbox_id, path)

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        """Stat a path without following a final symlink; ``FileNotFound`` if absent."""
        return await self._composed().files.stat(sandbox_id, path)

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        """Make a directory."""
        await self._composed().files.mkdir(sandbox_id, path, parents=parents,
                                           exist_ok=exist_ok)

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        """Remove a file, or a directory (its contents too if ``recursive``)."""
        await self._composed().files.remove(sandbox_id, path, recursive=recursive)

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing a file at ``dst``."""
        await self._composed().files.rename(sandbox_id, src, dst)

    # ---------------------------------------------------------- capability hooks
    # Each goes to the role part of its capability, which the provider declares exactly
    # when a role has it (checked when it is made); otherwise UnsupportedCapability.

    async def _start(self, sandbox_id: str, command: Command) -> int:
        """Start a background process; its pid. (``process.background``)"""
        part = self._part(Capability.PROCESS_BACKGROUND, sandbox_id)
        return int(await part.start(sandbox_id, command))

    def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        """A process's output, then its exit. (``process.background``)"""
        events: AsyncIterator[ProcessEvent] = self._part(
            Capability.PROCESS_BACKGROUND, sandbox_id).process_events(sandbox_id, pid)
        return events

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        """Write to a process's stdin. (``process.background``)"""
        await self._part(Capability.PROCESS_BACKGROUND, sandbox_id).send_stdin(
            sandbox_id, pid, data)

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        """Close a process's stdin. (``process.background``)"""
        await self._part(Capability.PROCESS_BACKGROUND, sandbox_id).close_stdin(
            sandbox_id, pid)

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        """Kill a process and its whole tree. (``process.background``)"""
        await self._part(Capability.PROCESS_BACKGROUND, sandbox_id).kill_process(
            sandbox_id, pid)

    async def _create_code_context(self, sandbox_id: str, *, language: str,
                                   cwd: str | None, env: Mapping[str, str]) -> CodeContext:
        """Start a code context. (``code.interpreter``)"""
        context: CodeContext = await self._part(
            Capability.CODE_INTERPRETER, sandbox_id).create_context(
            sandbox_id, language=language, cwd=cwd, env=env)
        return context

    async def _run_code(self, sandbox_id: str, run: CodeRun) -> CodeResult:
        """Run code in a context. (``code.interpreter``)"""
        result: CodeResult = await self._part(Capability.CODE_INTERPRETER,
                                              sandbox_id).run_code(sandbox_id, run)
        return result

    async def _close_code_context(self, sandbox_id: str, context_id: str) -> None:
        """End a code context. (``code.interpreter``)"""
        await self._part(Capability.CODE_INTERPRETER, sandbox_id).close_context(
            sandbox_id, context_id)

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        """Pause; return once paused. (``pause``)"""
        info: SandboxInfo = await self._part(Capability.PAUSE, sandbox_id).pause(sandbox_id)
        return info

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        """Resume; return once the data plane answers. (``pause``)"""
        info: SandboxInfo = await self._part(Capability.PAUSE, sandbox_id).resume(sandbox_id)
        return info

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        """Snapshot the sandbox. (``snapshot.filesystem``)"""
        snap: Snapshot = await self._part(Capability.SNAPSHOT_FILESYSTEM,
                                          sandbox_id).snapshot(sandbox_id)
        return snap

    async def _list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        """List snapshots. (``snapshot.filesystem``)"""
        snaps: builtins.list[Snapshot] = await self._part(
            Capability.SNAPSHOT_FILESYSTEM, sandbox_id).list_snapshots(sandbox_id)
        return snaps

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot. (``snapshot.filesystem``)"""
        await self._part(Capability.SNAPSHOT_FILESYSTEM, None).delete_snapshot(snapshot_id)

    async def _rollback(self, sandbox_id: str, snapshot_id: str) -> SandboxInfo:
        """Restore a sandbox in place from a snapshot. (``snapshot.rollback``)"""
        info: SandboxInfo = await self._part(Capability.SNAPSHOT_ROLLBACK,
                                             sandbox_id).rollback(sandbox_id, snapshot_id)
        return info

    async def _create_volume(self, name: str) -> Volume:
        """Create a volume. (``volumes``)"""
        volume: Volume = await self._part(Capability.VOLUMES, None).create_volume(name)
        return volume

    async def _get_volume(self, name: str) -> Volume:
        """Get a volume by name. (``volumes``)"""
        volume: Volume = await self._part(Capability.VOLUMES, None).get_volume(name)
        return volume

    async def _list_volumes(self) -> builtins.list[Volume]:
        """List volumes. (``volumes``)"""
        volumes: builtins.list[Volume] = await self._part(Capability.VOLUMES,
                                                          None).list_volumes()
        return volumes

    async def _delete_volume(self, name: str) -> None:
        """Delete a volume. (``volumes``)"""
        await self._part(Capability.VOLUMES, None).delete_volume(name)

    async def _update_network(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        """Change a running sandbox's network policy. (``network.update``)"""
        await self._part(Capability.NETWORK_UPDATE, sandbox_id).update_network(
            sandbox_id, policy)

    async def _set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        """Set ``labels``, keeping the sandbox's others (internal ones too); its info
        with them. (``metadata.update``)"""
        info: SandboxInfo = await self._part(Capability.METADATA_UPDATE,
                                             sandbox_id).set_metadata(sandbox_id, labels)
        return info

    async def _set_metadata_as_seen(self, sandbox_id: str,
                                    labels: Mapping[str, str]) -> SandboxInfo:
        """``_set_metadata`` without reading the labels first (``reread=False``).
        (``metadata.update``)

        A provider that overrides the hooks itself and not this one saves nothing by
        it: its ``_set_metadata`` is called."""
        if self._roles is None:
            return await self._set_metadata(sandbox_id, labels)
        info: SandboxInfo = await self._part(
            Capability.METADATA_UPDATE, sandbox_id).set_metadata_as_seen(sandbox_id, labels)
        return info

    async def _metrics(self, sandbox_id: str) -> Metrics:
        """Read resource use. (``metrics``)"""
        metrics: Metrics = await self._part(Capability.METRICS, sandbox_id).metrics(
            sandbox_id)
        return metrics

    async def _expose(self, sandbox_id: str, port: int) -> ExposedPort:
        """Serve the sandbox's ``port`` at an address that needs a token.
        (``ports.expose``)"""
        exposed: ExposedPort = await self._part(Capability.PORTS_EXPOSE, sandbox_id).expose(
            sandbox_id, port)
        return exposed

    async def _unexpose(self, sandbox_id: str, port: int) -> None:
        """Stop serving the port. (``ports.expose``)"""
        await self._part(Capability.PORTS_EXPOSE, sandbox_id).unexpose(sandbox_id, port)

    async def _open_terminal(self, sandbox_id: str, spec: TerminalSpec) -> TerminalSession:
        """Open a terminal. (``terminal.pty``)"""
        session: TerminalSession = await self._part(Capability.TERMINAL_PTY,
                                                    sandbox_id).open_terminal(sandbox_id, spec)
        return session

    def _template_builder(self) -> TemplateBuilder:
        """This provider's template builder. (``templates.build``)"""
        builder: TemplateBuilder = self._part(Capability.TEMPLATES_BUILD,
                                              None).template_builder()
        return builder

    # ------------------------------------------------------------------- helpers

    def _composed(self) -> Roles:
        roles = self._roles
        if roles is None:
            raise TypeError(f"{type(self).__name__} gives no roles: its __init__ must call "
                            "SandboxProvider.__init__(control=..., commands=...)")
        return roles

    def _part(self, capability: Capability, sandbox_id: str | None) -> Any:
        """The role that makes ``capability``'s calls; ``UnsupportedCapability`` where
        this provider has none (it does not declare the capability)."""
        roles = self._roles
        if capability in type(self).capabilities and roles is not None:
            return roles.serving(capability)
        raise self._unsupported(capability, sandbox_id)

    def _unsupported(self, capability: Capability, sandbox_id: str | None) -> SandboxError:
        return UnsupportedCapability(str(capability), provider=self.name, sandbox_id=sandbox_id)

    def _visible(self, info: SandboxInfo) -> SandboxInfo:
        """``info`` as callers see it: without this provider's internal labels."""
        if not self.internal_labels or self.internal_labels.isdisjoint(info.metadata):
            return info
        return attrs.evolve(info, metadata=visible(info.metadata, self.internal_labels))

    def _check_network(self, policy: NetworkPolicy, sandbox_id: str | None,
                       where: str) -> None:
        """Refuse a network policy that needs a capability this instance lacks."""
        if policy == NetworkPolicy():
            return
        self.require(Capability.NETWORK_POLICY, sandbox_id=sandbox_id, detail=where)
        if policy.allow_internet:
            self.require(Capability.NETWORK_INTERNET, sandbox_id=sandbox_id,
                         detail="NetworkPolicy(allow_internet=True)")
        if policy.allow_out:
            self.require(Capability.NETWORK_ALLOW_OUT, sandbox_id=sandbox_id,
                         detail="NetworkPolicy.allow_out")
        if policy.deny_out:
            self.require(Capability.NETWORK_DENY_OUT, sandbox_id=sandbox_id,
                         detail="NetworkPolicy.deny_out")




def _check_id(provider: str, value: str, field: str = "sandbox_id") -> None:
    if not isinstance(value, str) or not value or "\0" in value or "/" in value:
        raise InvalidInput(f"{field}: {value!r} is not a valid id", provider=provider)


def _check_name(provider: str, kind: str, value: str) -> None:
    """Refuse a name no backend takes: empty, with a ``/``, or with a control character
    (NUL, a newline: a pattern ending in ``$`` takes a trailing one)."""
    if not isinstance(value, str) or not value or "/" in value \
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidInput(f"{kind} name: {value!r} is not a valid name", provider=provider)
