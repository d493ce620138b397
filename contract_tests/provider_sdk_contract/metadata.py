"""Contract: changing a sandbox's labels after create (``metadata.update``).

``Sandbox.set_metadata`` sets labels and keeps the others; what it sets shows in the
sandbox's info and selects it in ``list(metadata=...)``, for the handle that set it and
for another provider instance, as another process would open. Without a read first
(``reread=False``) it keeps what this provider set before.
"""

from __future__ import annotations

import secrets

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput
from provider_sdk.provider import SandboxProvider
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

__all__ = ["MetadataContract"]


class MetadataContract(ContractBase):
    """Metadata updates: labels set on a running sandbox, seen everywhere at once."""

    @requires(Capability.METADATA_UPDATE)
    async def test_set_metadata_shows_in_info_and_list(
            self, factory: Factory, second_provider: SandboxProvider) -> None:
        """A label added and a label changed show in the handle's info, in
        ``get_info`` and in another instance's; listing by the new pairs finds the
        sandbox alone, listing by the old value no longer does, and the labels it was
        created with stay."""
        token = secrets.token_hex(4)
        sandbox = await factory.sandbox(metadata={"psdk-kept": token, "psdk-changed": "old"})
        other = await factory.sandbox(metadata={"psdk-kept": token, "psdk-changed": "old"})
        wanted = {"psdk-added": token, "psdk-changed": f"new-{token}"}
        info = await sandbox.set_metadata(wanted)
        expected = {**factory.tag, "psdk-kept": token, **wanted}
        assert info.metadata == expected
        assert sandbox.metadata == expected
        for provider in (factory.provider, second_provider):
            assert (await provider.get_info(sandbox.id)).metadata == expected
            assert (await provider.get_info(other.id)).metadata == {
                **factory.tag, "psdk-kept": token, "psdk-changed": "old"}
            for pairs in (wanted, {"psdk-added": token},
                          {"psdk-kept": token, "psdk-changed": f"new-{token}"}):
                found = await provider.list(metadata=pairs)
                assert [i.id for i in found] == [sandbox.id], pairs
            old = await provider.list(metadata={"psdk-kept": token, "psdk-changed": "old"})
            assert [i.id for i in old] == [other.id]

    @requires(Capability.METADATA_UPDATE)
    async def test_set_metadata_without_a_reread_keeps_what_this_provider_set(
            self, factory: Factory, second_provider: SandboxProvider) -> None:
        """``reread=False`` merges into the labels as this provider last saw them: those
        the sandbox was created with and those set since through it stay, as anyone sees
        at once."""
        sandbox = await factory.sandbox(metadata={"psdk-kept": "yes"})
        await sandbox.set_metadata({"psdk-first": "1"})
        info = await sandbox.set_metadata({"psdk-second": "2", "psdk-first": "one"},
                                          reread=False)
        expected = {**factory.tag, "psdk-kept": "yes", "psdk-first": "one",
                    "psdk-second": "2"}
        assert info.metadata == expected
        assert (await second_provider.get_info(sandbox.id)).metadata == expected
        with pytest.raises(InvalidInput):
            await sandbox.set_metadata({"psdk=bad": "x"}, reread=False)
        assert (await factory.provider.get_info(sandbox.id)).metadata == expected

    @requires(Capability.METADATA_UPDATE)
    async def test_set_metadata_refuses_what_create_refuses(self, factory: Factory) -> None:
        """A label create would refuse (an ``=`` in its key, one of the provider's
        internal labels) is ``InvalidInput``, and the sandbox's labels stay as they
        were."""
        sandbox = await factory.sandbox(metadata={"psdk-kept": "yes"})
        refused = [{"psdk=bad": "x"}, {"psdk-ok": "line\nbreak"}]
        refused += [{key: "x"} for key in sorted(factory.provider.internal_labels)]
        for labels in refused:
            with pytest.raises(InvalidInput):
                await sandbox.set_metadata(labels)
        assert (await factory.provider.get_info(sandbox.id)).metadata == {
            **factory.tag, "psdk-kept": "yes"}
