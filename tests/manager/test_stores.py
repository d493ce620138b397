"""Every binding store keeps the same promises: compare-and-set writes, exclusive claims
that expire, and bindings that round-trip whole. Run against a real SQLite file, a real
Redis and a real PostgreSQL."""

from __future__ import annotations

import inspect
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from provider_sdk.config import Secret
from provider_sdk.distributions import CORE, install_hint
from provider_sdk.errors import ConfigError, InvalidInput
from provider_sdk.manager import (
    Binding,
    BindingStore,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    open_store,
)

pytestmark = pytest.mark.anyio


def _binding(owner: str = "alice", sandbox_id: str = "sb-1", version: int = 0) -> Binding:
    return Binding(owner=owner, sandbox_id=sandbox_id, provider="local", version=version,
                   env={"TOKEN": "s3cret", "PATH": "/opt/bin:/usr/bin"},
                   snapshots=("snap-1", "snap-2"), snapshot_at=1700000000.5,
                   last_used=1700000001.25, paused=True)


async def test_a_binding_round_trips_whole(any_store: BindingStore) -> None:
    stored = await any_store.put(_binding())
    assert stored is not None
    assert stored.version == 1
    assert await any_store.get("alice") == stored
    assert await any_store.get("bob") is None


async def test_a_first_put_fails_if_a_binding_exists(any_store: BindingStore) -> None:
    assert await any_store.put(_binding(sandbox_id="sb-1")) is not None
    assert await any_store.put(_binding(sandbox_id="sb-2")) is None
    found = await any_store.get("alice")
    assert found is not None
    assert found.sandbox_id == "sb-1"


async def test_a_put_from_a_stale_read_fails_and_changes_nothing(
        any_store: BindingStore) -> None:
    first = await any_store.put(_binding())
    assert first is not None
    second = await any_store.put(Binding(owner="alice", sandbox_id="sb-2", provider="local",
                                         version=first.version))
    assert second is not None
    assert second.version == 2
    assert await any_store.put(Binding(owner="alice", sandbox_id="sb-3", provider="local",
                                       version=first.version)) is None
    found = await any_store.get("alice")
    assert found is not None
    assert (found.sandbox_id, found.version) == ("sb-2", 2)


async def test_delete_at_a_stale_version_keeps_the_binding(any_store: BindingStore) -> None:
    stored = await any_store.put(_binding())
    assert stored is not None
    assert not await any_store.delete("alice", version=stored.version + 1)
    assert await any_store.get("alice") is not None
    assert await any_store.delete("alice", version=stored.version)
    assert await any_store.get("alice") is None
    assert not await any_store.delete("alice")


async def test_list_gives_every_binding(any_store: BindingStore) -> None:
    for owner in ("carol", "alice", "bob"):
        await any_store.put(_binding(owner=owner, sandbox_id=f"sb-{owner}"))
    await any_store.delete("bob")
    assert sorted(b.owner for b in await any_store.list()) == ["alice", "carol"]


async def test_only_one_of_many_concurrent_claimers_wins(any_store: BindingStore) -> None:
    tokens = [secrets.token_hex(4) for _ in range(20)]
    won: list[str] = []

    async def claim(token: str) -> None:
        if await any_store.claim("owner:alice", token, 30):
            won.append(token)

    async with anyio.create_task_group() as tg:
        for token in tokens:
            tg.start_soon(claim, token)
    assert len(won) == 1
    assert await any_store.claimed("owner:alice")
    assert await any_store.claim("owner:alice", won[0], 30)  # the holder renews


async def test_a_claim_held_by_another_token_is_refused_whatever_it_sorts_as(
        any_store: BindingStore) -> None:
    for holder, claimer in (("mm", "zz"), ("mm", "aa")):
        assert await any_store.claim(f"c-{claimer}", holder, 30)
        assert not await any_store.claim(f"c-{claimer}", claimer, 30), claimer


