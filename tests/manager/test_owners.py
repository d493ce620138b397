"""An owner is checked once, wherever it enters, and a bad one is ``InvalidInput``: a lone
surrogate (which no store can encode), a control character or line separator (which
would break labels, logs and terminals), an empty or oversized one (a megabyte is not a
transient failure of the store)."""

from __future__ import annotations

from typing import Any

import pytest

from provider_sdk.errors import InvalidInput
from provider_sdk.local import LocalProvider
from provider_sdk.manager import MAX_OWNER, Binding, BindingStore, SandboxManager

pytestmark = pytest.mark.anyio

BAD: list[Any] = ["\ud800", "alice\udfff", "a\nb", "a\x1bb", "a\u2028b", "", "x" * 1_000_000,
                  "y" * (MAX_OWNER + 1), 42, None]


@pytest.mark.parametrize("owner", BAD, ids=lambda o: ascii(o)[:20])
async def test_a_bad_owner_is_invalid_input_at_every_store(any_store: BindingStore,
                                                           owner: Any) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        await any_store.get(owner)
    with pytest.raises(InvalidInput, match="owner"):
        await any_store.put(Binding(owner=owner, sandbox_id="sb", provider="local"))
    with pytest.raises(InvalidInput, match="owner"):
        await any_store.delete(owner)
    assert await any_store.list() == []


@pytest.mark.parametrize("owner", BAD, ids=lambda o: ascii(o)[:20])
async def test_a_bad_owner_is_invalid_input_at_every_manager_method(
        provider: LocalProvider, any_store: BindingStore, owner: Any) -> None:
    manager = SandboxManager(provider, any_store)
    for call in (manager.acquire, manager.release, manager.binding, manager.snapshot):
        with pytest.raises(InvalidInput, match="owner"):
            await call(owner)
    with pytest.raises(InvalidInput, match="owner"):
        manager.forget(owner)
    assert await provider.list() == []


async def test_the_longest_owner_of_four_byte_characters_works_on_every_store(
        any_store: BindingStore) -> None:
    owner = "\U0001f600" * MAX_OWNER
    stored = await any_store.put(Binding(owner=owner, sandbox_id="sb", provider="local"))
    assert stored is not None
    assert await any_store.get(owner) == stored
    assert await any_store.delete(owner)
