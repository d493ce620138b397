"""The blocking twin: the same manager, driven from plain functions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engines import require_bwrap

from provider_sdk.errors import InvalidInput
from provider_sdk.manager import OWNER_LABEL, SQLiteStore
from provider_sdk.manager.sync import (
    SyncClaimedSandbox,
    SyncManagedSandbox,
    SyncSandboxManager,
    SyncWarmPool,
)
from provider_sdk.sync import SyncProvider, open_provider


@pytest.fixture
def sync_provider(tmp_path: Path) -> Iterator[SyncProvider]:
    require_bwrap()
    with open_provider("local", home=tmp_path / "home") as provider:
        try:
            yield provider
        finally:
            for info in provider.list():
                provider.kill(info.id)


def test_acquire_set_env_and_release_block(sync_provider: SyncProvider,
                                           db_path: Path) -> None:
    with SyncSandboxManager(sync_provider, SQLiteStore(db_path)) as manager:
        sandbox = manager.acquire("alice")
        assert isinstance(sandbox, SyncManagedSandbox)
        assert sandbox.owner == "alice"
        sandbox.set_env(STAGE="installed")
        assert manager.acquire("alice").id == sandbox.id
    with SyncSandboxManager(sync_provider, SQLiteStore(db_path)) as manager:
        again = manager.acquire("alice")
        assert again.id == sandbox.id
        assert again.exec("echo $STAGE").stdout == "installed\n"
        assert again.env == {"STAGE": "installed"}
        binding = manager.binding("alice")
        assert binding is not None
        assert binding.sandbox_id == sandbox.id
        manager.release("alice")
        assert manager.binding("alice") is None
    assert sync_provider.list() == []


def test_errors_are_the_async_managers(sync_provider: SyncProvider, db_path: Path) -> None:
    with SyncSandboxManager(sync_provider, SQLiteStore(db_path)) as manager, \
            pytest.raises(InvalidInput, match="owner"):
        manager.acquire("")


def test_a_sync_pool_labels_claims_and_feeds_the_sync_manager(
        sync_provider: SyncProvider, db_path: Path) -> None:
    store = SQLiteStore(db_path)
    with SyncWarmPool(sync_provider, size=1, store=store, interval=60) as pool:
        pool.wait_filled(60)
        assert pool.running
        assert pool.free == 1
        with pool.claim(metadata={"user": "bob"}, env={"USER_ID": "bob"}) as claimed:
            assert isinstance(claimed, SyncClaimedSandbox)
            assert claimed.env == {"USER_ID": "bob"}
            assert claimed.exec("echo $USER_ID").stdout == "bob\n"
            found = sync_provider.list(metadata={"user": "bob"})
            assert [i.id for i in found] == [claimed.id]
        pool.wait_filled(60)
        (member,) = pool.pool._free
        with SyncSandboxManager(sync_provider, store, pool=pool) as manager:
            sandbox = manager.acquire("alice")
            assert sandbox.id == member
            assert sandbox.metadata[OWNER_LABEL] == "alice"
    assert not pool.running


def test_set_metadata_blocks(sync_provider: SyncProvider) -> None:
    with sync_provider.create(metadata={"team": "ml"}) as sandbox:
        info = sandbox.set_metadata({"owner": "alice"})
        assert info.metadata == {"team": "ml", "owner": "alice"}
        assert [i.id for i in sync_provider.list(metadata={"owner": "alice"})] == [sandbox.id]
