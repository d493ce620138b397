"""The Docker Engine provider: sandboxes as hardened containers (entry point ``docker``).

Its capabilities are declared here, as data (``PROVIDER_CAPABILITIES``), so ``psdk
providers`` reads them without importing the ``docker`` package; the classes are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.capabilities import Capability
from provider_sdk.lazy import lazy_exports

if TYPE_CHECKING:
    from provider_sdk_docker._engine import Engine
    from provider_sdk_docker.provider import DEFAULT_TEMPLATE, DockerProvider

__all__ = ["BASE_CAPABILITIES", "BOUNDED_CAPABILITIES", "DEFAULT_TEMPLATE",
           "HOST_CAPABILITIES", "PROVIDER_CAPABILITIES", "QUOTA_CAPABILITIES",
           "DockerProvider", "Engine"]

#: What every sandbox has, wherever the Engine runs.
BASE_CAPABILITIES = frozenset({
    Capability.EXEC_STREAM,
    Capability.EXEC_USER,
    Capability.PROCESS_BACKGROUND,
    Capability.SHELL_PERSISTENT,
    Capability.SHELL_STDIN,
    Capability.PAUSE,
    Capability.PAUSE_MEMORY,
    Capability.SNAPSHOT_FILESYSTEM,
    Capability.VOLUMES,
    Capability.VOLUMES_SHARED,
    Capability.VOLUMES_READ_ONLY,
    # Internet on or off; the Engine has no per-destination egress rules (allow_out,
    # deny_out), and a container no idle notion (lifecycle.auto_kill).
    Capability.NETWORK_POLICY,
    Capability.NETWORK_INTERNET,
    Capability.LIST_METADATA,
    Capability.METRICS,
    Capability.RESOURCES_CPU,
    Capability.RESOURCES_MEMORY,
    Capability.TEMPLATES,
    Capability.TEMPLATES_BUILD,
    Capability.PORTS_EXPOSE,
    Capability.PORTS_URL_TOKEN,
    Capability.PORTS_REVOKE,
    Capability.LIMITS_PIDS,
    # The Engine's default seccomp profile (no nested user namespaces without
    # CAP_SYS_ADMIN, which containers never get here).
    Capability.SEAL_SYSCALLS,
})
#: What holds only where the provider controls the containers from the Engine's host.
HOST_CAPABILITIES = frozenset({Capability.EXEC_CONTAINED, Capability.LIMITS_MEMORY})
#: What holds only where the Engine's storage has quotas (overlay2 on XFS with pquota).
QUOTA_CAPABILITIES = frozenset({Capability.LIMITS_DISK, Capability.RESOURCES_DISK})
#: What holds where, without quotas, a sandbox's own directories are bounded instead
#: (``bounded_dirs``).
BOUNDED_CAPABILITIES = frozenset({Capability.RESOURCES_DISK})

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {
    "DockerProvider": BASE_CAPABILITIES | HOST_CAPABILITIES | QUOTA_CAPABILITIES}
"""What :class:`DockerProvider` declares; an instance may hold fewer (see its docs)."""

_LAZY = {name: "provider_sdk_docker.provider" for name in ("DEFAULT_TEMPLATE", "DockerProvider")}
_LAZY["Engine"] = "provider_sdk_docker._engine"  # public: DockerProvider.engine


__getattr__ = lazy_exports(__name__, _LAZY)
