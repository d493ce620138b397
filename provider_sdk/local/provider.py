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
``_templates``). Only building needs Docker (and the distribution
``provider-sdk-templates``); listing, deleting and creating from a built template do not.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import anyio
import attrs

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import Problem, TemplateSupport
from provider_sdk.local import _disk, _launch, _records, _seccomp, _templates
from provider_sdk.local._client import AgentClient
from provider_sdk.local._home import Home, default_home, read_meta, write_meta
from provider_sdk.local._records import BrokenRecordWarning
from provider_sdk.models import (
    ExecResult,
    FileInfo,
    FileType,
    Metrics,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
    Volume,
)
from provider_sdk.provider import Command, ProcessEvent, SandboxProvider
from provider_sdk.sandbox import EmulatedShell

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["BrokenRecordWarning", "LocalProvider", "UnisolatedWarning"]

T = TypeVar("T")

WORKDIR = "/home/user"
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": WORKDIR,
    "USER": "user",
    "LOGNAME": "user",
    "SHELL": "/bin/bash",
    "LANG": "C.UTF-8",
}
PASSWD = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
GROUP = "root:x:0:\nuser:x:1000:\n"
HOSTS = "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"
# Host /etc entries a shell and Python need, copied once into the shared read-only /etc.
ETC_COPIED = ("nsswitch.conf", "localtime", "bash.bashrc", "profile", "inputrc", "mime.types")
_NO_COMMAND = "local sandboxes run no image command: start processes with sandbox.start()"
TEMPLATE_SUPPORT = TemplateSupport(
    unsupported={
        "CMD": _NO_COMMAND,
        "ENTRYPOINT": _NO_COMMAND,
        "HEALTHCHECK": "local sandboxes run no image command, so nothing is checked",
        "EXPOSE": "local sandboxes have loopback only: no port is published",
        "VOLUME": "the image's volumes are not made: mount provider volumes "
                  "(SandboxSpec.volumes) instead",
    },
    # USER is checked by LocalProvider.check_template and at build time: uid 0 or 1000.
)
READY_CMD_TIMEOUT = 120.0  # seconds a template's ready_cmd may take to succeed
VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
READY_TIMEOUT = 15.0
DEFAULT_MEMORY_MB = 2048
"""An isolated sandbox's memory limit when neither the spec nor its template gives one
(as the Docker provider's)."""
AGENT_TIMEOUT = 15.0


class UnisolatedWarning(RuntimeWarning):
    """A sandbox was created without isolation: its commands see the whole host."""


