"""The ports role of ``E2BProvider`` (``ports.expose``): E2B's own host routing.

E2B routes every port of a sandbox at ``<port>-<id>.<domain>`` (the SDK's
``get_host(port)``). The provider creates its sandboxes with ``allow_public_traffic:
false``, so E2B's edge refuses a request to such a port (403) unless it carries the
sandbox's traffic access token in the ``e2b-traffic-access-token`` header.

What an :class:`~provider_sdk.models.ExposedPort` means here, then:

- ``url`` and ``base_url`` are the same address, ``SCHEME://<port>-<id>.<domain>/``;
  E2B takes no token in a URL, so the URL alone is refused (no ``ports.url_token``);
- ``token`` is the sandbox's traffic access token, one for all its ports, and
  ``token_header`` names the header it goes in;
- E2B serves every port for the sandbox's life: ``unexpose`` has nothing to undo, and
  the address and token keep working until the sandbox ends (no ``ports.revoke``).

The scheme is that of the data plane's configured URL (``sandbox_url``, else
``api_url``): ``https`` unless the deployment is reached over plain HTTP.
"""

from __future__ import annotations

import urllib.parse

from provider_sdk import errors
from provider_sdk.models import ExposedPort
from provider_sdk_e2b._control import E2BControl
from provider_sdk_e2b._session import Session

__all__ = ["TRAFFIC_HEADER", "E2BPorts"]

TRAFFIC_HEADER = "e2b-traffic-access-token"
"""The header E2B's edge takes a sandbox's traffic access token from."""


class E2BPorts:
    """The ports role (see the module).

    Args:
        session: what the provider's roles share.
        control: the control plane, which opens a sandbox's clients and tells its
            traffic access token (on connect).
    """

    def __init__(self, session: Session, control: E2BControl) -> None:
        self.session = session
        self.control = control

    def _scheme(self) -> str:
        options = self.session.options
        for url in (options.sandbox_url, options.api_url):
            if url:
                return urllib.parse.urlsplit(url).scheme or "https"
        return "https"

    async def expose(self, sandbox_id: str, port: int) -> ExposedPort:
        handle = await self.control.handle(sandbox_id)
        if handle.traffic_token is None:  # opened from the sandbox's info: connect tells it
            remote = await self.control.describe(sandbox_id)
            if remote.state != "running":
                raise errors.SandboxNotRunning(f"sandbox {sandbox_id!r} is {remote.state}",
                                               state=remote.state, provider=self.session.name,
                                               sandbox_id=sandbox_id)
            with self.session.translate(sandbox_id):
                connected = await self.control.connect_remote(sandbox_id, handle.renew)
            if connected.sdk is not None:
                handle.traffic_token = connected.sdk.traffic_access_token
        if not handle.traffic_token:
            raise errors.Conflict(
                f"the ports of sandbox {sandbox_id!r} are public (it was made with public "
                "traffic, not by this provider): there is no token to guard them with",
                provider=self.session.name, sandbox_id=sandbox_id)
        url = f"{self._scheme()}://{handle.sandbox.get_host(port)}/"
        return ExposedPort(port=port, url=url, base_url=url, token=handle.traffic_token,
                           token_header=TRAFFIC_HEADER)

    async def unexpose(self, sandbox_id: str, port: int) -> None:
        """Nothing: E2B routes every port of a sandbox for its life."""
