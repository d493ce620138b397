"""``E2BProvider``: sandboxes on E2B, through the ``e2b`` SDK's async API.

Lifecycle mapping: E2B's ``timeout`` is an absolute deadline from create. The neutral
``Lifecycle(idle_timeout=T)`` becomes a deadline of ``T`` seconds that the provider pushes
back (``set_timeout``) whenever the sandbox is used through it and half the window has
passed, so an unused sandbox ends between ``T/2`` and ``T`` after its last use.
``idle_timeout=None`` asks for ``max_timeout`` (E2B has no "never") and renews the same
way. ``on_idle="pause"`` is E2B's auto-pause; ``auto_resume`` its auto-resume.

The pitfalls this module absorbs (each is proven by a test through the emulator):

- envd runs commands as ``bash -l -c``, whose profile resets ``PATH``: the environment
  travels in a script that runs after the profile (see ``provider_sdk_e2b._shell``);
- the SDK decodes command output as UTF-8 and its ``timeout`` (60 s by default) kills
  commands: exec talks to envd's process service directly, with bytes, and no deadline
  unless the caller gives one;
- after create, resume or connect the control plane can say running while the data
  plane answers 502/503/504: the provider probes envd's ``/health`` and retries for
  ``ready_timeout`` seconds, then raises ``Unavailable``; a request the gateway refused
  (so nothing ran) is retried within the same window, never one that reached envd;
- 429s are retried by the SDK's transport honouring ``Retry-After`` (``retries``), then
  raise ``RateLimited``.

Everything vendor-specific about errors happens in ``E2BProvider._translate``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import gc
import json
import time
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import anyio
import attrs
import httpx
from e2b import AsyncSandbox, SandboxQuery
from e2b import SandboxState as E2BState
from e2b import exceptions as e2bx
from e2b.api import client_async
from e2b.connection_config import ConnectionConfig
from packaging.version import Version

from provider_sdk import errors, scripts
from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.models import (
    Metrics,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
)
from provider_sdk.provider import SandboxProvider
from provider_sdk.settings import Settings
from provider_sdk.tasks import TaskOwner
from provider_sdk.templates import TemplateBuilder
from provider_sdk_e2b import _e2b_templates, _shell
from provider_sdk_e2b._capabilities import PROVIDER_CAPABILITIES
from provider_sdk_e2b._control import ENVD_PORT as ENVD_PORT
from provider_sdk_e2b._control import E2BControlPlane
from provider_sdk_e2b._errors import ErrorsMixin
from provider_sdk_e2b._files import FilesMixin
from provider_sdk_e2b._ports import PortsMixin
from provider_sdk_e2b._processes import ProcessesMixin, _Proc
from provider_sdk_e2b._remote import Remote as Remote
from provider_sdk_e2b._remote import _Handle

__all__ = ["E2BProvider"]

_P = TypeVar("_P", bound="E2BProvider")

PSDK_KEY = "psdk"
"""Metadata key this provider reserves: the sandbox's working directory and idle window,
so a handle opened in another process behaves the same. Never shown in ``metadata``."""


def _release_sdk_transports() -> None:
    """Drop the SDK's process-wide HTTP transports while the interpreter is whole.

    The ``e2b`` SDK keeps its connection pools (Rust, on their own runtime threads) in
    module-level caches for the life of the process. Left to the interpreter's final
    garbage collection, their teardown races it and can abort the process after
    ``main`` has returned; released from an exit hook, they shut down cleanly first.
    """
    for name in ("_httpx_transports", "_transports", "_pools"):
        cache = getattr(client_async, name, None)
        if isinstance(cache, dict):
            cache.clear()
    gc.collect()


atexit.register(_release_sdk_transports)

class E2BProvider(ProcessesMixin, FilesMixin, PortsMixin, ErrorsMixin, E2BControlPlane,
                  SandboxProvider):
    """Sandboxes on E2B, through the ``e2b`` SDK (async API).

    Every option falls back to its setting in the environment (in brackets).

    Args:
        api_key: the API key [``E2B_API_KEY``, required].
        api_url: the control plane's URL [``E2B_API_URL``; default from the domain].
        domain: E2B's domain [``E2B_DOMAIN``; default ``e2b.app``].
        sandbox_url: one URL for every sandbox's data plane, routed by the
            ``E2b-Sandbox-Id`` header [``E2B_SANDBOX_URL``; default per sandbox].
        template: the template when a spec names none (default ``base``).
        ready_timeout: seconds to wait for a sandbox's data plane after create, resume
            or connect, and to retry requests a gateway refused, before raising
            ``Unavailable`` [``PSDK_E2B_READY_TIMEOUT``; default 60].
        max_timeout: the lifetime asked for when ``Lifecycle.idle_timeout`` is ``None``
            (E2B has no "never"), renewed on use [default 3600].
        request_timeout: seconds for one control-plane request (default 60).
        retries: control-plane retries on 429/502/503/504, honouring ``Retry-After``
            (default 3).
    """

    name: ClassVar[str] = "e2b"
    internal_labels: ClassVar[frozenset[str]] = frozenset({PSDK_KEY})
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["E2BProvider"]
    template_support: ClassVar[TemplateSupport] = _e2b_templates.TEMPLATE_SUPPORT

    #: Where each option is read from when not given.
    SETTINGS: ClassVar[Mapping[str, str]] = {
        "api_key": "E2B_API_KEY", "api_url": "E2B_API_URL", "domain": "E2B_DOMAIN",
        "sandbox_url": "E2B_SANDBOX_URL", "ready_timeout": "PSDK_E2B_READY_TIMEOUT",
    }
    DEFAULT_TEMPLATE: ClassVar[str | None] = "base"
    _STATES: ClassVar[Mapping[str, SandboxState]] = {
        "running": SandboxState.RUNNING, "paused": SandboxState.PAUSED,
    }

    def __init__(self, *, api_key: str | None = None, api_url: str | None = None,
                 domain: str | None = None, sandbox_url: str | None = None,
                 template: str | None = None, ready_timeout: float | None = None,
                 max_timeout: int = 3600, request_timeout: float = 60.0,
                 retries: int = 3) -> None:
        settings = Settings(self.name, self.SETTINGS)
        key = settings.secret("api_key", api_key)
        assert key is not None  # required
        self._api_key = key
        self._api_url = settings.url("api_url", api_url)
        self._domain = settings.text("domain", domain)
        self._sandbox_url = settings.url("sandbox_url", sandbox_url)
        self._template = settings.text("template", template) or self.DEFAULT_TEMPLATE
        self._ready_timeout = settings.number("ready_timeout", ready_timeout, default=60.0,
                                              unit=" of seconds")
        self._max_timeout = settings.integer("max_timeout", max_timeout, default=3600)
        self._request_timeout = settings.number("request_timeout", request_timeout,
                                                default=60.0, unit=" of seconds")
        self._retries = settings.integer("retries", retries, default=3, minimum=0)
        self._handles: dict[str, _Handle] = {}
        self._procs: dict[tuple[str, int], _Proc] = {}
        self._tasks = TaskOwner(self.name)
        """Owns every task the provider starts: process pumps, lease renewals."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} api_url={self._api_url!r}>"

    async def __aenter__(self: _P) -> _P:
        await self._tasks.open()
        return self

    async def aclose(self) -> None:
        """Stop the provider's tasks (each closes its stream first) and forget the
        processes and data-plane clients; sandboxes keep running. Safe to call twice."""
        await self._tasks.aclose()
        self._procs.clear()
        self._handles.clear()

    # ------------------------------------------------------------ SDK plumbing

    def _params(self) -> dict[str, Any]:
        """The SDK's connection options (``ApiParams``), key revealed only here."""
        params: dict[str, Any] = {"api_key": self._api_key.reveal(),
                                  "request_timeout": self._request_timeout,
                                  "retries": self._retries}
        for option, value in (("api_url", self._api_url), ("domain", self._domain),
                              ("sandbox_url", self._sandbox_url)):
            if value:
                params[option] = value
        return params

    def _config(self, **extra: Any) -> ConnectionConfig:
        return ConnectionConfig(**self._params(), **extra)

    def _new_handle(self, remote: Remote, psdk: Mapping[str, Any]) -> _Handle:
        headers = self._sandbox_headers(remote.id, remote.domain)
        if remote.access_token:
            headers["X-Access-Token"] = remote.access_token
        sandbox = remote.sdk
        if sandbox is None or not headers.items() <= \
                sandbox.connection_config.sandbox_headers.items():
            sandbox = AsyncSandbox(
                sandbox_id=remote.id, sandbox_domain=remote.domain,
                envd_version=Version(remote.envd_version or "0.1.0"),
                envd_access_token=remote.access_token,
                traffic_access_token=sandbox.traffic_access_token if sandbox else None,
                connection_config=self._config(extra_sandbox_headers=headers),
            )
        renew = psdk.get("idle")
        handle = _Handle(sandbox, workdir=psdk.get("cwd"),
                         renew=int(renew) if isinstance(renew, (int, float)) else None)
        self._handles[remote.id] = handle
        return handle

    async def _handle(self, sandbox_id: str) -> _Handle:
        """The data-plane clients of a sandbox, opened from its info on first use."""
        handle = self._handles.get(sandbox_id)
        if handle is None:
            remote = await self._describe(sandbox_id)
            handle = self._new_handle(remote, _psdk(remote.metadata))
            handle.renewed_at = 0.0  # unknown: renew on this first use
        await self._touch(sandbox_id, handle)
        return handle

    async def _touch(self, sandbox_id: str, handle: _Handle) -> None:
        """Push the deadline back (in the background) once half of the idle window has
        passed."""
        if handle.renew is None or time.monotonic() - handle.renewed_at < handle.renew / 2:
            return
        handle.renewed_at = time.monotonic()
        await self._tasks.start_soon(self._renew, sandbox_id, handle.renew)

    async def _renew(self, sandbox_id: str, seconds: int) -> None:
        with contextlib.suppress(e2bx.SandboxException, httpx.HTTPError):
            await AsyncSandbox.set_timeout(sandbox_id, seconds, **self._params())

    # ------------------------------------------------------------ lifecycle

    def _network(self, policy: NetworkPolicy) -> tuple[bool, dict[str, Any] | None]:
        """``allow_internet_access`` and the SDK's ``network`` options for a policy."""
        network: dict[str, Any] = {}
        if policy.allow_out:
            network["allow_out"] = list(policy.allow_out)
        if policy.deny_out:
            network["deny_out"] = list(policy.deny_out)
        return policy.allow_internet, network or None

    def _psdk_metadata(self, spec: SandboxSpec, renew: int | None) -> dict[str, str]:
        data: dict[str, Any] = {}
        if spec.cwd is not None:
            data["cwd"] = spec.cwd
        if renew is not None:
            data["idle"] = renew
        return {PSDK_KEY: json.dumps(data, separators=(",", ":"))} if data else {}

    def _template_for(self, spec: SandboxSpec) -> str:
        if spec.snapshot is not None:
            return spec.snapshot
        template = spec.template or self._template
        if template is None:
            var = self.SETTINGS.get("template", "the template option")
            raise errors.ConfigError(f"no template: name one in the spec, or set {var}",
                                     provider=self.name)
        return template

    def _create_env(self, spec: SandboxSpec) -> dict[str, str]:
        env = dict(spec.env)
        if env:
            env[_shell.SPEC_ENV] = scripts.export_script(spec.env)
        return env

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        timeout, renew = self._timeouts(spec.lifecycle)
        lifecycle = self._lifecycle(spec.lifecycle)
        allow_internet, network = self._create_network(spec.network)
        metadata = {**spec.metadata, **self._psdk_metadata(spec, renew)}
        what = "snapshot" if spec.snapshot is not None else "template"
        with self._translate(what=what):
            created = await self._create_remote(spec, timeout=timeout, lifecycle=lifecycle,
                                                allow_internet=allow_internet,
                                                network=network, metadata=metadata)
        try:
            handle = self._new_handle(created, {"cwd": spec.cwd, "idle": renew})
            await self._wait_ready(created.id, handle)
            if spec.cwd is not None:
                with self._translate(created.id, what="file", path=spec.cwd):
                    await handle.sandbox.files.make_dir(spec.cwd)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._kill(created.id)
            raise
        # What create answered, completed from the request (the client's clock for the
        # times) rather than asked again: ``get_info`` gives the control plane's view.
        started = created.started_at or _now()
        ends = started + dt.timedelta(seconds=timeout) if timeout > 0 else None
        return self._to_info(attrs.evolve(
            created, state="running", metadata=metadata, started_at=started,
            end_at=created.end_at or ends, template=self._template_for(spec)))

    def _to_info(self, remote: Remote) -> SandboxInfo:
        psdk = _psdk(remote.metadata)
        return SandboxInfo(
            id=remote.id, provider=self.name,
            state=self._STATES.get(remote.state, SandboxState.UNKNOWN),
            template=remote.template,
            metadata=remote.metadata,
            created_at=remote.started_at, expires_at=remote.end_at,
            resources=Resources(cpu=remote.cpu or None, memory_mb=remote.memory_mb or None,
                                disk_mb=remote.disk_mb or None),
            extra={"envd_version": remote.envd_version, "domain": remote.domain,
                   "cwd": psdk.get("cwd"), "idle_window": psdk.get("idle"), **remote.extra},
        )

    async def _info(self, sandbox_id: str) -> SandboxInfo:
        return self._to_info(await self._describe(sandbox_id))

    async def _list(self, *, metadata: Mapping[str, str],
                    state: SandboxState | None) -> list[SandboxInfo]:
        states = {SandboxState.RUNNING: [E2BState.RUNNING], SandboxState.PAUSED: [
            E2BState.PAUSED]}.get(state) if state is not None else None
        query = SandboxQuery(metadata=dict(metadata) or None, state=states)
        found: list[SandboxInfo] = []
        with self._translate():
            paginator = AsyncSandbox.list(query=query, **self._params())
            while paginator.has_next:
                for item in await paginator.next_items():
                    found.append(self._to_info(Remote(
                        id=item.sandbox_id, state=str(item.state.value),
                        template=item.template_id, metadata=dict(item.metadata or {}),
                        started_at=item.started_at, end_at=item.end_at,
                        cpu=item.cpu_count, memory_mb=item.memory_mb,
                        envd_version=item.envd_version, domain=item.sandbox_domain)))
        return found

    async def _kill(self, sandbox_id: str) -> None:
        self._forget(sandbox_id)
        with self._translate(sandbox_id):
            await AsyncSandbox.kill(sandbox_id, **self._params())

    def _forget(self, sandbox_id: str) -> None:
        self._handles.pop(sandbox_id, None)
        for key in [k for k in self._procs if k[0] == sandbox_id]:
            proc = self._procs.pop(key)
            if proc.pump is not None:
                proc.pump.cancel()

    async def _pause(self, sandbox_id: str) -> SandboxInfo:
        with self._translate(sandbox_id):
            await AsyncSandbox.pause(sandbox_id, **self._params())
        return await self._info(sandbox_id)

    async def _resume(self, sandbox_id: str) -> SandboxInfo:
        handle = self._handles.get(sandbox_id)
        psdk = ({"cwd": handle.workdir, "idle": handle.renew} if handle
                else _psdk((await self._describe(sandbox_id)).metadata))
        renew = psdk.get("idle")
        with self._translate(sandbox_id):  # the resumed sandbox gets its window again
            remote = await self._connect_remote(
                sandbox_id, int(renew) if isinstance(renew, (int, float)) else None)
        handle = self._new_handle(remote, psdk)
        await self._wait_ready(sandbox_id, handle)
        return await self._info(sandbox_id)

    # ------------------------------------------------------------ snapshots

    async def _snapshot(self, sandbox_id: str) -> Snapshot:
        with self._translate(sandbox_id):
            info = await AsyncSandbox.create_snapshot(sandbox_id, **self._params())
        return Snapshot(id=info.snapshot_id, provider=self.name, sandbox_id=sandbox_id,
                        captures=frozenset({"filesystem"}), created_at=_now(),
                        extra={"names": list(info.names)})

    async def _list_snapshots(self, sandbox_id: str | None) -> list[Snapshot]:
        found: list[Snapshot] = []
        with self._translate(sandbox_id):
            paginator = AsyncSandbox.list_snapshots(sandbox_id=sandbox_id, **self._params())
            while paginator.has_next:
                for info in await paginator.next_items():
                    found.append(Snapshot(id=info.snapshot_id, provider=self.name,
                                          sandbox_id=sandbox_id,
                                          captures=frozenset({"filesystem"}),
                                          extra={"names": list(info.names)}))
        return found

    async def _delete_snapshot(self, snapshot_id: str) -> None:
        with self._translate(what="snapshot"):
            deleted = await AsyncSandbox.delete_snapshot(snapshot_id, **self._params())
        if not deleted:
            raise errors.SnapshotNotFound(f"no snapshot {snapshot_id!r}", provider=self.name)

    # ------------------------------------------------------------ templates

    def _template_builder(self) -> TemplateBuilder:
        return _e2b_templates.E2BTemplates(
            provider=self.name, params=self._params,
            translate=lambda: self._translate(what="template"))

    # ------------------------------------------------------------ network, metrics

    async def _update_network(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        allow_internet, network = self._network(policy)
        update: dict[str, Any] = {"allow_internet_access": allow_internet, **(network or {})}
        with self._translate(sandbox_id):
            await AsyncSandbox.update_network(  # type: ignore[call-overload]
                sandbox_id, update, **self._params())

    async def _metrics(self, sandbox_id: str) -> Metrics:
        with self._translate(sandbox_id):
            readings = await AsyncSandbox.get_metrics(sandbox_id, **self._params())
        if not readings:
            return Metrics(timestamp=_now())
        last = max(readings, key=lambda m: m.timestamp)
        return Metrics(memory_bytes=last.mem_used, memory_limit_bytes=last.mem_total or None,
                       disk_bytes=last.disk_used, timestamp=last.timestamp)


# ---------------------------------------------------------------- helpers


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _psdk(metadata: Mapping[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(metadata.get(PSDK_KEY) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}

