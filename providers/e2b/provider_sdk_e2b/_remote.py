"""What ``E2BProvider`` knows of one sandbox: the control plane's view (``Remote``), the
data-plane clients opened for it (``_Handle``), and what opens them (``Handles``, which
the control plane is)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Protocol

import attrs
from e2b import AsyncSandbox
from e2b.api.client_async import get_envd_api
from e2b.envd.client_async import create_rpc_client
from e2b.envd.process import process_connect

__all__ = ["Handles", "Remote"]


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
        self.traffic_token: str | None = sandbox.traffic_access_token
        """The sandbox's traffic access token, once known (create and connect tell it)."""
        self.renewed_at = time.monotonic()


class Handles(Protocol):
    """What opens a sandbox's data-plane clients, for the roles that use them."""

    async def handle(self, sandbox_id: str) -> _Handle:
        """The sandbox's clients, opened on first use; pushes its deadline back."""
