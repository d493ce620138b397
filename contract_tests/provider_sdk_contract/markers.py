"""Markers the contract tests carry, and the names the plugin reads them by.

``requires`` gates a test on capabilities the provider must declare; ``lacks`` gates a
test on a capability it must *not* declare (the checks that an undeclared capability
raises). The plugin turns both into skips with a reason at collection, before any
provider is created, from what the provider's class declares; the ``provider`` fixture
checks again against the instance, which may hold fewer where its host decides
(:func:`capability_skip`). Tests never branch on capabilities themselves.
"""

from __future__ import annotations

import pytest

from provider_sdk.capabilities import Capability

__all__ = ["LACKS", "REQUIRES", "capability_skip", "lacks", "requires"]

REQUIRES = "psdk_requires"
"""Name of the marker ``requires`` makes."""
LACKS = "psdk_lacks"
"""Name of the marker ``lacks`` makes."""


def requires(*capabilities: Capability) -> pytest.MarkDecorator:
    """Run the test only if the provider declares every one of ``capabilities``."""
    if not capabilities or not all(isinstance(c, Capability) for c in capabilities):
        raise TypeError("requires() takes one or more Capability members")
    return pytest.mark.psdk_requires(*capabilities)


def lacks(capability: Capability) -> pytest.MarkDecorator:
    """Run the test only if the provider does not declare ``capability``."""
    if not isinstance(capability, Capability):
        raise TypeError("lacks() takes a Capability member")
    return pytest.mark.psdk_lacks(capability)


def capability_skip(item: pytest.Item, name: str,
                    declared: frozenset[Capability]) -> str | None:
    """Why ``item`` cannot run against a provider that declares ``declared``, or ``None``.

    Called at collection with the class's capabilities, and again with the instance's
    (which may hold fewer, where its host decides) once the test has its provider."""
    missing = [str(c) for mark in item.iter_markers(REQUIRES) for c in mark.args
               if c not in declared]
    if missing:
        return f"provider {name!r} does not declare: {', '.join(dict.fromkeys(missing))}"
    present = [str(c) for mark in item.iter_markers(LACKS) for c in mark.args if c in declared]
    if present:
        return (f"provider {name!r} declares {', '.join(present)}: the error for an "
                "undeclared capability cannot be shown with it")
    return None
