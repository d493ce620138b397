"""Daytona for provider-sdk: :class:`DaytonaProvider`. It talks to Daytona, or to
anything that speaks its API, such as ``psdk emulate daytona`` (the distribution
``sandbox-provider-sdk-emulators``), only through the ``daytona`` SDK.

Its capabilities are declared as data (``PROVIDER_CAPABILITIES``, from ``_capabilities``), so
``psdk providers`` reads them without importing the ``daytona`` SDK; the class is imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.lazy import lazy_exports
from provider_sdk_daytona._capabilities import PROVIDER_CAPABILITIES

if TYPE_CHECKING:
    from provider_sdk_daytona.provider import DaytonaProvider

__all__ = ["PROVIDER_CAPABILITIES", "DaytonaProvider"]

_LAZY = {"DaytonaProvider": "provider_sdk_daytona.provider"}


__getattr__ = lazy_exports(__name__, _LAZY)