async def test_only_the_holder_releases_a_claim(any_store: BindingStore) -> None:
    assert await any_store.claim("owner:alice", "holder", 30)
    await any_store.release("owner:alice", "someone-else")
    assert await any_store.claimed("owner:alice")
    assert not await any_store.claim("owner:alice", "someone-else", 30)
    await any_store.release("owner:alice", "holder")
    assert not await any_store.claimed("owner:alice")
    assert await any_store.claim("owner:alice", "someone-else", 30)


async def test_releasing_a_claim_nobody_holds_does_nothing(any_store: BindingStore) -> None:
    await any_store.release("owner:nobody", "")
    await any_store.release("owner:nobody", "any")
    assert not await any_store.claimed("owner:nobody")


async def test_an_expired_claim_can_be_taken(any_store: BindingStore) -> None:
    assert await any_store.claim("owner:alice", "crashed", 1.0)
    assert not await any_store.claim("owner:alice", "next", 30)
    await anyio.sleep(1.2)
    assert not await any_store.claimed("owner:alice")
    assert await any_store.claim("owner:alice", "next", 30)


@pytest.mark.parametrize("owner", ["", "alice\nbob", "x" * 257])
async def test_a_bad_owner_is_refused_and_nothing_is_written(
        any_store: BindingStore, owner: str) -> None:
    with pytest.raises(InvalidInput, match="owner"):
        await any_store.put(_binding(owner=owner))
    with pytest.raises(InvalidInput, match="owner"):
        await any_store.delete(owner)
    with pytest.raises(InvalidInput, match="owner"):
        await any_store.get(owner)
    assert await any_store.list() == []


@pytest.mark.parametrize("fence", [("owner:alice",), ("owner:alice", "t", "x"),
                                   ("owner:alice", ""), ("", "t"), ["owner:alice", "t"],
                                   ("owner:alice", 7), "owner:alice"],
                         ids=["one", "three", "no-token", "no-name", "list", "int", "str"])
async def test_a_bad_fence_is_refused_and_nothing_is_written(
        any_store: BindingStore, fence: object) -> None:
    assert await any_store.claim("owner:alice", "t", 30)
    with pytest.raises(InvalidInput, match="fence must be a"):
        await any_store.put(_binding(), fence=fence)  # type: ignore[arg-type]
    assert await any_store.list() == []


async def test_a_closed_redis_store_leaves_no_connection_open(
        redis_store: RedisStore) -> None:
    name = f"psdk-test-{secrets.token_hex(4)}"
    url = f"{os.environ['PSDK_TEST_REDIS_URL']}?client_name={name}"

    async def connected() -> bool:
        async with redis_store._redis() as client:
            return any(c.get("name") == name for c in await client.client_list())

    store = RedisStore(url, prefix=redis_store.prefix)
    assert not await store.claimed("x")
    assert await connected()
    await store.aclose()
    assert not await connected()


async def test_a_claim_of_under_a_millisecond_is_taken_and_runs_out(
        any_store: BindingStore) -> None:
    assert await any_store.claim("owner:alice", "brief", 0.0001)
    await anyio.sleep(0.1)
    assert await any_store.claim("owner:alice", "next", 30)


async def test_a_fenced_put_needs_the_claim_held_by_its_token(any_store: BindingStore) -> None:
    fence = ("owner:alice", "creator")
    assert await any_store.put(_binding(), fence=fence) is None  # nobody holds it
    assert await any_store.get("alice") is None
    assert await any_store.claim("owner:alice", "reaper", 30)
    assert await any_store.put(_binding(), fence=fence) is None  # someone else does
    await any_store.release("owner:alice", "reaper")
    assert await any_store.claim(*fence, 1.0)
    stored = await any_store.put(_binding(), fence=fence)
    assert stored is not None
    assert stored.version == 1
    await anyio.sleep(1.2)  # the creator's claim ran out
    assert await any_store.put(_binding(sandbox_id="sb-2", version=1), fence=fence) is None
    found = await any_store.get("alice")
    assert found is not None
    assert found.sandbox_id == "sb-1"


