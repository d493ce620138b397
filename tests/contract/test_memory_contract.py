"""The in-memory test provider runs the shared contract suite like every other provider.

The core's, the CLI's and the manager's tests stand on ``MemoryProvider``; the suite
holds it to what it declares. It is registered here under a name of its own, while the
module is collected (the suite reads its capabilities then), so the ``memory`` fixture,
which registers and forgets ``memory`` around each test, leaves it alone.
"""

from __future__ import annotations

from memory_provider import MemoryProvider
from provider_sdk_contract import ProviderContract

from provider_sdk import registry

registry.register("memory-contract", MemoryProvider)


class TestMemoryContract(ProviderContract):
    provider_name = "memory-contract"
