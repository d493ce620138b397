"""What the embedded local provider can do, declared as data.

The package exports it; the registry reads it without importing a provider class (or
its vendor SDK); each class declares exactly this, checked when it loads.
"""

from __future__ import annotations

from provider_sdk.capabilities import Capability

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {"LocalProvider": frozenset({
        Capability.EXEC_STREAM,
        Capability.PROCESS_BACKGROUND,
        Capability.CODE_INTERPRETER,
        Capability.TERMINAL_PTY,
        Capability.SHELL_PERSISTENT,
        Capability.SHELL_STDIN,
        Capability.PAUSE,
        Capability.PAUSE_MEMORY,
        Capability.LIFECYCLE_AUTO_KILL,
        Capability.SNAPSHOT_FILESYSTEM,
        # Loopback only: no network.internet, network.allow_out or network.deny_out.
        Capability.NETWORK_POLICY,
        Capability.FILES_PERMISSIONS,
        Capability.LIST_METADATA,
        Capability.METADATA_UPDATE,
        Capability.METRICS,
        Capability.PORTS_EXPOSE,
        Capability.PORTS_URL_TOKEN,
        Capability.PORTS_REVOKE,
        # Held per instance, where the host and the mode allow (see __init__).
        Capability.PYTHON,
        Capability.VOLUMES,
        Capability.VOLUMES_SHARED,
        Capability.VOLUMES_READ_ONLY,
        Capability.TEMPLATES,
        Capability.TEMPLATES_BUILD,
        Capability.RESOURCES_CPU,
        Capability.RESOURCES_MEMORY,
        Capability.RESOURCES_DISK,
        Capability.LIMITS_MEMORY,
        Capability.LIMITS_PIDS,
        Capability.LIMITS_DISK,
        Capability.SEAL_SYSCALLS,
        Capability.EXEC_CONTAINED,
        Capability.SEAL_HOST,
        Capability.SEAL_IDS,
        Capability.SEAL_KNOBS,
})}
"""What :class:`LocalProvider` declares; an instance may hold fewer (see its docs)."""
