"""E2B and CubeSandbox for provider-sdk.

``provider_sdk_e2b.provider.E2BProvider`` (entry point ``e2b``) and
``provider_sdk_e2b.cube.CubeProvider`` (entry point ``cube``) talk to the services
through the ``e2b`` SDK, whether the service is the vendor's or ``psdk emulate e2b|cube``
(the distribution ``sandbox-provider-sdk-emulators``), which serves both wire protocols
on 127.0.0.1, backed by a neutral provider, for offline tests.

Their capabilities are declared as data (``PROVIDER_CAPABILITIES``, from ``_capabilities``), so
``psdk providers`` reads them without importing the ``e2b`` SDK; the classes are imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.lazy import lazy_exports
from provider_sdk_e2b._capabilities import PROVIDER_CAPABILITIES

if TYPE_CHECKING:
    from provider_sdk_e2b.cube import CubeProvider
    from provider_sdk_e2b.provider import E2BProvider

__all__ = ["PROVIDER_CAPABILITIES", "CubeProvider", "E2BProvider"]

_LAZY = {"E2BProvider": "provider_sdk_e2b.provider", "CubeProvider": "provider_sdk_e2b.cube"}


__getattr__ = lazy_exports(__name__, _LAZY)
