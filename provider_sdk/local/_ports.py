"""``LocalPorts``: the ports role of ``LocalProvider``: a proxy on 127.0.0.1 (the shared
:class:`~provider_sdk.ports.PortProxy`) whose connections the sandbox's agent makes to
the port inside, so the sandbox keeps loopback only.
"""

from __future__ import annotations

from provider_sdk.local._sandboxes import Sandboxes
from provider_sdk.models import ExposedPort

__all__ = ["LocalPorts"]


class LocalPorts:
    """Exposed ports of local sandboxes."""

    def __init__(self, sandboxes: Sandboxes) -> None:
        self._sandboxes = sandboxes

    async def expose(self, sandbox_id: str, port: int) -> ExposedPort:
        """Serve the port on 127.0.0.1 behind a token (the same while it is exposed)."""
        self._sandboxes.running(sandbox_id)
        return await self._sandboxes.shared.ports.expose(
            sandbox_id, port, lambda: self._sandboxes.running(sandbox_id).tunnel(port))

    async def unexpose(self, sandbox_id: str, port: int) -> None:
        """Stop serving the port."""
        await self._sandboxes.shared.ports.unexpose(sandbox_id, port)
