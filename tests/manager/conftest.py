"""Fixtures for the manager's tests: the local provider in a fresh home, and real stores.

Redis and PostgreSQL come from ``PSDK_TEST_REDIS_URL`` and ``PSDK_TEST_POSTGRES_DSN``
(``.ci/run`` starts both on 127.0.0.1 and sets them). A missing or unreachable server
skips its tests, with the reason, except under CI (``CI=true``), where it is a failure;
the same goes for bubblewrap.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engines import missing
from local_fixtures import home, provider
from psdk_fixtures import memory, unconfigured_structlog

from manager.lookup_fakes import FaultyProvider, faulty_in
from provider_sdk.manager import (
    BindingStore,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
)

# structlog unconfigured at start; ``memory`` registers the in-memory test provider.
__all__ = ["home", "memory", "provider", "unconfigured_structlog"]

REDIS_URL = "PSDK_TEST_REDIS_URL"
POSTGRES_DSN = "PSDK_TEST_POSTGRES_DSN"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def faulty(home: Path) -> AsyncIterator[FaultyProvider]:
    """A local provider in ``home`` with faults a test adds (``lookup_fakes``)."""
    async with faulty_in(home) as provider:
        yield provider


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "bindings.sqlite3"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(db_path) as store:
        yield store


def server_url(var: str, what: str) -> str:
    url = os.environ.get(var)
    if not url:
        missing(f"{what}: set {var} to a server on 127.0.0.1 (.ci/run starts one)")
    assert url is not None
    return url


@pytest.fixture
async def redis_store() -> AsyncIterator[RedisStore]:
    """A Redis store under a key prefix of its own, removed afterwards."""
    url = server_url(REDIS_URL, "Redis")
    prefix = f"psdk-test:{secrets.token_hex(6)}:"
    # The server is probed with the driver alone: a store that fails must fail the test,
    # not pass for a missing server.
    import redis.asyncio
    import redis.exceptions

    probe = redis.asyncio.Redis.from_url(url)
    try:
        await probe.ping()
    except redis.exceptions.RedisError as exc:
        missing(f"Redis at {REDIS_URL} is not reachable: {exc}")
    finally:
        await probe.aclose()
    store = RedisStore(url, prefix=prefix)
    try:
        yield store
    finally:
        async with store._redis() as client:
            keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
        await store.aclose()


@pytest.fixture
async def postgres_store() -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store in tables of its own, dropped afterwards."""
    dsn = server_url(POSTGRES_DSN, "PostgreSQL")
    table = f"psdk_test_{secrets.token_hex(6)}"
    import psycopg

    try:
        await (await psycopg.AsyncConnection.connect(dsn)).close()
    except psycopg.OperationalError as exc:
        missing(f"PostgreSQL at {POSTGRES_DSN} is not reachable: {exc}")
    store = PostgresStore(dsn, table=table)
    try:
        yield store
    finally:
        await store._query(f"DROP TABLE IF EXISTS {table}, {table}_claims")
        await store.aclose()


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def any_store(request: pytest.FixtureRequest) -> BindingStore:
    """Each kind of store in turn."""
    name = "store" if request.param == "sqlite" else f"{request.param}_store"
    store: BindingStore = request.getfixturevalue(name)
    return store
