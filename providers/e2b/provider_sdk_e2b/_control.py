"""The control plane of :class:`~provider_sdk_e2b.provider.E2BProvider`: how a sandbox is
asked for, described and resumed, how a spec's lifecycle becomes its timeout and its
network the one asked for at create, and what headers reach its data plane.

This is the seam of E2B's flavours. :class:`E2BControlPlane` is E2B's own;
:class:`~provider_sdk_e2b.cube.CubeControlPlane` overrides these methods, and only
these, for CubeSandbox. Everything else a flavour changes is a neutral hook of
:class:`~provider_sdk.provider.SandboxProvider` (listing, pausing, volumes, templates).
"""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

from e2b import AsyncSandbox
from e2b.api.client.api.sandboxes import get_sandboxes_sandbox_id
from e2b.api.client.models import SandboxDetail
from e2b.api.client.types import Unset
from e2b.api.client_async import get_api_client

from provider_sdk import errors
from provider_sdk.models import Lifecycle, NetworkPolicy, SandboxSpec
from provider_sdk_e2b._remote import Remote

if TYPE_CHECKING:
    import contextlib

    from e2b.connection_config import ConnectionConfig

__all__ = ["ENVD_PORT", "E2BControlPlane"]

ENVD_PORT = 49983


class E2BControlPlane:
    """E2B's control plane, for ``E2BProvider``; a flavour overrides these methods."""

    name: ClassVar[str]
    PRIVATE_TRAFFIC: ClassVar[bool] = True
    """Sandboxes are made with ``allow_public_traffic: false``: their ports need the
    traffic access token (``ports.expose``)."""
    _max_timeout: int

    if TYPE_CHECKING:
        def _params(self) -> dict[str, Any]: ...
        def _config(self, **extra: Any) -> ConnectionConfig: ...
        def _translate(self, sandbox_id: str | None = None, *, what: str = "sandbox",
                       path: str | None = None) -> contextlib.AbstractContextManager[None]: ...
        def _template_for(self, spec: SandboxSpec) -> str: ...
        def _create_env(self, spec: SandboxSpec) -> dict[str, str]: ...
        def _network(self, policy: NetworkPolicy) -> tuple[bool, dict[str, Any] | None]: ...

    def _sandbox_headers(self, sandbox_id: str, domain: str | None) -> dict[str, str]:
        """Headers every data-plane request of this sandbox carries."""
        return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(ENVD_PORT)}

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

    def _create_network(self, policy: NetworkPolicy) -> tuple[bool, dict[str, Any] | None]:
        """``_network`` at create, where the sandbox's ports are made private."""
        allow_internet, network = self._network(policy)
        if self.PRIVATE_TRAFFIC:
            network = {**(network or {}), "allow_public_traffic": False}
        return allow_internet, network

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

    async def _connect_remote(self, sandbox_id: str, timeout: int | None) -> Remote:
        """Resume a paused sandbox (a no-op on a running one) on the control plane."""
        sandbox = await AsyncSandbox.connect(sandbox_id, timeout=timeout, **self._params())
        return Remote(id=sandbox.sandbox_id, state="running", domain=sandbox.sandbox_domain,
                      envd_version=str(sandbox._envd_version),
                      access_token=sandbox._envd_access_token, sdk=sandbox)


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
