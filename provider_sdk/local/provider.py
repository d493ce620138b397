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

This module holds the class, its lifecycle and the state it reads from the home; its
other hooks are in mixins: ``_startup`` (a sandbox's root and launch), ``_calls`` (exec,
processes and files, through the agent), ``_storage`` (snapshots and volumes) and
``_template_builds``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import attrs

from provider_sdk import disks, errors
from provider_sdk.capabilities import Capability
from provider_sdk.config import default_home
from provider_sdk.dockerfile import Problem, TemplateSupport
from provider_sdk.labels import check_labels
from provider_sdk.local import (
    _bwrap,
    _cgroups,
    _disk,
    _ids,
    _launch,
    _mountpoints,
    _mounts,
    _records,
    _seccomp,
    _users,
)
from provider_sdk.local._calls import CallsMixin
from provider_sdk.local._capabilities import PROVIDER_CAPABILITIES
from provider_sdk.local._client import AgentClient
from provider_sdk.local._home import Home, now, write_meta
from provider_sdk.local._records import BrokenRecordWarning, SandboxRecord, VolumeBinding
from provider_sdk.local._startup import WORKDIR, StartupMixin
from provider_sdk.local._storage import StorageMixin
from provider_sdk.local._template_builds import TEMPLATE_SUPPORT, TemplateBuildsMixin
from provider_sdk.local._trees import disk_usage, remove_tree
from provider_sdk.models import (
    ExposedPort,
    Metrics,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    TemplateSpec,
)
from provider_sdk.ports import PortProxy
from provider_sdk.provider import SandboxProvider
from provider_sdk.settings import Settings
from provider_sdk.templates import parsed

__all__ = ["BrokenRecordWarning", "LocalProvider", "UnisolatedWarning"]

T = TypeVar("T")

DEFAULT_MEMORY_MB = 2048
"""An isolated sandbox's memory limit when neither the spec nor its template gives one
(as the Docker provider's)."""
AGENT_TIMEOUT = 15.0


#: What needs bubblewrap: held by isolated instances only.
_BWRAP = frozenset({Capability.VOLUMES, Capability.VOLUMES_SHARED, Capability.VOLUMES_READ_ONLY,
                    Capability.TEMPLATES, Capability.TEMPLATES_BUILD})
#: What the class declares and an instance holds only where its host and mode allow.
_PER_INSTANCE = _BWRAP | {
    Capability.RESOURCES_CPU, Capability.RESOURCES_MEMORY, Capability.RESOURCES_DISK,
    Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS, Capability.LIMITS_DISK,
    Capability.SEAL_SYSCALLS, Capability.EXEC_CONTAINED, Capability.SEAL_HOST,
    Capability.SEAL_IDS, Capability.SEAL_KNOBS}
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
}


class UnisolatedWarning(RuntimeWarning):
    """A sandbox was created without isolation: its commands see the whole host."""


warnings.simplefilter("always", UnisolatedWarning)


