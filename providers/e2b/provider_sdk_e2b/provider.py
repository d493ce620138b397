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

import asyncio
import atexit
import base64
import collections
import contextlib
import datetime as dt
import functools
import gc
import inspect
import json
import math
import posixpath
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import anyio
import attrs
import httpx
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b import AsyncSandbox, SandboxQuery
from e2b import SandboxState as E2BState
from e2b import exceptions as e2bx
from e2b.api import client_async
from e2b.api.client.api.sandboxes import get_sandboxes_sandbox_id
from e2b.api.client.models import SandboxDetail
from e2b.api.client.types import Unset
from e2b.api.client_async import get_api_client, get_envd_api
from e2b.connection_config import ConnectionConfig
from e2b.envd.client_async import as_stream, create_rpc_client
from e2b.envd.process import process_connect, process_pb
from e2b.sandbox.filesystem.filesystem import EntryInfo
from e2b.sandbox.filesystem.filesystem import FileType as E2BFileType
from packaging.version import Version
from protobuf import Oneof

from provider_sdk import errors, scripts
from provider_sdk.capabilities import Capability
from provider_sdk.config import Secret, env_setting
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.limits import OutputBuffer
from provider_sdk.models import (
    ExecResult,
    FileInfo,
    FileType,
    Lifecycle,
    Metrics,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
)
from provider_sdk.provider import Command, ProcessEvent, ProcessExit, ProcessOutput, SandboxProvider
from provider_sdk.sandbox import EmulatedShell
from provider_sdk_e2b import _e2b_templates, _shell

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from provider_sdk.sandbox import Sandbox, Shell

__all__ = ["E2BProvider"]

T = TypeVar("T")

ENVD_PORT = 49983
PSDK_KEY = "psdk"
"""Metadata key this provider reserves: the sandbox's working directory and idle window,
so a handle opened in another process behaves the same. Never shown in ``metadata``."""
_STDIN_CHUNK = 1 << 16
_KEEPALIVE = {"Keepalive-Ping-Interval": "50"}
_ROOT = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
"""envd runs a request as the user its basic authorization names: the tree kill runs
as root, so it reaches processes of every user."""
_YEAR = 365 * 86400.0
_KILL_WAIT = 30.0
_SYMLINK_HOPS = 40
"""Seconds the tree kill may take before the provider gives up on it."""


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


@attrs.define
class Remote:
    """What the control plane says about one sandbox, vendor-neutral enough for both
    flavors (E2B's typed models, Cube's raw JSON)."""

    id: str
    state: str
    template: str | None = None
    metadata: dict[str, str] = attrs.field(factory=dict)
    started_at: dt.datetime | None = None
    end_at: dt.datetime | None = None
    cpu: float | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    envd_version: str | None = None
    access_token: str | None = attrs.field(default=None, repr=False)
    domain: str | None = None
    extra: dict[str, Any] = attrs.field(factory=dict)
    sdk: AsyncSandbox | None = attrs.field(default=None, repr=False, eq=False)
    """The SDK's handle, when the SDK made one (create, connect)."""


class _Handle:
    """The data-plane clients of one sandbox, and what this provider knows of it."""

    def __init__(self, sandbox: AsyncSandbox, *, workdir: str | None,
                 renew: int | None) -> None:
        self.sandbox = sandbox
        self.rpc = create_rpc_client(process_connect.ProcessClient, sandbox.envd_api_url,
                                     sandbox.connection_config)
        self.health = get_envd_api(sandbox.connection_config, sandbox.envd_api_url,
                                   retry_connect=False)
        self.workdir = workdir
        self.renew = renew
        self.renewed_at = time.monotonic()


class _Proc:
    """A background process this provider started or attached to: its events so far.

    Output is kept up to ``LIMIT`` bytes; beyond that the oldest output is dropped
    (``first`` counts the events gone), never the exit.
    """

    LIMIT = 64 << 20

    def __init__(self) -> None:
        self.events: collections.deque[ProcessEvent | BaseException] = collections.deque()
        self.first = 0
        self.size = 0
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return bool(self.events) and not isinstance(self.events[-1], ProcessOutput)

    def push(self, event: ProcessEvent | BaseException) -> None:
        self.events.append(event)
        if isinstance(event, ProcessOutput):
            self.size += len(event.data)
            while self.size > self.LIMIT and isinstance(self.events[0], ProcessOutput):
                self.size -= len(self.events.popleft().data)  # type: ignore[union-attr]
                self.first += 1
        self.changed.set()
        self.changed = asyncio.Event()


