"""The PostgreSQL binding store beyond what every store promises: how it names its
database, its table names, its connection's end, and a table gone under it."""

from __future__ import annotations

import os
import secrets

import anyio
import pytest

from provider_sdk.errors import InvalidInput, Unavailable
from provider_sdk.manager import Binding, PostgresStore
from provider_sdk.retry import Attempts, Backoff

pytestmark = pytest.mark.anyio


def test_a_url_is_shown_as_given_without_its_user_information() -> None:
    store = PostgresStore("postgresql://psdk:hunter2@127.0.0.1:5432/psdk")
    assert "'postgresql://***@127.0.0.1:5432/psdk'" in repr(store)


def test_a_key_value_dsn_is_shown_without_its_password() -> None:
    store = PostgresStore("host=127.0.0.1 port=5432 user=psdk password=hunter2 dbname=db")
    for setting in ("host=127.0.0.1", "port=5432", "user=psdk", "dbname=db"):
        assert setting in repr(store)
    assert "hunter2" not in repr(store)


def test_only_the_scheme_of_a_url_of_another_database_is_quoted() -> None:
    with pytest.raises(InvalidInput, match="its scheme is 'mysql'") as info:
        PostgresStore("mysql://user:hunter2@127.0.0.1/db/http://elsewhere")
    assert "hunter2" not in str(info.value)


def test_a_key_value_dsn_with_a_scheme_like_value_is_not_quoted() -> None:
    """A DSN that is no URL may hold a password: what it holds is never shown."""
    with pytest.raises(InvalidInput, match="it cannot be read") as info:
        PostgresStore("password=hunter2 options=a://b oops")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("table", ["bindings\n", "\nbindings"])
def test_a_table_name_with_a_line_break_is_refused(table: str) -> None:
    with pytest.raises(InvalidInput, match="table"):
        PostgresStore("postgresql://127.0.0.1/db", table=table)


async def _connections(store: PostgresStore, name: str) -> int:
    rows = await store._query("SELECT count(*) FROM pg_stat_activity "
                              "WHERE application_name = %s", (name,))
    return int(rows[0][0])


async def test_a_closed_store_leaves_no_connection_open(
        postgres_store: PostgresStore) -> None:
    name = f"psdk-test-{secrets.token_hex(4)}"
    dsn = f"{os.environ['PSDK_TEST_POSTGRES_DSN']}?application_name={name}"
    store = PostgresStore(dsn, table=postgres_store.table)
    assert await store.get("alice") is None
    assert await _connections(postgres_store, name) == 1
    await store.aclose()
    # The server's process ends a moment after the client has gone.
    async for _ in Attempts(Backoff(initial=0.05, factor=1), timeout=10):
        if not await _connections(postgres_store, name):
            break
    else:
        pytest.fail("the connection is still open 10 s after aclose()")


async def test_a_table_dropped_under_the_store_is_unavailable(
        postgres_store: PostgresStore) -> None:
    assert await postgres_store.get("alice") is None
    await postgres_store._query("DROP TABLE {b}")
    with pytest.raises(Unavailable, match="binding store"):
        await postgres_store.get("alice")


async def test_stores_creating_their_tables_at_once_all_open() -> None:
    """Replicas that start together create the same tables at the same moment."""
    dsn = os.environ.get("PSDK_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set PSDK_TEST_POSTGRES_DSN to a server on 127.0.0.1")
    table = f"psdk_test_{secrets.token_hex(6)}"
    stores = [PostgresStore(dsn, table=table) for _ in range(8)]
    try:
        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(store.get, "alice")
    finally:
        await stores[0]._query("DROP TABLE IF EXISTS {b}, {c}")
        for store in stores:
            await store.aclose()


async def test_a_put_at_a_version_never_stored_writes_nothing(
        postgres_store: PostgresStore) -> None:
    """Only version 0 creates a binding; any other version must match the stored one."""
    stray = Binding(owner="alice", sandbox_id="sb-1", provider="local", version=-1)
    assert await postgres_store.put(stray) is None
    assert await postgres_store.get("alice") is None
