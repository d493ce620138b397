"""E2B and CubeSandbox for provider-sdk.

``provider_sdk_e2b.provider.E2BProvider`` (entry point ``e2b``) and
``provider_sdk_e2b.cube.CubeProvider`` (entry point ``cube``) talk to the services
through the ``e2b`` SDK; :mod:`provider_sdk_e2b.emulator` serves both wire protocols on
127.0.0.1, backed by a neutral provider, for offline tests.

Their capabilities are declared here, as data (``PROVIDER_CAPABILITIES``), so ``psdk
providers`` reads them without importing the ``e2b`` SDK; the classes are imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.capabilities import Capability
from provider_sdk.lazy import lazy_exports

if TYPE_CHECKING:
    from provider_sdk_e2b.cube import CubeProvider
    from provider_sdk_e2b.provider import E2BProvider

__all__ = ["PROVIDER_CAPABILITIES", "CubeProvider", "E2BProvider"]

_E2B = frozenset({

        Capability.EXEC_STREAM,
        Capability.PROCESS_BACKGROUND,
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

_LAZY = {"E2BProvider": "provider_sdk_e2b.provider", "CubeProvider": "provider_sdk_e2b.cube"}


__getattr__ = lazy_exports(__name__, _LAZY)