class LocalProvider(StartupMixin, CallsMixin, StorageMixin, TemplateBuildsMixin,
                    SandboxProvider):
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
        self._home = Home(settings.path("home", home) or default_home())
        self._unisolated = unisolated = settings.switch("unisolated", unisolated,
                                                        default=False)
        self._cgroups = _cgroups.Cgroup.available()
        self._quota = not unisolated and disks.available()
        self._separate = not unisolated and _users.separate_users()
        self._registry = _ids.Registry(_ids.host_range()) if self._separate else None
        held = set(type(self).capabilities) - _PER_INSTANCE
        if unisolated and os.geteuid() == 0:
            held.discard(Capability.FILES_PERMISSIONS)  # root's file operations, unchecked
        if not unisolated:  # bubblewrap mounts volumes and runs templates' images
            held |= _BWRAP
        if self._cgroups:
            held |= {Capability.RESOURCES_CPU, Capability.RESOURCES_MEMORY}
        if self._cgroups and not unisolated:
            held |= {Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS}
        if self._quota:
            held |= {Capability.LIMITS_DISK, Capability.RESOURCES_DISK}
        if not unisolated and _seccomp.supported():
            held.add(Capability.SEAL_SYSCALLS)  # only isolated sandboxes run under the filter
        if self._separate:
            held.add(Capability.EXEC_CONTAINED)  # commands cannot reach their supervisors
            held.add(Capability.SEAL_IDS)  # a slot of unprivileged host ids of its own
            held.add(Capability.SEAL_KNOBS)  # /proc's knobs read-only, devices its own
        if self._separate and self._quota:
            # The root and volumes are filesystems of their own (no home path in the
            # mount table), and the agent and init are out of the commands' reach.
            held.add(Capability.SEAL_HOST)
        self._hold_only(held, why=_WHY_LACKING)
        self._ports = PortProxy(provider=self.name)

    agent_timeout: float = AGENT_TIMEOUT
    """Seconds a sandbox's agent has to accept each call (connect and acknowledge).
    Past it the call raises ``Unavailable``; a dead or stopped agent is noticed sooner,
    from its process state. Set it on an instance to change it."""

    def __repr__(self) -> str:
        return f"<LocalProvider home={str(self._home.path)!r}>"

    @property
    def home(self) -> Path:
        """The state directory in use."""
        return self._home.path

    async def aclose(self) -> None:
        """Stop serving every exposed port (sandboxes keep running)."""
        await self._ports.aclose()

    # ---------------------------------------------------------------- lifecycle

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        bwrap = self._check_can_launch()
        self._check_create(spec)
        template = self._template_of(spec)
        if self._unisolated:
            warnings.warn("local sandbox created WITHOUT isolation (unisolated=True): its "
                          "commands can read and change this machine's files and processes",
                          UnisolatedWarning, stacklevel=4)
        image = self._template_record(template) if template != "default" else None
        sandbox_id, claim = self._home.claim("sandboxes")
        directory = self._home.sandbox(sandbox_id)
        meta = SandboxRecord(
            id=sandbox_id,
            created_at=now(),
            template=template,
            metadata=dict(spec.metadata),
            image_env=dict(image.env) if image else {},
            env=dict(spec.env),
            cwd=spec.cwd or (image.workdir if image else None) or WORKDIR,
            resources=self._resources(spec, image),
            start_cmd=image.start_cmd if image else None,
            ready_cmd=image.ready_cmd if image else None,
            idle_timeout=spec.lifecycle.idle_timeout,
            volumes=[VolumeBinding(m.volume, m.path, m.read_only) for m in spec.volumes],
            snapshot=spec.snapshot,
            unisolated=self._unisolated,
        )
        try:
            if self._registry is not None:  # its own host ids, before it has a file
                meta.ids = await anyio.to_thread.run_sync(self._registry.claim, directory)
            with _disk.typed_full(doing="creating a sandbox", provider=self.name):
                await anyio.to_thread.run_sync(self._make_layer, directory, meta)
                write_meta(directory, meta.to_json())
            if template != "default":
                self._template_record(template)  # deleted meanwhile: its delete saw no user
            await self._start_sandbox(sandbox_id, meta, bwrap)
            await self._start_command(sandbox_id, meta)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._kill(sandbox_id)  # under the claim's lock, which it holds
            raise
        finally:
            claim.release()
        return self._to_info(meta, SandboxState.RUNNING)

    def _check_can_launch(self) -> str | None:
        if self._unisolated:
            return None
        bwrap = _bwrap.bwrap_path()
        if bwrap is None:
            raise errors.ConfigError(
                "the local provider needs bubblewrap (bwrap) to isolate sandboxes: install "
                "it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                "bubblewrap), or pass unisolated=True to run WITHOUT isolation",
                provider=self.name)
        if os.geteuid() == 0 and not self._separate:
            raise errors.ConfigError(
                "run as root, the local provider gives each sandbox host ids of its own "
                "(none of them root's), which cannot be done here: "
                f"{_users.separation_problem()}; fix that, or run the provider as a user "
                "other than root", provider=self.name)
        if not Path(_bwrap.SANDBOX_PYTHON).is_file():
            raise errors.ConfigError(
                f"the local provider runs its agent with {_bwrap.SANDBOX_PYTHON}, which is "
                "missing: install python3 from the system's packages", provider=self.name)
        return bwrap

    def _template_of(self, spec: SandboxSpec) -> str:
        """The template a new sandbox runs on: the spec's, or its snapshot's."""
        wanted = spec.template or "default"
        if spec.snapshot is not None:
            snap = self._snapshot_record(spec.snapshot)
            if wanted not in ("default", snap.template):
                raise errors.InvalidInput(
                    f"snapshot {spec.snapshot!r} was taken on template {snap.template!r}, "
                    f"not {wanted!r}: give no template with it", provider=self.name)
            wanted = snap.template
        if wanted != "default":  # the spec's was checked already; this is its snapshot's
            self.require(Capability.TEMPLATES, detail=f"snapshot {spec.snapshot!r} was "
                                                      f"taken on template {wanted!r}")
        return wanted

    def _resources(self, spec: SandboxSpec, image: _records.TemplateRecord | None
                   ) -> Resources:
        """The limits a sandbox gets: the spec's; for what it leaves unset, the
        template's cpu and memory_mb, else the defaults (memory where cgroups apply it
        to an isolated sandbox, disk where quotas hold)."""
        defaults: dict[str, Any] = {}
        if self._cgroups:
            template = {"cpu": image.cpu, "memory_mb": image.memory_mb} if image else {}
            defaults = {k: v for k, v in template.items()
                        if v is not None and getattr(spec.resources, k) is None}
            if not self._unisolated and spec.resources.memory_mb is None:
                defaults.setdefault("memory_mb", DEFAULT_MEMORY_MB)
        if self._quota and spec.resources.disk_mb is None:
            defaults["disk_mb"] = _disk.DEFAULT_DISK_MB
        return attrs.evolve(spec.resources, **defaults) if defaults else spec.resources

    def _check_create(self, spec: SandboxSpec) -> None:
        """What the core cannot check (it checked the capabilities): that the spec's
        volumes and snapshot exist, with good records, and that each volume may be
        mounted where it asks (``_mountpoints.check_volume_targets``)."""
        _mountpoints.check_volume_targets([m.path for m in spec.volumes], provider=self.name)
        for mount in spec.volumes:
            self._volume_record(mount.volume)
        if spec.snapshot is not None:
            self._snapshot_record(spec.snapshot)

    def _status_path(self, sandbox_id: str, token: str) -> Path:
        """Where the host-side launcher records the sandbox's exit status (a file outside
        the sandbox's root, which nothing inside can write)."""
        return self._home.sandbox(sandbox_id) / f"exit-{token}"

    def _cgroup(self, sandbox_id: str) -> _cgroups.Cgroup:
        return _cgroups.Cgroup(f"psdk-{self._home.tag}-{sandbox_id}")

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        broken = self._broken(sandbox_id)
        if broken is not None:
            return broken
        meta = self._read(sandbox_id)
        return self._to_info(meta, self._state(sandbox_id, meta))

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> list[SandboxInfo]:
        found = []
        for staging in self._home.abandoned_claims("sandboxes"):
            shutil.rmtree(staging, ignore_errors=True)  # never named, so never started
        if self._separate:  # what a process that died while starting a sandbox staged
            await anyio.to_thread.run_sync(_mounts.sweep)
        for sandbox_id in self._home.all_ids("sandboxes"):
            broken = self._broken(sandbox_id, warn=True)
            if broken is not None:
                found.append(broken)
                continue
            meta, _reason = _records.read(self._home.sandbox(sandbox_id), sandbox_id)
            if meta is not None and self._ended_by_idle(sandbox_id, meta):
                await self._kill(sandbox_id)
                continue
            if meta is None or any(meta.metadata.get(k) != v for k, v in metadata.items()):
                continue
            found.append(self._to_info(meta, self._state(sandbox_id, meta)))
        return found

    def _broken(self, sandbox_id: str, *, warn: bool = False) -> SandboxInfo | None:
        """The ``ERROR`` info of a broken record, else ``None``."""
        return _records.broken_info(self._home, sandbox_id, provider=self.name, warn=warn)

    async def _kill(self, sandbox_id: str) -> None:
        await self._ports.drop(sandbox_id)
        directory = self._home.sandbox(sandbox_id)
        async with self._home.hold(directory):  # no resume or pause meanwhile
            meta, _reason = _records.read(directory, sandbox_id)
            if meta is None and not directory.exists():
                return
            if meta and meta.unisolated and self._state(sandbox_id,
                                                        meta) == SandboxState.RUNNING:
                # Its commands are not in a namespace that dies with it: ask the agent.
                with anyio.move_on_after(5), contextlib.suppress(errors.SandboxError):
                    await self._client(sandbox_id).call("kill_all")
            await anyio.to_thread.run_sync(self._kill_blocking, sandbox_id, directory)

    def _kill_blocking(self, sandbox_id: str, directory: Path) -> None:
        with self._home.lock(directory):
            # A broken record is trusted for nothing: its cgroups and mounts are found
            # by name, its processes through its cgroups.
            meta, _reason = _records.read(directory, sandbox_id)
            self._stop_processes(sandbox_id, meta)
            _disk.unmount_all(directory)
            if self._registry is not None and meta is not None and meta.ids is not None:
                self._registry.release(meta.ids, directory)
            remove_tree(directory)  # moved aside first: no lister sees it half removed

    def _stop_processes(self, sandbox_id: str, meta: SandboxRecord | None) -> None:
        launch = meta.launch if meta else None
        cgroup = self._cgroup(sandbox_id)
        if cgroup.exists() and cgroup.frozen():
            cgroup.freeze(False)  # a frozen process takes no signal, SIGKILL included
        if launch:
            _launch.kill(launch)
        cgroup.destroy()

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        async with self._home.hold(self._home.sandbox(sandbox_id)):
            return await anyio.to_thread.run_sync(self._pause_blocking, sandbox_id)

    def _pause_blocking(self, sandbox_id: str) -> SandboxInfo:
        directory = self._home.sandbox(sandbox_id)
        with self._home.lock(directory):
            meta = self._read(sandbox_id)
            state = self._state(sandbox_id, meta)
            if state == SandboxState.RUNNING:
                cgroup = self._cgroup(sandbox_id)
                if cgroup.exists():
                    cgroup.freeze(True)
                else:
                    (directory / "paused").touch()
                    _launch.signal_all(_started(meta), signal.SIGSTOP)
            elif state != SandboxState.PAUSED:
                raise self._not_running(sandbox_id, state)
            return self._to_info(meta, SandboxState.PAUSED)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        # The whole step under the sandbox's lock: a resume that saw a kill's first
        # steps as "stopped" would mount and start again what the kill removes.
        async with self._home.hold(self._home.sandbox(sandbox_id)):
            return await self._resume_held(sandbox_id)

    async def _resume_held(self, sandbox_id: str) -> SandboxInfo:
        directory = self._home.sandbox(sandbox_id)
        meta = self._read(sandbox_id)
        state = self._state(sandbox_id, meta)
        if state == SandboxState.PAUSED:
            await anyio.to_thread.run_sync(self._thaw, sandbox_id, directory, meta)
        elif state in (SandboxState.STOPPED, SandboxState.ERROR):
            # Its processes are gone (e.g. the machine restarted), or its agent is and
            # leftovers linger: end what is left and start it again from its files.
            bwrap = None if meta.unisolated else self._check_can_launch()
            await anyio.to_thread.run_sync(self._stop_processes, sandbox_id, meta)
            await self._start_sandbox(sandbox_id, meta, bwrap)
            await self._start_command(sandbox_id, meta)
        elif state == SandboxState.RUNNING:
            agent = _started(meta)
            if _launch.agent_state(agent) == "stopped" and agent.agent_pid is not None:
                _launch.continue_process(agent.agent_pid)
        else:
            raise self._not_running(sandbox_id, state)
        await self._wait_ready(sandbox_id, _started(self._read(sandbox_id)))
        return self._to_info(self._read(sandbox_id), SandboxState.RUNNING)

    def _thaw(self, sandbox_id: str, directory: Path, meta: SandboxRecord) -> None:
        with self._home.lock(directory):
            cgroup = self._cgroup(sandbox_id)
            if cgroup.exists():
                cgroup.freeze(False)
            else:
                _launch.signal_all(_started(meta), signal.SIGCONT)
                (directory / "paused").unlink(missing_ok=True)

    async def _set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        return await anyio.to_thread.run_sync(self._set_metadata_blocking, sandbox_id, labels)

    def _set_metadata_blocking(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        directory = self._home.sandbox(sandbox_id)
        self._read(sandbox_id)  # SandboxNotFound, or SandboxNotRunning if broken
        try:
            with self._home.lock(directory):  # the record is read, changed, replaced whole
                meta = self._read(sandbox_id)
                merged = {**meta.metadata, **labels}
                check_labels(merged, provider=self.name)
                meta.metadata = merged
                write_meta(directory, meta.to_json())
        except FileNotFoundError:  # killed meanwhile
            raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r} in {self._home.path}",
                                         provider=self.name, sandbox_id=sandbox_id) from None
        return self._to_info(meta, self._state(sandbox_id, meta))

    # ---------------------------------------------------------------------- ids

    def _id_range(self) -> _ids.IdRange:
        """This host's range of sandbox ids (only where sandboxes have ids of their own)."""
        return _ids.host_range()

    def _hold_ids(self, directory: Path, meta: SandboxRecord) -> None:
        """Hold the sandbox's slot again as it starts. Where the registry gives it
        another (its slot was taken meanwhile, or the host's range changed), and for a
        sandbox made by a version that ran its user as the host's root, its own files
        move to the ids of the slot it gets."""
        assert self._registry is not None
        base = self._registry.claim(directory, meta.ids)
        if base == meta.ids:
            return
        files = _disk.own_files(directory, meta)
        try:
            _ids.shift_tree(files, _ids.legacy(base) if meta.ids is None
                            else _ids.rebase(meta.ids, base))
        except OSError as exc:  # a tree too deep, no descriptor to be had
            raise errors.SandboxError(
                f"the sandbox's files could not be moved to its ids: {exc.strerror or exc}",
                provider=self.name, sandbox_id=meta.id) from exc
        meta.ids = base
        write_meta(directory, meta.to_json())

    def _legacy(self, meta: SandboxRecord) -> bool:
        """Whether an isolated sandbox was started by a version that ran its user as the
        host's root (it must start again, with ids of its own, before it serves)."""
        return self._separate and not meta.unisolated and meta.ids is None

    # ------------------------------------------------------------- state helpers

    def _read(self, sandbox_id: str) -> SandboxRecord:
        meta, reason = _records.read(self._home.sandbox(sandbox_id), sandbox_id)
        if reason is not None:
            if self._home.busy(self._home.sandbox(sandbox_id)):
                raise errors.SandboxNotRunning("the sandbox is being created",
                                               state=str(SandboxState.STARTING),
                                               provider=self.name, sandbox_id=sandbox_id)
            raise errors.SandboxNotRunning(
                f"the sandbox's state record is broken: {reason}; kill it to remove it",
                state=str(SandboxState.ERROR), provider=self.name, sandbox_id=sandbox_id)
        if meta is not None and self._ended_by_idle(sandbox_id, meta):
            self._kill_blocking(sandbox_id, self._home.sandbox(sandbox_id))
            meta = None
        if meta is None:
            raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r} in {self._home.path}",
                                         provider=self.name, sandbox_id=sandbox_id)
        return meta

    def _ended_by_idle(self, sandbox_id: str, meta: SandboxRecord) -> bool:
        """Whether the sandbox ended itself after its idle timeout: its agent exited with
        the idle status, as recorded by the host-side launcher in a file the sandbox
        cannot write. Such a sandbox is gone, and its files are removed lazily.

        The file is this launch's own (named by its token) and is written only once the
        sandbox's init has exited, so it alone decides: the init's process may still
        show in ``/proc`` for a moment, not yet reaped."""
        launched = meta.launch
        if not (meta.idle_timeout and launched and launched.token):
            return False
        return _launch.exit_status(
            self._status_path(sandbox_id, launched.token)) == _launch.IDLE_EXIT

    def _state(self, sandbox_id: str, meta: SandboxRecord) -> SandboxState:
        """The sandbox's state from its processes. Its agent gone while other processes
        of it linger is ``ERROR``: nothing serves it (``resume()`` starts it again)."""
        launched = meta.launch
        if launched is None:
            return SandboxState.STARTING
        if not _launch.alive(launched):
            return SandboxState.STOPPED
        directory = self._home.sandbox(sandbox_id)
        if self._cgroup(sandbox_id).frozen() or (directory / "paused").exists():
            return SandboxState.PAUSED
        if _launch.agent_state(launched) is None:
            if launched.pid_namespace is not None:  # nothing would contain them now
                _launch.end_unsupervised(launched, self._cgroup(sandbox_id)
                                         if self._cgroups else None)
            return SandboxState.ERROR
        if self._legacy(meta):
            return SandboxState.ERROR
        return SandboxState.RUNNING

    def _not_running(self, sandbox_id: str, state: SandboxState) -> errors.SandboxNotRunning:
        hint = " (resume it first)" if state in (SandboxState.PAUSED,
                                                 SandboxState.STOPPED) else ""
        if state == SandboxState.ERROR:
            hint = " (its agent is gone; resume() starts it again from its files)"
            meta, _reason = _records.read(self._home.sandbox(sandbox_id), sandbox_id)
            if meta is not None and self._legacy(meta):
                hint = (" (an earlier version started it with its user as the host's root; "
                        "resume() starts it again from its files, with ids of its own)")
        return errors.SandboxNotRunning(f"the sandbox is {state}{hint}", state=str(state),
                                        provider=self.name, sandbox_id=sandbox_id)

    def _client(self, sandbox_id: str, launched: _launch.Launched | None = None) -> AgentClient:
        health = None if launched is None else (
            lambda: self._agent_trouble(sandbox_id, launched))
        return AgentClient(str(self._home.sandbox(sandbox_id) / "agent.sock"),
                           provider=self.name, sandbox_id=sandbox_id,
                           accept_timeout=self.agent_timeout, health=health)

    def _agent_trouble(self, sandbox_id: str, launched: _launch.Launched) -> str | None:
        """Why the agent cannot answer, if its process says so: gone, or stopped by a
        signal while the sandbox is not paused (a pause waits for resume instead)."""
        state = _launch.agent_state(launched)
        if state is None:
            return ("the sandbox's agent is gone (state: error); resume() starts the "
                    "sandbox again from its files")
        if state == "stopped" and not self._paused(sandbox_id):
            return ("the sandbox's agent is stopped (SIGSTOP or a tracer); resume() "
                    "continues it")
        return None

    def _paused(self, sandbox_id: str) -> bool:
        return self._cgroup(sandbox_id).frozen() or (
            self._home.sandbox(sandbox_id) / "paused").exists()

    def _running(self, sandbox_id: str) -> AgentClient:
        """A client for a running sandbox; a typed error for any other state, and
        ``Unavailable`` at once if its agent is stopped."""
        # Read fresh each time: another process may have paused, resumed or killed it.
        meta = self._read(sandbox_id)
        state = self._state(sandbox_id, meta)
        if state != SandboxState.RUNNING:
            raise self._not_running(sandbox_id, state)
        launched = _started(meta)
        trouble = self._agent_trouble(sandbox_id, launched)
        if trouble is not None:
            raise errors.Unavailable(trouble, provider=self.name, sandbox_id=sandbox_id)
        return self._client(sandbox_id, launched)

    async def _agent(self, sandbox_id: str, call: Callable[[AgentClient], Any]) -> Any:
        """Run ``call`` against the agent; if it fails to answer, say why."""
        client = self._running(sandbox_id)
        try:
            return await call(client)
        except errors.Unavailable:
            self._running(sandbox_id)  # raises SandboxNotFound/NotRunning if that is why
            raise

    def _to_info(self, meta: SandboxRecord, state: SandboxState) -> SandboxInfo:
        return SandboxInfo(
            id=meta.id, provider=self.name, state=state, template=meta.template,
            metadata=meta.metadata, created_at=meta.created_at,
            expires_at=None, resources=meta.resources,
            extra={"home": str(self._home.path), "unisolated": meta.unisolated,
                   "idle_timeout": meta.idle_timeout, "snapshot": meta.snapshot},
        )

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

    # --------------------------------------------------------------------- ports

    async def _expose(self, sandbox_id: str, port: int) -> ExposedPort:
        """A proxy on 127.0.0.1 whose connections the sandbox's agent makes to the port
        inside (the sandbox keeps loopback only)."""
        self._running(sandbox_id)
        return await self._ports.expose(
            sandbox_id, port, lambda: self._running(sandbox_id).tunnel(port))

    async def _unexpose(self, sandbox_id: str, port: int) -> None:
        await self._ports.unexpose(sandbox_id, port)

    # ------------------------------------------------------------------- metrics

    async def _metrics(self, sandbox_id: str) -> Metrics:
        self._running(sandbox_id)
        cgroup = self._cgroup(sandbox_id)
        layer = _disk.own_files(self._home.sandbox(sandbox_id), self._read(sandbox_id))
        disk = await anyio.to_thread.run_sync(disk_usage, layer)
        memory, limit = cgroup.memory() if cgroup.exists() else (None, None)
        cpu = cgroup.cpu_seconds() if cgroup.exists() else None
        if memory is None:
            launched = _started(self._read(sandbox_id))
            memory = sum(_rss(pid) for pid in _launch.namespace_pids(launched))
        return Metrics(cpu_seconds=cpu, memory_bytes=memory, memory_limit_bytes=limit,
                       disk_bytes=disk, timestamp=now())


def _started(meta: SandboxRecord) -> _launch.Launched:
    """The launch of a sandbox whose state says it started."""
    if meta.launch is None:
        raise errors.SandboxNotRunning("the sandbox is being created",
                                       state=str(SandboxState.STARTING), sandbox_id=meta.id)
    return meta.launch


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
