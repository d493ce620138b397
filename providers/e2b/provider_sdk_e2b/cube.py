"""``CubeProvider``: CubeSandbox, which speaks E2B's protocol. Every difference from
:class:`~provider_sdk_e2b.provider.E2BProvider` lives in this module, and only here:
``CubeProvider`` is E2B's composition (the same commands, files and ports roles over
envd, around the same kind of shared session) with ``CubeControl`` as its control
plane: E2B's control plane with Cube's requests where they differ, and Cube's own
parts (volumes, rollback, template builds).

What differs, and how it is handled:

- settings: ``CUBE_API_URL`` (required), ``CUBE_API_KEY``, ``CUBE_TEMPLATE_ID`` (Cube
  has no ``base``), ``CUBE_SANDBOX_DOMAIN``; the data plane is CubeProxy, reached like
  the Cube SDK does: plain HTTP to ``CUBE_PROXY_NODE_IP:CUBE_PROXY_PORT_HTTP`` with
  ``Host: <port>-<id>.<domain>`` (unset: the SDK's ``https://<port>-<id>.<domain>``);
- released versions answer 405 to ``POST /v2/sandboxes``: create falls back to the v1
  route, remembered per provider; Cube-only requests (read-only mounts, never-expiring
  sandboxes) go to v1 directly, and so does connect (every release serves v1);
- the timeout is an idle window, not a deadline: ``Lifecycle.idle_timeout`` maps onto
  it as is (``None``: ``-1``, never), with nothing to renew;
- sandbox info comes in camelCase and snake_case, ``endAt`` is absent for
  never-expiring sandboxes and ``state`` may be ``pausing``: info and lists are parsed
  here, tolerantly, from the raw JSON;
- pause answers at once and the sandbox is ``pausing`` before ``paused``: pause waits;
- extras: volumes (read-only per mount), in-place rollback
  (:meth:`CubeProvider.ex_rollback`); no metrics, no private ports (the class does not
  declare them, so no call reaches those parts of the roles);
- templates: Cube builds none from Dockerfiles; the image is built here, given envd,
  pushed to a registry and made a template through Cube's template API (the control
  plane's template building part, ``_cube_templates.CubeTemplates``;
  :class:`CubeProvider`'s ``registry`` and ``envd`` settings).
"""

from __future__ import annotations

import builtins
import datetime as dt
import math
import re
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
from e2b import exceptions as e2bx
from e2b.api import handle_api_exception
from e2b.api.client_async import get_api_client

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.models import (
    Lifecycle,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Volume,
)
from provider_sdk.retry import Attempts, Backoff
from provider_sdk.settings import Settings
from provider_sdk_e2b._capabilities import PROVIDER_CAPABILITIES
from provider_sdk_e2b._control import ENVD_PORT, E2BControl
from provider_sdk_e2b._cube_templates import CubeTemplates
from provider_sdk_e2b._remote import Remote
from provider_sdk_e2b._session import Options, Session
from provider_sdk_e2b.provider import E2BProvider

__all__ = ["CubeControl", "CubeProvider"]

_PAUSE_POLL = Backoff(initial=0.05, factor=1, cap=0.05)
"""How often a pausing sandbox's state is asked for."""


