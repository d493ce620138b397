"""Contract: listing by metadata on the backend (``list.metadata``).

``provider.list(metadata=...)`` narrows what the hook returns for every provider, so
only the hook shows whether the backend filtered: a provider declaring
``list.metadata`` returns from ``_list`` exactly the sandboxes carrying every pair,
not everything for the core to narrow.
"""

from __future__ import annotations

import secrets

from provider_sdk.capabilities import Capability
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

__all__ = ["ListingContract"]


class ListingContract(ContractBase):
    """Listing: the backend's own metadata filter."""

    @requires(Capability.LIST_METADATA)
    async def test_list_metadata_filters_on_the_backend(self, factory: Factory) -> None:
        """Of three sandboxes, one and two pairs select exactly the carriers of every
        pair, from the hook as from ``list``."""
        token = secrets.token_hex(4)
        one = await factory.sandbox(metadata={"psdk-pick": token})
        both = await factory.sandbox(metadata={"psdk-pick": token, "psdk-also": token})
        await factory.sandbox(metadata={"psdk-pick": f"not-{token}", "psdk-also": token})
        provider = factory.provider
        for wanted, expected in (({"psdk-pick": token}, {one.id, both.id}),
                                 ({"psdk-pick": token, "psdk-also": token}, {both.id})):
            from_backend = await provider._list(metadata=wanted, state=None)
            assert sorted(i.id for i in from_backend) == sorted(expected), wanted
            assert sorted(i.id for i in await provider.list(metadata=wanted)) == \
                sorted(expected), wanted
