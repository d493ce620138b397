"""``LocalControl``: the control plane of ``LocalProvider``: sandbox directories in the
home and the bubblewrap trees that hold them: create, info, list, kill, pause and resume,
labels and metrics; it holds snapshots and volumes (``_storage``, a part the provider
hands the base beside it) and templates (``_template_builds``).

A sandbox's processes start in ``_startup``; its record and state are read through
``_sandboxes``. Every step that changes a sandbox runs under its lock in the home
(``Home.hold``), which every process using the home shares.
"""

from __future__ import annotations

import builtins
import contextlib
import shutil
import signal
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from provider_sdk import errors
from provider_sdk._warnings import warn_caller
from provider_sdk.capabilities import Capability
from provider_sdk.labels import check_labels
from provider_sdk.local import _disk, _launch, _mountpoints, _mounts, _records
from provider_sdk.local._commands import LocalCommands
from provider_sdk.local._home import now, write_meta
from provider_sdk.local._records import SandboxRecord, VolumeBinding
from provider_sdk.local._sandboxes import Sandboxes, started
from provider_sdk.local._startup import WORKDIR, Startup
from provider_sdk.local._storage import LocalStorage
from provider_sdk.local._template_builds import LocalTemplates
from provider_sdk.local._trees import disk_usage
from provider_sdk.models import (
    Metrics,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
)

__all__ = ["DEFAULT_MEMORY_MB", "LocalControl", "UnisolatedWarning"]

DEFAULT_MEMORY_MB = 2048
"""An isolated sandbox's memory limit when neither the spec nor its template gives one
(as the Docker provider's)."""


class UnisolatedWarning(RuntimeWarning):
    """A sandbox was created without isolation: its commands see the whole host."""


warnings.simplefilter("always", UnisolatedWarning)


