"""A ``ProviderSandbox`` on each provider, made as a user makes one, for langchain-tests'
sandbox suite.

The vendor suite (``SandboxIntegrationTests``) runs against one backend per class.
Vendor providers run against their emulators, started by the fixture modules of
``tests/e2b`` and ``tests/daytona``, backed by the local provider; Docker runs where an
engine answers. Without what a provider needs, its tests skip saying why, except under
CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from provider_sdk_deepagents import ProviderSandbox


@contextlib.contextmanager
def suite_backend(provider: str, options: Mapping[str, Any]) -> Iterator[ProviderSandbox]:
    """A backend on ``provider`` with the adapter's defaults and the provider's default
    template: what the suite expects of a sandbox (``python`` on the ``PATH``, ``glob``
    paths relative to the search root) holds without asking. ``options``: how to reach
    the provider (its home, an emulator's address). Deleted (the sandbox killed) at the
    end."""
    backend = ProviderSandbox.create(provider=provider, provider_options=options)
    try:
        yield backend
    finally:
        backend.delete()