warnings.simplefilter("always", UnisolatedWarning)


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
    """

    name: ClassVar[str] = "local"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.EXEC_STREAM,
        Capability.PROCESS_BACKGROUND,
        Capability.SHELL_PERSISTENT,
        Capability.PAUSE,
        Capability.PAUSE_MEMORY,
        Capability.SNAPSHOT_FILESYSTEM,
        Capability.VOLUMES,
        Capability.VOLUMES_SHARED,
        Capability.NETWORK_POLICY,
        Capability.LIST_METADATA,
        Capability.METRICS,
        Capability.TEMPLATES_BUILD,
        # Held per instance, where the host and the mode allow (see __init__).
        Capability.LIMITS_MEMORY,
        Capability.LIMITS_PIDS,
        Capability.LIMITS_DISK,
        Capability.SEAL_SYSCALLS,
    })
    template_support: ClassVar[TemplateSupport] = TEMPLATE_SUPPORT

    def __init__(self, *, home: str | os.PathLike[str] | None = None,
                 unisolated: bool = False) -> None:
        self._home = Home(Path(home) if home is not None else default_home())
        self._unisolated = unisolated
        self._cgroups = _launch.Cgroup.available()
        self._quota = not unisolated and _disk.available()
        held = set(type(self).capabilities) - {
            Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS, Capability.LIMITS_DISK,
            Capability.SEAL_SYSCALLS}
        if self._cgroups and not unisolated:
            held |= {Capability.LIMITS_MEMORY, Capability.LIMITS_PIDS}
        if self._quota:
            held.add(Capability.LIMITS_DISK)
        if not unisolated and _seccomp.supported():
            held.add(Capability.SEAL_SYSCALLS)  # only isolated sandboxes run under the filter
        self._hold_only(held)

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

    # ---------------------------------------------------------------- lifecycle

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        bwrap = self._check_can_launch()
        self._check_create(spec)
        template = self._template_of(spec)
        if self._unisolated:
            warnings.warn("local sandbox created WITHOUT isolation (unisolated=True): its "
                          "commands can read and change this machine's files and processes",
                          UnisolatedWarning, stacklevel=4)
        image: dict[str, Any] = {}
        if template != "default":
            image = self._template_meta(template)
        sandbox_id, claim = self._home.claim("sandboxes")
        directory = self._home.sandbox(sandbox_id)
        meta: dict[str, Any] = {
            "id": sandbox_id,
            "created_at": _now().isoformat(),
            "template": template,
            "metadata": dict(spec.metadata),
            "image_env": image.get("env", {}),
            "env": dict(spec.env),
            "cwd": spec.cwd or image.get("workdir") or WORKDIR,
            "resources": attrs.asdict(self._resources(spec, image)),
            "start_cmd": image.get("start_cmd"),
            "ready_cmd": image.get("ready_cmd"),
            "idle_timeout": spec.lifecycle.idle_timeout,
            "volumes": [[m.volume, m.path, m.read_only] for m in spec.volumes],
            "snapshot": spec.snapshot,
            "unisolated": self._unisolated,
        }
        try:
            with _disk.typed_full(doing="creating a sandbox", provider=self.name):
                await anyio.to_thread.run_sync(self._make_layer, directory, meta)
                write_meta(directory, meta)
            if template != "default":
                self._template_meta(template)  # deleted meanwhile: its delete saw no user
            await self._start_sandbox(sandbox_id, meta, bwrap)
            await self._start_command(sandbox_id, meta)
        except BaseException:
            claim.release()  # the kill below takes the directory's lock
            with anyio.CancelScope(shield=True):
                await self._kill(sandbox_id)
            raise
        finally:
            claim.release()
        return self._to_info(meta, SandboxState.RUNNING)

    def _make_layer(self, directory: Path, meta: dict[str, Any]) -> None:
        """A new sandbox's writable layer: its quota'd image mounted (where quotas
        hold), then its root's first files."""
        if _disk.has_quota(meta):
            blank = _disk.blank(self._home.path / "base", meta["resources"]["disk_mb"])
            _disk.make(directory, meta["template"], blank)
        self._make_root(directory, meta["snapshot"], meta["cwd"], meta["template"], meta)

    def _check_can_launch(self) -> str | None:
        if self._unisolated:
            return None
        bwrap = _launch.bwrap_path()
        if bwrap is None:
            raise errors.ConfigError(
                "the local provider needs bubblewrap (bwrap) to isolate sandboxes: install "
                "it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
                "bubblewrap), or pass unisolated=True to run WITHOUT isolation",
                provider=self.name)
        if not Path(_launch.SANDBOX_PYTHON).is_file():
            raise errors.ConfigError(
                f"the local provider runs its agent with {_launch.SANDBOX_PYTHON}, which is "
                "missing: install python3 from the system's packages", provider=self.name)
        return bwrap

    def _template_of(self, spec: SandboxSpec) -> str:
        """The template a new sandbox runs on: the spec's, or its snapshot's."""
        wanted = spec.template or "default"
        if spec.snapshot is not None:
            snap = read_meta(self._home.snapshot(spec.snapshot))
            if snap is None:
                raise errors.SnapshotNotFound(f"snapshot {spec.snapshot!r} does not exist",
                                              provider=self.name)
            if wanted not in ("default", snap["template"]):
                raise errors.InvalidInput(
                    f"snapshot {spec.snapshot!r} was taken on template {snap['template']!r}, "
                    f"not {wanted!r}: give no template with it", provider=self.name)
            wanted = snap["template"]
        if wanted != "default" and self._unisolated:
            raise errors.UnsupportedCapability(
                "templates", provider=self.name,
                detail="sandboxes from a template need bubblewrap")
        return wanted

    def _resources(self, spec: SandboxSpec, image: Mapping[str, Any]) -> Resources:
        """The limits a sandbox gets: the spec's; for what it leaves unset, the
        template's cpu and memory_mb, else the defaults (memory where cgroups apply it
        to an isolated sandbox, disk where quotas hold)."""
        defaults: dict[str, Any] = {}
        if self._cgroups:
            defaults = {k: image.get(k) for k in ("cpu", "memory_mb")
                        if image.get(k) is not None and getattr(spec.resources, k) is None}
            if not self._unisolated and spec.resources.memory_mb is None:
                defaults.setdefault("memory_mb", DEFAULT_MEMORY_MB)
        if self._quota and spec.resources.disk_mb is None:
            defaults["disk_mb"] = _disk.DEFAULT_DISK_MB
        return attrs.evolve(spec.resources, **defaults) if defaults else spec.resources

    async def _start_command(self, sandbox_id: str, meta: Mapping[str, Any]) -> None:
        """Start a template's ``start_cmd`` in the background and wait until its
        ``ready_cmd`` exits 0 (at create, and when a stopped sandbox is started again)."""
        if meta.get("start_cmd"):
            await self._start(sandbox_id, Command(argv=("/bin/sh", "-c", meta["start_cmd"])))
        if not meta.get("ready_cmd"):
            return
        probe = Command(argv=("/bin/sh", "-c", meta["ready_cmd"]), timeout=10)
        with anyio.move_on_after(READY_CMD_TIMEOUT):
            while (await self._exec(sandbox_id, probe)).exit_code != 0:  # noqa: ASYNC110
                await anyio.sleep(0.1)  # a command's result: there is no event to wait on
            return
        raise errors.OperationTimeout(
            f"the template's ready_cmd did not succeed within {READY_CMD_TIMEOUT:.0f}s",
            provider=self.name, sandbox_id=sandbox_id)

    def _template_meta(self, template_id: str) -> dict[str, Any]:
        meta = (read_meta(self._home.template(template_id))
                if _templates.TEMPLATE_ID.match(template_id) else None)
        if meta is None:
            known = ", ".join(["default", *self._home.ids("templates")])
            raise errors.TemplateNotFound(
                f"template {template_id!r} does not exist; this home has: {known}",
                provider=self.name)
        return meta

    def _check_create(self, spec: SandboxSpec) -> None:
        if spec.network.allow_internet or spec.network.allow_out:
            raise errors.UnsupportedCapability(
                "network.policy", provider=self.name,
                detail="local sandboxes have loopback only: allow_internet and allow_out "
                       "are not available")
        if spec.resources.disk_mb is not None and not self._quota:
            raise errors.UnsupportedCapability(
                "resources.disk_mb", provider=self.name,
                detail="disk quotas need loop mounts (root) and an isolated sandbox; here "
                       "sandboxes share the state directory's filesystem")
        if (spec.resources.memory_mb or spec.resources.cpu) and not self._cgroups:
            raise errors.UnsupportedCapability(
                "resources", provider=self.name,
                detail="memory and CPU limits need writable cgroup v1 controllers")
        if spec.volumes and self._unisolated:
            raise errors.UnsupportedCapability(
                "volumes", provider=self.name, detail="volumes need bubblewrap")
        for mount in spec.volumes:
            if read_meta(self._home.volume(mount.volume)) is None:
                raise errors.VolumeNotFound(f"volume {mount.volume!r} does not exist",
                                            provider=self.name)
        if spec.snapshot is not None and read_meta(self._home.snapshot(spec.snapshot)) is None:
            raise errors.SnapshotNotFound(f"snapshot {spec.snapshot!r} does not exist",
                                          provider=self.name)

    def _make_root(self, directory: Path, snapshot: str | None, workdir: str,
                   template: str, meta: dict[str, Any]) -> None:
        root = directory / "root"
        if template != "default":
            # The template is the overlay's lower layer; the sandbox writes to upper/.
            upper, work = _disk.overlay_dirs(directory, meta)
            if snapshot is not None:
                _copy_tree(self._home.snapshot(snapshot) / "root", upper)
            else:
                upper.mkdir()
            work.mkdir()
            root.mkdir()
            _templates.make_cwd(self._home.template(template) / "root", upper, workdir)
            return
        if snapshot is not None and _disk.has_quota(meta):
            _disk.copy_into(self._home.snapshot(snapshot) / "root", root)
        elif snapshot is not None:
            _copy_tree(self._home.snapshot(snapshot) / "root", root)
        else:

            # Mount points first (bubblewrap would make them anyway), then the writable
            # directories every sandbox has.
            for name in ("etc", "usr", "proc", "dev", "home/user", "root"):
                (root / name).mkdir(parents=True)
            for name in ("tmp", "var/tmp"):
                (root / name).mkdir(parents=True)
                (root / name).chmod(0o1777)
            for name, target in _launch.system_links().items():
                (root / name).symlink_to(target)
        (root / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)

    def _base_etc(self) -> Path:
        """The read-only /etc every sandbox of this home shares, made once."""
        etc = self._home.path / "base" / "etc"
        if etc.is_dir():
            return etc
        # Unique per call: concurrent first creates, in one process or several, race here.
        staging = self._home.path / "base" / f".etc-{os.getpid()}-{secrets.token_hex(6)}"
        staging.mkdir(parents=True)
        for name in ETC_COPIED:
            src = Path("/etc") / name
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, staging / name, symlinks=True)
            elif src.exists() or src.is_symlink():
                shutil.copy2(src, staging / name, follow_symlinks=False)
        for name in _launch.ETC_LIVE:  # mount points for the live host entries
            src = Path("/etc") / name
            if src.is_dir():
                (staging / name).mkdir()
            elif src.exists():
                (staging / name).touch()
        (staging / "psdk").mkdir()
        for name in (_launch.SANDBOX_AGENT, _launch.SANDBOX_PROCS, _launch.SANDBOX_CONFIG):
            (staging / "psdk" / name.rsplit("/", 1)[1]).touch()
        (staging / "passwd").write_text(PASSWD)
        (staging / "group").write_text(GROUP)
        (staging / "hosts").write_text(HOSTS)
        (staging / "hostname").write_text("sandbox\n")
        try:
            staging.rename(etc)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
        return etc

    async def _start_sandbox(self, sandbox_id: str, meta: dict[str, Any],
                             bwrap: str | None) -> None:
        """Start the sandbox's processes and wait until its agent answers."""
        directory = self._home.sandbox(sandbox_id)
        root = directory / "root"
        config = {
            "workdir": meta["cwd"],
            "env": {**BASE_ENV, **meta.get("image_env", {}), **meta["env"]},
            "idle_timeout": meta["idle_timeout"],
            "root": str(root) if meta["unisolated"] else "",
        }
        _write_json(directory / "agent.json", config)  # unisolated agents read it there
        config_bytes = json.dumps(config).encode()
        # Mounted already at create; after a host restart, mounted again here.
        await anyio.to_thread.run_sync(_disk.ensure_mounted, directory, meta)
        sock_path = directory / "agent.sock"
        listener = _listen(sock_path)
        token = secrets.token_hex(6)
        args: list[str] | None = None
        data: dict[str, bytes] = {}
        try:
            if bwrap is not None:
                volumes = [(self._home.volume(name) / "data", path, ro)
                           for name, path, ro in meta["volumes"]]
                etc = await anyio.to_thread.run_sync(self._base_etc)
                if meta["template"] == "default":
                    prefix: list[str] = []
                    args = _launch.bwrap_argv(bwrap=bwrap, root=root, etc=etc, volumes=volumes)
                    python = [_launch.SANDBOX_PYTHON]
                else:
                    upper, work = _disk.overlay_dirs(directory, meta)
                    prefix = _templates.overlay_prefix(
                        lower=self._home.template(meta["template"]) / "root",
                        upper=upper, work=work, root=root)
                    args = _templates.bwrap_argv(bwrap=bwrap, root=root, etc=etc,
                                                 volumes=volumes)
                    python = _templates.agent_interpreter()
                # bubblewrap's options (host paths) come through a descriptor: the
                # command line the sandbox can read names only paths inside it.
                argv = [*prefix, args[0], "--args", _launch.ARGS_FD, *python[:-1],
                        *_launch.agent_command(python[-1], agent=_launch.SANDBOX_AGENT,
                                               config=_launch.SANDBOX_CONFIG)]
                args = args[1:]
                data = {_launch.AGENT_FD: _launch.AGENT_SOURCE.read_bytes(),
                        _launch.PROCS_FD: _launch.PROCS_SOURCE.read_bytes(),
                        _launch.CONFIG_FD: config_bytes,
                        **_launch.etc_data(etc, None if meta["template"] == "default"
                                           else ("hosts", "hostname"))}
            else:
                argv = _launch.agent_command(_launch.host_python(),
                                             agent=str(_launch.AGENT_SOURCE),
                                             config=str(directory / "agent.json"))
            cgroup = self._cgroup(sandbox_id) if self._cgroups else None
            resources = Resources(**meta["resources"])
            status = self._status_path(sandbox_id, token)
            started = await anyio.to_thread.run_sync(lambda: _launch.start(
                argv=argv, args=args, listener=listener, data=data, status=status,
                cgroup=cgroup, resources=resources))
        finally:
            listener.close()
        try:
            launched = attrs.evolve(started.launched, token=token)
            meta["launch"] = attrs.asdict(launched)
            write_meta(directory, meta)
            (directory / "paused").unlink(missing_ok=True)
            await self._wait_ready(sandbox_id, launched, started)
        finally:
            started.close()  # from now on the sandbox writes to no one
        meta["launch"] = attrs.asdict(_launch.find_agent(launched))
        write_meta(directory, meta)

    async def _wait_ready(self, sandbox_id: str, launched: _launch.Launched,
                          started: _launch.Started | None = None) -> None:
        """Ping the agent. Its socket listens from before the launch, so the ping waits
        in the socket's backlog until the agent serves it: no polling delay."""
        client = self._client(sandbox_id)
        with anyio.move_on_after(READY_TIMEOUT):
            while True:
                try:
                    await client.call("ping")
                    return
                except errors.Unavailable:
                    if not _launch.alive(launched):
                        said = started.output_text() if started else "(no output)"
                        raise errors.SandboxError(f"the sandbox exited at start; {said}",
                                                  provider=self.name,
                                                  sandbox_id=sandbox_id) from None
                await anyio.sleep(0.005)
        raise errors.OperationTimeout(f"the sandbox's agent did not answer in {READY_TIMEOUT}s",
                                      provider=self.name, sandbox_id=sandbox_id)

    def _status_path(self, sandbox_id: str, token: str) -> Path:
        """Where the host-side launcher records the sandbox's exit status (a file outside
        the sandbox's root, which nothing inside can write)."""
        return self._home.sandbox(sandbox_id) / f"exit-{token}"

    def _cgroup(self, sandbox_id: str) -> _launch.Cgroup:
        return _launch.Cgroup(f"psdk-{self._home.tag}-{sandbox_id}")

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
        for sandbox_id in self._home.all_ids("sandboxes"):
            broken = self._broken(sandbox_id, warn=True)
            if broken is not None:
                found.append(broken)
                continue
            meta = read_meta(self._home.sandbox(sandbox_id))
            if meta is not None and self._ended_by_idle(sandbox_id, meta):
                await self._kill(sandbox_id)
                continue
            if meta is None or any(meta["metadata"].get(k) != v for k, v in metadata.items()):
                continue
            found.append(self._to_info(meta, self._state(sandbox_id, meta)))
        return found

    def _broken(self, sandbox_id: str, *, warn: bool = False) -> SandboxInfo | None:
        """The ``ERROR`` info of a broken record, else ``None``."""
        return _records.broken_info(self._home, sandbox_id, provider=self.name, warn=warn)

    async def _kill(self, sandbox_id: str) -> None:
        directory = self._home.sandbox(sandbox_id)
        meta, _reason = _records.read(directory, sandbox_id)
        if meta is None and not directory.exists():
            return
        if meta and meta["unisolated"] and self._state(sandbox_id, meta) == SandboxState.RUNNING:
            # Its commands are not in a namespace that dies with it: ask the agent first.
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
            _remove_tree(directory)  # moved aside first: no lister sees it half removed

    def _stop_processes(self, sandbox_id: str, meta: dict[str, Any] | None) -> None:
        launch = meta.get("launch") if meta else None
        cgroup = self._cgroup(sandbox_id)
        if cgroup.exists() and cgroup.frozen():
            cgroup.freeze(False)  # a frozen process takes no signal, SIGKILL included
        if launch:
            _launch.kill(_launch.Launched(**launch))
        cgroup.destroy()

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
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
                    _launch.signal_all(_launch.Launched(**meta["launch"]), signal.SIGSTOP)
            elif state != SandboxState.PAUSED:
                raise self._not_running(sandbox_id, state)
            return self._to_info(meta, SandboxState.PAUSED)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        directory = self._home.sandbox(sandbox_id)
        meta = self._read(sandbox_id)
        state = self._state(sandbox_id, meta)
        if state == SandboxState.PAUSED:
            await anyio.to_thread.run_sync(self._thaw, sandbox_id, directory, meta)
        elif state in (SandboxState.STOPPED, SandboxState.ERROR):
            # Its processes are gone (e.g. the machine restarted), or its agent is and
            # leftovers linger: end what is left and start it again from its files.
            bwrap = None if meta["unisolated"] else self._check_can_launch()
            await anyio.to_thread.run_sync(self._stop_processes, sandbox_id, meta)
            await self._start_sandbox(sandbox_id, meta, bwrap)
            await self._start_command(sandbox_id, meta)
        elif state == SandboxState.RUNNING:
            agent = _launch.Launched(**meta["launch"])
            if _launch.agent_state(agent) == "stopped" and agent.agent_pid is not None:
                _launch.continue_process(agent.agent_pid)
        else:
            raise self._not_running(sandbox_id, state)
        await self._wait_ready(sandbox_id, _launch.Launched(**self._read(sandbox_id)["launch"]))
        return self._to_info(self._read(sandbox_id), SandboxState.RUNNING)

    def _thaw(self, sandbox_id: str, directory: Path, meta: dict[str, Any]) -> None:
        with self._home.lock(directory):
            cgroup = self._cgroup(sandbox_id)
            if cgroup.exists():
                cgroup.freeze(False)
            else:
                _launch.signal_all(_launch.Launched(**meta["launch"]), signal.SIGCONT)
                (directory / "paused").unlink(missing_ok=True)

    # ------------------------------------------------------------- state helpers

    def _read(self, sandbox_id: str) -> dict[str, Any]:
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

    def _ended_by_idle(self, sandbox_id: str, meta: dict[str, Any]) -> bool:
        """Whether the sandbox ended itself after its idle timeout: its agent exited with
        the idle status, as recorded by the host-side launcher in a file the sandbox
        cannot write. Such a sandbox is gone, and its files are removed lazily."""
        launch = meta.get("launch")
        if not (meta["idle_timeout"] and launch and launch.get("token")):
            return False
        launched = _launch.Launched(**launch)
        return not _launch.alive(launched) and _launch.exit_status(
            self._status_path(sandbox_id, launched.token)) == _launch.IDLE_EXIT

    def _state(self, sandbox_id: str, meta: dict[str, Any]) -> SandboxState:
        """The sandbox's state from its processes. Its agent gone while other processes
        of it linger is ``ERROR``: nothing serves it (``resume()`` starts it again)."""
        launch = meta.get("launch")
        if launch is None:
            return SandboxState.STARTING
        launched = _launch.Launched(**launch)
        if not _launch.alive(launched):
            return SandboxState.STOPPED
        directory = self._home.sandbox(sandbox_id)
        if self._cgroup(sandbox_id).frozen() or (directory / "paused").exists():
            return SandboxState.PAUSED
        if _launch.agent_state(launched) is None:
            return SandboxState.ERROR
        return SandboxState.RUNNING

    def _not_running(self, sandbox_id: str, state: SandboxState) -> errors.SandboxNotRunning:
        hint = " (resume it first)" if state in (SandboxState.PAUSED,
                                                 SandboxState.STOPPED) else ""
        if state == SandboxState.ERROR:
            hint = " (its agent is gone; resume() starts it again from its files)"
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
        launched = _launch.Launched(**meta["launch"])
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

    def _to_info(self, meta: dict[str, Any], state: SandboxState) -> SandboxInfo:
        return SandboxInfo(
            id=meta["id"], provider=self.name, state=state, template=meta["template"],
            metadata=meta["metadata"], created_at=dt.datetime.fromisoformat(meta["created_at"]),
            expires_at=None, resources=Resources(**meta["resources"]),
            extra={"home": str(self._home.path), "unisolated": meta["unisolated"],
                   "idle_timeout": meta["idle_timeout"], "snapshot": meta["snapshot"]},
        )

    # ---------------------------------------------------------------------- exec

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        if command.user is not None:
            raise self._unsupported(Capability.EXEC_USER, sandbox_id)
        # The memory cgroup counts its OOM kills: one during the call killed a process
        # of this command (or one it started), even when another process exits last.
        cgroup = self._cgroup(sandbox_id) if self._cgroups else None
        kills = cgroup.oom_kills() if cgroup else None
        try:
            result: ExecResult = await self._agent(sandbox_id, lambda c: c.exec(command))
        except errors.CommandTimeout as exc:
            if cgroup and kills is not None and (cgroup.oom_kills() or 0) > kills:
                exc.result = attrs.evolve(exc.result, oom_killed=True)
            raise
        if cgroup and kills is not None and (cgroup.oom_kills() or 0) > kills:
            result = attrs.evolve(result, oom_killed=True)
        return result

    async def _start(self, sandbox_id: str, command: Command) -> int:
        started = await self._agent(sandbox_id, lambda c: c.call(
            "start", argv=list(command.argv), env=dict(command.env), cwd=command.cwd))
        return int(started["pid"])

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        client = self._running(sandbox_id)
        async for event in client.events(pid):
            yield event

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._agent(sandbox_id, lambda c: c.stdin(pid, data, close=False))

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._agent(sandbox_id, lambda c: c.stdin(pid, b"", close=True))

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        await self._agent(sandbox_id, lambda c: c.call("kill_process", pid=pid))

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)

    # --------------------------------------------------------------------- files

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        client = self._running(sandbox_id)
        async for chunk in client.read(path):
            yield chunk

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        await self._agent(sandbox_id, lambda c: c.write(path, chunks))

    async def _list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        entries = await self._agent(sandbox_id, lambda c: c.call("list", path=path))
        return [_to_file_info(e) for e in entries]

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        return _to_file_info(await self._agent(sandbox_id, lambda c: c.call("stat", path=path)))

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        await self._agent(sandbox_id, lambda c: c.call("mkdir", path=path, parents=parents,
                                                       exist_ok=exist_ok))

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        await self._agent(sandbox_id, lambda c: c.call("remove", path=path,
                                                       recursive=recursive))

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._agent(sandbox_id, lambda c: c.call("rename", src=src, dst=dst))

    # ----------------------------------------------------------------- snapshots

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        return await anyio.to_thread.run_sync(self._snapshot_blocking, sandbox_id)

    def _snapshot_blocking(self, sandbox_id: str) -> Snapshot:
        directory = self._home.sandbox(sandbox_id)
        meta = self._read(sandbox_id)
        with _disk.typed_full(doing="taking a snapshot", provider=self.name,
                              sandbox_id=sandbox_id):
            return self._copy_snapshot(sandbox_id, directory, meta)

    def _copy_snapshot(self, sandbox_id: str, directory: Path,
                       meta: dict[str, Any]) -> Snapshot:
        snapshot_id = self._home.new_id("snapshots")
        target = self._home.snapshot(snapshot_id)
        try:
            with self._home.lock(directory):
                cgroup = self._cgroup(sandbox_id)
                # Freeze while copying so the snapshot is consistent.
                thaw = self._state(sandbox_id, meta) == SandboxState.RUNNING and cgroup.exists()
                if thaw:
                    cgroup.freeze(True)
                try:
                    # A template sandbox's own files are its overlay layer: the snapshot
                    # keeps that, over the same template.
                    _copy_tree(_disk.own_files(directory, meta), target / "root")
                finally:
                    if thaw:
                        cgroup.freeze(False)
            snap = {"id": snapshot_id, "sandbox_id": sandbox_id,
                    "created_at": _now().isoformat(), "template": meta["template"]}
            write_meta(target, snap)

        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return self._to_snapshot(snap)

    async def _list_snapshots(self, sandbox_id: str | None) -> list[Snapshot]:
        snaps = [read_meta(self._home.snapshot(s)) for s in self._home.ids("snapshots")]
        return [self._to_snapshot(s) for s in snaps
                if s is not None and sandbox_id in (None, s["sandbox_id"])]

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        target = self._home.snapshot(snapshot_id)
        if read_meta(target) is None:
            raise errors.SnapshotNotFound(f"snapshot {snapshot_id!r} does not exist",
                                          provider=self.name)
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(target, ignore_errors=True))

    def _to_snapshot(self, meta: dict[str, Any]) -> Snapshot:
        return Snapshot(id=meta["id"], provider=self.name, sandbox_id=meta["sandbox_id"],
                        captures=frozenset({"filesystem"}),
                        created_at=dt.datetime.fromisoformat(meta["created_at"]),
                        extra={"template": meta["template"]})

    # ------------------------------------------------------------------- volumes

    def _check_volume_name(self, name: str) -> None:
        if not VOLUME_NAME.match(name):
            raise errors.InvalidInput(
                f"volume name {name!r}: use letters, digits, '.', '_' and '-'",
                provider=self.name)

    async def _create_volume(self, name: str) -> Volume:
        self._check_volume_name(name)
        directory = self._home.volume(name)
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            raise errors.Conflict(f"volume {name!r} already exists", provider=self.name) from None
        (directory / "data").mkdir()
        meta = {"name": name, "created_at": _now().isoformat()}
        write_meta(directory, meta)
        return self._to_volume(meta)

    async def _get_volume(self, name: str) -> Volume:
        self._check_volume_name(name)
        meta = read_meta(self._home.volume(name))
        if meta is None:
            raise errors.VolumeNotFound(f"volume {name!r} does not exist", provider=self.name)
        return self._to_volume(meta)

    async def _list_volumes(self) -> list[Volume]:
        metas = [read_meta(self._home.volume(v)) for v in self._home.ids("volumes")]
        return [self._to_volume(m) for m in metas if m is not None]

    async def _delete_volume(self, name: str) -> None:
        await self._get_volume(name)
        for info in await self._list(metadata={}, state=None):
            meta = read_meta(self._home.sandbox(info.id)) or {"volumes": []}
            if info.state in (SandboxState.RUNNING, SandboxState.PAUSED) and \
                    any(v[0] == name for v in meta["volumes"]):
                raise errors.Conflict(f"volume {name!r} is mounted by sandbox {info.id}",
                                      provider=self.name)
        await anyio.to_thread.run_sync(
            lambda: shutil.rmtree(self._home.volume(name), ignore_errors=True))

    def _to_volume(self, meta: dict[str, Any]) -> Volume:
        return Volume(id=meta["name"], name=meta["name"], provider=self.name,
                      created_at=dt.datetime.fromisoformat(meta["created_at"]),
                      extra={"path": str(self._home.volume(meta["name"]) / "data")})

    # ----------------------------------------------------------------- templates

    async def _build_template(self, spec: TemplateSpec, *, force: bool,
                              on_progress: Callable[[str], None] | None) -> Template:
        try:
            from provider_sdk_docker import DockerProvider
            from provider_sdk_templates import rootfs
        except ImportError as exc:
            raise errors.ConfigError(
                "templates for the local provider are built with Docker Engine: install the "
                f"distribution provider-sdk-templates (missing module: {exc.name})",
                provider=self.name) from exc
        digest = await anyio.to_thread.run_sync(spec.content_hash)
        template_id = _templates.template_id(spec.name, digest)
        meta = read_meta(self._home.template(template_id))
        if meta is not None and not force:
            return self._to_template(meta)
        if meta is not None:
            await anyio.to_thread.run_sync(self._check_unused, template_id)
        docker = DockerProvider()
        try:
            before = {(t.name, t.content_hash) for t in await docker.list_templates()}
            image = await docker.build_template(spec, force=force, on_progress=on_progress)
            try:
                if on_progress is not None:
                    on_progress(f"exporting the filesystem of {image.id} as local template "
                                f"{template_id}")
                meta = await anyio.to_thread.run_sync(
                    lambda: self._export(rootfs.export_image, image.id, spec, digest, force))
            finally:
                if (spec.name, digest) not in before:  # made for this build: not kept
                    with contextlib.suppress(errors.SandboxError):
                        await docker.delete_template(image.id)
        finally:
            await docker.aclose()
        return self._to_template(meta)

    def _export(self, export: Callable[..., Any], image: str, spec: TemplateSpec, digest: str,
                force: bool) -> dict[str, Any]:
        """Export ``image`` beside the templates, then move it into place."""
        name = spec.name
        template_id = _templates.template_id(name, digest)
        templates = self._home.path / "templates"
        staging = templates / f".{template_id}-{secrets.token_hex(4)}"
        staging.mkdir(mode=0o700)
        try:
            config = export(image, staging / "root", provider=self.name)
            if _templates.user_uid(staging / "root", config.user) not in (0, 1000):
                users = [i.line for i in spec.parsed().instructions if i.keyword == "USER"]
                raise errors.TemplateBuildError(
                    f"the image's USER is {config.user!r}, which is not uid 0 or 1000 in its "
                    "/etc/passwd: local sandboxes always run as uid 1000",
                    step=f"USER (line {users[-1]})" if users else "USER", provider=self.name)
            _templates.prepare_root(staging / "root")
            meta = {"id": template_id, "name": name, "content_hash": digest,
                    "created_at": _now().isoformat(), "image": image,
                    "env": dict(config.env), "workdir": config.workdir, "user": config.user,
                    "cpu": spec.cpu, "memory_mb": spec.memory_mb,
                    "start_cmd": spec.start_cmd, "ready_cmd": spec.ready_cmd}
            write_meta(staging, meta)
            target = self._home.template(template_id)
            with self._home.lock(templates):
                if read_meta(target) is not None:
                    if not force:  # another build of the same spec finished first
                        shutil.rmtree(staging)
                        return read_meta(target) or meta
                    self._check_unused(template_id)
                    _remove_tree(target)
                staging.rename(target)
            return meta
        except BaseException:
            _remove_tree(staging)
            raise

    def check_template(self, spec: TemplateSpec) -> list[Problem]:
        """What local templates cannot do with ``spec``, with line numbers: besides the
        declared :attr:`template_support`, a ``USER`` naming a uid other than 0 or 1000
        (a user name is checked against the image's ``/etc/passwd`` at build time)."""
        found = super().check_template(spec)
        for instruction in spec.parsed().instructions:
            if instruction.keyword == "USER" and instruction.args:
                uid = instruction.args[0].partition(":")[0]
                if uid.isdigit() and int(uid) not in (0, 1000):
                    found.append(Problem(line=instruction.line, what="USER", reason=(
                        f"uid {uid}: local sandboxes always run as uid 1000 ('user')")))
        return sorted(found, key=lambda p: (p.line is None, p.line or 0))

    def _check_unused(self, template_id: str) -> None:
        """Conflict while a sandbox or snapshot of this home is made from the template
        (its files are their lower layer)."""
        sandboxes = [s for s in self._home.ids("sandboxes")
                     if (read_meta(self._home.sandbox(s)) or {}).get("template") == template_id]
        snapshots = [s for s in self._home.ids("snapshots")
                     if (read_meta(self._home.snapshot(s)) or {}).get("template") == template_id]
        if sandboxes or snapshots:
            users = [f"sandbox {s}" for s in sandboxes] + [f"snapshot {s}" for s in snapshots]
            raise errors.Conflict(
                f"template {template_id!r} is in use by {', '.join(users)}: kill those "
                "sandboxes and delete those snapshots first", provider=self.name)

    async def _list_templates(self) -> list[Template]:
        metas = [read_meta(self._home.template(t)) for t in self._home.ids("templates")]
        return [self._to_template(m) for m in metas if m is not None]

    async def _delete_template(self, template_id: str) -> None:
        self._template_meta(template_id)  # TemplateNotFound
        templates = self._home.path / "templates"

        def delete() -> None:
            with self._home.lock(templates):
                self._check_unused(template_id)
                _remove_tree(self._home.template(template_id))

        await anyio.to_thread.run_sync(delete)

    def _to_template(self, meta: dict[str, Any]) -> Template:
        return Template(id=meta["id"], name=meta["name"], provider=self.name,
                        content_hash=meta["content_hash"],
                        created_at=dt.datetime.fromisoformat(meta["created_at"]),
                        extra={"path": str(self._home.template(meta["id"]) / "root"),
                               "image": meta["image"], "env": dict(meta["env"]),
                               "workdir": meta["workdir"], "user": meta["user"],
                               "start_cmd": meta.get("start_cmd"),
                               "ready_cmd": meta.get("ready_cmd")})

    # ------------------------------------------------------------------- metrics

    async def _metrics(self, sandbox_id: str) -> Metrics:
        self._running(sandbox_id)
        cgroup = self._cgroup(sandbox_id)
        layer = _disk.own_files(self._home.sandbox(sandbox_id), self._read(sandbox_id))
        disk = await anyio.to_thread.run_sync(_disk_usage, layer)
        memory, limit = cgroup.memory() if cgroup.exists() else (None, None)
        cpu = cgroup.cpu_seconds() if cgroup.exists() else None
        if memory is None:
            launched = _launch.Launched(**self._read(sandbox_id)["launch"])
            memory = sum(_rss(pid) for pid in _launch.namespace_pids(launched))
        return Metrics(cpu_seconds=cpu, memory_bytes=memory, memory_limit_bytes=limit,
                       disk_bytes=disk, timestamp=_now())


