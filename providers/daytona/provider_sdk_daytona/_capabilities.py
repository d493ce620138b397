"""What the Daytona provider can do, declared as data.

The package exports it; the registry reads it without importing a provider class (or
its vendor SDK); each class declares exactly this, checked when it loads.
"""

from __future__ import annotations

from provider_sdk.capabilities import Capability

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {"DaytonaProvider": frozenset({
        Capability.PROCESS_BACKGROUND,
        Capability.CODE_INTERPRETER,
        Capability.TERMINAL_PTY,
        Capability.PYTHON,
        Capability.SHELL_PERSISTENT,
        Capability.PAUSE,
        Capability.LIFECYCLE_AUTO_PAUSE,
        Capability.LIFECYCLE_AUTO_KILL,
        Capability.SNAPSHOT_FILESYSTEM,
        Capability.VOLUMES,
        Capability.VOLUMES_SHARED,
        Capability.NETWORK_POLICY,
        Capability.NETWORK_INTERNET,
        Capability.NETWORK_ALLOW_OUT,
        Capability.LIST_METADATA,
        Capability.METADATA_UPDATE,
        # Sandboxes made from an image (extension daytona.image) only: one made from a
        # Daytona snapshot has the snapshot's size, and asking for more is InvalidInput.
        Capability.RESOURCES_CPU,
        Capability.RESOURCES_MEMORY,
        Capability.RESOURCES_DISK,
        Capability.TEMPLATES,
        Capability.TEMPLATES_BUILD,
        Capability.PORTS_EXPOSE,
        Capability.PORTS_URL_TOKEN,
        Capability.PORTS_REVOKE,
})}
"""What :class:`DaytonaProvider` declares. Not declared: ``volumes.read_only`` (Daytona's
mounts have no read-only flag), ``network.deny_out`` (it has allow lists only),
``shell.stdin`` and ``exec.stream`` (a session command takes no stdin and its output
arrives when it ends)."""
