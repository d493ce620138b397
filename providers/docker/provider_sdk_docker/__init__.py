"""The Docker Engine provider: sandboxes as hardened containers (entry point ``docker``).

Its capabilities are declared as data (``PROVIDER_CAPABILITIES``, from ``_capabilities``), so
``psdk providers`` reads them without importing the ``docker`` package; the classes are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provider_sdk.lazy import lazy_exports
from provider_sdk_docker._capabilities import (
    BASE_CAPABILITIES,
    BOUNDED_CAPABILITIES,
    HOST_CAPABILITIES,
    PROVIDER_CAPABILITIES,
    QUOTA_CAPABILITIES,
)

if TYPE_CHECKING:
    from provider_sdk_docker._engine import Engine
    from provider_sdk_docker.provider import DEFAULT_TEMPLATE, DockerProvider

__all__ = ["BASE_CAPABILITIES", "BOUNDED_CAPABILITIES", "DEFAULT_TEMPLATE",
           "HOST_CAPABILITIES", "PROVIDER_CAPABILITIES", "QUOTA_CAPABILITIES",
           "DockerProvider", "Engine"]

_LAZY = {name: "provider_sdk_docker.provider" for name in ("DEFAULT_TEMPLATE", "DockerProvider")}
_LAZY["Engine"] = "provider_sdk_docker._engine"  # public: DockerProvider.engine


__getattr__ = lazy_exports(__name__, _LAZY)
