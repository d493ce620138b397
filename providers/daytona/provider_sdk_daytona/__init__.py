"""Daytona for provider-sdk: :class:`DaytonaProvider` and a Daytona-compatible emulator.

Its capabilities are declared here, as data (``PROVIDER_CAPABILITIES``), so ``psdk
providers`` reads them without importing the ``daytona`` SDK; the class is imported on
first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from provider_sdk.capabilities import Capability

if TYPE_CHECKING:
    from provider_sdk_daytona.provider import DaytonaProvider

__all__ = ["PROVIDER_CAPABILITIES", "DaytonaProvider"]

PROVIDER_CAPABILITIES: dict[str, frozenset[Capability]] = {"DaytonaProvider": frozenset({

        Capability.PROCESS_BACKGROUND,
        Capability.SHELL_PERSISTENT,
        Capability.PAUSE,
        Capability.LIFECYCLE_AUTO_PAUSE,
        Capability.SNAPSHOT_FILESYSTEM,
        Capability.VOLUMES,
        Capability.VOLUMES_SHARED,
        Capability.NETWORK_POLICY,
        Capability.LIST_METADATA,
        Capability.TEMPLATES_BUILD,
})}
"""What :class:`DaytonaProvider` declares."""

_LAZY = {"DaytonaProvider": "provider_sdk_daytona.provider"}


def __getattr__(name: str) -> Any:
    """Import the provider's modules (and so its vendor SDK) only when first used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
