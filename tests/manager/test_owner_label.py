"""The manager's own label: it adopts, kills and reaps only sandboxes a manager made (or
the one a binding holds), never one a person labelled ``owner=<x>`` by hand; bindings
stored before the label existed keep working in every store."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from provider_sdk.errors import InvalidInput
from provider_sdk.local import LocalProvider
from provider_sdk.manager import OWNER_LABEL, Binding, BindingStore, SandboxManager, reap
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio


async def _alive(provider: LocalProvider) -> set[str]:
    return {i.id for i in await provider.list() if i.state != SandboxState.KILLED}


def test_the_label_is_namespaced_and_the_cli_reaps_by_it() -> None:
    assert OWNER_LABEL == "psdk.manager.owner"
    shown = subprocess.run([sys.executable, "-m", "provider_sdk.cli", "reap", "--help"],
                           capture_output=True, text=True, check=True).stdout
    assert f"(default: {OWNER_LABEL})" in " ".join(shown.split())


async def test_a_hand_made_owner_labelled_sandbox_is_never_adopted_or_released(
        provider: LocalProvider, any_store: BindingStore) -> None:
    """The quickstart's own ``owner=alice`` sandbox is the user's: acquire makes the
    manager's own, and release kills that one only."""
    by_hand = await provider.create(metadata={"owner": "alice"})
    manager = SandboxManager(provider, any_store)
    managed = await manager.acquire("alice")
    assert managed.id != by_hand.id
    assert dict(managed.metadata) == {OWNER_LABEL: "alice"}
    await manager.release("alice")
    alive = await _alive(provider)
    assert by_hand.id in alive
    assert managed.id not in alive


async def test_the_reaper_spares_hand_made_sandboxes(provider: LocalProvider,
                                                     any_store: BindingStore) -> None:
    by_hand = await provider.create(metadata={"owner": "bob"})
    orphan = await provider.create(metadata={OWNER_LABEL: "bob"})
    assert [i.id for i in await reap(provider, any_store)] == [orphan.id]
    assert by_hand.id in await _alive(provider)


async def test_a_binding_stored_before_the_label_keeps_working(
        provider: LocalProvider, any_store: BindingStore) -> None:
    """A binding an earlier release stored (its sandbox tagged ``owner=alice`` only, the
    row as that release wrote it) is found through the store, and released with it."""
    legacy = await provider.create(metadata={"owner": "alice"})
    by_hand = await provider.create(metadata={"owner": "alice"})
    stored = await any_store.put(Binding(owner="alice", sandbox_id=legacy.id,
                                         provider="local", env={"MODE": "legacy"},
                                         last_used=time.time()))
    assert stored is not None
    manager = SandboxManager(provider, any_store)
    sandbox = await manager.acquire("alice")
    assert sandbox.id == legacy.id
    assert (await sandbox.exec("echo $MODE")).stdout == "legacy\n"
    await manager.release("alice")
    alive = await _alive(provider)
    assert legacy.id not in alive
    assert by_hand.id in alive
    assert await any_store.get("alice") is None


async def test_a_broken_legacy_binding_is_replaced_by_a_labelled_sandbox(
        provider: LocalProvider, any_store: BindingStore) -> None:
    legacy = await provider.create(metadata={"owner": "alice"})
    await any_store.put(Binding(owner="alice", sandbox_id=legacy.id, provider="local"))
    await provider.kill(legacy.id)
    sandbox = await SandboxManager(provider, any_store).acquire("alice")
    assert sandbox.id != legacy.id
    assert sandbox.metadata[OWNER_LABEL] == "alice"


async def test_an_owner_key_that_is_no_label_is_refused(provider: LocalProvider,
                                                        any_store: BindingStore) -> None:
    with pytest.raises(InvalidInput, match="owner_key: label 'a=b'"):
        SandboxManager(provider, any_store, owner_key="a=b")