class E2BProvider(SandboxProvider):
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
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.EXEC_STREAM,
        Capability.PROCESS_BACKGROUND,
        Capability.SHELL_PERSISTENT,
        Capability.PAUSE,
        Capability.PAUSE_MEMORY,
        Capability.LIFECYCLE_AUTO_PAUSE,
        Capability.LIFECYCLE_AUTO_RESUME,
        Capability.SNAPSHOT_FILESYSTEM,
        Capability.NETWORK_POLICY,
        Capability.NETWORK_UPDATE,
        Capability.LIST_METADATA,
        Capability.METRICS,
        Capability.TEMPLATES_BUILD,
    })
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
        key = api_key or env_setting(self.SETTINGS["api_key"], required=True, secret=True,
                                     provider=self.name)
        self._api_key = Secret(key if not isinstance(key, Secret) else key.reveal())
        self._api_url = api_url or self._setting("api_url")
        self._domain = domain or self._setting("domain")
        self._sandbox_url = sandbox_url or self._setting("sandbox_url")
        self._template = template or self._setting("template") or self.DEFAULT_TEMPLATE
        self._ready_timeout = self._number("ready_timeout", ready_timeout, 60.0)
        self._max_timeout = int(self._number("max_timeout", max_timeout, 3600))
        self._request_timeout = self._number("request_timeout", request_timeout, 60.0)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise errors.ConfigError(f"retries must be a non-negative integer, got {retries!r}",
                                     provider=self.name)
        self._retries = retries
        self._handles: dict[str, _Handle] = {}
        self._procs: dict[tuple[str, int], _Proc] = {}
        self._background: set[asyncio.Task[Any]] = set()

    def _setting(self, option: str) -> str | None:
        var = self.SETTINGS.get(option)
        return env_setting(var) if var is not None else None

    def _number(self, option: str, value: float | None, default: float) -> float:
        var = self.SETTINGS.get(option)
        if value is None and var is not None:
            raw = env_setting(var)
            try:
                value = float(raw) if raw is not None else None
            except ValueError:
                raise errors.ConfigError(f"the setting {var} must be a number of seconds, "
                                         f"got {raw!r}", provider=self.name) from None
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise errors.ConfigError(f"{option} must be a positive number, got {value!r}",
                                     provider=self.name)
        return float(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} api_url={self._api_url!r}>"

    async def aclose(self) -> None:
        tasks = [p.task for p in self._procs.values() if p.task is not None]
        tasks += list(self._background)
        for task in tasks:
            task.cancel()
        if tasks:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(tasks, timeout=5)
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

    def _sandbox_headers(self, sandbox_id: str, domain: str | None) -> dict[str, str]:
        """Headers every data-plane request of this sandbox carries."""
        return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(ENVD_PORT)}

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
                envd_access_token=remote.access_token, traffic_access_token=None,
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
        self._touch(sandbox_id, handle)
        return handle

    def _touch(self, sandbox_id: str, handle: _Handle) -> None:
        """Push the deadline back once half of the idle window has passed."""
        if handle.renew is None or time.monotonic() - handle.renewed_at < handle.renew / 2:
            return
        handle.renewed_at = time.monotonic()
        self._spawn(self._renew(sandbox_id, handle.renew))

    async def _renew(self, sandbox_id: str, seconds: int) -> None:
        with contextlib.suppress(e2bx.SandboxException, httpx.HTTPError):
            await AsyncSandbox.set_timeout(sandbox_id, seconds, **self._params())

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------ errors

    @contextlib.contextmanager
    def _translate(self, sandbox_id: str | None = None, *, what: str = "sandbox",
                   path: str | None = None) -> Iterator[None]:
        """The one place SDK and wire errors become neutral ones, most specific first.

        ``what`` says what a "not found" refers to: ``sandbox``, ``file``, ``process``,
        ``snapshot``, ``template`` or ``volume``.
        """
        try:
            yield
        except errors.SandboxError:
            raise
        except ConnectError as exc:
            if isinstance(exc.__cause__, asyncio.CancelledError):
                raise exc.__cause__ from None
            raise self._from_rpc(exc, sandbox_id, what, path) from exc
        except (e2bx.SandboxException, e2bx.AuthenticationException,
                e2bx.ServiceBusyException) as exc:
            raise self._from_sdk(exc, sandbox_id, what, path) from exc
        except httpx.TimeoutException as exc:
            raise errors.OperationTimeout(f"request timed out: {exc}", provider=self.name,
                                          sandbox_id=sandbox_id) from exc
        except (httpx.TransportError, ConnectionError) as exc:
            raise errors.Unavailable(f"cannot reach {self.name}: {exc}", provider=self.name,
                                     sandbox_id=sandbox_id) from exc

    def _not_found(self, what: str, message: str, sandbox_id: str | None) -> errors.SandboxError:
        kinds: dict[str, type[errors.NotFound]] = {
            "sandbox": errors.SandboxNotFound, "file": errors.FileNotFound,
            "process": errors.ProcessNotFound, "snapshot": errors.SnapshotNotFound,
            "template": errors.TemplateNotFound, "volume": errors.VolumeNotFound,
        }
        return kinds.get(what, errors.NotFound)(message, provider=self.name,
                                                sandbox_id=sandbox_id)

    def _from_message(self, message: str, sandbox_id: str | None,
                      path: str | None) -> errors.SandboxError | None:
        """Errors told apart only by envd's message."""
        text = message.lower()
        where = {"provider": self.name, "sandbox_id": sandbox_id}
        about = f"{path}: {message}" if path else message
        if "read-only" in text or "permission denied" in text:
            return errors.PermissionDenied(about, **where)
        if "not a directory" in text:
            return errors.NotADirectory(about, **where)
        if "is a directory" in text:
            return errors.IsADirectory(about, **where)
        if "not empty" in text:
            return errors.Conflict(about, **where)
        return None

    def _from_rpc(self, exc: ConnectError, sandbox_id: str | None, what: str,
                  path: str | None) -> errors.SandboxError:
        where = {"provider": self.name, "sandbox_id": sandbox_id}
        message = exc.message or str(exc)
        if exc.code == Code.NOT_FOUND:
            return self._not_found(what, f"{path}: {message}" if path else message,
                                   sandbox_id)
        if exc.code == Code.ALREADY_EXISTS:
            return errors.FileExists(f"{path}: {message}" if path else message, **where)
        if exc.code == Code.UNAUTHENTICATED:
            return errors.AuthenticationError(message, **where)
        if exc.code == Code.RESOURCE_EXHAUSTED:
            return errors.RateLimited(message, provider=self.name, sandbox_id=sandbox_id)
        if exc.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELED):
            if e2bx.is_sandbox_not_found_message(message):
                return errors.SandboxNotRunning(message, **where)
            if isinstance(exc.__cause__, TimeoutError):
                return errors.OperationTimeout(message, **where)
            return errors.Unavailable(message, **where)
        if e2bx.is_sandbox_not_found_message(message):  # the proxy: gone (502, Cube's 410)
            return errors.SandboxNotRunning(message, **where)
        specific = self._from_message(message, sandbox_id, path)
        if specific is not None:
            return specific
        if exc.code == Code.PERMISSION_DENIED:
            return errors.PermissionDenied(message, **where)
        if exc.code == Code.INVALID_ARGUMENT:
            return errors.InvalidInput(message, **where)
        return errors.SandboxError(f"{exc.code}: {message}", **where)

    def _from_sdk(self, exc: Exception, sandbox_id: str | None, what: str,
                  path: str | None) -> errors.SandboxError:
        where = {"provider": self.name, "sandbox_id": sandbox_id}
        message = str(exc)
        if isinstance(exc, e2bx.AuthenticationException):
            return errors.AuthenticationError(
                f"{self.name} refused the API key (check {self.SETTINGS['api_key']})", **where)
        if isinstance(exc, e2bx.RateLimitException):
            return errors.RateLimited(message, provider=self.name, sandbox_id=sandbox_id)
        if isinstance(exc, e2bx.ServiceBusyException):
            return errors.Unavailable(message, **where)
        if isinstance(exc, e2bx.SandboxNotFoundException):
            return errors.SandboxNotFound(message, **where)
        if isinstance(exc, e2bx.NotFoundException):
            return self._not_found(what, f"{path}: {message}" if path else message,
                                   sandbox_id)
        if isinstance(exc, e2bx.SandboxNotRunningException):
            return errors.SandboxNotRunning(message, **where)
        if isinstance(exc, e2bx.SandboxUnreachableException):
            return errors.Unavailable(message, **where)
        if isinstance(exc, e2bx.NotEnoughSpaceException):
            return errors.QuotaExceeded(message, **where)
        if e2bx.is_sandbox_not_found_message(message):  # the proxy: gone (502, Cube's 410)
            return errors.SandboxNotRunning(message, **where)
        specific = self._from_message(message, sandbox_id, path)
        if specific is not None:
            return specific
        if isinstance(exc, e2bx.InvalidArgumentException):
            return errors.InvalidInput(message, **where)
        if isinstance(exc, e2bx.TimeoutException):
            return errors.OperationTimeout(message, **where)
        status = getattr(exc, "status_code", None) or _status_prefix(message)
        if status == 404:
            return self._not_found(what, message, sandbox_id)
        if status == 409:
            return errors.Conflict(message, **where)
        if status in (502, 503, 504):
            return errors.Unavailable(message, **where)
        if status == 403:
            return errors.PermissionDenied(message, **where)
        if status == 400:
            return errors.InvalidInput(message, **where)
        return errors.SandboxError(message, **where)

    # ------------------------------------------------------------ readiness

    async def _wait_ready(self, sandbox_id: str, handle: _Handle) -> None:
        """Return once envd answers ``/health``; retry 502/503/504 and connection
        failures for ``ready_timeout`` seconds, then raise ``Unavailable``."""
        deadline = time.monotonic() + self._ready_timeout
        delay = 0.02
        last = "no answer"
        while True:
            remaining = deadline - time.monotonic()
            wait = delay
            with anyio.move_on_after(max(remaining, 0.01)):
                try:
                    response = await handle.health.get("/health",
                                                      timeout=max(0.01, min(5.0, remaining)))
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    if response.is_success:
                        return
                    last = f"HTTP {response.status_code}"
                    if response.status_code == 401:
                        raise errors.AuthenticationError(
                            "the sandbox's data plane refused the access token",
                            provider=self.name, sandbox_id=sandbox_id)
                    if response.status_code not in (502, 503, 504):
                        raise errors.SandboxError(f"the data plane answered {last}",
                                                  provider=self.name, sandbox_id=sandbox_id)
                    wait = max(delay, _retry_after(response) or 0.0)
            if time.monotonic() + wait > deadline:
                raise errors.Unavailable(
                    f"the sandbox's data plane did not answer within {self._ready_timeout:g} s "
                    f"(last: {last})", provider=self.name, sandbox_id=sandbox_id)
            await anyio.sleep(wait)
            delay = min(delay * 2, 1.0)

    async def _retrying(self, sandbox_id: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``; while a gateway answers for envd (so nothing ran), retry it for
        ``ready_timeout`` seconds. Anything that reached envd is never repeated."""
        deadline = time.monotonic() + self._ready_timeout
        delay = 0.02
        while True:
            try:
                return await op()
            except Exception as exc:
                if not _refused_by_gateway(exc) or time.monotonic() + delay > deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------ lifecycle

    def _timeouts(self, lifecycle: Lifecycle) -> tuple[int, int | None]:
        """The ``timeout`` to send, and the window to renew on use (``None``: never)."""
        seconds = (math.ceil(lifecycle.idle_timeout) if lifecycle.idle_timeout is not None
                   else self._max_timeout)
        return seconds, seconds

    def _lifecycle(self, lifecycle: Lifecycle) -> dict[str, Any] | None:
        if lifecycle.on_idle == "pause":
            return {"on_timeout": "pause", "auto_resume": lifecycle.auto_resume}
        if lifecycle.auto_resume:
            raise errors.InvalidInput(
                f"{self.name} resumes automatically only sandboxes it paused when idle: use "
                "Lifecycle(on_idle='pause', auto_resume=True)", provider=self.name)
        return {"on_timeout": "kill"}

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

    def _check_create(self, spec: SandboxSpec) -> None:
        if spec.resources != Resources():
            raise errors.UnsupportedCapability(
                "resources", provider=self.name,
                detail=f"{self.name} sizes sandboxes by template")
        if PSDK_KEY in spec.metadata:
            raise errors.InvalidInput(f"metadata: the key {PSDK_KEY!r} is reserved",
                                      provider=self.name)

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
        self._check_create(spec)
        timeout, renew = self._timeouts(spec.lifecycle)
        lifecycle = self._lifecycle(spec.lifecycle)
        allow_internet, network = self._network(spec.network)
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

    async def _create_remote(self, spec: SandboxSpec, *, timeout: int,
                             lifecycle: dict[str, Any] | None, allow_internet: bool,
                             network: dict[str, Any] | None,
                             metadata: dict[str, str]) -> Remote:
        """Ask the control plane for a sandbox; return what it answered."""
        sandbox = await AsyncSandbox.create(
            template=self._template_for(spec), timeout=timeout, metadata=metadata,
            envs=self._create_env(spec), allow_internet_access=allow_internet,
            network=network, lifecycle=lifecycle,  # type: ignore[arg-type]
            # The SDK retries 429/502/503/504; one key makes every retry the same create.
            idempotency_key=uuid.uuid4().hex, **self._params())
        return Remote(id=sandbox.sandbox_id, state="running", template=spec.template,
                      domain=sandbox.sandbox_domain, envd_version=str(sandbox._envd_version),
                      access_token=sandbox._envd_access_token, sdk=sandbox)

    async def _describe(self, sandbox_id: str) -> Remote:
        """The control plane's view of one sandbox; ``SandboxNotFound`` if unknown."""
        with self._translate(sandbox_id):
            response = await get_sandboxes_sandbox_id.asyncio_detailed(
                sandbox_id, client=get_api_client(self._config()))
            if response.status_code == 404:
                raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=self.name,
                                             sandbox_id=sandbox_id)
            if response.status_code >= 300 or not isinstance(response.parsed, SandboxDetail):
                from e2b.api import handle_api_exception
                raise handle_api_exception(response)
        return _detail_to_remote(response.parsed)

    def _to_info(self, remote: Remote) -> SandboxInfo:
        psdk = _psdk(remote.metadata)
        return SandboxInfo(
            id=remote.id, provider=self.name,
            state=self._STATES.get(remote.state, SandboxState.UNKNOWN),
            template=remote.template,
            metadata={k: v for k, v in remote.metadata.items() if k != PSDK_KEY},
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
            if proc.task is not None:
                proc.task.cancel()

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

    async def _connect_remote(self, sandbox_id: str, timeout: int | None) -> Remote:
        """Resume a paused sandbox (a no-op on a running one) on the control plane."""
        sandbox = await AsyncSandbox.connect(sandbox_id, timeout=timeout, **self._params())
        return Remote(id=sandbox.sandbox_id, state="running", domain=sandbox.sandbox_domain,
                      envd_version=str(sandbox._envd_version),
                      access_token=sandbox._envd_access_token, sdk=sandbox)

    # ------------------------------------------------------------ exec

    def _cwd(self, handle: _Handle, cwd: str | None) -> str | None:
        if cwd is None:
            return handle.workdir
        if cwd.startswith("/") or handle.workdir is None:
            return cwd
        return posixpath.join(handle.workdir, cwd)

    async def _open_process(self, sandbox_id: str, handle: _Handle, command: Command, *,
                            stdin: bool, timeout: float | None, as_root: bool = False
                            ) -> tuple[AsyncIterator[process_pb.StartResponse], int]:
        envs = {_shell.CALL_ENV: scripts.export_script(command.env)} if command.env else {}
        request = process_pb.StartRequest(
            process=process_pb.ProcessConfig(
                cmd="/bin/bash", args=["-l", "-c", _shell.command_text(command.argv)],
                envs=envs, cwd=self._cwd(handle, command.cwd)),
            stdin=stdin)
        # envd's own deadline is a backstop for a client that went away; the command's
        # timeout is enforced here, where the whole tree can be killed.
        # A timeout past a year is no deadline at all (and would overflow the header).
        backstop = None if timeout is None or timeout > _YEAR else int((timeout + 30) * 1000)
        headers = {**_KEEPALIVE, **(_ROOT if as_root else {})}

        async def start() -> tuple[AsyncIterator[process_pb.StartResponse], int]:
            events = as_stream(handle.rpc.start(request, headers=headers,
                                                timeout_ms=backstop))
            try:
                first = await self._first(sandbox_id, events)
            except BaseException:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await events.aclose()
                raise
            started = _payload(first)
            if isinstance(started, process_pb.ProcessEvent.StartEvent):
                return events, int(started.pid)
            await events.aclose()
            raise errors.SandboxError(f"envd did not report the process start: {first}",
                                      provider=self.name, sandbox_id=sandbox_id)

        with self._translate(sandbox_id):
            return await self._retrying(sandbox_id, start)

    async def _first(self, sandbox_id: str, events: AsyncIterator[T]) -> T:
        """The event that opens a process stream, within ``request_timeout``: a data
        plane that accepts the request and never answers does not hang the caller."""
        try:
            with anyio.fail_after(self._request_timeout):
                try:
                    return await events.__anext__()
                except ConnectError as exc:  # connectrpc wraps the scope's cancellation
                    if isinstance(exc.__cause__, asyncio.CancelledError):
                        raise exc.__cause__ from None
                    raise
        except TimeoutError:
            raise errors.Unavailable(f"envd did not start the process within "
                                     f"{self._request_timeout:g} s", provider=self.name,
                                     sandbox_id=sandbox_id) from None

    async def _exec(self, sandbox_id: str, command: Command) -> ExecResult:
        handle = await self._handle(sandbox_id)
        began = time.monotonic()
        events, pid = await self._open_process(sandbox_id, handle, command,
                                               stdin=command.stdin is not None,
                                               timeout=command.timeout)
        out, err = command.buffers()
        code: int | None = None
        try:
            with anyio.move_on_after(_deadline(command.timeout)) as scope:
                if command.stdin is None:
                    code = await self._drain(sandbox_id, events, out, err, command)
                else:
                    code = await self._drain_feeding(sandbox_id, handle, pid, events, out,
                                                     err, command, command.stdin)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._kill_tree(sandbox_id, handle, pid)
                await _aclose(events)
            raise
        if scope.cancelled_caught:
            with anyio.CancelScope(shield=True):
                await self._kill_tree(sandbox_id, handle, pid)
                await _aclose(events)
            partial = ExecResult(exit_code=-9, stdout_bytes=out.value(),
                                 stderr_bytes=err.value(), stdout_truncated=out.dropped,
                                 stderr_truncated=err.dropped, duration=time.monotonic() - began)
            raise errors.CommandTimeout(f"the command ran longer than {command.timeout:g} s",
                                        result=partial, provider=self.name,
                                        sandbox_id=sandbox_id)
        await _aclose(events)
        if code is None:
            raise errors.Unavailable("the command's output stream ended before its exit status",
                                     provider=self.name, sandbox_id=sandbox_id)
        return ExecResult(exit_code=code, stdout_bytes=out.value(), stderr_bytes=err.value(),
                          stdout_truncated=out.dropped, stderr_truncated=err.dropped,
                          duration=time.monotonic() - began)

    async def _drain(self, sandbox_id: str, events: AsyncIterator[process_pb.StartResponse],
                     out: OutputBuffer, err: OutputBuffer, command: Command) -> int | None:
        """Collect a process's output until its end event; return its exit code."""
        code = None
        with self._translate(sandbox_id, what="process"):
            async for event in events:
                ended = await _collect(event, out, err, command)
                code = ended if ended is not None else code
        return code

    async def _drain_feeding(self, sandbox_id: str, handle: _Handle, pid: int,
                             events: AsyncIterator[process_pb.StartResponse], out: OutputBuffer,
                             err: OutputBuffer, command: Command, data: bytes) -> int | None:
        """:meth:`_drain` while writing ``data`` to stdin (then closing it): reading and
        writing at once, so a command echoing a large input never blocks on its output."""
        codes: list[int | None] = []
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._feed, sandbox_id, handle, pid, data)
                codes.append(await self._drain(sandbox_id, events, out, err, command))
        except BaseExceptionGroup as group:  # one failure: raise it, not a group
            raise group.exceptions[0] from None
        return codes[0]

    async def _feed(self, sandbox_id: str, handle: _Handle, pid: int, data: bytes) -> None:
        for i in range(0, len(data), _STDIN_CHUNK):
            with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
                await handle.rpc.send_input(process_pb.SendInputRequest(
                    process=_selector(pid), input=_stdin(data[i:i + _STDIN_CHUNK])))
        with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
            await handle.rpc.close_stdin(process_pb.CloseStdinRequest(process=_selector(pid)))

    @contextlib.contextmanager
    def _deadline(self, sandbox_id: str) -> Iterator[None]:
        """Bound one data-plane call by ``request_timeout``: envd that accepts a request
        and never answers raises ``OperationTimeout`` instead of hanging the caller."""
        try:
            with anyio.fail_after(self._request_timeout):
                yield
        except TimeoutError:
            raise errors.OperationTimeout(
                f"envd did not answer within {self._request_timeout:g} s",
                provider=self.name, sandbox_id=sandbox_id) from None

    async def _kill_tree(self, sandbox_id: str, handle: _Handle, pid: int, *,
                         quiet: bool = True) -> bool:
        """Kill ``pid`` and everything it started (the core's tree kill, run as root);
        ``False`` if there was no such pid. Bounded: a sandbox that stops answering costs
        at most ``request_timeout`` plus :data:`_KILL_WAIT` seconds, then (unless
        ``quiet``) raises ``OperationTimeout`` or ``Unavailable``."""
        command = Command(argv=scripts.kill_tree_argv(pid), output_limit=4096)
        code = None
        with anyio.move_on_after(self._request_timeout + _KILL_WAIT) as scope:
            try:
                events, _ = await self._open_process(sandbox_id, handle, command, stdin=False,
                                                     timeout=_KILL_WAIT, as_root=True)
                with anyio.move_on_after(_KILL_WAIT):
                    code = await self._drain(sandbox_id, events, *command.buffers(), command)
                await _aclose(events)
            except (errors.SandboxNotFound, errors.SandboxNotRunning):
                return True  # the sandbox is gone or paused: nothing left to kill here
            except errors.SandboxError:
                if quiet:
                    return True
                raise
            with contextlib.suppress(ConnectError):
                await handle.rpc.send_signal(process_pb.SendSignalRequest(
                    process=_selector(pid), signal=process_pb.Signal.SIGKILL))
        if scope.cancelled_caught and not quiet:
            raise errors.OperationTimeout(
                f"killing process {pid} took longer than "
                f"{self._request_timeout + _KILL_WAIT:g} s", provider=self.name,
                sandbox_id=sandbox_id)
        return code != scripts.NO_SUCH_PROCESS

    # ------------------------------------------------------------ processes

    async def _start(self, sandbox_id: str, command: Command) -> int:
        handle = await self._handle(sandbox_id)
        events, pid = await self._open_process(sandbox_id, handle, command, stdin=True,
                                               timeout=None)
        proc = self._new_proc(sandbox_id, pid)
        proc.task = asyncio.ensure_future(self._pump(sandbox_id, proc, events))
        return pid

    def _new_proc(self, sandbox_id: str, pid: int) -> _Proc:
        """Keep a new process's events; forget the oldest finished ones past 256."""
        finished = [key for key, proc in self._procs.items() if proc.done]
        for key in finished[:max(0, len(finished) - 256)]:
            del self._procs[key]
        proc = self._procs[(sandbox_id, pid)] = _Proc()
        return proc

    async def _pump(self, sandbox_id: str, proc: _Proc, events: AsyncIterator[
            process_pb.StartResponse] | AsyncIterator[process_pb.ConnectResponse]) -> None:
        """Keep a started process's events, so ``wait`` works after it exited."""
        try:
            with self._translate(sandbox_id, what="process"):
                async for event in events:
                    for item in _to_events(event):
                        proc.push(item)
        except errors.SandboxError as exc:
            proc.push(exc)
        finally:
            await _aclose(events)
            if not proc.events or not isinstance(proc.events[-1], (ProcessExit, BaseException)):
                proc.push(errors.Unavailable("the process's output stream ended early",
                                             provider=self.name, sandbox_id=sandbox_id))

    async def _attach(self, sandbox_id: str, pid: int) -> _Proc:
        """The events of ``pid``: those kept since this provider started it, or, for a
        process started elsewhere, those from now on (kept from the first touch, so a
        ``wait`` after writing its stdin still sees its exit)."""
        proc = self._procs.get((sandbox_id, pid))
        if proc is not None:
            return proc
        handle = await self._handle(sandbox_id)

        async def attach() -> AsyncIterator[process_pb.ConnectResponse]:
            stream = as_stream(handle.rpc.connect(
                process_pb.ConnectRequest(process=_selector(pid)), headers=_KEEPALIVE))
            try:
                await self._first(sandbox_id, stream)  # the start event
            except BaseException:
                await _aclose(stream)
                raise
            return stream

        with self._translate(sandbox_id, what="process"):
            stream = await self._retrying(sandbox_id, attach)
        proc = self._procs.get((sandbox_id, pid)) or self._new_proc(sandbox_id, pid)
        if proc.task is None:
            proc.task = asyncio.ensure_future(self._pump(sandbox_id, proc, stream))
        else:
            await _aclose(stream)
        return proc

    async def _process_events(self, sandbox_id: str, pid: int) -> AsyncIterator[ProcessEvent]:
        proc = await self._attach(sandbox_id, pid)
        index = 0
        while True:
            changed = proc.changed
            while index < proc.first + len(proc.events):
                index = max(index, proc.first)  # output beyond the limit was dropped
                item = proc.events[index - proc.first]
                index += 1
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, ProcessExit):
                    return
            await changed.wait()

    async def _send_stdin(self, sandbox_id: str, pid: int, data: bytes) -> None:
        await self._attach(sandbox_id, pid)
        handle = await self._handle(sandbox_id)
        with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
            await self._retrying(sandbox_id, lambda: handle.rpc.send_input(
                process_pb.SendInputRequest(process=_selector(pid), input=_stdin(data))))

    async def _close_stdin(self, sandbox_id: str, pid: int) -> None:
        await self._attach(sandbox_id, pid)
        handle = await self._handle(sandbox_id)
        with self._deadline(sandbox_id), self._translate(sandbox_id, what="process"):
            await self._retrying(sandbox_id, lambda: handle.rpc.close_stdin(
                process_pb.CloseStdinRequest(process=_selector(pid))))

    async def _kill_process(self, sandbox_id: str, pid: int) -> None:
        handle = await self._handle(sandbox_id)
        if not await self._kill_tree(sandbox_id, handle, pid, quiet=False):
            raise errors.ProcessNotFound(f"no process {pid}", provider=self.name,
                                         sandbox_id=sandbox_id)

    async def _open_shell(self, sandbox: Sandbox, *, cwd: str | None,
                          env: Mapping[str, str]) -> Shell:
        return await EmulatedShell.open(sandbox, cwd=cwd, env=env)

    # ------------------------------------------------------------ files

    def _path(self, handle: _Handle, path: str) -> str:
        if path.startswith("/") or handle.workdir is None:
            return path
        return posixpath.join(handle.workdir, path)

    async def _read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        handle = await self._handle(sandbox_id)
        target = self._path(handle, path)
        await self._refuse_special(sandbox_id, handle, target, path)
        with self._translate(sandbox_id, what="file", path=path):
            reader = await self._retrying(sandbox_id, lambda: handle.sandbox.files.read(
                target, format="stream"))
        try:
            with self._translate(sandbox_id, what="file", path=path):
                async for chunk in reader:
                    yield bytes(chunk)
        finally:
            with anyio.CancelScope(shield=True):
                await reader.aclose()

    async def _refuse_special(self, sandbox_id: str, handle: _Handle, target: str,
                              path: str) -> None:
        """Raise ``NotARegularFile`` for a device, FIFO or socket, or a symlink to one,
        before anything is read: envd would stream ``/dev/zero`` forever and block on a
        FIFO. One stat (plus one per symlink followed). What is missing or a directory is
        left to the read, which says so."""
        seen = target
        for _ in range(_SYMLINK_HOPS):
            with self._translate(sandbox_id, what="file", path=path):
                entry = await self._retrying(
                    sandbox_id, functools.partial(handle.sandbox.files.get_info, seen))
            info = _to_file_info(entry)
            if info.type == FileType.SYMLINK and entry.symlink_target:
                seen = posixpath.normpath(posixpath.join(posixpath.dirname(seen),
                                                         entry.symlink_target))
                continue
            if info.type == FileType.OTHER:
                raise errors.NotARegularFile(
                    f"{path}: not a regular file (a device, FIFO or socket); refused before "
                    "reading", provider=self.name, sandbox_id=sandbox_id)
            return

    async def _write_file(self, sandbox_id: str, path: str,
                          chunks: AsyncIterator[bytes]) -> None:
        handle = await self._handle(sandbox_id)
        with self._translate(sandbox_id, what="file", path=path):
            await handle.sandbox.files.write(self._path(handle, path), chunks)

    async def _list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        handle = await self._handle(sandbox_id)
        target = self._path(handle, path)
        with self._translate(sandbox_id, what="file", path=path):
            entries = await self._retrying(sandbox_id, lambda: handle.sandbox.files.list(
                target, depth=1))
        return [_to_file_info(e) for e in entries]

    async def _stat(self, sandbox_id: str, path: str) -> FileInfo:
        handle = await self._handle(sandbox_id)
        target = self._path(handle, path)
        with self._translate(sandbox_id, what="file", path=path):
            entry = await self._retrying(sandbox_id, lambda: handle.sandbox.files.get_info(
                target))
        return _to_file_info(entry)

    async def _mkdir(self, sandbox_id: str, path: str, *, parents: bool,
                     exist_ok: bool) -> None:
        handle = await self._handle(sandbox_id)
        target = self._path(handle, path)
        if not parents:
            await self._stat(sandbox_id, posixpath.dirname(target.rstrip("/")) or "/")
        with self._translate(sandbox_id, what="file", path=path):
            made = await self._retrying(sandbox_id, lambda: handle.sandbox.files.make_dir(
                target))
        if not made:
            info = await self._stat(sandbox_id, target)
            if not exist_ok or info.type != FileType.DIRECTORY:
                raise errors.FileExists(f"{path}: already exists", provider=self.name,
                                        sandbox_id=sandbox_id)

    async def _remove(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        handle = await self._handle(sandbox_id)
        target = self._path(handle, path)
        info = await self._stat(sandbox_id, target)  # envd removes a missing path quietly
        if not recursive and info.type == FileType.DIRECTORY and \
                await self._list_dir(sandbox_id, target):
            raise errors.Conflict(f"{path}: the directory is not empty (use recursive=True)",
                                  provider=self.name, sandbox_id=sandbox_id)
        with self._translate(sandbox_id, what="file", path=path):
            await self._retrying(sandbox_id, lambda: handle.sandbox.files.remove(target))

    async def _rename(self, sandbox_id: str, src: str, dst: str) -> None:
        handle = await self._handle(sandbox_id)
        source, target = self._path(handle, src), self._path(handle, dst)
        with self._translate(sandbox_id, what="file", path=src):
            await self._retrying(sandbox_id, lambda: handle.sandbox.files.rename(
                source, target))

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

    async def _build_template(self, spec: TemplateSpec, *, force: bool,
                              on_progress: Callable[[str], None] | None) -> Template:
        return await _e2b_templates.build(self, spec, force=force, on_progress=on_progress)

    async def _list_templates(self) -> list[Template]:
        return await _e2b_templates.list_all(self)

    async def _delete_template(self, template_id: str) -> None:
        await _e2b_templates.delete(self, template_id)

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


def _selector(pid: int) -> process_pb.ProcessSelector:
    return process_pb.ProcessSelector(selector=cast(Any, Oneof("pid", pid)))


def _stdin(data: bytes) -> process_pb.ProcessInput:
    return process_pb.ProcessInput(input=cast(Any, Oneof("stdin", data)))


def _payload(event: process_pb.StartResponse | process_pb.ConnectResponse) -> Any:
    """The payload of a process event: a StartEvent, DataEvent, EndEvent or KeepAlive."""
    oneof = event.event.event if event.event is not None else None
    return oneof.value if oneof is not None else None


def _psdk(metadata: Mapping[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(metadata.get(PSDK_KEY) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _status_prefix(message: str) -> int | None:
    head = message.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdecimal() else None


def _refused_by_gateway(exc: BaseException) -> bool:
    """Whether a proxy answered instead of envd (502 other than "not found", 503, 504)
    or the connection never opened: in both cases the request did not run."""
    if isinstance(exc, ConnectError):
        if isinstance(exc.__cause__, (asyncio.CancelledError, TimeoutError)):
            return False
        if isinstance(exc.__cause__, ConnectionError):
            return True
        return exc.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) and \
            not e2bx.is_sandbox_not_found_message(exc.message or "") and exc.__cause__ is None
    if isinstance(exc, e2bx.SandboxUnreachableException):
        return True
    if isinstance(exc, e2bx.SandboxException) and \
            not isinstance(exc, e2bx.SandboxNotRunningException):
        # The SDK maps a gateway's 504 on an RPC to TimeoutException, raised while
        # handling the wire error: judge by that.
        if isinstance(exc.__context__, ConnectError):
            return _refused_by_gateway(exc.__context__)
        return _status_prefix(str(exc)) in (502, 503, 504)
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


async def _aclose(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await aclose()


def _to_events(event: process_pb.StartResponse | process_pb.ConnectResponse
               ) -> list[ProcessEvent]:
    payload = _payload(event)
    if isinstance(payload, process_pb.ProcessEvent.DataEvent) and payload.output is not None:
        stream, chunk = payload.output.field, payload.output.value
        if stream in ("stdout", "stderr") and chunk:
            return [ProcessOutput(stream, bytes(chunk))]
    elif isinstance(payload, process_pb.ProcessEvent.EndEvent):
        return [ProcessExit(_shell.exit_code(payload.exit_code, payload.status))]
    return []


def _deadline(timeout: float | None) -> float | None:
    """A command's timeout as a cancel scope's delay (past a year: none)."""
    return None if timeout is None or timeout > _YEAR else timeout


async def _collect(event: process_pb.StartResponse, out: OutputBuffer, err: OutputBuffer,
                   command: Command) -> int | None:
    """Add one event's output to the bounded ``out``/``err`` (the callbacks get every
    chunk); return the exit code if it was the end event."""
    code = None
    for item in _to_events(event):
        if isinstance(item, ProcessExit):
            code = item.exit_code
            continue
        (out if item.stream == "stdout" else err).append(item.data)
        callback = command.on_stdout if item.stream == "stdout" else command.on_stderr
        if callback is not None:
            result = callback(item.data)
            if inspect.isawaitable(result):
                await result
    return code


_FILE_TYPES = {E2BFileType.FILE: FileType.FILE, E2BFileType.DIR: FileType.DIRECTORY,
               E2BFileType.SYMLINK: FileType.SYMLINK}


def _to_file_info(entry: EntryInfo) -> FileInfo:
    kind = _FILE_TYPES.get(entry.type, FileType.OTHER) if entry.type else FileType.OTHER
    return FileInfo(path=entry.path, type=kind,
                    size=entry.size, mode=entry.mode & 0o7777,
                    modified_at=entry.modified_time, symlink_target=entry.symlink_target)


def _optional(value: Any) -> Any:
    return None if isinstance(value, Unset) else value


def _detail_to_remote(detail: SandboxDetail) -> Remote:
    metadata = _optional(detail.metadata)
    network = _optional(detail.network)
    return Remote(
        id=detail.sandbox_id, state=str(getattr(detail.state, "value", detail.state)),
        template=detail.template_id,
        metadata=dict(getattr(metadata, "additional_properties", metadata) or {}),
        started_at=detail.started_at, end_at=detail.end_at, cpu=detail.cpu_count,
        memory_mb=detail.memory_mb, disk_mb=detail.disk_size_mb,
        envd_version=detail.envd_version, access_token=_optional(detail.envd_access_token),
        domain=_optional(detail.domain), extra={
            "alias": _optional(detail.alias),
            "allow_internet": _optional(detail.allow_internet_access),
            "network": network.to_dict() if network is not None else None})