async def test_the_stores_clock_is_the_time_now(any_store: BindingStore) -> None:
    assert abs(await any_store.time() - time.time()) < 2


async def test_the_stores_clock_reads_fractions_of_a_second(any_store: BindingStore) -> None:
    """Every server here runs on this machine's clock: each reading falls between the
    times taken around it (a quarter of a second either way, for a busy machine)."""
    for _ in range(5):
        before = time.time()
        now = await any_store.time()
        assert before - 0.25 <= now <= time.time() + 0.25
        await anyio.sleep(0.05)


async def test_a_stores_options_are_keywords_only(any_store: BindingStore) -> None:
    """A bare version or fence could be taken for another: each is named."""
    stored = await any_store.put(_binding())
    assert stored is not None
    with pytest.raises(TypeError):
        await any_store.put(_binding(), ("owner:alice", "token"))  # type: ignore[misc]
    with pytest.raises(TypeError):
        await any_store.delete("alice", stored.version)  # type: ignore[misc]
    assert await any_store.get("alice") == stored


async def test_a_second_sqlite_store_on_the_same_file_sees_the_bindings(
        store: SQLiteStore) -> None:
    await store.put(_binding())
    async with SQLiteStore(store.path) as other:
        assert await other.get("alice") == await store.get("alice")
        assert await store.claim("x", "a", 30)
        assert not await other.claim("x", "b", 30)


async def test_a_second_postgres_store_on_the_same_table_sees_the_bindings(
        postgres_store: PostgresStore) -> None:
    """What one replica writes, every other one reads at once: each statement commits."""
    stored = await postgres_store.put(_binding())
    async with PostgresStore(os.environ["PSDK_TEST_POSTGRES_DSN"],
                             table=postgres_store.table) as other:
        assert await other.get("alice") == stored
        assert await postgres_store.claim("x", "a", 30)
        assert not await other.claim("x", "b", 30)


async def test_credentials_the_server_refuses_are_an_authentication_error(
        postgres_store: PostgresStore) -> None:
    import psycopg.conninfo

    from provider_sdk.errors import AuthenticationError

    dsn = psycopg.conninfo.make_conninfo(os.environ["PSDK_TEST_POSTGRES_DSN"],
                                         password="not-the-password")
    async with PostgresStore(dsn, table=postgres_store.table) as wrong:
        with pytest.raises(AuthenticationError) as info:
            await wrong.get("alice")
    assert "not-the-password" not in f"{info.value} {info.value!r}"


def test_env_values_and_passwords_never_show_in_reprs() -> None:
    assert "s3cret" not in repr(_binding())
    assert "TOKEN" in repr(_binding())
    redis = RedisStore("redis://:hunter2@127.0.0.1:6379/0")
    postgres = PostgresStore("postgresql://psdk:hunter2@127.0.0.1:5432/psdk")
    settings = PostgresStore("host=127.0.0.1 user=psdk password=hunter2 dbname=psdk")
    query = PostgresStore("postgresql://127.0.0.1/psdk?user=psdk&password=hunter2")
    for store in (redis, postgres, settings, query):
        assert "hunter2" not in repr(store)
        assert "127.0.0.1" in repr(store)
    assert isinstance(redis._url, Secret)


def test_open_store_picks_the_store_from_the_url() -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    sqlite = open_store("sqlite:///tmp/x/bindings.sqlite3")
    assert isinstance(sqlite, SQLiteStore)
    assert str(sqlite.path) == "/tmp/x/bindings.sqlite3"
    assert isinstance(open_store("bindings.sqlite3"), SQLiteStore)
    assert isinstance(open_store("redis://127.0.0.1:6379/0"), RedisStore)
    assert isinstance(open_store("postgresql://u@127.0.0.1/db"), PostgresStore)
    with pytest.raises(ConfigError, match="unknown scheme") as info:
        open_store("mongodb://user:hunter2@127.0.0.1/db")
    assert "hunter2" not in str(info.value)


