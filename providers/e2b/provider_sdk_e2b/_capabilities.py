"""What the E2B and Cube providers can do, declared as data.

The package exports it; the registry reads it without importing a provider class (or
its vendor SDK); each class declares exactly this, checked when it loads.
"""

from __future__ import annotations

from provider_sdk.capabilities import Capability

_E2B = frozenset({
        Capability.EXEC_STREAM,
        Capability.PROCESS_BACKGROUND,
        Capability.CODE_INTERPRETER,
        Capability.TERMINAL_PTY,
        Capability.PYTHON,
        Capability.SHELL_PERSISTENT,
        Capability.SHELL_STDIN,
        Capability.PAUSE,
        Capability.PAUSE_MEMORY,
        Capability.LIFECYCLE_AUTO_PAUSE,
        Capability.LIFECYCLE_AUTO_RESUME,
        Capability.LIFECYCLE_AUTO_KILL,
        Capability.SNAPSHOT_FILESYSTEM,
        Capability.NETWORK_POLICY,
        Capability.NETWORK_INTERNET,
        Capability.NETWORK_ALLOW_OUT,
        Capability.NETWORK_DENY_OUT,
        Capability.NETWORK_UPDATE,
        Capability.LIST_METADATA,
        Capability.METRICS,
        Capability.TEMPLATES,
        Capability.TEMPLATES_BUILD,
        Capability.PORTS_EXPOSE,
})

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {
    "E2BProvider": _E2B,
    # Cube has no metrics endpoint, nor private ports; it has volumes (read-only mounts
    # too), rollback and template builds.
    "CubeProvider": (_E2B - {Capability.METRICS, Capability.PORTS_EXPOSE}) | {
        Capability.VOLUMES, Capability.VOLUMES_SHARED, Capability.VOLUMES_READ_ONLY,
        Capability.SNAPSHOT_ROLLBACK, Capability.TEMPLATES_BUILD},
}
"""What each class declares, by class name. Neither declares ``resources.*``: both size
sandboxes by template."""
