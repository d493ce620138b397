"""``Shared``: what every role of a ``LocalProvider`` holds: the home, what this host and
mode allow, the registry of host ids and the port proxy.

Made once by the provider from its settings; the roles read it and never replace what it
holds. Only ``agent_timeout`` changes afterwards (set through the provider).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from provider_sdk.local import _ids
from provider_sdk.local._cgroups import Cgroup
from provider_sdk.local._home import Home
from provider_sdk.ports import PortProxy

__all__ = ["AGENT_TIMEOUT", "Shared"]

AGENT_TIMEOUT = 15.0


@attrs.define(eq=False, kw_only=True)
class Shared:
    """The state a local provider's roles share."""

    name: str
    """The provider's name, for errors and infos."""
    home: Home
    unisolated: bool
    """Sandboxes made by this instance run without bubblewrap."""
    cgroups: bool
    """cgroup v1 controllers are writable: each sandbox's tree has cgroups of its own."""
    quota: bool
    """Disk quotas hold (loop mounts, an isolated sandbox)."""
    separate: bool
    """Each sandbox has host ids of its own, and the agent a user of its own."""
    registry: _ids.Registry | None
    """Where sandboxes claim their slot of host ids (where ``separate``)."""
    ports: PortProxy
    """The proxy serving exposed ports (closed by the provider's ``aclose``)."""
    agent_timeout: float = AGENT_TIMEOUT
    """Seconds a sandbox's agent has to accept each call."""

    def cgroup(self, sandbox_id: str) -> Cgroup:
        """The sandbox's cgroups (they may not exist)."""
        return Cgroup(f"psdk-{self.home.tag}-{sandbox_id}")

    def status_path(self, sandbox_id: str, token: str) -> Path:
        """Where the host-side launcher records the sandbox's exit status (a file outside
        the sandbox's root, which nothing inside can write)."""
        return self.home.sandbox(sandbox_id) / f"exit-{token}"