def test_a_store_url_names_the_redis_prefix_and_the_postgres_table() -> None:
    redis = open_store("redis://:hunter2@127.0.0.1:6379/0?prefix=app:one:")
    assert isinstance(redis, RedisStore)
    assert redis.prefix == "app:one:"
    assert redis._url.reveal() == "redis://:hunter2@127.0.0.1:6379/0"
    postgres = open_store("postgresql://u@127.0.0.1/db?table=app_one&sslmode=disable")
    assert isinstance(postgres, PostgresStore)
    assert postgres.table == "app_one"
    assert postgres._dsn.reveal() == "postgresql://u@127.0.0.1/db?sslmode=disable"
    with pytest.raises(InvalidInput, match="table"):
        open_store("postgresql://u@127.0.0.1/db?table=Bad-Name")
    with pytest.raises(InvalidInput, match="given 2 times"):
        open_store("redis://127.0.0.1/0?prefix=a&prefix=b")


def test_a_postgres_table_name_is_checked() -> None:
    with pytest.raises(InvalidInput, match="table"):
        PostgresStore("postgresql://127.0.0.1/db", table="x; DROP TABLE y")
    assert PostgresStore("postgresql://127.0.0.1/db", table="t" * 51).table == "t" * 51
    with pytest.raises(InvalidInput, match="table"):  # with _claims, past 63 bytes soon
        PostgresStore("postgresql://127.0.0.1/db", table="t" * 52)


async def test_an_unreachable_store_is_unavailable_without_its_password() -> None:
    from provider_sdk.errors import Unavailable

    # Port 9 on loopback: nothing listens there.
    for store in (RedisStore("redis://:hunter2@127.0.0.1:9/0"),
                  PostgresStore("postgresql://psdk:hunter2@127.0.0.1:9/psdk")):
        with pytest.raises(Unavailable) as info:
            await store.get("alice")
        assert "hunter2" not in str(info.value)
        await store.aclose()


