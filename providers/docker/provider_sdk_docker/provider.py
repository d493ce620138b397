"""``DockerProvider``: each sandbox is a hardened container on a Docker Engine.

Every call goes through the Engine API (the ``docker`` package over the Engine's
socket), never the ``docker`` command. A sandbox is a container named ``psdk-<id>``,
labelled ``psdk.sandbox=<id>``: any process using the same Engine sees it, and nothing
else on the Engine is listed or touched.

Mapping: ``pause`` is ``docker pause`` (the cgroup freezer: memory kept); a snapshot is
``docker commit`` (the container's filesystem, not its memory or volumes); volumes are
Docker named volumes labelled ``psdk.volume``; metadata are labels; metrics come from the
stats API; ``build_template`` is a classic-builder image build with networking off,
cached by the content hash of the Dockerfile and its context.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import inspect
import json
import posixpath
import re
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import docker.types

from provider_sdk import errors
from provider_sdk.buildcontext import write_context
from provider_sdk.capabilities import Capability
from provider_sdk.config import env_setting, int_setting
from provider_sdk.models import (
    ExecResult,
    FileInfo,
    FileType,
    Metrics,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
    Volume,
)
from provider_sdk.provider import (
    Command,
    OutputCallback,
    ProcessEvent,
    ProcessExit,
    ProcessOutput,
    SandboxProvider,
    exit_code_from_status,
)
from provider_sdk.sandbox import EmulatedShell
from provider_sdk_docker import _scripts
from provider_sdk_docker._engine import Engine, ExecStream, Kind
from provider_sdk_docker._tar import ArchiveReader, one_file_archive

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["DEFAULT_TEMPLATE", "DockerProvider"]

DEFAULT_TEMPLATE = "psdk-base:bookworm"
DEFAULT_HOST = "unix:///var/run/docker.sock"

LABEL = "psdk.sandbox"
LABEL_METADATA = "psdk.metadata"
LABEL_META = "psdk.meta."
LABEL_TEMPLATE = "psdk.template"
LABEL_CREATED = "psdk.created"
LABEL_SNAPSHOT = "psdk.snapshot"
LABEL_SNAPSHOT_SOURCE = "psdk.snapshot.source"
LABEL_VOLUME = "psdk.volume"
LABEL_TEMPLATE_HASH = "psdk.template.hash"
LABEL_TEMPLATE_NAME = "psdk.template.name"
SNAPSHOT_REPOSITORY = "psdk-snapshot"
TEMPLATE_PREFIX = "psdk-template-"

#: What a shell needs, and nothing that reaches past the container.
CAPABILITIES_KEPT = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
SPOOL_IN_MEMORY = 8 << 20
VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
EXIT_POLL = 0.005

_STATES = {
    "created": SandboxState.STARTING,
    "restarting": SandboxState.STARTING,
    "running": SandboxState.RUNNING,
    "paused": SandboxState.PAUSED,
    "removing": SandboxState.KILLED,
    "exited": SandboxState.STOPPED,
    "dead": SandboxState.ERROR,
}
# Go's os.FileMode type bits, as the archive endpoint reports them.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_FILE_ERRORS: tuple[tuple[str, type[errors.SandboxError]], ...] = (
    ("No such file", errors.FileNotFound),
    ("Not a directory", errors.NotADirectory),
    ("Is a directory", errors.IsADirectory),
    ("File exists", errors.FileExists),
    ("Directory not empty", errors.Conflict),
    ("Permission denied", errors.PermissionDenied),
    ("Read-only file system", errors.PermissionDenied),
    ("read-only", errors.PermissionDenied),
)


class DockerProvider(SandboxProvider):
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
    """

    name: ClassVar[str] = "docker"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.EXEC_STREAM,
        Capability.EXEC_USER,
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
    })

    def __init__(self, *, base_url: str | None = None, template: str | None = None,
                 pids_limit: int | None = None, memory_mb: int | None = None,
                 network: str | None = None) -> None:
        url = base_url or env_setting("DOCKER_HOST", default=DEFAULT_HOST)
        assert url is not None
        self._engine = Engine(url, provider=self.name)
        self.template = template or env_setting("PSDK_DOCKER_TEMPLATE",
                                                default=DEFAULT_TEMPLATE) or DEFAULT_TEMPLATE
        self.pids_limit = pids_limit or int_setting("PSDK_DOCKER_PIDS_LIMIT", 1024,
                                                     provider=self.name)
        self.memory_mb = memory_mb or int_setting("PSDK_DOCKER_MEMORY_MB", 2048,
                                                   provider=self.name)
        self.network = network or env_setting("PSDK_DOCKER_NETWORK", default="bridge") \
            or "bridge"
        self._workdirs: dict[str, str] = {}
        self._owners: dict[str, tuple[int, int]] = {}

    def __repr__(self) -> str:
        return f"<DockerProvider {self._engine.base_url!r} template={self.template!r}>"

    async def aclose(self) -> None:
        """Close the Engine client's connections."""
        self._engine.close()

    # ---------------------------------------------------------------- lifecycle

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        network_mode = self._network_mode(spec.network)
        if spec.lifecycle.idle_timeout is not None:
            raise errors.InvalidInput(
                "Lifecycle(idle_timeout=...): a Docker container has no idle notion; use "
                "the SandboxManager's idle handling instead", provider=self.name)
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
        created = _now()
        labels = {
            LABEL: sandbox_id,
            LABEL_METADATA: json.dumps(dict(spec.metadata), sort_keys=True),
            LABEL_TEMPLATE: spec.snapshot or image,
            LABEL_CREATED: created.isoformat(),
            **{f"{LABEL_META}{k}": v for k, v in spec.metadata.items()},
        }
        memory = (spec.resources.memory_mb or self.memory_mb) << 20
        host_config: dict[str, Any] = {
            "network_mode": network_mode,
            "privileged": False,
            "cap_drop": ["ALL"],
            "cap_add": list(CAPABILITIES_KEPT),
            "security_opt": ["no-new-privileges"],
            "pids_limit": self.pids_limit,
            "mem_limit": memory,
            "memswap_limit": memory,
            "init": True,
            "mounts": mounts,
        }
        if spec.resources.cpu is not None:
            host_config["nano_cpus"] = int(spec.resources.cpu * 1e9)
        client = await self._engine.call(lambda: self._engine.client)
        container = await self._engine.call(
            client.create_container, image, name=_container(sandbox_id),
            entrypoint=["/bin/sh", "-c", _scripts.KEEPALIVE], command=[], labels=labels,
            environment=dict(spec.env), working_dir=spec.cwd, hostname="sandbox",
            host_config=client.create_host_config(**host_config), kind=kind, what=shown)
        try:
            await self._engine.call(client.start, container["Id"], sandbox_id=sandbox_id)
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                await self._engine.call(client.remove_container, container["Id"], force=True)
            raise
        if spec.cwd is not None:
            self._workdirs[sandbox_id] = spec.cwd
        return SandboxInfo(
            id=sandbox_id, provider=self.name, state=SandboxState.RUNNING,
            template=spec.snapshot or image, metadata=spec.metadata, created_at=created,
            resources=Resources(cpu=spec.resources.cpu, memory_mb=memory >> 20),
            extra={"container_id": container["Id"], "image": image})

    def _network_mode(self, policy: NetworkPolicy) -> str:
        if policy.allow_out or policy.deny_out:
            raise errors.UnsupportedCapability(
                str(Capability.NETWORK_POLICY), provider=self.name,
                detail="allow_out/deny_out: Docker has no per-destination egress rules")
        return self.network if policy.allow_internet else "none"

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        data = await self._inspect(sandbox_id)
        config, host = data["Config"], data["HostConfig"]
        self._workdirs.setdefault(sandbox_id, config.get("WorkingDir") or "/")
        status = data["State"]["Status"]
        return self._to_info(sandbox_id, config.get("Labels") or {}, status, extra={
            "container_id": data["Id"], "image": config.get("Image")},
            resources=Resources(cpu=(host.get("NanoCpus") or 0) / 1e9 or None,
                                memory_mb=(host.get("Memory") or 0) >> 20 or None))

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
        wanted = [LABEL, *(f"{LABEL_META}{k}={v}" for k, v in metadata.items() if "=" not in k)]
        filters: dict[str, Any] = {"label": wanted}
        statuses = [s for s, st in _STATES.items() if st == state] if state else []
        if statuses:
            filters["status"] = statuses
        found = await self._engine.api("containers", all=True, filters=filters)
        return [self._to_info(c["Labels"][LABEL], c["Labels"], c["State"],
                              extra={"container_id": c["Id"], "image": c.get("Image")})
                for c in found]

    async def _kill(self, sandbox_id: str) -> None:
        with contextlib.suppress(errors.SandboxNotFound):
            data = await self._inspect(sandbox_id)
            await self._engine.api("remove_container", _container(sandbox_id), force=True,
                                   v=True, what=sandbox_id, sandbox_id=sandbox_id)
            await self._drop_orphan_image(data["Image"])
        self._workdirs.pop(sandbox_id, None)
        self._owners.pop(sandbox_id, None)

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
            await self._engine.api("pause", _container(sandbox_id), what=sandbox_id,
                                   sandbox_id=sandbox_id)
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
        return await self._info(sandbox_id)

    # --------------------------------------------------------------------- exec

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        token = "x" + secrets.token_hex(8)
        started = time.monotonic()
        env = {**command.env, _scripts.TREE_VAR: token}
        exec_id = await self._exec_create(sandbox_id, list(command.argv), env=env,
                                          cwd=command.cwd, user=command.user,
                                          stdin=command.stdin is not None)
        out, err = bytearray(), bytearray()
        timed_out = False
        stream = await self._engine.attach(exec_id, sandbox_id=sandbox_id)
        try:
            with anyio.move_on_after(command.timeout if command.timeout else float("inf")) \
                    as scope:
                await _pump(stream, command.stdin, out, err, command.on_stdout,
                            command.on_stderr)
            if scope.cancelled_caught:
                timed_out = True
                await self._kill_tree(sandbox_id, token)
                with anyio.move_on_after(5):
                    await _pump(stream, None, out, err, command.on_stdout, command.on_stderr)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.SandboxError):
                await self._kill_tree(sandbox_id, token)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        code = -9 if timed_out else await self._exit_code(exec_id, sandbox_id)
        result = ExecResult(exit_code=code, stdout_bytes=bytes(out), stderr_bytes=bytes(err),
                            duration=time.monotonic() - started)
        if timed_out:
            raise errors.CommandTimeout(
                f"command timed out after {command.timeout:g} s: {command.argv[0]!r}",
                result=result, provider=self.name, sandbox_id=sandbox_id)
        return result

    async def _exec_create(self, sandbox_id: str, argv: builtins.list[str], *,
                           env: Mapping[str, str] | None = None, cwd: str | None = None,
                           user: str | None = None, stdin: bool = False) -> str:
        if cwd is not None and not cwd.startswith("/"):
            cwd = await self._resolve(sandbox_id, cwd)
        created = await self._engine.api(
            "exec_create", _container(sandbox_id), argv, stdin=stdin,
            environment=dict(env or {}), workdir=cwd, user=user or "", what=sandbox_id,
            sandbox_id=sandbox_id)
        return str(created["Id"])

    async def _exit_code(self, exec_id: str, sandbox_id: str) -> int:
        """The exit status of a finished exec; 128+N (signal N) as -N."""
        delay = EXIT_POLL
        while True:
            state = await self._engine.api("exec_inspect", exec_id, kind="exec",
                                           sandbox_id=sandbox_id)
            if not state.get("Running") and state.get("ExitCode") is not None:
                return exit_code_from_status(int(state["ExitCode"]))
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.2)

    async def _run(self, sandbox_id: str, script: str, *args: str, user: str | None = None,
                   stdin: bytes | None = None) -> ExecResult:
        """Run one of the provider's own shell snippets."""
        return await self._exec(sandbox_id, Command(
            argv=("/bin/sh", "-c", script, "psdk", *args), user=user, stdin=stdin))

    async def _kill_tree(self, sandbox_id: str, token: str) -> None:
        half = len(token) // 2
        await self._run(sandbox_id, _scripts.KILL_TREE, token[:half], token[half:], user="0")

    # -------------------------------------------------------- background processes

    async def _start(self, sandbox_id: str, command: Command) -> int:
        exec_id = await self._exec_create(
            sandbox_id, ["/bin/sh", "-c", _scripts.SUPERVISE, "psdk", *command.argv],
            env=command.env, cwd=command.cwd, user=command.user)
        stream = await self._engine.attach(exec_id, sandbox_id=sandbox_id)
        try:
            line = await stream.line()
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        if not line.strip().isdigit():
            raise errors.SandboxError(
                f"could not start {command.argv[0]!r}: the supervisor needs /bin/sh, mkfifo "
                f"and a writable {_scripts.PROC_DIR}", provider=self.name,
                sandbox_id=sandbox_id)
        return int(line)

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        await self._check_process(sandbox_id, pid)
        exec_id = await self._exec_create(
            sandbox_id, ["/bin/sh", "-c", _scripts.FOLLOW, "psdk", str(pid)])
        stream = await self._engine.attach(exec_id, sandbox_id=sandbox_id)
        try:
            async for name, data in stream.frames():
                yield ProcessOutput(name, data)
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        yield ProcessExit(await self._exit_code(exec_id, sandbox_id))

    async def _check_process(self, sandbox_id: str, pid: int) -> None:
        if await self._path_stat(sandbox_id, f"{_scripts.PROC_DIR}/{pid}/in") is None:
            raise errors.ProcessNotFound(f"no process {pid} started by this SDK",
                                         provider=self.name, sandbox_id=sandbox_id)

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._check_process(sandbox_id, pid)
        result = await self._run(sandbox_id, _scripts.SEND_STDIN, str(pid), stdin=data)
        if not result.ok:
            raise errors.ProcessNotFound(f"cannot write to process {pid}: "
                                         f"{result.stderr.strip()}", provider=self.name,
                                         sandbox_id=sandbox_id)

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._check_process(sandbox_id, pid)
        await self._run(sandbox_id, 'kill -USR1 "$1" 2>/dev/null; exit 0', str(pid))

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        await self._check_process(sandbox_id, pid)
        await self._kill_tree(sandbox_id, f"p{pid}")

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)

    # -------------------------------------------------------------------- files

    async def _resolve(self, sandbox_id: str, path: str) -> str:
        if not path.startswith("/"):
            workdir = self._workdirs.get(sandbox_id)
            if workdir is None:
                await self._info(sandbox_id)
                workdir = self._workdirs[sandbox_id]
            path = posixpath.join(workdir, path)
        return posixpath.normpath("/" + path.lstrip("/"))

    async def _path_stat(self, sandbox_id: str, path: str) -> dict[str, Any] | None:
        """The Engine's stat of ``path`` (the final symlink not followed), or ``None``."""
        def head() -> dict[str, Any] | None:
            client = self._engine.client
            url = client._url("/containers/{0}/archive", _container(sandbox_id))
            response = client.head(url, params={"path": path})
            if response.status_code == 404:  # no such path, or no such container
                raise _PathMissing
            client._raise_for_status(response)
            header = response.headers.get("X-Docker-Container-Path-Stat")
            if not header:
                return None
            stat: dict[str, Any] = json.loads(_b64(header))
            return stat

        try:
            return await self._engine.call(head, what=sandbox_id, sandbox_id=sandbox_id)
        except _PathMissing:
            await self._inspect(sandbox_id)  # the sandbox is there: the path is not
            return None

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        target = await self._resolve(sandbox_id, path)
        for _ in range(40):
            stat = await self._path_stat(sandbox_id, target)
            if stat is None:
                raise self._file_error(f"{path}: No such file or directory", sandbox_id)
            mode = int(stat.get("mode", 0))
            if mode & _MODE_DIR:
                raise errors.IsADirectory(f"{path} is a directory", provider=self.name,
                                          sandbox_id=sandbox_id)
            if not mode & _MODE_SYMLINK:
                break
            target = posixpath.normpath(posixpath.join(posixpath.dirname(target),
                                                       stat.get("linkTarget", "")))
        else:
            raise errors.InvalidInput(f"{path}: too many levels of symbolic links",
                                      provider=self.name, sandbox_id=sandbox_id)
        chunks, _ = await self._engine.api("get_archive", _container(sandbox_id), target,
                                           chunk_size=1 << 20, what=sandbox_id,
                                           sandbox_id=sandbox_id)
        reader = await self._engine.call(ArchiveReader, chunks)
        try:
            while data := await self._engine.call(reader.read):
                yield data
        finally:
            with anyio.CancelScope(shield=True):
                await self._engine.call(reader.close)

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        target = await self._resolve(sandbox_id, path)
        parent, name = posixpath.split(target)
        if not name:
            raise errors.IsADirectory(f"{path} is a directory", provider=self.name,
                                      sandbox_id=sandbox_id)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
            size = 0
            async for chunk in chunks:
                size += len(chunk)
                if size > SPOOL_IN_MEMORY:
                    await anyio.to_thread.run_sync(spool.write, chunk)
                else:
                    spool.write(chunk)
            uid, gid = await self._owner(sandbox_id)
            for attempt in range(2):
                try:
                    await self._put(sandbox_id, parent,
                                    lambda: one_file_archive(name, spool, size, uid=uid, gid=gid))
                    return
                except errors.FileNotFound:
                    if attempt:
                        raise
                    await self._mkdir(sandbox_id, parent, parents=True, exist_ok=True)

    async def _put(self, sandbox_id: str, directory: str,
                   archive: Callable[[], Iterator[bytes]]) -> None:
        def put() -> None:
            client = self._engine.client
            url = client._url("/containers/{0}/archive", _container(sandbox_id))
            response = client.put(url, params={"path": directory}, data=archive())
            if response.status_code == 404 and "no such container" not in response.text.lower():
                raise _PathMissing
            if response.status_code in (400, 403, 500):
                raise _PathRefused(response.text)
            client._raise_for_status(response)

        try:
            await self._engine.call(put, what=sandbox_id, sandbox_id=sandbox_id)
        except _PathMissing:
            raise errors.FileNotFound(f"{directory}: No such file or directory",
                                      provider=self.name, sandbox_id=sandbox_id) from None
        except _PathRefused as exc:
            raise self._file_error(f"{directory}: {exc}", sandbox_id) from None

    async def _owner(self, sandbox_id: str) -> tuple[int, int]:
        """The uid and gid that files written through the API get: the sandbox user's."""
        if sandbox_id not in self._owners:
            result = await self._run(sandbox_id, 'printf "%s %s" "$(id -u)" "$(id -g)"')
            uid, _, gid = result.stdout.partition(" ")
            self._owners[sandbox_id] = (int(uid), int(gid)) if result.ok else (0, 0)
        return self._owners[sandbox_id]

    async def _files_op(self, sandbox_id: str, script: str, *args: str) -> ExecResult:
        result = await self._run(sandbox_id, script, *args)
        if not result.ok:
            raise self._file_error(result.stderr.strip() or f"exit {result.exit_code}",
                                   sandbox_id)
        return result

    def _file_error(self, message: str, sandbox_id: str) -> errors.SandboxError:
        for text, cls in _FILE_ERRORS:
            if text in message:
                return cls(message, provider=self.name, sandbox_id=sandbox_id)
        return errors.SandboxError(message, provider=self.name, sandbox_id=sandbox_id)

    async def _list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        directory = await self._resolve(sandbox_id, path)
        result = await self._files_op(sandbox_id, _scripts.LIST_DIR, directory)
        fields = result.stdout_bytes.split(b"\0")
        entries = []
        for head, link in zip(fields[0::2], fields[1::2], strict=False):
            kind, size, mode, mtime, name = head.split(b"/", 4)
            entries.append(FileInfo(
                path=posixpath.join(directory, name.decode("utf-8", "surrogateescape")),
                type=_FIND_TYPES.get(kind, FileType.OTHER), size=int(size),
                mode=int(mode, 8),
                modified_at=dt.datetime.fromtimestamp(float(mtime), dt.timezone.utc),
                symlink_target=link.decode("utf-8", "surrogateescape") or None))
        return sorted(entries, key=lambda e: e.path)

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        target = await self._resolve(sandbox_id, path)
        stat = await self._path_stat(sandbox_id, target)
        if stat is None:
            raise errors.FileNotFound(f"{path}: No such file or directory",
                                      provider=self.name, sandbox_id=sandbox_id)
        mode = int(stat.get("mode", 0))
        kind = FileType.DIRECTORY if mode & _MODE_DIR else \
            FileType.SYMLINK if mode & _MODE_SYMLINK else \
            FileType.FILE if not mode & 0xFFFF_0000 else FileType.OTHER
        return FileInfo(path=target, type=kind, size=int(stat.get("size", 0)),
                        mode=mode & 0o7777, modified_at=_parse_time(stat.get("mtime")),
                        symlink_target=stat.get("linkTarget") or None
                        if kind == FileType.SYMLINK else None)

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        target = await self._resolve(sandbox_id, path)
        await self._files_op(sandbox_id, _scripts.MKDIR, target, _flag(parents),
                             _flag(exist_ok))

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        target = await self._resolve(sandbox_id, path)
        await self._files_op(sandbox_id, _scripts.REMOVE, target, _flag(recursive))

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._files_op(sandbox_id, _scripts.RENAME, await self._resolve(sandbox_id, src),
                             await self._resolve(sandbox_id, dst))

    # ---------------------------------------------------------------- snapshots

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        await self._inspect(sandbox_id)
        snapshot_id = secrets.token_hex(6)
        created = _now()
        labels = {LABEL_SNAPSHOT: snapshot_id, LABEL_SNAPSHOT_SOURCE: sandbox_id,
                  LABEL_CREATED: created.isoformat()}
        image = await self._engine.api(
            "commit", _container(sandbox_id), repository=SNAPSHOT_REPOSITORY, tag=snapshot_id,
            conf={"Labels": labels}, pause=True, what=sandbox_id, sandbox_id=sandbox_id)
        return Snapshot(id=snapshot_id, provider=self.name, sandbox_id=sandbox_id,
                        captures={"filesystem"}, created_at=created,
                        extra={"image": f"{SNAPSHOT_REPOSITORY}:{snapshot_id}",
                               "image_id": image["Id"]})

    async def _list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        wanted = [LABEL_SNAPSHOT]
        if sandbox_id is not None:
            wanted.append(f"{LABEL_SNAPSHOT_SOURCE}={sandbox_id}")
        images = await self._engine.api("images", filters={"label": wanted})
        found = []
        for image in images:
            labels = image.get("Labels") or {}
            snapshot_id = labels.get(LABEL_SNAPSHOT, "")
            if f"{SNAPSHOT_REPOSITORY}:{snapshot_id}" not in (image.get("RepoTags") or ()):
                continue  # an image built on a snapshot inherits its labels
            created = labels.get(LABEL_CREATED)
            found.append(Snapshot(
                id=snapshot_id, provider=self.name,
                sandbox_id=labels.get(LABEL_SNAPSHOT_SOURCE), captures={"filesystem"},
                created_at=dt.datetime.fromisoformat(created) if created else None,
                extra={"image": f"{SNAPSHOT_REPOSITORY}:{snapshot_id}",
                       "image_id": image["Id"]}))
        return sorted(found, key=lambda s: (s.created_at or _now(), s.id))

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        image = f"{SNAPSHOT_REPOSITORY}:{snapshot_id}"
        await self._engine.api("inspect_image", image, kind="snapshot", what=snapshot_id)
        # force: sandboxes created from it keep their layers; only the snapshot goes.
        await self._engine.api("remove_image", image, force=True, kind="snapshot",
                               what=snapshot_id)

    # ------------------------------------------------------------------ volumes

    async def _create_volume(self, name: str) -> Volume:
        if not VOLUME_NAME.match(name):
            raise errors.InvalidInput(f"volume name {name!r}: use letters, digits, '_', '.', "
                                      "'-', starting with a letter or digit",
                                      provider=self.name)
        with contextlib.suppress(errors.VolumeNotFound):
            await self._engine.api("inspect_volume", name, kind="volume", what=name)
            raise errors.Conflict(f"a volume named {name!r} exists", provider=self.name)
        data = await self._engine.api(
            "create_volume", name, labels={LABEL_VOLUME: "1", LABEL_CREATED: _now().isoformat()},
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
        cpu = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        memory = stats.get("memory_stats") or {}
        return Metrics(
            cpu_seconds=cpu / 1e9 if cpu is not None else None,
            memory_bytes=memory.get("usage"), memory_limit_bytes=memory.get("limit"),
            disk_bytes=sizes[0].get("SizeRw") if sizes else None, timestamp=_now())

    # ---------------------------------------------------------------- templates

    async def _build_template(self, spec: TemplateSpec, *, force: bool,
                              on_progress: Callable[[str], None] | None) -> Template:
        digest = await anyio.to_thread.run_sync(spec.content_hash)
        tag = f"{TEMPLATE_PREFIX}{spec.name}:{digest[:12]}"
        if not force:
            with contextlib.suppress(errors.TemplateNotFound):
                return self._to_template(await self._engine.api(
                    "inspect_image", tag, kind="image", what=tag))
        await self._check_base_images(spec)
        with tempfile.TemporaryFile() as context:
            await anyio.to_thread.run_sync(write_context, spec, context)
            context.seek(0)
            lines = await self._engine.api(
                "build", fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
                network_mode="none", decode=True, nocache=force, pull=False,
                labels={LABEL_TEMPLATE_HASH: digest, LABEL_TEMPLATE_NAME: spec.name},
                kind="image", what=tag)
            log: builtins.list[str] = []
            step = "build"
            while (item := await self._engine.call(next, lines, None)) is not None:
                text = str(item.get("stream") or item.get("status") or "").rstrip()
                if text:
                    log.append(text)
                    if text.startswith("Step "):
                        step = text
                    if on_progress is not None:
                        on_progress(text)
                if "error" in item:
                    raise errors.TemplateBuildError(
                        f"building {spec.name!r} failed at {step}: {item['error'].strip()}",
                        step=step, log_tail="\n".join([*log[-20:], item["error"].strip()]),
                        provider=self.name)
        return self._to_template(await self._engine.api("inspect_image", tag, kind="image",
                                                        what=tag))

    async def _check_base_images(self, spec: TemplateSpec) -> None:
        """Every ``FROM`` image must be in the Engine: nothing is pulled, so a missing one
        fails here, naming its line, before the build starts."""
        for instruction, image in spec.parsed().base_images():
            if image.lower() == "scratch":
                continue
            try:
                await self._engine.api("inspect_image", image, kind="image", what=image)
            except errors.TemplateNotFound:
                raise errors.TemplateBuildError(
                    f"the base image {image!r} is not in the Docker Engine; nothing is "
                    "pulled: build, load or pull it first",
                    step=f"FROM (line {instruction.line})", provider=self.name) from None

    async def _list_templates(self) -> builtins.list[Template]:
        images = await self._engine.api("images", filters={"label": LABEL_TEMPLATE_HASH})
        found = []
        for image in images:
            for tag in image.get("RepoTags") or ():
                if tag.startswith(TEMPLATE_PREFIX):
                    found.append(self._to_template({**image, "RepoTags": [tag],
                                                    "Config": {"Labels": image["Labels"]}}))
        return sorted(found, key=lambda t: t.id)

    async def _delete_template(self, template_id: str) -> None:
        try:
            data = await self._engine.api("inspect_image", template_id, kind="image",
                                          what=template_id)
        except errors.TemplateNotFound:
            raise errors.TemplateNotFound(f"no template {template_id!r}",
                                          provider=self.name) from None
        if LABEL_TEMPLATE_HASH not in ((data.get("Config") or {}).get("Labels") or {}):
            raise errors.TemplateNotFound(f"no template {template_id!r} built by this SDK",
                                          provider=self.name)
        await self._engine.api("remove_image", template_id, force=True, kind="image",
                               what=template_id)

    def _to_template(self, data: Mapping[str, Any]) -> Template:
        labels = (data.get("Config") or {}).get("Labels") or {}
        tags = [t for t in data.get("RepoTags") or () if t.startswith(TEMPLATE_PREFIX)]
        created = data.get("Created")
        return Template(
            id=tags[0] if tags else data["Id"], name=labels.get(LABEL_TEMPLATE_NAME, ""),
            provider=self.name, content_hash=labels.get(LABEL_TEMPLATE_HASH),
            created_at=_parse_time(created) if isinstance(created, str) else
            dt.datetime.fromtimestamp(created, dt.timezone.utc) if created else None,
            extra={"image_id": data["Id"]})


class _PathMissing(Exception):
    pass


class _PathRefused(Exception):
    pass


_FIND_TYPES = {b"f": FileType.FILE, b"d": FileType.DIRECTORY, b"l": FileType.SYMLINK}


async def _pump(stream: ExecStream, stdin: bytes | None, out: bytearray, err: bytearray,
                on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> None:
    """Feed ``stdin`` (then end of file) while collecting output until the exec ends."""
    async def feed(data: bytes) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError,
                                 OSError):
            await stream.send(data)
            await stream.close_stdin()

    async with anyio.create_task_group() as tg:
        if stdin is not None:
            tg.start_soon(feed, stdin)
        async for name, data in stream.frames():
            (out if name == "stdout" else err).extend(data)
            callback = on_stdout if name == "stdout" else on_stderr
            if callback is not None:
                done = callback(data)
                if inspect.isawaitable(done):
                    await done


def _container(sandbox_id: str) -> str:
    return f"psdk-{sandbox_id}"


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _b64(text: str) -> str:
    import base64

    return base64.b64decode(text + "=" * (-len(text) % 4)).decode()


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