class CubeControl(E2BControl):
    """Cube's control plane: E2B's, with Cube's raw requests (v1 where v2 is missing),
    its idle window as the timeout, its data-plane headers, public traffic and its
    ``pausing`` state; and Cube's parts: volumes, rollback, template builds.

    Args:
        session: what the provider's roles share.
        node: CubeProxy's address, where the data plane is reached by ``Host``.
        registry: where template builds push their images (``HOST:PORT``).
        envd: an envd binary to add to images that lack one.
    """

    # CubeProxy asks a sandbox with private traffic for its token on envd too, and Cube
    # tells it at create only: a handle opened elsewhere could not reach envd.
    PRIVATE_TRAFFIC: ClassVar[bool] = False
    STATES: ClassVar[Mapping[str, SandboxState]] = {
        **E2BControl.STATES, "pausing": SandboxState.PAUSING,
    }

    def __init__(self, session: Session, *, node: str | None, registry: str | None,
                 envd: str | None) -> None:
        super().__init__(session)
        self._node = node
        self._v1 = False  # set once the control plane answered 405 to a v2 route
        self._templates = CubeTemplates(call=self._template_call, provider=session.name,
                                        registry=registry, envd=envd)

    def _sandbox_headers(self, sandbox_id: str, domain: str | None) -> dict[str, str]:
        headers = super()._sandbox_headers(sandbox_id, domain)
        # CubeAPI with auth on checks the key on the data plane too (Cube's envd has no
        # access token), as the cubesandbox SDK sends it.
        headers["X-API-Key"] = self.session.options.api_key.reveal()
        if self._node:  # CubeProxy routes by Host
            domain = domain or self.session.options.domain or "cube.app"
            headers["Host"] = f"{ENVD_PORT}-{sandbox_id}.{domain}"
        return headers

    async def _call(self, method: str, path: str, *, json: Any = None,
                    params: Mapping[str, str] | None = None,
                    headers: Mapping[str, str] | None = None) -> Any:
        """One raw control-plane request with the SDK's client (auth, retries)."""
        client = get_api_client(self.session.config()).get_async_httpx_client()
        response = await client.request(method, path, json=json, params=params,
                                        headers=headers)
        if response.status_code >= 300:
            raise handle_api_exception(response)
        return response.json() if response.content else None

    def _timeouts(self, lifecycle: Lifecycle) -> tuple[int, int | None]:
        idle = lifecycle.idle_timeout
        return (math.ceil(idle) if idle is not None else -1), None

    def _lifecycle(self, lifecycle: Lifecycle) -> dict[str, Any] | None:
        return {"on_timeout": lifecycle.on_idle, "auto_resume": lifecycle.auto_resume}

    async def _create_remote(self, spec: SandboxSpec, *, timeout: int,
                             lifecycle: dict[str, Any] | None, allow_internet: bool,
                             network: dict[str, Any] | None,
                             metadata: dict[str, str]) -> Remote:
        lc = lifecycle or {}
        v1_only = timeout < 0 or bool(spec.volumes) or (
            bool(lc.get("auto_resume")) and lc.get("on_timeout") == "kill")
        if not (self._v1 or v1_only):
            try:
                return await super()._create_remote(
                    spec, timeout=timeout, lifecycle=lifecycle, allow_internet=allow_internet,
                    network=network, metadata=metadata)
            except e2bx.SandboxException as exc:
                if exc.status_code != 405:
                    raise
                self._v1 = True
        body: dict[str, Any] = {
            "templateID": self._template_for(spec), "timeout": timeout, "metadata": metadata,
            "envVars": self._create_env(spec), "allow_internet_access": allow_internet,
            "lifecycle": {"onTimeout": lc.get("on_timeout", "kill"),
                          "autoResume": bool(lc.get("auto_resume"))},
        }
        if network:
            body["network"] = {"allowOut": network.get("allow_out", []),
                               "denyOut": network.get("deny_out", [])}
        if spec.volumes:
            ids = {v.name: v.id for v in await self.list_volumes()}
            missing = [m.volume for m in spec.volumes if m.volume not in ids]
            if missing:
                raise errors.VolumeNotFound(f"no volume {missing[0]!r}", provider=self.name)
            body["volumeMounts"] = [{"name": ids[m.volume], "path": m.path,
                                     "readOnly": m.read_only} for m in spec.volumes]
        return _to_remote(await self._call("POST", "/sandboxes", json=body, headers={
            "Idempotency-Key": uuid.uuid4().hex}))

    async def connect_remote(self, sandbox_id: str, timeout: int | None) -> Remote:
        # Every release serves v1 connect; v2's 404 would read as "no such sandbox".
        body = {"timeout": timeout} if timeout else {}
        return _to_remote(await self._call("POST", f"/sandboxes/{_quote(sandbox_id)}/connect",
                                           json=body))

    async def describe(self, sandbox_id: str) -> Remote:
        with self.session.translate(sandbox_id):
            return _to_remote(await self._call("GET", f"/sandboxes/{_quote(sandbox_id)}"))

    async def list(self, *, metadata: Mapping[str, str],
                   state: SandboxState | None) -> builtins.list[SandboxInfo]:
        """Sandboxes, filtered on the control plane by metadata."""
        params = {"metadata": urllib.parse.urlencode(
            {urllib.parse.quote(k): urllib.parse.quote(v) for k, v in metadata.items()})
        } if metadata else None
        with self.session.translate():
            items = await self._call("GET", "/sandboxes", params=params)
        return [self._to_info(_to_remote(item)) for item in items or []]

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        """Pause, then wait while the sandbox is ``pausing``."""
        info = await super().pause(sandbox_id)
        ready_timeout = self.session.options.ready_timeout
        async for attempt in Attempts(_PAUSE_POLL, timeout=ready_timeout):
            if attempt > 1:
                info = await self.info(sandbox_id)
            if info.state != SandboxState.PAUSING:
                return info
        raise errors.OperationTimeout(
            f"still pausing after {ready_timeout:g} s", provider=self.name,
            sandbox_id=sandbox_id)

    # ------------------------------------------------------------ templates

    async def _template_call(self, method: str, path: str, *, json: Any = None) -> Any:
        with self.session.translate(what="template"):
            return await self._call(method, path, json=json)

    def template_builder(self) -> CubeTemplates:
        """Cube's template builder: images built here, made templates by Cube."""
        return self._templates

    # ------------------------------------------------------------ rollback, volumes

    async def rollback(self, sandbox_id: str, snapshot_id: str) -> SandboxInfo:
        """Restore the sandbox in place from a snapshot; return once envd answers."""
        with self.session.translate(sandbox_id, what="snapshot"):
            await self._call("POST", f"/sandboxes/{_quote(sandbox_id)}/rollback",
                             json={"snapshotID": snapshot_id})
        self.session.handles.pop(sandbox_id, None)  # CubeProxy's routes changed: new clients
        await self.session.wait_ready(sandbox_id, await self.handle(sandbox_id))
        return await self.info(sandbox_id)

    async def create_volume(self, name: str) -> Volume:
        """Create a volume; ``Conflict`` if one has that name."""
        if name in {v.name for v in await self.list_volumes()}:
            raise errors.Conflict(f"volume {name!r} already exists", provider=self.name)
        with self.session.translate(what="volume"):
            return self._to_volume(await self._call("POST", "/volumes", json={"name": name}))

    async def get_volume(self, name: str) -> Volume:
        """A volume by name; ``VolumeNotFound`` if unknown."""
        for volume in await self.list_volumes():
            if volume.name == name:
                return volume
        raise errors.VolumeNotFound(f"no volume {name!r}", provider=self.name)

    async def list_volumes(self) -> builtins.list[Volume]:
        """Every volume."""
        with self.session.translate(what="volume"):
            return [self._to_volume(v) for v in await self._call("GET", "/volumes") or []]

    async def delete_volume(self, name: str) -> None:
        """Delete a volume."""
        volume = await self.get_volume(name)
        with self.session.translate(what="volume"):
            await self._call("DELETE", f"/volumes/{_quote(volume.id)}")

    def _to_volume(self, data: Mapping[str, Any]) -> Volume:
        return Volume(id=_pick(data, "volumeID", "volume_id"), name=_pick(data, "name"),
                      provider=self.name)


