"""``DaytonaProvider``: sandboxes on Daytona, through the ``daytona`` SDK's async client.

Mapping, in short (the Daytona page of the docs has the whole table):

- ``pause`` is Daytona's stop: files are kept, processes and memory are not, so
  ``pause.memory`` is not declared. ``resume`` is Daytona's start; both are retried through
  502/503 for ``unavailable_window`` seconds, and ``resume`` returns once the toolbox
  answers. Archive and recover are the extensions :meth:`DaytonaProvider.ex_archive` and
  :meth:`DaytonaProvider.ex_recover`.
- The neutral idle policy is explicit: without ``Lifecycle(idle_timeout=...)`` a sandbox
  never stops by itself (auto-stop 0, auto-delete off), instead of Daytona's silent
  15-minute auto-stop. ``Lifecycle(idle_timeout=T, on_idle="pause")`` is auto-stop after
  ``ceil(T / 60)`` minutes (``lifecycle.auto_pause``); ``on_idle="kill"`` adds immediate
  auto-delete. Daytona counts requests as activity, not processes inside the sandbox.
- Metadata is Daytona's labels, minus the SDK's ``code-toolbox-language`` label and this
  provider's ``provider-sdk.cwd`` (where ``SandboxSpec.cwd`` is kept).
- Commands run through a wrapper (see ``_exec``) so that stdout and stderr stay apart and
  byte-exact, stdin works, a timeout keeps the partial output, and cancelling kills the
  command's process tree.
- A background process is a Daytona session of its own running one asynchronous
  command (see ``_processes``); its pid is the real pid inside the sandbox.
- The persistent shell is a Daytona session: every command is sourced into one
  long-lived shell, so ``cd``, ``export``, plain variables and functions carry over;
  ``exit N`` in a command ends that command with ``N``, not the session.
- A snapshot's neutral id is its Daytona snapshot name, which is what Daytona creates
  sandboxes from; ``templates.build`` makes Daytona snapshots too, from
  ``Image.from_dockerfile``. Snapshots taken from a sandbox are the neutral snapshots,
  the others are templates. Volumes are mounted by name (resolved to Daytona's id); Daytona has no
  read-only mounts, so ``VolumeMount(read_only=True)`` is refused.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import posixpath
import re
import secrets
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import aiohttp
import anyio
from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    DaytonaConfig,
    DaytonaConflictError,
    DaytonaError,
    DaytonaTimeoutError,
    Image,
    ListSandboxesQuery,
    Resources,
    SessionExecuteRequest,
)
from daytona import VolumeMount as DaytonaVolumeMount

from provider_sdk import errors, scripts
from provider_sdk.capabilities import Capability
from provider_sdk.config import Secret, env_setting
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import (
    ExecResult,
    FileInfo,
    FileType,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
    Volume,
)
from provider_sdk.models import Resources as NeutralResources
from provider_sdk.provider import (
    Command,
    ProcessEvent,
    ProcessExit,
    ProcessOutput,
    SandboxProvider,
    exit_code_from_status,
)
from provider_sdk.sandbox import Shell
from provider_sdk_daytona import _convert as convert
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona import _processes as procs
from provider_sdk_daytona._errors import code_of, is_transient, neutral, status_of
from provider_sdk_daytona._shell import DaytonaShell

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox

__all__ = ["DaytonaProvider", "DaytonaShell"]

T = TypeVar("T")

LANGUAGE_LABEL = "code-toolbox-language"
CWD_LABEL = "provider-sdk.cwd"
CREATE_LABEL = "provider-sdk.create"
"""A token per create: a create retried after a 502 first looks for what it made."""
RESERVED_LABELS = frozenset({LANGUAGE_LABEL, CWD_LABEL, CREATE_LABEL})
EXTENSIONS = ("daytona.image", "daytona.name", "daytona.public",
              "daytona.auto_archive_interval")
_SMALL_WRITE = 4 << 20
_SMALL_READ = 4096
"""Most the provider reads of its own small files (pids, tokens) in a sandbox."""
_STREAMS: tuple[Literal["stdout", "stderr"], ...] = ("stdout", "stderr")

_STATES = {
    "started": SandboxState.RUNNING, "snapshotting": SandboxState.RUNNING,
    "forking": SandboxState.RUNNING, "resizing": SandboxState.RUNNING,
    "creating": SandboxState.STARTING, "starting": SandboxState.STARTING,
    "restoring": SandboxState.STARTING, "resuming": SandboxState.STARTING,
    "pending_build": SandboxState.STARTING, "building_snapshot": SandboxState.STARTING,
    "pulling_snapshot": SandboxState.STARTING,
    "stopping": SandboxState.PAUSING, "archiving": SandboxState.PAUSING,
    "pausing": SandboxState.PAUSING,
    "stopped": SandboxState.PAUSED, "archived": SandboxState.PAUSED,
    "paused": SandboxState.PAUSED,
    "destroying": SandboxState.KILLED, "destroyed": SandboxState.KILLED,
    "error": SandboxState.ERROR, "build_failed": SandboxState.ERROR,
}


def _state_name(sandbox: AsyncSandbox) -> str:
    state = sandbox.state
    return str(getattr(state, "value", state) or "unknown")


class DaytonaProvider(SandboxProvider):
    """Sandboxes on Daytona (or anything that speaks its API, like ``psdk emulate daytona``).

    Args:
        api_key: the API key; default the ``DAYTONA_API_KEY`` setting (required).
        api_url: the API's URL, ending in ``/api``; default ``DAYTONA_API_URL``, else the
            SDK's default (Daytona's cloud).
        target: the region; default ``DAYTONA_TARGET``, else the organisation's default.
        create_timeout: seconds a create, start or stop may take (Daytona's SDK default of
            60 is too short for large images).
        unavailable_window: seconds during which 502/503/504 answers around state changes,
            and from a toolbox that is not reachable yet, are retried.
        request_timeout: seconds one toolbox call may go unanswered (a command's own
            ``timeout`` is added for exec) before it raises ``OperationTimeout``.
    """

    name: ClassVar[str] = "daytona"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.PROCESS_BACKGROUND,
        Capability.SHELL_PERSISTENT,
        Capability.PAUSE,
        Capability.LIFECYCLE_AUTO_PAUSE,
        Capability.SNAPSHOT_FILESYSTEM,
        Capability.VOLUMES,
        Capability.VOLUMES_SHARED,
        Capability.NETWORK_POLICY,
        Capability.LIST_METADATA,
        Capability.TEMPLATES_BUILD,
    })
    template_support: ClassVar[TemplateSupport] = TemplateSupport(
        context=False,
        options={"start_cmd": "Daytona snapshots have no start command; start it in the "
                              "sandbox instead",
                 "ready_cmd": "Daytona snapshots have no readiness command"})

    def __init__(self, *, api_key: str | None = None, api_url: str | None = None,
                 target: str | None = None, create_timeout: float = 300.0,
                 unavailable_window: float = 30.0, request_timeout: float = 60.0) -> None:
        key = api_key or env_setting("DAYTONA_API_KEY", required=True, secret=True,
                                     provider=self.name)
        assert key is not None
        self._api_key = key if isinstance(key, Secret) else Secret(key)
        self._api_url = api_url or env_setting("DAYTONA_API_URL")
        if self._api_url is not None and not self._api_url.startswith(("http://", "https://")):
            raise errors.ConfigError(
                f"DAYTONA_API_URL must be an http(s) URL ending in /api, got {self._api_url!r}",
                provider=self.name)
        self._target = target or env_setting("DAYTONA_TARGET")
        for option, value in (("create_timeout", create_timeout),
                              ("unavailable_window", unavailable_window),
                              ("request_timeout", request_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not 0 < value <= wrapper.MAX_SECONDS:
                raise errors.ConfigError(f"{option} must be a positive number of seconds",
                                         provider=self.name)
        self._request_timeout = float(request_timeout)
        self._create_timeout = float(create_timeout)
        self._window = float(unavailable_window)
        self._daytona: AsyncDaytona | None = None
        self._sandboxes: dict[str, AsyncSandbox] = {}
        self._workdirs: dict[str, str] = {}
        self._litter: dict[str, wrapper.Litter] = {}
        """Files that finished commands left in each sandbox, removed in batches."""
        self._processes: dict[tuple[str, int], tuple[str, str]] = {}
        """(sandbox, pid) -> (token, session command id) of background processes."""

    def __repr__(self) -> str:
        return f"<DaytonaProvider api_url={self._api_url!r} target={self._target!r}>"

    @property
    def client(self) -> AsyncDaytona:
        """The SDK's async client (made on first use), for what has no neutral call."""
        if self._daytona is None:
            try:
                self._daytona = AsyncDaytona(DaytonaConfig(
                    api_key=self._api_key.reveal(), api_url=self._api_url, target=self._target))
            except DaytonaError as exc:
                raise errors.ConfigError(f"cannot configure the Daytona client: {exc}",
                                         provider=self.name) from exc
        return self._daytona

    async def aclose(self) -> None:
        litter, self._litter = self._litter, {}
        with anyio.move_on_after(5, shield=True):
            async with anyio.create_task_group() as tg:
                for sandbox_id, files in litter.items():
                    if files.paths:
                        tg.start_soon(self._remove_quietly, sandbox_id, files.paths)
        client, self._daytona = self._daytona, None
        self._sandboxes.clear()
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]

    # ---------------------------------------------------------------- plumbing

    @contextlib.contextmanager
    def _translate(self, sandbox_id: str | None = None,
                   not_found: type[errors.NotFound] = errors.SandboxNotFound) -> Iterator[None]:
        """The one place SDK errors become neutral ones."""
        try:
            yield
        except DaytonaError as exc:
            raise neutral(exc, sandbox_id=sandbox_id, not_found=not_found) from exc

    async def _retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``, retrying 502/503/504 and dropped connections for the window."""
        deadline = anyio.current_time() + self._window
        delay = 0.1
        while True:
            try:
                return await op()
            except DaytonaError as exc:
                if not is_transient(exc) or anyio.current_time() + delay > deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _sandbox(self, sandbox_id: str) -> AsyncSandbox:
        """The SDK's handle (cached: it carries the toolbox URL)."""
        found = self._sandboxes.get(sandbox_id)
        if found is None:
            found = await self._fetch(sandbox_id)
        return found

    async def _fetch(self, sandbox_id: str) -> AsyncSandbox:
        with self._translate(sandbox_id):
            found = await self._retrying(lambda: self.client.get(sandbox_id))
        self._sandboxes[sandbox_id] = found
        return found

    async def _toolbox_error(self, sandbox_id: str, exc: DaytonaError) -> errors.SandboxError:
        """Why a toolbox call failed: the sandbox gone or not started, else ``exc``."""
        code = code_of(exc)
        if code in ("FILE_NOT_FOUND", "FILE_ACCESS_DENIED") or status_of(exc) == 403:
            return neutral(exc, sandbox_id=sandbox_id, not_found=errors.FileNotFound)
        self._sandboxes.pop(sandbox_id, None)
        try:
            fresh = await self._fetch(sandbox_id)
        except errors.SandboxNotFound as gone:
            return gone
        state = _STATES.get(_state_name(fresh), SandboxState.UNKNOWN)
        if state != SandboxState.RUNNING:
            hint = " (resume it first)" if state == SandboxState.PAUSED else ""
            return errors.SandboxNotRunning(f"the sandbox is {state}{hint}", state=str(state),
                                            provider=self.name, sandbox_id=sandbox_id)
        return neutral(exc, sandbox_id=sandbox_id, not_found=errors.FileNotFound)

    async def _toolbox(self, sandbox_id: str, call: Callable[[AsyncSandbox], Awaitable[T]], *,
                       wait: float | None = 0.0) -> T:
        """Run a toolbox call; translate its failure once. It may take ``wait`` seconds
        (0: ``request_timeout``; ``None``: as long as it runs), then ``OperationTimeout``."""
        sandbox = await self._sandbox(sandbox_id)
        try:
            with self._deadline(sandbox_id, self._request_timeout if wait == 0 else wait):
                return await call(sandbox)
        except DaytonaError as exc:
            raise await self._toolbox_error(sandbox_id, exc) from exc

    @contextlib.contextmanager
    def _deadline(self, sandbox_id: str, seconds: float | None) -> Iterator[None]:
        """Bound a call in time: a toolbox that accepts a request and never answers
        raises ``OperationTimeout`` instead of hanging the caller."""
        if seconds is None:
            yield
            return
        try:
            with anyio.fail_after(seconds):
                yield
        except TimeoutError:
            raise errors.OperationTimeout(f"the sandbox did not answer within {seconds:g} s",
                                          provider=self.name, sandbox_id=sandbox_id) from None

    async def _probe(self, sandbox: AsyncSandbox) -> None:
        """Wait until the toolbox answers (502/503/504 retried), learning the workdir."""
        with self._translate(sandbox.id):
            workdir = await self._retrying(sandbox.get_work_dir)
        self._workdirs[sandbox.id] = workdir or "/"

    async def _cwd(self, sandbox_id: str) -> str:
        """Where commands run and relative paths resolve: the spec's cwd, else Daytona's
        working directory."""
        sandbox = await self._sandbox(sandbox_id)
        spec_cwd = (sandbox.labels or {}).get(CWD_LABEL)
        if spec_cwd:
            return spec_cwd
        if sandbox_id not in self._workdirs:
            await self._toolbox(sandbox_id, self._probe)
        return self._workdirs[sandbox_id]

    async def _path(self, sandbox_id: str, path: str) -> str:
        """An absolute, normalized path inside the sandbox."""
        if not path.startswith("/"):
            path = posixpath.join(await self._cwd(sandbox_id), path)
        normal = posixpath.normpath(path)
        return "/" + normal.lstrip("/")  # normpath keeps a leading "//"

    def _to_info(self, sandbox: AsyncSandbox) -> SandboxInfo:
        labels = dict(sandbox.labels or {})
        state = _state_name(sandbox)
        return SandboxInfo(
            id=sandbox.id, provider=self.name,
            state=_STATES.get(state, SandboxState.UNKNOWN), template=sandbox.snapshot,
            metadata={k: v for k, v in labels.items() if k not in RESERVED_LABELS},
            created_at=convert.timestamp(sandbox.created_at), expires_at=None,
            resources=NeutralResources(cpu=sandbox.cpu or None,
                                       memory_mb=(sandbox.memory or 0) * 1024 or None,
                                       disk_mb=(sandbox.disk or 0) * 1024 or None),
            extra={"daytona_state": state, "name": sandbox.name, "target": sandbox.target,
                   "auto_stop_interval": sandbox.auto_stop_interval,
                   "auto_archive_interval": sandbox.auto_archive_interval,
                   "auto_delete_interval": sandbox.auto_delete_interval,
                   "cwd": labels.get(CWD_LABEL)},
        )

    # ---------------------------------------------------------------- lifecycle

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        params = await self._params(spec)
        not_found: type[errors.NotFound] = (
            errors.SnapshotNotFound if spec.snapshot is not None else
            errors.TemplateNotFound if spec.template is not None else errors.SandboxNotFound)
        token = secrets.token_hex(8)
        params.labels = {**(params.labels or {}), CREATE_LABEL: token}

        tries = 0

        async def create_once() -> AsyncSandbox:
            nonlocal tries
            tries += 1
            if tries > 1:
                # The last try's 502 may have come after Daytona made the sandbox: never
                # make a second one.
                query = ListSandboxesQuery(labels={CREATE_LABEL: token})
                made = [found async for found in self.client.list(query)]
                if made:
                    await made[0].wait_for_sandbox_start(timeout=self._create_timeout)
                    return made[0]
            return await self.client.create(params, timeout=self._create_timeout)

        with self._translate(not_found=not_found):
            sandbox = await self._retrying(create_once)
        self._sandboxes[sandbox.id] = sandbox
        try:
            await self._probe(sandbox)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._kill(sandbox.id)
            raise
        return self._to_info(sandbox)

    async def _params(self, spec: SandboxSpec) -> (
            CreateSandboxFromSnapshotParams | CreateSandboxFromImageParams):
        unknown = sorted(k for k in spec.extensions
                         if k.startswith("daytona.") and k not in EXTENSIONS)
        if unknown:
            raise errors.InvalidInput(f"unknown extensions {unknown}; Daytona's are "
                                      f"{', '.join(EXTENSIONS)}", provider=self.name)
        labels = dict(spec.metadata)
        if spec.cwd is not None:
            labels[CWD_LABEL] = spec.cwd
        idle = spec.lifecycle.idle_timeout
        kill_when_idle = idle is not None and spec.lifecycle.on_idle == "kill"
        common: dict[str, Any] = {
            "env_vars": dict(spec.env), "labels": labels,
            "volumes": [await self._mount(m) for m in spec.volumes],
            # Never Daytona's surprise 15-minute auto-stop: off unless asked for. Idle
            # "pause" is auto-stop; idle "kill" is auto-stop, then deletion at once.
            "auto_stop_interval": math.ceil(idle / 60) if idle is not None else 0,
            "auto_delete_interval": 0 if kill_when_idle else -1,
            **convert.network_fields(spec.network),
        }
        ext = spec.extensions
        if "daytona.name" in ext:
            common["name"] = str(ext["daytona.name"])
        if "daytona.public" in ext:
            common["public"] = bool(ext["daytona.public"])
        if "daytona.auto_archive_interval" in ext:
            common["auto_archive_interval"] = int(ext["daytona.auto_archive_interval"])
        image = ext.get("daytona.image")
        sources = [s for s in (spec.snapshot, spec.template, image) if s is not None]
        if len(sources) > 1:
            raise errors.InvalidInput("give one of snapshot, template and the extension "
                                      "daytona.image", provider=self.name)
        if image is not None:
            if not isinstance(image, (str, Image)):
                raise errors.InvalidInput("daytona.image must be an image name or a "
                                          "daytona.Image", provider=self.name)
            return CreateSandboxFromImageParams(image=image, resources=convert.resources(spec),
                                                **common)
        if spec.resources != NeutralResources():
            raise errors.InvalidInput(
                "resources: a Daytona sandbox made from a snapshot has the snapshot's size; "
                "create from an image (extension daytona.image) to choose resources",
                provider=self.name)
        return CreateSandboxFromSnapshotParams(snapshot=spec.snapshot or spec.template,
                                               **common)

    async def _mount(self, mount: Any) -> DaytonaVolumeMount:
        if mount.read_only:
            raise errors.UnsupportedCapability(
                "volumes.read_only", provider=self.name,
                detail="Daytona volumes have no read-only mounts")
        volume = await self._get_volume(mount.volume)
        return DaytonaVolumeMount(volume_id=volume.id, mount_path=mount.path)

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        return self._to_info(await self._fetch(sandbox_id))

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> builtins.list[SandboxInfo]:
        query = ListSandboxesQuery(labels=dict(metadata) or None)
        found: builtins.list[SandboxInfo] = []
        with self._translate():
            async for sandbox in self.client.list(query):
                found.append(self._to_info(sandbox))
        return found

    async def _kill(self, sandbox_id: str) -> None:
        self._workdirs.pop(sandbox_id, None)
        self._litter.pop(sandbox_id, None)
        try:
            sandbox = await self._sandbox(sandbox_id)
            with self._translate(sandbox_id):
                await self._retrying(lambda: sandbox.delete(timeout=self._create_timeout))
        except errors.SandboxNotFound:
            pass
        finally:
            self._sandboxes.pop(sandbox_id, None)

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        sandbox = await self._fetch(sandbox_id)
        state = _STATES.get(_state_name(sandbox), SandboxState.UNKNOWN)
        if state == SandboxState.RUNNING:
            with self._translate(sandbox_id):
                await self._retrying(lambda: sandbox.stop(timeout=self._create_timeout))
        elif state not in (SandboxState.PAUSED, SandboxState.PAUSING):
            raise errors.SandboxNotRunning(f"the sandbox is {state}", state=str(state),
                                           provider=self.name, sandbox_id=sandbox_id)
        return self._to_info(sandbox)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        sandbox = await self._fetch(sandbox_id)
        if _state_name(sandbox) != "started":
            with self._translate(sandbox_id):
                await self._retrying(lambda: sandbox.start(timeout=self._create_timeout))
        await self._probe(sandbox)
        return self._to_info(sandbox)

    async def ex_archive(self, sandbox_id: str) -> SandboxInfo:
        """Archive a sandbox (Daytona only): its files move to cheaper storage; a running
        sandbox is stopped first. ``resume`` starts it again (slower than from stopped)."""
        sandbox = await self._fetch(sandbox_id)
        with self._translate(sandbox_id):
            if _state_name(sandbox) == "started":
                await self._retrying(lambda: sandbox.stop(timeout=self._create_timeout))
            await self._retrying(sandbox.archive)
        return self._to_info(sandbox)

    async def ex_recover(self, sandbox_id: str) -> SandboxInfo:
        """Recover a sandbox from a recoverable error state (Daytona only)."""
        sandbox = await self._fetch(sandbox_id)
        with self._translate(sandbox_id):
            await self._retrying(lambda: sandbox.recover(timeout=self._create_timeout))
        await self._probe(sandbox)
        return self._to_info(sandbox)

    # -------------------------------------------------------------------- exec

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        cwd = await self._path(sandbox_id, command.cwd or ".")
        litter = self._litter.setdefault(sandbox_id, wrapper.Litter())
        run = wrapper.wrap(command, cwd=cwd, env=dict(command.env), remove=litter.take())
        limit = wrapper.daemon_seconds(command.timeout)
        start = anyio.current_time()
        sandbox = await self._sandbox(sandbox_id)
        if command.stdin is not None:
            data = command.stdin
            await self._toolbox(sandbox_id, lambda s: s.fs.upload_file(data, run.stdin_path))
        # The timeout is enforced here: the provider's tree kill reaches what the
        # daemon's process-group kill misses (new sessions, their orphans). The daemon's
        # own timeout, a little later, is a backstop for a toolbox that stopped answering.
        backstop = None if limit is None else limit + 5
        outcome: builtins.list[Any] = []  # the response, or what the call raised
        finished = anyio.Event()
        # Shielded: the call stays open until the tree is killed, because the daemon
        # kills the process group on its own when the request goes away.
        open_call = anyio.CancelScope(shield=True)

        async def call() -> None:
            with open_call:
                try:
                    outcome.append(await sandbox.process.exec(run.script, timeout=backstop))
                except Exception as exc:
                    outcome.append(exc)
                finally:
                    finished.set()

        expired = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            try:
                with anyio.move_on_after(limit):
                    await finished.wait()
                if not finished.is_set():
                    expired = True
                    await self._kill_run(sandbox, run, cleanup=False)
                    with anyio.move_on_after(self._request_timeout):
                        await finished.wait()
            except BaseException:
                await self._kill_run(sandbox, run)
                raise
            finally:
                open_call.cancel()
        response: Any = outcome[0] if outcome else None
        if isinstance(response, DaytonaTimeoutError) and command.timeout is not None and \
                status_of(response) in (408, None):
            expired = True
        elif isinstance(response, DaytonaError) and not expired:
            raise await self._toolbox_error(sandbox_id, response) from response
        elif isinstance(response, Exception) and not expired:
            raise response
        if expired:
            partial = await self._collect(sandbox_id, run, command, exit_code=-9, start=start)
            raise errors.CommandTimeout(
                f"the command ran longer than {command.timeout:g} s and was killed",
                result=partial, provider=self.name, sandbox_id=sandbox_id)
        report = wrapper.parse(run, response.result or "")
        if report is None:
            raise errors.SandboxError(
                f"the command wrapper printed no report (exit {response.exit_code}): "
                f"{(response.result or '')[-500:]}", provider=self.name, sandbox_id=sandbox_id)
        if report.stdout is None or report.stderr is None:
            return await self._collect(sandbox_id, run, command, exit_code=report.exit_code,
                                       start=start)
        if report.left_files:
            litter.add(run, len(report.stdout) + len(report.stderr))
        out, err = command.buffers()
        out.append(report.stdout)
        err.append(report.stderr)
        return _result(report.exit_code, out, err, anyio.current_time() - start)

    async def _kill_run(self, sandbox: AsyncSandbox, run: wrapper.Run, *,
                        cleanup: bool = True) -> None:
        """Kill what a run started, and remove its files unless ``cleanup`` is false
        (shielded, within ``request_timeout``)."""
        with anyio.move_on_after(self._request_timeout, shield=True), \
                contextlib.suppress(DaytonaError, aiohttp.ClientError):
            await sandbox.process.exec(run.kill_script(cleanup=cleanup), timeout=30)

    async def _remove_quietly(self, sandbox_id: str, paths: Sequence[str]) -> None:
        """Remove files left in a sandbox, if it is still there and running."""
        with contextlib.suppress(errors.SandboxError, DaytonaError), \
                anyio.move_on_after(self._request_timeout):
            sandbox = await self._sandbox(sandbox_id)
            await sandbox.process.exec(f"rm -f -- {shlex.join(paths)}", timeout=30)

    async def _collect(self, sandbox_id: str, run: wrapper.Run, command: Command, *,
                       exit_code: int, start: float) -> ExecResult:
        """Download a run's output files (at most ``output_limit`` of each), then remove
        them."""
        out, err = command.buffers()
        try:
            await self._download_into(sandbox_id, run.stdout_path, out)
            await self._download_into(sandbox_id, run.stderr_path, err)
        finally:
            with anyio.move_on_after(self._request_timeout, shield=True), \
                    contextlib.suppress(errors.SandboxError):
                await self._toolbox(sandbox_id, lambda s: s.process.exec(run.cleanup_script()))
        return _result(exit_code, out, err, anyio.current_time() - start)

    async def _download_into(self, sandbox_id: str, path: str, kept: OutputBuffer, *,
                             missing_ok: bool = True) -> None:
        """Keep the first ``kept.limit`` bytes of a file; count the rest from its size
        (what is past the limit is not downloaded)."""
        chunks = self._download(sandbox_id, path)
        try:
            async for chunk in chunks:
                kept.append(chunk)
                if kept.dropped:
                    break
        except errors.FileNotFound:
            if not missing_ok:
                raise
            return
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        if kept.dropped:
            with contextlib.suppress(errors.SandboxError):
                size = (await self._stat(sandbox_id, path)).size
                kept.dropped = max(kept.dropped, size - len(kept))

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await DaytonaShell.open(self, sandbox.id, cwd=cwd, env=env)

    # ---------------------------------------------------- background processes

    async def _run_quietly(self, sandbox_id: str, script: str) -> str:
        """Run a helper script with Daytona's plain exec; its merged output (bounded)."""
        done = await self._toolbox(sandbox_id, lambda s: s.process.exec(script, timeout=60),
                                   wait=60 + self._request_timeout)
        return (done.result or "")[-_SMALL_READ:]

    async def _start(self, sandbox_id: str, command: Command) -> int:
        cwd = await self._path(sandbox_id, command.cwd or ".")
        token = secrets.token_hex(8)
        session = procs.session_id(token)
        script = procs.start_script(command, token, cwd=cwd, env=dict(command.env))
        await self._toolbox(sandbox_id, lambda s: s.process.create_session(session))
        started = await self._toolbox(sandbox_id, lambda s: s.process.execute_session_command(
            session, SessionExecuteRequest(command=DaytonaShell.EXIT + script, run_async=True)))
        deadline = anyio.current_time() + self._window
        while True:  # the wrapper writes the pid as soon as the child exists
            # The state first: a quick child that has ended had its pid written already.
            state = await self._toolbox(sandbox_id, lambda s: s.process.get_session_command(
                session, started.cmd_id))
            with contextlib.suppress(errors.FileNotFound, ValueError):
                pid = int((await self._read_all(sandbox_id, procs.pid_path(token))).strip())
                self._processes[(sandbox_id, pid)] = (token, started.cmd_id)
                return pid
            if state.exit_code is not None or anyio.current_time() > deadline:
                logs = await self._toolbox(sandbox_id, lambda s: (
                    s.process.get_session_command_logs(session, started.cmd_id)))
                raise errors.SandboxError(f"the process did not start (exit "
                                          f"{state.exit_code}): {logs.stderr or logs.output}",
                                          provider=self.name, sandbox_id=sandbox_id)
            await anyio.sleep(0.01)

    async def _read_all(self, sandbox_id: str, path: str) -> bytes:
        """One of the provider's small files (a pid, a token): its first bytes only,
        whatever the sandbox put there."""
        kept = OutputBuffer(_SMALL_READ)
        await self._download_into(sandbox_id, path, kept, missing_ok=False)
        return kept.value()

    async def _process(self, sandbox_id: str, pid: int) -> tuple[str, str]:
        """The token and session command of the background process ``pid``."""
        found = self._processes.get((sandbox_id, pid))
        if found is not None:
            return found
        try:
            token = (await self._read_all(sandbox_id, procs.map_path(pid))).decode().strip()
        except errors.FileNotFound:
            raise errors.ProcessNotFound(f"no background process {pid}", provider=self.name,
                                         sandbox_id=sandbox_id) from None
        session = await self._toolbox(sandbox_id,
                                      lambda s: s.process.get_session(procs.session_id(token)))
        found = (token, session.commands[0].id)
        self._processes[(sandbox_id, pid)] = found
        return found

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        token, command_id = await self._process(sandbox_id, pid)
        session = procs.session_id(token)
        sent = {"stdout": 0, "stderr": 0}
        end: dict[str, int] | None = None  # the sizes seen once the process had ended
        code = 0
        delay = 0.02
        while True:
            # Status first: sizes read after the exit is seen are final (but for a
            # daemon the process left holding its output: only what it wrote by then).
            state = await self._toolbox(sandbox_id, lambda s: s.process.get_session_command(
                session, command_id))
            sizes = await self._output_sizes(sandbox_id, token, sent)
            if state.exit_code is not None and end is None:
                end, code = sizes, state.exit_code
            moved = False
            for stream in _STREAMS:
                wanted = sizes[stream] if end is None else min(sizes[stream], end[stream])
                if wanted <= sent[stream]:
                    continue
                piece = OutputBuffer(min(procs.CHUNK, wanted - sent[stream]))
                await self._download_into(sandbox_id, procs.piece_path(token, stream), piece)
                if len(piece):
                    yield ProcessOutput(stream, piece.value())
                    sent[stream] += len(piece)
                    moved = True
            if end is not None and all(sent[k] >= end[k] for k in sent):
                yield ProcessExit(exit_code_from_status(code))
                return
            if moved:
                delay = 0.02
                continue
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    async def _output_sizes(self, sandbox_id: str, token: str,
                            sent: dict[str, int]) -> dict[str, int]:
        """The sizes of a process's output files, with the next piece of each cut."""
        said = (await self._run_quietly(sandbox_id, procs.chunk_script(token, sent))).split()
        try:
            return {"stdout": int(said[-2]), "stderr": int(said[-1])}
        except (IndexError, ValueError):
            raise errors.SandboxError(f"the output of a background process could not be "
                                      f"measured: {' '.join(said)[-200:]!r}",
                                      provider=self.name, sandbox_id=sandbox_id) from None

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        token, _command = await self._process(sandbox_id, pid)
        staged = f"{procs.PREFIX}{token}.w-{secrets.token_hex(4)}"
        await self._toolbox(sandbox_id, lambda s: s.fs.upload_file(data, staged))
        await self._run_quietly(sandbox_id, procs.write_script(token, staged))

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        token, _command = await self._process(sandbox_id, pid)
        await self._run_quietly(sandbox_id, procs.close_stdin_script(token))

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        await self._process(sandbox_id, pid)
        await self._run_quietly(sandbox_id, procs.kill_script(pid))

    # ------------------------------------------------------------------- files

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        full = await self._path(sandbox_id, path)
        probe = scripts.probe_file_command(full)
        found = await self._toolbox(sandbox_id, lambda s: s.process.exec(probe, timeout=30))
        if (found.result or "").strip() == "other":
            raise errors.NotARegularFile(
                f"{full}: not a regular file (a device, FIFO or socket); refused before "
                "reading", provider=self.name, sandbox_id=sandbox_id)
        chunks = self._download(sandbox_id, full)
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]

    async def _download(self, sandbox_id: str, full: str) -> AsyncIterator[bytes]:
        """A file's bytes as the daemon streams them; each chunk within
        ``request_timeout`` (a FIFO with no writer does not hang the caller)."""
        sandbox = await self._sandbox(sandbox_id)
        received = False
        try:
            with self._deadline(sandbox_id, self._request_timeout):
                stream = await sandbox.fs.download_file_stream(full)
            chunks = stream.__aiter__()
            try:
                while True:
                    with self._deadline(sandbox_id, self._request_timeout):
                        try:
                            chunk = await chunks.__anext__()
                        except StopAsyncIteration:
                            return
                    received = True
                    yield chunk
            finally:  # a reader that stopped early releases the connection now
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    with anyio.move_on_after(5, shield=True), \
                            contextlib.suppress(Exception):
                        await close()
        except DaytonaError as exc:
            if not received and code_of(exc) is None:
                # The SDK's stream refuses a part with no bytes ("No file data
                # received"): an empty file is a valid answer.
                with contextlib.suppress(errors.SandboxError):
                    info = await self._stat(sandbox_id, full)
                    if info.type == FileType.FILE and info.size == 0:
                        return
            raise await self._file_error(sandbox_id, full, exc) from exc
        except aiohttp.ClientResponseError as exc:
            # The SDK's download stream lets the HTTP error through untranslated.
            vendor = DaytonaError(exc.message, status_code=exc.status)
            raise await self._file_error(sandbox_id, full, vendor) from exc
        except aiohttp.ClientError as exc:
            raise errors.Unavailable(f"reading {full} failed: {exc}", provider=self.name,
                                     sandbox_id=sandbox_id) from exc

    async def _file_error(self, sandbox_id: str, path: str,
                          exc: DaytonaError) -> errors.SandboxError:
        """A file call failed: say why (missing, a directory, not running ...)."""
        error = await self._toolbox_error(sandbox_id, exc)
        if type(error) in (errors.SandboxError, errors.InvalidInput, errors.Conflict):
            with contextlib.suppress(errors.SandboxError):
                info = await self._stat(sandbox_id, path)
                where: dict[str, Any] = {"provider": self.name, "sandbox_id": sandbox_id}
                if info.type == FileType.DIRECTORY:
                    return errors.IsADirectory(f"{path} is a directory", **where)
        return error

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        full = await self._path(sandbox_id, path)
        if not posixpath.basename(full).isprintable():
            # The SDK sends the file's name in a multipart header, where control
            # characters are refused: upload under a plain name, then move it.
            staging = posixpath.join(posixpath.dirname(full),
                                     f".psdk-upload-{secrets.token_hex(8)}")
            await self._write_file(sandbox_id, staging, chunks)
            await self._rename(sandbox_id, staging, full)
            return
        head = bytearray()
        small = True
        async for chunk in chunks:
            head.extend(chunk)
            if len(head) > _SMALL_WRITE:
                small = False
                break
        # upload_file puts the whole path in a multipart header; upload_file_stream only
        # its last component.
        if small and full.isprintable():  # one request on the shared connection pool
            data = bytes(head)
            await self._upload(sandbox_id, full, lambda s: s.fs.upload_file(data, full))
            return

        async def everything() -> AsyncIterator[bytes]:
            yield bytes(head)
            async for rest in chunks:
                yield rest

        await self._upload(sandbox_id, full,
                           lambda s: s.fs.upload_file_stream(everything(), full))

    async def _upload(self, sandbox_id: str, path: str,
                      call: Callable[[AsyncSandbox], Awaitable[None]]) -> None:
        sandbox = await self._sandbox(sandbox_id)
        try:
            await call(sandbox)
        except DaytonaError as exc:
            if status_of(exc) == 403 or "permission denied" in str(exc).lower() or \
                    "read-only" in str(exc).lower():
                raise errors.PermissionDenied(f"cannot write {path}: {exc}", provider=self.name,
                                              sandbox_id=sandbox_id) from exc
            raise await self._file_error(sandbox_id, path, exc) from exc

    async def _list_dir(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        full = await self._path(sandbox_id, path)
        sandbox = await self._sandbox(sandbox_id)
        try:
            entries = await sandbox.fs.list_files(full)
        except DaytonaError as exc:
            error = await self._toolbox_error(sandbox_id, exc)
            if not isinstance(error, (errors.NotFound, errors.SandboxNotRunning)):
                info = await self._stat(sandbox_id, full)
                if info.type != FileType.DIRECTORY:
                    raise errors.NotADirectory(f"{full} is not a directory", provider=self.name,
                                               sandbox_id=sandbox_id) from exc
            raise error from exc
        return [convert.to_file_info(posixpath.join(full, e.name), e) for e in entries]

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        full = await self._path(sandbox_id, path)
        entry = await self._toolbox(sandbox_id, lambda s: s.fs.get_file_info(full))
        info = convert.to_file_info(full, entry)
        if info.type == FileType.SYMLINK:
            target = await self._toolbox(
                sandbox_id, lambda s: s.process.exec(f"readlink -- {shlex.quote(full)}"))
            info = FileInfo(path=info.path, type=info.type, size=info.size, mode=info.mode,
                            modified_at=info.modified_at,
                            symlink_target=(target.result or "").rstrip("\n") or None)
        return info

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        full = await self._path(sandbox_id, path)
        where: dict[str, Any] = {"provider": self.name, "sandbox_id": sandbox_id}
        try:
            existing: FileInfo | None = await self._stat(sandbox_id, full)
        except errors.FileNotFound:
            existing = None
        if existing is not None:
            if existing.type != FileType.DIRECTORY or not exist_ok:
                raise errors.FileExists(f"{full} already exists", **where)
            return
        if not parents and not await self._exists(sandbox_id, posixpath.dirname(full)):
            raise errors.FileNotFound(f"{posixpath.dirname(full)}: no such directory", **where)
        await self._toolbox(sandbox_id, lambda s: s.fs.create_folder(full, "755"))

    async def _exists(self, sandbox_id: str, path: str) -> bool:
        try:
            await self._stat(sandbox_id, path)
        except errors.FileNotFound:
            return False
        return True

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        full = await self._path(sandbox_id, path)
        sandbox = await self._sandbox(sandbox_id)
        try:
            await sandbox.fs.delete_file(full, recursive=recursive)
        except DaytonaError as exc:
            error = await self._toolbox_error(sandbox_id, exc)
            if not recursive and not isinstance(error, (errors.NotFound,
                                                        errors.SandboxNotRunning)):
                raise errors.Conflict(f"{full} is a directory that is not empty (pass "
                                      "recursive=True)", provider=self.name,
                                      sandbox_id=sandbox_id) from exc
            raise error from exc

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        source = await self._path(sandbox_id, src)
        target = await self._path(sandbox_id, dst)
        await self._toolbox(sandbox_id, lambda s: s.fs.move_files(source, target))

    # --------------------------------------------------------------- snapshots

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        sandbox = await self._sandbox(sandbox_id)
        name = f"psdk-{sandbox_id[:8]}-{secrets.token_hex(6)}"
        with self._translate(sandbox_id):
            # A try that answered 502 may have made it: then the name is taken, by us.
            with contextlib.suppress(DaytonaConflictError):
                await self._retrying(lambda: sandbox.create_snapshot(
                    name, timeout=self._create_timeout))
            made = await self.client.snapshot.get(name)
        return convert.to_snapshot(made)

    async def _daytona_snapshots(self, sandbox_id: str | None) -> builtins.list[Any]:
        """Every Daytona snapshot (of one sandbox), page by page."""
        found: builtins.list[Any] = []
        page = 1
        with self._translate():
            while True:
                listing = await self.client.snapshot.list(page=page, limit=100,
                                                          source_sandbox_id=sandbox_id)
                found += listing.items
                if page >= listing.total_pages:
                    return found
                page += 1

    async def _list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        # Snapshots taken from sandboxes; the others are images (templates).
        return [convert.to_snapshot(s) for s in await self._daytona_snapshots(sandbox_id)
                if s.source_sandbox_id]

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        with self._translate(not_found=errors.SnapshotNotFound):
            await self.client.snapshot.delete(snapshot_id)

    # --------------------------------------------------------------- templates

    async def _build_template(self, spec: TemplateSpec, *, force: bool,
                              on_progress: Callable[[str], None] | None) -> Template:
        where: dict[str, Any] = {"provider": self.name}
        digest = await anyio.to_thread.run_sync(spec.content_hash)
        name = f"{spec.name}-{digest[:12]}"
        try:
            with self._translate(not_found=errors.TemplateNotFound):
                existing = await self.client.snapshot.get(name)
        except errors.TemplateNotFound:
            existing = None
        if existing is not None and not force and convert.state_of(existing) == "active":
            return convert.to_template(spec.name, digest, existing)
        with self._translate(not_found=errors.TemplateNotFound):
            if existing is not None:
                await self.client.snapshot.delete(existing)
            image = convert.image_from_dockerfile(spec.dockerfile)
            resources = None
            if spec.cpu or spec.memory_mb:
                resources = Resources(cpu=math.ceil(spec.cpu) if spec.cpu else None,
                                      memory=math.ceil(spec.memory_mb / 1024)
                                      if spec.memory_mb else None)
            try:
                made = await self.client.snapshot.create(
                    CreateSnapshotParams(name=name, image=image, resources=resources),
                    on_logs=on_progress, timeout=self._create_timeout)
            except DaytonaError as exc:
                if status_of(exc) is None and "Failed to create snapshot" in str(exc):
                    # The builder's log names the steps it ran; the last is the one that
                    # failed.
                    steps = re.findall(r"Step \d+/\d+ : [^\n]*", str(exc))
                    raise errors.TemplateBuildError(
                        str(exc), step=steps[-1].strip() if steps else "build",
                        log_tail=str(exc)[-2000:], **where) from exc
                raise
        return convert.to_template(spec.name, digest, made)

    async def _list_templates(self) -> builtins.list[Template]:
        return [convert.to_template(s.name, None, s) for s in await self._daytona_snapshots(None)
                if not s.source_sandbox_id]

    async def _delete_template(self, template_id: str) -> None:
        with self._translate(not_found=errors.TemplateNotFound):
            await self.client.snapshot.delete(template_id)

    # ----------------------------------------------------------------- volumes

    async def _create_volume(self, name: str) -> Volume:
        with self._translate(not_found=errors.VolumeNotFound):
            return convert.to_volume(await self.client.volume.create(name))

    async def _get_volume(self, name: str) -> Volume:
        with self._translate(not_found=errors.VolumeNotFound):
            return convert.to_volume(await self.client.volume.get(name))

    async def _list_volumes(self) -> builtins.list[Volume]:
        with self._translate(not_found=errors.VolumeNotFound):
            return [convert.to_volume(v) for v in await self.client.volume.list()]

    async def _delete_volume(self, name: str) -> None:
        with self._translate(not_found=errors.VolumeNotFound):
            volume = await self.client.volume.get(name)
            await self.client.volume.delete(volume)


def _result(exit_code: int, out: OutputBuffer, err: OutputBuffer,
            duration: float) -> ExecResult:
    return ExecResult(exit_code=exit_code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                      stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                      duration=duration)