class LocalControl:
    """The local sandboxes themselves, with their snapshots, volumes and templates.

    Args:
        sandboxes: the provider's sandboxes (and, through them, its shared state).
        commands: the commands role (a template's ``start_cmd`` and ``ready_cmd`` run
            through it as a sandbox starts).
        require: the provider's capability check (a snapshot's template needs
            ``templates``, which an unisolated instance lacks).
    """

    def __init__(self, sandboxes: Sandboxes, commands: LocalCommands,
                 require: Callable[..., None]) -> None:
        self._sandboxes = sandboxes
        self._shared = sandboxes.shared
        self._require = require
        self.storage = LocalStorage(sandboxes, lambda: self.list(metadata={}, state=None))
        """Snapshots and volumes (``_storage``), a part the provider hands the base."""
        self._startup = Startup(sandboxes, self.storage, commands)
        self._templates = LocalTemplates(self._shared.home, self._shared.name)

    # ---------------------------------------------------------------- lifecycle

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Make the sandbox's directory and root, start it, and return once its agent
        (and a template's ``ready_cmd``) answers; on any failure, remove what was made."""
        bwrap = self._startup.check_can_launch()
        self._check_create(spec)
        template = self._template_of(spec)
        if self._shared.unisolated:
            warn_caller("local sandbox created WITHOUT isolation (unisolated=True): its "
                        "commands can read and change this machine's files and processes",
                        UnisolatedWarning)
        image = self._templates.record(template) if template != "default" else None
        sandbox_id, claim = self._shared.home.claim("sandboxes")
        directory = self._shared.home.sandbox(sandbox_id)
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
            unisolated=self._shared.unisolated,
        )
        try:
            if self._shared.registry is not None:  # its own host ids, before it has a file
                meta.ids = await anyio.to_thread.run_sync(self._shared.registry.claim, directory)
            with _disk.typed_full(doing="creating a sandbox", provider=self._shared.name):
                await anyio.to_thread.run_sync(self._startup.make_layer, directory, meta)
                write_meta(directory, meta.to_json())
            if template != "default":
                self._templates.record(template)  # deleted meanwhile: its delete saw no user
            await self._startup.start_sandbox(sandbox_id, meta, bwrap)
            await self._startup.start_command(sandbox_id, meta)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.kill(sandbox_id)  # under the claim's lock, which it holds
            raise
        finally:
            claim.release()
        return self._sandboxes.to_info(meta, SandboxState.RUNNING)

    def _template_of(self, spec: SandboxSpec) -> str:
        """The template a new sandbox runs on: the spec's, or its snapshot's."""
        wanted = spec.template or "default"
        if spec.snapshot is not None:
            snap = self.storage.snapshot_record(spec.snapshot)
            if wanted not in ("default", snap.template):
                raise errors.InvalidInput(
                    f"snapshot {spec.snapshot!r} was taken on template {snap.template!r}, "
                    f"not {wanted!r}: give no template with it", provider=self._shared.name)
            wanted = snap.template
        if wanted != "default":  # the spec's was checked already; this is its snapshot's
            self._require(Capability.TEMPLATES, detail=f"snapshot {spec.snapshot!r} was "
                                                       f"taken on template {wanted!r}")
        return wanted

    def _resources(self, spec: SandboxSpec, image: _records.TemplateRecord | None
                   ) -> Resources:
        """The limits a sandbox gets: the spec's; for what it leaves unset, the
        template's cpu and memory_mb, else the defaults (memory where cgroups apply it
        to an isolated sandbox, disk where quotas hold)."""
        defaults: dict[str, Any] = {}
        if self._shared.cgroups:
            template = {"cpu": image.cpu, "memory_mb": image.memory_mb} if image else {}
            defaults = {k: v for k, v in template.items()
                        if v is not None and getattr(spec.resources, k) is None}
            if not self._shared.unisolated and spec.resources.memory_mb is None:
                defaults.setdefault("memory_mb", DEFAULT_MEMORY_MB)
        if self._shared.quota and spec.resources.disk_mb is None:
            defaults["disk_mb"] = _disk.DEFAULT_DISK_MB
        return attrs.evolve(spec.resources, **defaults) if defaults else spec.resources

    def _check_create(self, spec: SandboxSpec) -> None:
        """What the core cannot check (it checked the capabilities): that the spec's
        volumes and snapshot exist, with good records, and that each volume may be
        mounted where it asks (``_mountpoints.check_volume_targets``)."""
        _mountpoints.check_volume_targets([m.path for m in spec.volumes],
                                          provider=self._shared.name)
        for mount in spec.volumes:
            self.storage.volume_record(mount.volume)
        if spec.snapshot is not None:
            self.storage.snapshot_record(spec.snapshot)

    async def info(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox's info, ``error`` for a broken record."""
        broken = self._sandboxes.broken(sandbox_id)
        if broken is not None:
            return broken
        meta = self._sandboxes.read(sandbox_id)
        return self._sandboxes.to_info(meta, self._sandboxes.state(sandbox_id, meta))

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        """Every sandbox whose labels hold ``metadata`` (broken ones as ``error``),
        removing on the way what ended after its idle timeout and what a process that
        died while creating left staged."""
        found = []
        for staging in self._shared.home.abandoned_claims("sandboxes"):
            shutil.rmtree(staging, ignore_errors=True)  # never named, so never started
        if self._shared.separate:  # what a process that died while starting a sandbox staged
            await anyio.to_thread.run_sync(_mounts.sweep)
        for sandbox_id in self._shared.home.all_ids("sandboxes"):
            broken = self._sandboxes.broken(sandbox_id, warn=True)
            if broken is not None:
                found.append(broken)
                continue
            meta, _reason = _records.read(self._shared.home.sandbox(sandbox_id), sandbox_id)
            if meta is not None and self._sandboxes.ended_by_idle(sandbox_id, meta):
                await self.kill(sandbox_id)
                continue
            if meta is None or any(meta.metadata.get(k) != v for k, v in metadata.items()):
                continue
            found.append(self._sandboxes.to_info(meta, self._sandboxes.state(sandbox_id, meta)))
        return found

    async def kill(self, sandbox_id: str) -> None:
        """End the sandbox and remove it, with its exposed ports; nothing to do if it is
        gone."""
        await self._shared.ports.drop(sandbox_id)
        directory = self._shared.home.sandbox(sandbox_id)
        async with self._shared.home.hold(directory):  # no resume or pause meanwhile
            meta, _reason = _records.read(directory, sandbox_id)
            if meta is None and not directory.exists():
                return
            if meta and meta.unisolated and self._sandboxes.state(
                    sandbox_id, meta) == SandboxState.RUNNING:
                # Its commands are not in a namespace that dies with it: ask the agent.
                with anyio.move_on_after(5), contextlib.suppress(errors.SandboxError):
                    await self._sandboxes.client(sandbox_id).call("kill_all")
            await anyio.to_thread.run_sync(self._sandboxes.kill_blocking, sandbox_id, directory)

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        """Freeze the sandbox's tree (its cgroups, else each process by signal)."""
        async with self._shared.home.hold(self._shared.home.sandbox(sandbox_id)):
            return await anyio.to_thread.run_sync(self._pause_blocking, sandbox_id)

    def _pause_blocking(self, sandbox_id: str) -> SandboxInfo:
        directory = self._shared.home.sandbox(sandbox_id)
        with self._shared.home.lock(directory):
            meta = self._sandboxes.read(sandbox_id)
            state = self._sandboxes.state(sandbox_id, meta)
            if state == SandboxState.RUNNING:
                cgroup = self._shared.cgroup(sandbox_id)
                if cgroup.exists():
                    cgroup.freeze(True)
                else:
                    (directory / "paused").touch()
                    _launch.signal_all(started(meta), signal.SIGSTOP)
            elif state != SandboxState.PAUSED:
                raise self._sandboxes.not_running(sandbox_id, state)
            return self._sandboxes.to_info(meta, SandboxState.PAUSED)

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        """Thaw a paused sandbox, or start a stopped one again from its files."""
        # The whole step under the sandbox's lock: a resume that saw a kill's first
        # steps as "stopped" would mount and start again what the kill removes.
        async with self._shared.home.hold(self._shared.home.sandbox(sandbox_id)):
            return await self._resume_held(sandbox_id)

    async def _resume_held(self, sandbox_id: str) -> SandboxInfo:
        directory = self._shared.home.sandbox(sandbox_id)
        meta = self._sandboxes.read(sandbox_id)
        state = self._sandboxes.state(sandbox_id, meta)
        if state == SandboxState.PAUSED:
            await anyio.to_thread.run_sync(self._thaw, sandbox_id, directory, meta)
        elif state in (SandboxState.STOPPED, SandboxState.ERROR):
            # Its processes are gone (e.g. the machine restarted), or its agent is and
            # leftovers linger: end what is left and start it again from its files.
            bwrap = None if meta.unisolated else self._startup.check_can_launch()
            await anyio.to_thread.run_sync(self._sandboxes.stop_processes, sandbox_id, meta)
            await self._startup.start_sandbox(sandbox_id, meta, bwrap)
            await self._startup.start_command(sandbox_id, meta)
        elif state == SandboxState.RUNNING:
            agent = started(meta)
            if _launch.agent_state(agent) == "stopped" and agent.agent_pid is not None:
                _launch.continue_process(agent.agent_pid)
        else:
            raise self._sandboxes.not_running(sandbox_id, state)
        await self._startup.wait_ready(sandbox_id, started(self._sandboxes.read(sandbox_id)))
        return self._sandboxes.to_info(self._sandboxes.read(sandbox_id), SandboxState.RUNNING)

    def _thaw(self, sandbox_id: str, directory: Path, meta: SandboxRecord) -> None:
        with self._shared.home.lock(directory):
            cgroup = self._shared.cgroup(sandbox_id)
            if cgroup.exists():
                cgroup.freeze(False)
            else:
                _launch.signal_all(started(meta), signal.SIGCONT)
                (directory / "paused").unlink(missing_ok=True)

    async def set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        """Merge ``labels`` into the sandbox's record, under its lock."""
        return await anyio.to_thread.run_sync(self._set_metadata_blocking, sandbox_id, labels)

    def _set_metadata_blocking(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        directory = self._shared.home.sandbox(sandbox_id)
        self._sandboxes.read(sandbox_id)  # SandboxNotFound, or SandboxNotRunning if broken
        try:
            with self._shared.home.lock(directory):  # the record is read, changed, replaced whole
                meta = self._sandboxes.read(sandbox_id)
                merged = {**meta.metadata, **labels}
                check_labels(merged, provider=self._shared.name)
                meta.metadata = merged
                write_meta(directory, meta.to_json())
        except FileNotFoundError:  # killed meanwhile
            raise errors.SandboxNotFound(
                f"no sandbox {sandbox_id!r} in {self._shared.home.path}",
                provider=self._shared.name, sandbox_id=sandbox_id) from None
        return self._sandboxes.to_info(meta, self._sandboxes.state(sandbox_id, meta))

    async def set_metadata_as_seen(self, sandbox_id: str,
                                   labels: Mapping[str, str]) -> SandboxInfo:
        """:meth:`set_metadata`: the record is read under its lock either way."""
        return await self.set_metadata(sandbox_id, labels)

    async def metrics(self, sandbox_id: str) -> Metrics:
        """The sandbox's CPU and memory (its cgroups, else its processes' RSS) and disk."""
        self._sandboxes.running(sandbox_id)
        cgroup = self._shared.cgroup(sandbox_id)
        layer = _disk.own_files(self._shared.home.sandbox(sandbox_id),
                                self._sandboxes.read(sandbox_id))
        disk = await anyio.to_thread.run_sync(disk_usage, layer)
        memory, limit = cgroup.memory() if cgroup.exists() else (None, None)
        cpu = cgroup.cpu_seconds() if cgroup.exists() else None
        if memory is None:
            launched = started(self._sandboxes.read(sandbox_id))
            memory = sum(_rss(pid) for pid in _launch.namespace_pids(launched))
        return Metrics(cpu_seconds=cpu, memory_bytes=memory, memory_limit_bytes=limit,
                       disk_bytes=disk, timestamp=now())

    # ------------------------------------------------------------------ templates

    def template_builder(self) -> LocalTemplates:
        """The template builder (``_template_builds``)."""
        return self._templates



def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
