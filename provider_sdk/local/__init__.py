"""The embedded local provider (entry point ``local``): sandboxes on this machine,
isolated with bubblewrap, that outlive the process that made them.

Its capabilities are declared as data (``PROVIDER_CAPABILITIES``, from ``_capabilities``), so
``psdk providers`` reads them without importing the provider; the classes are imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.lazy import lazy_exports
from provider_sdk.local._capabilities import PROVIDER_CAPABILITIES

if TYPE_CHECKING:
    from provider_sdk.local.provider import BrokenRecordWarning, LocalProvider, UnisolatedWarning

__all__ = ["PROVIDER_CAPABILITIES", "BrokenRecordWarning", "LocalProvider",
           "UnisolatedWarning"]

_LAZY = {name: "provider_sdk.local.provider"
         for name in ("BrokenRecordWarning", "LocalProvider", "UnisolatedWarning")}


__getattr__ = lazy_exports(__name__, _LAZY)
