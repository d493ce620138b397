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
  provider's ``provider-sdk.cwd`` (where ``SandboxSpec.cwd`` is kept). ``set_metadata``
  (``metadata.update``) is the SDK's ``set_labels``, sent with the labels kept.
- Commands run through a wrapper (the script is ``_exec``'s, the call ``_commands``') so
  that stdout and stderr stay apart and byte-exact, stdin works, a timeout keeps the
  partial output, and cancelling kills the command's process tree.
- A background process is a Daytona session of its own running one asynchronous
  command (the scripts are ``_processes``', the calls ``_background``'); its pid is the
  real pid inside the sandbox.
- The persistent shell is a Daytona session: every command is sourced into one
  long-lived shell, so ``cd``, ``export``, plain variables and functions carry over;
  ``exit N`` in a command ends that command with ``N``, not the session.
- A snapshot's neutral id is its Daytona snapshot name, which is what Daytona creates
  sandboxes from; ``templates.build`` makes Daytona snapshots too, from
  ``Image.from_dockerfile``. Snapshots taken from a sandbox are the neutral snapshots,
  the others are templates. Volumes are mounted by name (resolved to Daytona's id); Daytona has no
  read-only mounts, so ``VolumeMount(read_only=True)`` is refused.

This module keeps the class (its options, capabilities and client), what a sandbox's
state means (the state table, and why a toolbox call failed), where relative paths
resolve, the lifecycle, opening the shell, snapshots, templates and volumes. The other
hooks are mixins in private modules: ``_calls`` (SDK errors translated once,
502/503/504 retried, the SDK's handles, toolbox calls bounded in time), ``_commands``
(exec), ``_background`` (background processes) and ``_files`` (the files API).
"""

from __future__ import annotations

import builtins
import contextlib
import math
import posixpath
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
from daytona import (
    AsyncDaytona,
    AsyncSandbox,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    DaytonaConfig,
    DaytonaConflictError,
    DaytonaError,
    Image,
    ListSandboxesQuery,
)
from daytona import VolumeMount as DaytonaVolumeMount

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.labels import check_labels
from provider_sdk.models import (
    ExposedPort,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Volume,
)
from provider_sdk.models import Resources as NeutralResources
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Shell
from provider_sdk.settings import Settings
from provider_sdk_daytona import _convert as convert
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona._background import BackgroundMixin
from provider_sdk_daytona._calls import CallsMixin
from provider_sdk_daytona._capabilities import PROVIDER_CAPABILITIES
from provider_sdk_daytona._commands import CommandsMixin
from provider_sdk_daytona._errors import code_of, neutral, status_of
from provider_sdk_daytona._files import FilesMixin
from provider_sdk_daytona._ports import PortsMixin
from provider_sdk_daytona._shell import DaytonaShell
from provider_sdk_daytona._templates import DaytonaTemplates

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox

__all__ = ["DaytonaProvider", "DaytonaShell"]

LANGUAGE_LABEL = "code-toolbox-language"
CWD_LABEL = "provider-sdk.cwd"
CREATE_LABEL = "provider-sdk.create"
"""A token per create: a create retried after a 502 first looks for what it made."""
RESERVED_LABELS = frozenset({LANGUAGE_LABEL, CWD_LABEL, CREATE_LABEL})
#: The environment variable each option is read from when not given.
SETTINGS = {"api_key": "DAYTONA_API_KEY", "api_url": "DAYTONA_API_URL",
            "target": "DAYTONA_TARGET"}
EXTENSIONS = ("daytona.image", "daytona.name", "daytona.public",
              "daytona.auto_archive_interval")

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


class DaytonaProvider(CommandsMixin, BackgroundMixin, FilesMixin, PortsMixin, CallsMixin,
                      SandboxProvider):
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
    internal_labels: ClassVar[frozenset[str]] = RESERVED_LABELS
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["DaytonaProvider"]
    template_support: ClassVar[TemplateSupport] = TemplateSupport(
        context=False,
        options={"start_cmd": "Daytona snapshots have no start command; start it in the "
                              "sandbox instead",
                 "ready_cmd": "Daytona snapshots have no readiness command"})

    def __init__(self, *, api_key: str | None = None, api_url: str | None = None,
                 target: str | None = None, create_timeout: float = 300.0,
                 unavailable_window: float = 30.0, request_timeout: float = 60.0) -> None:
        settings = Settings(self.name, SETTINGS)
        key = settings.secret("api_key", api_key)
        assert key is not None  # required
        self._api_key = key
        self._api_url = settings.url("api_url", api_url, hint=" ending in /api")
        self._target = settings.text("target", target)
        self._request_timeout, self._create_timeout, self._window = (
            settings.number(option, value, default=60.0, maximum=wrapper.MAX_SECONDS,
                            unit=" of seconds")
            for option, value in (("request_timeout", request_timeout),
                                  ("create_timeout", create_timeout),
                                  ("unavailable_window", unavailable_window)))
        self._daytona: AsyncDaytona | None = None
        self._sandboxes: dict[str, AsyncSandbox] = {}
        self._workdirs: dict[str, str] = {}
        self._litter: dict[str, wrapper.Litter] = {}
        """Files that finished commands left in each sandbox, removed in batches."""
        self._processes: dict[tuple[str, int], tuple[str, str]] = {}
        """(sandbox, pid) -> (token, session command id) of background processes."""
        self._exposed: dict[tuple[str, int], tuple[ExposedPort, float]] = {}
        """(sandbox, port) -> the signed preview URL exposed, and when it expires."""

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

    # --------------------------------------------------------- state and paths

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
            metadata=labels,
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
        # Daytona mounts have no read-only flag: volumes.read_only is not declared.
        volume = await self._get_volume(mount.volume)
        return DaytonaVolumeMount(volume_id=volume.id, mount_path=mount.path)

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        return self._to_info(await self._refreshed(sandbox_id))

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> builtins.list[SandboxInfo]:
        query = ListSandboxesQuery(labels=dict(metadata) or None)
        found: builtins.list[SandboxInfo] = []
        with self._translate():
            async for sandbox in self.client.list(query):
                found.append(self._to_info(sandbox))
        return found

    async def _kill(self, sandbox_id: str) -> None:
        self._forget_ports(sandbox_id)
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

    async def _set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        # Daytona replaces the labels whole (PUT /sandbox/{id}/labels): the current ones,
        # read just before, reserved ones too, go with the new. Two callers at once: the
        # last one wins.
        return await self._replace_labels(sandbox_id, await self._refreshed(sandbox_id), labels)

    async def _set_metadata_as_seen(self, sandbox_id: str,
                                    labels: Mapping[str, str]) -> SandboxInfo:
        # No GET: the labels of the handle kept since this provider last read or wrote
        # them (fetched, if it keeps none) go with the new.
        return await self._replace_labels(sandbox_id, await self._sandbox(sandbox_id), labels)

    async def _replace_labels(self, sandbox_id: str, sandbox: AsyncSandbox,
                              labels: Mapping[str, str]) -> SandboxInfo:
        merged = {**(sandbox.labels or {}), **labels}
        check_labels(merged, provider=self.name)
        with self._translate(sandbox_id):
            await self._retrying(lambda: sandbox.set_labels(merged))
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

    # ------------------------------------------------------------------- shell

    # DaytonaShell calls back into the provider through ShellHost (toolbox calls, paths,
    # timeouts).
    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await DaytonaShell.open(self, sandbox, cwd=cwd, env=env)

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

    def _template_builder(self) -> DaytonaTemplates:
        return DaytonaTemplates(client=self.client, snapshots=self._daytona_snapshots,
                                timeout=self._create_timeout, provider=self.name)

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
