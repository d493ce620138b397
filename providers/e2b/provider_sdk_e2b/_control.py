"""The control-plane role of :class:`~provider_sdk_e2b.provider.E2BProvider`: E2B's REST
API through the ``e2b`` SDK (create, info, list, kill, pause and resume, snapshots,
metrics, network updates, template builds), and the data-plane clients it opens for
the other roles (:meth:`E2BControl.handle`).

How a sandbox is asked for, described and resumed, how a spec's lifecycle becomes its
timeout and its network the one asked for at create, and what headers reach its data
plane are the methods a flavour changes: :class:`~provider_sdk_e2b.cube.CubeControl`
overrides those (and adds Cube's parts) for CubeSandbox; the commands, files and ports
roles are the same for both.

Lifecycle mapping: E2B's ``timeout`` is an absolute deadline from create. The neutral
``Lifecycle(idle_timeout=T)`` becomes a deadline of ``T`` seconds that the control plane
pushes back (``set_timeout``) whenever the sandbox is used through the provider and half
the window has passed, so an unused sandbox ends between ``T/2`` and ``T`` after its
last use. ``idle_timeout=None`` asks for ``max_timeout`` (E2B has no "never") and renews
the same way. ``on_idle="pause"`` is E2B's auto-pause; ``auto_resume`` its auto-resume.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import json
import math
import time
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import anyio
import attrs
import httpx
from e2b import AsyncSandbox, SandboxQuery
from e2b import SandboxState as E2BState
from e2b import exceptions as e2bx
from e2b.api import handle_api_exception
from e2b.api.client.api.sandboxes import get_sandboxes_sandbox_id
from e2b.api.client.models import SandboxDetail
from e2b.api.client.types import Unset
from e2b.api.client_async import get_api_client
from packaging.version import Version

from provider_sdk import errors, scripts
from provider_sdk.models import (
    Lifecycle,
    Metrics,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
)
from provider_sdk.templates import TemplateBuilder
from provider_sdk_e2b import _e2b_templates, _shell
from provider_sdk_e2b._remote import Remote, _Handle
from provider_sdk_e2b._session import PSDK_KEY, Session, psdk_metadata

__all__ = ["ENVD_PORT", "E2BControl"]

ENVD_PORT = 49983


class E2BControl:
    """E2B's control plane, with its pausing, snapshots, metrics, network updates and
    template building parts (see the module).

    Args:
        session: what the provider's roles share.
    """

    PRIVATE_TRAFFIC: ClassVar[bool] = True
    """Sandboxes are made with ``allow_public_traffic: false``: their ports need the
    traffic access token (``ports.expose``)."""
    STATES: ClassVar[Mapping[str, SandboxState]] = {
        "running": SandboxState.RUNNING, "paused": SandboxState.PAUSED,
    }
    """The control plane's states, as neutral ones (others are ``UNKNOWN``)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def name(self) -> str:
        """The provider's name."""
        return self.session.name

    # ------------------------------------------------------------ data-plane clients

    async def handle(self, sandbox_id: str) -> _Handle:
        """The data-plane clients of a sandbox, opened from its info on first use; each
        use pushes its deadline back (see the module)."""
        handle = self.session.handles.get(sandbox_id)
        if handle is None:
            remote = await self.describe(sandbox_id)
            handle = self._open_handle(remote, psdk_metadata(remote.metadata))
            handle.renewed_at = 0.0  # unknown: renew on this first use
        await self._touch(sandbox_id, handle)
        return handle

    def _open_handle(self, remote: Remote, psdk: Mapping[str, Any]) -> _Handle:
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
                connection_config=self.session.config(extra_sandbox_headers=headers),
            )
        renew = psdk.get("idle")
        handle = _Handle(sandbox, workdir=psdk.get("cwd"),
                         renew=int(renew) if isinstance(renew, (int, float)) else None)
        self.session.handles[remote.id] = handle
        return handle

    async def _touch(self, sandbox_id: str, handle: _Handle) -> None:
        """Push the deadline back (in the background) once half of the idle window has
        passed."""
        if handle.renew is None or time.monotonic() - handle.renewed_at < handle.renew / 2:
            return
        handle.renewed_at = time.monotonic()
        await self.session.tasks.start_soon(self._renew, sandbox_id, handle.renew)

    async def _renew(self, sandbox_id: str, seconds: int) -> None:
        with contextlib.suppress(e2bx.SandboxException, httpx.HTTPError):
            await AsyncSandbox.set_timeout(sandbox_id, seconds, **self.session.params())

    # ------------------------------------------------------------ what a flavour changes

    def _sandbox_headers(self, sandbox_id: str, domain: str | None) -> dict[str, str]:
        """Headers every data-plane request of this sandbox carries."""
        return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(ENVD_PORT)}

    def _timeouts(self, lifecycle: Lifecycle) -> tuple[int, int | None]:
        """The ``timeout`` to send, and the window to renew on use (``None``: never)."""
        seconds = (math.ceil(lifecycle.idle_timeout) if lifecycle.idle_timeout is not None
                   else self.session.options.max_timeout)
        return seconds, seconds

    def _lifecycle(self, lifecycle: Lifecycle) -> dict[str, Any] | None:
        if lifecycle.on_idle == "pause":
            return {"on_timeout": "pause", "auto_resume": lifecycle.auto_resume}
        if lifecycle.auto_resume:
            raise errors.InvalidInput(
                f"{self.name} resumes automatically only sandboxes it paused when idle: use "
                "Lifecycle(on_idle='pause', auto_resume=True)", provider=self.name)
        return {"on_timeout": "kill"}

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
            idempotency_key=uuid.uuid4().hex, **self.session.params())
        return Remote(id=sandbox.sandbox_id, state="running", template=spec.template,
                      domain=sandbox.sandbox_domain, envd_version=str(sandbox._envd_version),
                      access_token=sandbox._envd_access_token, sdk=sandbox)

    async def describe(self, sandbox_id: str) -> Remote:
        """The control plane's view of one sandbox; ``SandboxNotFound`` if unknown."""
        with self.session.translate(sandbox_id):
            response = await get_sandboxes_sandbox_id.asyncio_detailed(
                sandbox_id, client=get_api_client(self.session.config()))
            if response.status_code == 404:
                raise errors.SandboxNotFound(f"no sandbox {sandbox_id!r}", provider=self.name,
                                             sandbox_id=sandbox_id)
            if response.status_code >= 300 or not isinstance(response.parsed, SandboxDetail):
                raise handle_api_exception(response)
        return _detail_to_remote(response.parsed)

    async def connect_remote(self, sandbox_id: str, timeout: int | None) -> Remote:
        """Resume a paused sandbox (a no-op on a running one) on the control plane."""
        sandbox = await AsyncSandbox.connect(sandbox_id, timeout=timeout,
                                             **self.session.params())
        return Remote(id=sandbox.sandbox_id, state="running", domain=sandbox.sandbox_domain,
                      envd_version=str(sandbox._envd_version),
                      access_token=sandbox._envd_access_token, sdk=sandbox)

    # ------------------------------------------------------------ create

    def _network(self, policy: NetworkPolicy) -> tuple[bool, dict[str, Any] | None]:
        """``allow_internet_access`` and the SDK's ``network`` options for a policy."""
        network: dict[str, Any] = {}
        if policy.allow_out:
            network["allow_out"] = list(policy.allow_out)
        if policy.deny_out:
            network["deny_out"] = list(policy.deny_out)
        return policy.allow_internet, network or None

    def _create_network(self, policy: NetworkPolicy) -> tuple[bool, dict[str, Any] | None]:
        """``_network`` at create, where the sandbox's ports are made private."""
        allow_internet, network = self._network(policy)
        if self.PRIVATE_TRAFFIC:
            network = {**(network or {}), "allow_public_traffic": False}
        return allow_internet, network

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
        template = spec.template or self.session.options.template
        if template is None:
            var = self.session.sources.get("template", "the template option")
            raise errors.ConfigError(f"no template: name one in the spec, or set {var}",
                                     provider=self.name)
        return template

    def _create_env(self, spec: SandboxSpec) -> dict[str, str]:
        env = dict(spec.env)
        if env:
            env[_shell.SPEC_ENV] = scripts.export_script(spec.env)
        return env

    async def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create a sandbox; return once its envd answers (see the module)."""
        timeout, renew = self._timeouts(spec.lifecycle)
        lifecycle = self._lifecycle(spec.lifecycle)
        allow_internet, network = self._create_network(spec.network)
        metadata = {**spec.metadata, **self._psdk_metadata(spec, renew)}
        what = "snapshot" if spec.snapshot is not None else "template"
        with self.session.translate(what=what):
            created = await self._create_remote(spec, timeout=timeout, lifecycle=lifecycle,
                                                allow_internet=allow_internet,
                                                network=network, metadata=metadata)
        try:
            handle = self._open_handle(created, {"cwd": spec.cwd, "idle": renew})
            await self.session.wait_ready(created.id, handle)
            if spec.cwd is not None:
                with self.session.translate(created.id, what="file", path=spec.cwd):
                    await handle.sandbox.files.make_dir(spec.cwd)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.kill(created.id)
            raise
        # What create answered, completed from the request (the client's clock for the
        # times) rather than asked again: ``info`` gives the control plane's view.
        started = created.started_at or _now()
        ends = started + dt.timedelta(seconds=timeout) if timeout > 0 else None
        return self._to_info(attrs.evolve(
            created, state="running", metadata=metadata, started_at=started,
            end_at=created.end_at or ends, template=self._template_for(spec)))

    # ------------------------------------------------------------ the others

    def _to_info(self, remote: Remote) -> SandboxInfo:
        psdk = psdk_metadata(remote.metadata)
        return SandboxInfo(
            id=remote.id, provider=self.name,
            state=self.STATES.get(remote.state, SandboxState.UNKNOWN),
            template=remote.template,
            metadata=remote.metadata,
            created_at=remote.started_at, expires_at=remote.end_at,
            resources=Resources(cpu=remote.cpu or None, memory_mb=remote.memory_mb or None,
                                disk_mb=remote.disk_mb or None),
            extra={"envd_version": remote.envd_version, "domain": remote.domain,
                   "cwd": psdk.get("cwd"), "idle_window": psdk.get("idle"), **remote.extra},
        )

    async def info(self, sandbox_id: str) -> SandboxInfo:
        """The control plane's view of the sandbox; ``SandboxNotFound`` if unknown."""
        return self._to_info(await self.describe(sandbox_id))

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        """Sandboxes, filtered on the control plane by metadata and state."""
        states = {SandboxState.RUNNING: [E2BState.RUNNING], SandboxState.PAUSED: [
            E2BState.PAUSED]}.get(state) if state is not None else None
        query = SandboxQuery(metadata=dict(metadata) or None, state=states)
        found: builtins.list[SandboxInfo] = []
        with self.session.translate():
            paginator = AsyncSandbox.list(query=query, **self.session.params())
            while paginator.has_next:
                for item in await paginator.next_items():
                    found.append(self._to_info(Remote(
                        id=item.sandbox_id, state=str(item.state.value),
                        template=item.template_id, metadata=dict(item.metadata or {}),
                        started_at=item.started_at, end_at=item.end_at,
                        cpu=item.cpu_count, memory_mb=item.memory_mb,
                        envd_version=item.envd_version, domain=item.sandbox_domain)))
        return found

    async def kill(self, sandbox_id: str) -> None:
        """Kill the sandbox and forget its clients and processes."""
        self.session.forget(sandbox_id)
        with self.session.translate(sandbox_id):
            await AsyncSandbox.kill(sandbox_id, **self.session.params())

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        """Pause (memory too); the sandbox's info after."""
        with self.session.translate(sandbox_id):
            await AsyncSandbox.pause(sandbox_id, **self.session.params())
        return await self.info(sandbox_id)

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        """Resume with the sandbox's idle window again; return once envd answers."""
        handle = self.session.handles.get(sandbox_id)
        psdk = ({"cwd": handle.workdir, "idle": handle.renew} if handle
                else psdk_metadata((await self.describe(sandbox_id)).metadata))
        renew = psdk.get("idle")
        with self.session.translate(sandbox_id):  # the resumed sandbox gets its window again
            remote = await self.connect_remote(
                sandbox_id, int(renew) if isinstance(renew, (int, float)) else None)
        handle = self._open_handle(remote, psdk)
        await self.session.wait_ready(sandbox_id, handle)
        return await self.info(sandbox_id)

    async def snapshot(self, sandbox_id: str) -> Snapshot:
        """Snapshot the sandbox's filesystem."""
        with self.session.translate(sandbox_id):
            info = await AsyncSandbox.create_snapshot(sandbox_id, **self.session.params())
        return Snapshot(id=info.snapshot_id, provider=self.name, sandbox_id=sandbox_id,
                        captures=frozenset({"filesystem"}), created_at=_now(),
                        extra={"names": list(info.names)})

    async def list_snapshots(self, sandbox_id: str | None) -> builtins.list[Snapshot]:
        """Snapshots, of one sandbox where ``sandbox_id`` is given."""
        found: builtins.list[Snapshot] = []
        with self.session.translate(sandbox_id):
            paginator = AsyncSandbox.list_snapshots(sandbox_id=sandbox_id,
                                                    **self.session.params())
            while paginator.has_next:
                for info in await paginator.next_items():
                    found.append(Snapshot(id=info.snapshot_id, provider=self.name,
                                          sandbox_id=sandbox_id,
                                          captures=frozenset({"filesystem"}),
                                          extra={"names": list(info.names)}))
        return found

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; ``SnapshotNotFound`` if unknown."""
        with self.session.translate(what="snapshot"):
            deleted = await AsyncSandbox.delete_snapshot(snapshot_id, **self.session.params())
        if not deleted:
            raise errors.SnapshotNotFound(f"no snapshot {snapshot_id!r}", provider=self.name)

    def template_builder(self) -> TemplateBuilder:
        """E2B's template builder, through the SDK."""
        return _e2b_templates.E2BTemplates(
            provider=self.name, params=self.session.params,
            translate=lambda: self.session.translate(what="template"))

    async def update_network(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        """Apply ``policy`` to the running sandbox."""
        allow_internet, network = self._network(policy)
        update: dict[str, Any] = {"allow_internet_access": allow_internet, **(network or {})}
        with self.session.translate(sandbox_id):
            await AsyncSandbox.update_network(  # type: ignore[call-overload]
                sandbox_id, update, **self.session.params())

    async def metrics(self, sandbox_id: str) -> Metrics:
        """The latest reading of the sandbox's resource use."""
        with self.session.translate(sandbox_id):
            readings = await AsyncSandbox.get_metrics(sandbox_id, **self.session.params())
        if not readings:
            return Metrics(timestamp=_now())
        last = max(readings, key=lambda m: m.timestamp)
        return Metrics(memory_bytes=last.mem_used, memory_limit_bytes=last.mem_total or None,
                       disk_bytes=last.disk_used, timestamp=last.timestamp)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


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