@pytest.mark.parametrize(("module", "store", "extra"), [
    ("redis", lambda: RedisStore("redis://127.0.0.1:9/0"), "redis"),
    ("psycopg", lambda: PostgresStore("postgresql://127.0.0.1:9/x"), "postgres"),
])
async def test_a_store_without_its_driver_names_the_extra_to_install(
        module: str, store: Any, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(ConfigError, match=re.escape(install_hint(CORE, extra=extra))):
        await store().get("alice")


@pytest.mark.parametrize(("module", "store", "extra"), [
    ("redis", "redis_store", "redis"),
    ("psycopg", "postgres_store", "postgres"),
])
async def test_a_stores_module_imports_without_its_driver(
        module: str, store: str, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manager works without the drivers of the stores it does not use: a store's
    module is imported whole (afresh, here) with its driver missing, and only a store
    that is made or used says what to install."""
    import importlib.util

    import provider_sdk.manager

    for name in [module, *(n for n in sys.modules if n.startswith(f"{module}."))]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    path = Path(provider_sdk.manager.__file__).parent / f"{store}.py"
    spec = importlib.util.spec_from_file_location(f"_fresh_{store}", path)
    assert spec is not None
    assert spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)

    async def make_and_use() -> None:
        made = fresh.RedisStore("redis://127.0.0.1:9/0") if module == "redis" \
            else fresh.PostgresStore("postgresql://127.0.0.1:9/x")  # reads its DSN
        await made.get("alice")

    with pytest.raises(ConfigError, match=re.escape(install_hint(CORE, extra=extra))):
        await make_and_use()


async def test_a_store_never_used_closes_without_error(tmp_path: Path) -> None:
    for store in (MemoryStore(), SQLiteStore(tmp_path / "b.sqlite3"),
                  RedisStore("redis://127.0.0.1:9/0"),
                  PostgresStore("postgresql://127.0.0.1:9/x")):
        await store.aclose()
        await store.aclose()


def test_a_stores_settings_are_keywords_only() -> None:
    with pytest.raises(TypeError):
        RedisStore("redis://127.0.0.1/0", "app:")  # type: ignore[misc]
    with pytest.raises(TypeError):
        PostgresStore("postgresql://127.0.0.1/db", "bindings")  # type: ignore[misc]


def test_open_store_reads_the_setting_then_defaults_to_a_sqlite_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PSDK_MANAGER_STORE", f"sqlite://{tmp_path}/from-env.sqlite3")
    chosen = open_store()
    assert isinstance(chosen, SQLiteStore)
    assert chosen.path == tmp_path / "from-env.sqlite3"
    monkeypatch.delenv("PSDK_MANAGER_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    default = open_store()
    assert isinstance(default, SQLiteStore)
    assert default.path == tmp_path / "data" / "psdk" / "manager.sqlite3"


@pytest.mark.parametrize(("dsn", "words"), [
    ("not a dsn", "it cannot be read"),
    ("mysql://user:hunter2@127.0.0.1/db", "its scheme is 'mysql'"),
    ("postgresql://user:hunter2@127.0.0.1:notaport/db", "port 'notaport' is not a number"),
    ("postgresql://user:hunter2@127.0.0.1/db?colour=red", 'invalid URI query parameter'),
    ("host=127.0.0.1 password=hunter2 oops", "it cannot be read"),
])
def test_a_bad_postgres_dsn_is_refused_when_the_store_is_made(dsn: str, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        PostgresStore(dsn)
    message = str(info.value)
    assert message.startswith("PostgresStore: ")  # no provider's: no [provider] prefix
    assert words in message
    assert "hunter2" not in f"{message} {info.value!r}"


async def test_a_store_error_met_in_acquire_is_the_stores_not_the_providers(
        tmp_path: Path, memory: Any) -> None:
    from provider_sdk import open_provider
    from provider_sdk.errors import Unavailable
    from provider_sdk.manager import SandboxManager

    async with open_provider("memory") as provider, \
            SandboxManager(provider, SQLiteStore(tmp_path)) as manager:  # a directory
        with pytest.raises(Unavailable) as info:
            await manager.acquire("alice")
    assert info.value.provider == ""
    assert str(info.value).startswith(f"binding store {tmp_path}: ")


async def test_a_store_used_with_async_with_is_closed_after(redis_store: RedisStore) -> None:
    name = f"psdk-test-{secrets.token_hex(4)}"
    url = f"{os.environ['PSDK_TEST_REDIS_URL']}?client_name={name}"

    async def connected() -> bool:
        async with redis_store._redis() as client:
            return any(c.get("name") == name for c in await client.client_list())

    async with RedisStore(url, prefix=redis_store.prefix) as store:
        assert not await store.claimed("x")
        assert await connected()
    assert not await connected()


def test_a_row_without_the_optional_fields_gets_their_defaults() -> None:
    assert Binding.from_row("alice", "sb-1", "local", 3, "{}") == Binding(
        owner="alice", sandbox_id="sb-1", provider="local", version=3, env={},
        snapshots=(), snapshot_at=None, last_used=0.0, paused=False)


async def test_a_fence_token_is_matched_by_its_value(any_store: BindingStore) -> None:
    """The token that fences a put is the claim's holder if it is equal to the one that
    claimed, not only if it is the same object."""
    assert await any_store.claim("owner:alice", "".join(["crea", "tor"]), 30)
    stored = await any_store.put(_binding(), fence=("owner:alice", "".join(["crea", "tor"])))
    assert stored is not None


def test_every_store_takes_the_fence_and_the_version_by_keyword() -> None:
    """As the interface declares them: ``put(binding, *, fence=None)``,
    ``delete(owner, *, version=None)``."""
    for store in (BindingStore, MemoryStore, SQLiteStore, RedisStore, PostgresStore):
        fence = inspect.signature(store.put).parameters["fence"]
        assert fence.kind is inspect.Parameter.KEYWORD_ONLY, store
        assert fence.default is None, store
        version = inspect.signature(store.delete).parameters["version"]
        assert version.kind is inspect.Parameter.KEYWORD_ONLY, store
        assert version.default is None, store


def test_a_password_holding_an_at_sign_never_shows_in_a_repr() -> None:
    store = RedisStore("redis://user:hun@ter2@127.0.0.1:6379/0")
    assert "ter2" not in repr(store)
    assert "hun" not in repr(store)
    assert "127.0.0.1:6379" in repr(store)


async def test_a_claim_is_renewed_and_released_by_a_token_of_equal_value(
        any_store: BindingStore) -> None:
    assert await any_store.claim("owner:alice", "".join(["hol", "der"]), 30)
    assert await any_store.claim("owner:alice", "".join(["hol", "der"]), 30)
    assert not await any_store.claim("owner:alice", "other", 30)
    await any_store.release("owner:alice", "".join(["hol", "der"]))
    assert not await any_store.claimed("owner:alice")


def test_a_binding_is_made_with_keywords_only() -> None:
    with pytest.raises(TypeError):
        Binding("alice", "sb-1", "local")  # type: ignore[misc]


async def test_a_new_binding_is_stored_at_version_1(any_store: BindingStore) -> None:
    fresh = Binding(owner="alice", sandbox_id="sb-1", provider="local")
    assert (fresh.env, fresh.snapshots, fresh.snapshot_at, fresh.last_used, fresh.paused,
            fresh.version) == ({}, (), None, 0.0, False, 0)
    stored = await any_store.put(fresh)
    assert stored is not None
    assert stored.version == 1


async def test_a_put_at_a_version_ahead_of_the_stored_one_fails(any_store: BindingStore) -> None:
    assert await any_store.put(_binding(version=5)) is None
    assert await any_store.get("alice") is None
    stored = await any_store.put(_binding())
    assert stored is not None
    assert await any_store.put(_binding(version=stored.version + 1)) is None
    found = await any_store.get("alice")
    assert found is not None
    assert found.version == stored.version


async def test_a_claim_is_released_by_its_holder_alone(any_store: BindingStore) -> None:
    assert await any_store.claim("owner:alice", "holder", 30)
    for other in ("another", "holder2", "zed", ""):
        await any_store.release("owner:alice", other)
        assert await any_store.claimed("owner:alice"), other


async def test_versions_are_compared_by_value(memory_store: MemoryStore) -> None:
    """Past the small numbers Python keeps one object of, an equal version is another
    object: a put and a delete at the stored version still hold."""
    stored = await memory_store.put(_binding())
    assert stored is not None
    while stored.version < 300:
        stored = await memory_store.put(stored)
        assert stored is not None
    again = await memory_store.put(attrs.evolve(stored, version=int(str(stored.version))))
    assert again is not None
    assert await memory_store.delete("alice", version=int(str(again.version)))


def test_a_url_without_credentials_is_shown_as_it_is() -> None:
    for url in ("redis://127.0.0.1:6379/0", "postgresql://127.0.0.1:5432/psdk"):
        store = RedisStore(url) if url.startswith("redis") else PostgresStore(url)
        assert repr(url) in repr(store), repr(store)
        assert "***" not in repr(store)


def test_a_password_is_masked_when_the_query_holds_a_url() -> None:
    store = RedisStore("redis://:hunter2@127.0.0.1:6379/0?client_name=http://x")
    assert "hunter2" not in repr(store)
    assert "127.0.0.1:6379" in repr(store)


async def test_delete_at_an_older_version_keeps_the_binding(any_store: BindingStore) -> None:
    stored = await any_store.put(_binding())
    assert stored is not None
    stored = await any_store.put(stored)
    assert stored is not None
    assert not await any_store.delete("alice", version=stored.version - 1)
    assert await any_store.get("alice") == stored


async def test_a_fence_of_another_token_fails_whatever_it_sorts_as(
        any_store: BindingStore) -> None:
    assert await any_store.claim("owner:alice", "creator", 30)
    for other in ("zz", "a", "creator2"):  # an empty token is refused: see above
        assert await any_store.put(_binding(), fence=("owner:alice", other)) is None, other
    assert await any_store.get("alice") is None