def _listen(path: Path) -> socket.socket:
    """A listening socket at ``path`` (bound through /proc when the path is too long)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(str(path)) <= 100:
            sock.bind(str(path))
        else:
            fd = os.open(path.parent, os.O_PATH)
            try:
                sock.bind(f"/proc/self/fd/{fd}/{path.name}")
            finally:
                os.close(fd)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy a root filesystem, keeping owners, modes, links and special files."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["cp", "-a", "--reflink=auto", "--", str(src), str(dst)],
                          capture_output=True, check=False, env={**os.environ, "LC_ALL": "C"})
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        full = "No space left on device" in message or "Disk quota exceeded" in message
        raise OSError(errno.ENOSPC if full else errno.EIO, f"copying {src} failed: {message}")


def _remove_tree(path: Path) -> None:
    """Remove a directory tree, first moving it aside so no reader sees it half gone."""
    if not path.exists():
        return
    aside = path.with_name(f".deleted-{path.name}-{secrets.token_hex(4)}")
    path.rename(aside)
    (aside / "meta.json").unlink(missing_ok=True)
    shutil.rmtree(aside, ignore_errors=True)


def _disk_usage(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _to_file_info(entry: dict[str, Any]) -> FileInfo:
    return FileInfo(path=entry["path"], type=FileType(entry["type"]), size=entry["size"],
                    mode=entry["mode"],
                    modified_at=dt.datetime.fromtimestamp(entry["mtime"], dt.timezone.utc),
                    symlink_target=entry["target"])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write a JSON file readable only by its owner."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
