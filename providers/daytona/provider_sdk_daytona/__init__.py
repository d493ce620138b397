"""Daytona for provider-sdk: :class:`DaytonaProvider` and a Daytona-compatible emulator.

Its capabilities are declared here, as data (``PROVIDER_CAPABILITIES``), so ``psdk
providers`` reads them without importing the ``daytona`` SDK; the class is imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.capabilities import Capability
from provider_sdk.lazy import lazy_exports

if TYPE_CHECKING:
    from provider_sdk_daytona.provider import DaytonaProvider

__all__ = ["PROVIDER_CAPABILITIES", "DaytonaProvider"]

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {"DaytonaProvider": frozenset({

        Capability.PROCESS_BACKGROUND,
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

_LAZY = {"DaytonaProvider": "provider_sdk_daytona.provider"}


__getattr__ = lazy_exports(__name__, _LAZY)