class CubeProvider(E2BProvider):
    """Sandboxes on CubeSandbox: E2B's roles, with Cube's control plane
    (``CubeControl``).

    Takes :class:`E2BProvider`'s options, read from Cube's settings: ``api_key``
    [``CUBE_API_KEY``, required], ``api_url`` [``CUBE_API_URL``, required], ``domain``
    [``CUBE_SANDBOX_DOMAIN``], ``template`` [``CUBE_TEMPLATE_ID``], ``ready_timeout``
    [``PSDK_CUBE_READY_TIMEOUT``]; ``proxy_node_ip`` [``CUBE_PROXY_NODE_IP``] and
    ``proxy_port`` [``CUBE_PROXY_PORT_HTTP``, default 80]: when set, the data plane is
    reached over plain HTTP there, with CubeProxy's ``Host`` header. There is no
    ``max_timeout``: Cube's timeout is an idle window, and ``None`` means never.

    Template builds: ``registry`` [``PSDK_REGISTRY``, ``HOST:PORT``; credentials from
    ``PSDK_REGISTRY_USERNAME`` and ``PSDK_REGISTRY_PASSWORD``] receives the images;
    ``envd`` [``PSDK_CUBE_ENVD``] is an envd binary added to images that lack one.
    """

    name: ClassVar[str] = "cube"
    capabilities: ClassVar[frozenset[Capability]] = PROVIDER_CAPABILITIES["CubeProvider"]
    SETTINGS: ClassVar[Mapping[str, str]] = {
        "api_key": "CUBE_API_KEY", "api_url": "CUBE_API_URL", "domain": "CUBE_SANDBOX_DOMAIN",
        "template": "CUBE_TEMPLATE_ID", "ready_timeout": "PSDK_CUBE_READY_TIMEOUT",
        "proxy_node_ip": "CUBE_PROXY_NODE_IP", "proxy_port": "CUBE_PROXY_PORT_HTTP",
    }
    DEFAULT_TEMPLATE: ClassVar[str | None] = None
    template_support: ClassVar[TemplateSupport] = TemplateSupport(options={
        "start_cmd": "a Cube template starts envd, as its entrypoint; start the command "
                     "in the sandbox instead",
        "ready_cmd": "Cube's readiness probe is envd's /health; no command is run",
    })

    def __init__(self, *, api_key: str | None = None, api_url: str | None = None,
                 domain: str | None = None, sandbox_url: str | None = None,
                 template: str | None = None, ready_timeout: float | None = None,
                 request_timeout: float = 60.0, retries: int = 3,
                 proxy_node_ip: str | None = None, proxy_port: int | None = None,
                 registry: str | None = None, envd: str | None = None) -> None:
        settings = Settings(self.name, self.SETTINGS)
        options = Options.read(
            settings, api_key=api_key, api_url=api_url, domain=domain,
            sandbox_url=sandbox_url, template=template,
            default_template=self.DEFAULT_TEMPLATE, ready_timeout=ready_timeout,
            max_timeout=3600, request_timeout=request_timeout, retries=retries)
        settings.url("api_url", options.api_url, required=True)
        node = settings.text("proxy_node_ip", proxy_node_ip)
        node_port = settings.integer("proxy_port", proxy_port, default=80)
        if node and not options.sandbox_url:
            options = attrs.evolve(options, sandbox_url=f"http://{node}:{node_port}")
        session = Session(self.name, options, self.SETTINGS)
        self._compose(session, CubeControl(session, node=node, registry=registry,
                                           envd=envd))

    async def ex_rollback(self, sandbox_id: str, snapshot_id: str) -> SandboxInfo:
        """Restore a sandbox in place (same id) from a snapshot: files and memory.

        Cube only; also reachable as ``sandbox.rollback(snapshot)``. Returns once the
        sandbox's data plane answers again.
        """
        return await self._rollback(sandbox_id, snapshot_id)


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _pick(data: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` present: Cube answers in camelCase, snake_case, or both."""
    for key in keys:
        if data.get(key) is not None:
            return data[key]
    return None


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))  # RFC 3339
    return dt.datetime.fromisoformat(text)


def _to_remote(data: Mapping[str, Any]) -> Remote:
    return Remote(
        id=_pick(data, "sandboxID", "sandbox_id"), state=_pick(data, "state") or "running",
        template=_pick(data, "templateID", "template_id"),
        metadata=dict(_pick(data, "metadata") or {}),
        started_at=_time(_pick(data, "startedAt", "started_at")),
        end_at=_time(_pick(data, "endAt", "end_at")),  # absent: never expires
        cpu=_pick(data, "cpuCount", "cpu_count"), memory_mb=_pick(data, "memoryMB", "memory_mb"),
        disk_mb=_pick(data, "diskSizeMB", "disk_size_mb"),
        envd_version=_pick(data, "envdVersion", "envd_version"),
        access_token=_pick(data, "envdAccessToken", "envd_access_token"),
        domain=_pick(data, "domain", "sandbox_domain"),
        extra={"cpu_milli": _pick(data, "cpuMilli", "cpu_milli"), "alias": _pick(data, "alias"),
               "allow_internet": _pick(data, "allowInternetAccess", "allow_internet_access"),
               "network": _pick(data, "network")})
