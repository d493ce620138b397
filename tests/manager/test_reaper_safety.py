"""The reaper never kills a bound sandbox, even one bound while it looks; ``psdk reap``
works only on the store the managers use, named exactly; and the library's ``reap()``
removes broken records as the CLI does."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from provider_sdk.cli import main
from provider_sdk.local import BrokenRecordWarning, LocalProvider
from provider_sdk.manager import (
    OWNER_LABEL,
    Binding,
    PostgresStore,
    RedisStore,
    SandboxManager,
    SQLiteStore,
    open_store,
    reap,
)
from provider_sdk.models import SandboxInfo, SandboxSpec

pytestmark = pytest.mark.anyio


class _SlowCreates(LocalProvider):
    """A local provider whose creates, once made, wait for ``go`` before they return."""

    def __init__(self, home: Path) -> None:
        super().__init__(home=home)
        self.created = anyio.Event()
        self.go = anyio.Event()

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        info = await super()._create(spec)
        self.created.set()
        await self.go.wait()
        return info


@pytest.fixture
async def slow(home: Path) -> AsyncIterator[_SlowCreates]:
    """A :class:`_SlowCreates` provider; its sandboxes are killed after."""
    provider = _SlowCreates(home)
    try:
        yield provider
    finally:
        provider.go.set()
        for info in await provider.list():
            await provider.kill(info.id)


class _StallingGet(SQLiteStore):
    """A second view of the managers' SQLite file whose ``get`` reads the binding, then
    stalls (until ``resume`` or 3 s) before it hands the reading back: the window between
    a reaper's look at the binding and what it does next."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read = anyio.Event()
        self.resume = anyio.Event()

    async def get(self, owner: str) -> Binding | None:
        found = await super().get(owner)
        self.read.set()
        with anyio.move_on_after(3):
            await self.resume.wait()
        return found


async def test_a_sandbox_bound_while_the_reaper_looks_is_not_killed(
        slow: _SlowCreates, db_path: Path) -> None:
    provider = slow
    async with SQLiteStore(db_path) as store, _StallingGet(db_path) as reapers_view:
        manager = SandboxManager(provider, store)
        got: list[str] = []
        reaped: list[SandboxInfo] = []

        async def acquire() -> None:
            got.append((await manager.acquire("alice")).id)

        async def reaper() -> None:
            reaped.extend(await reap(provider, reapers_view))

        async with anyio.create_task_group() as tg:
            tg.start_soon(acquire)
            with anyio.fail_after(30):
                await provider.created.wait()  # made, tagged, not bound yet
            async with anyio.create_task_group() as looking:
                looking.start_soon(reaper)
                with anyio.move_on_after(1):  # the reaper reads the binding (none yet)
                    await reapers_view.read.wait()
                provider.go.set()  # the manager binds it and lets its claim go
                await _wait_for(lambda: bool(got))
                reapers_view.resume.set()  # the reaper goes on with what it read
        assert reaped == []
        assert [i.id for i in await provider.list()] == got
        assert (await (await manager.acquire("alice")).exec("echo alive")).stdout == "alive\n"


async def _wait_for(done: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while not done():  # noqa: ASYNC110 (a poll of a list another task fills)
            await anyio.sleep(0.01)


async def test_the_library_reap_removes_broken_records_as_the_cli_does(
        provider: LocalProvider, store: SQLiteStore) -> None:
    sandbox = await provider.create(metadata={"team": "x"})
    (provider.home / "sandboxes" / sandbox.id / "meta.json").write_text("{not json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BrokenRecordWarning)
        victims = await reap(provider, store)
        assert [i.id for i in victims] == [sandbox.id]
        assert await provider.list() == []
    assert not (provider.home / "sandboxes" / sandbox.id).exists()


async def test_a_label_no_manager_could_write_is_left_alone(
        provider: LocalProvider, store: SQLiteStore) -> None:
    odd = await provider.create(metadata={OWNER_LABEL: "eve\ud800"})  # a lone surrogate
    orphan = await provider.create(metadata={OWNER_LABEL: "bob"})
    assert [i.id for i in await reap(provider, store)] == [orphan.id]
    assert [i.id for i in await provider.list()] == [odd.id]


# ------------------------------------------------------------ store URLs


async def test_a_redis_url_names_its_key_prefix(redis_store: RedisStore) -> None:
    url = f"{redis_store._url.reveal()}?prefix={redis_store.prefix}"
    async with open_store(url) as named:
        assert isinstance(named, RedisStore)
        assert named.prefix == redis_store.prefix
        assert await redis_store.put(Binding(owner="alice", sandbox_id="sb", provider="x"))
        found = await named.get("alice")
        assert found is not None
        assert found.sandbox_id == "sb"


async def test_a_postgres_url_names_its_table(postgres_store: PostgresStore) -> None:
    url = f"{postgres_store._dsn.reveal()}?table={postgres_store.table}"
    async with open_store(url) as named:
        assert isinstance(named, PostgresStore)
        assert named.table == postgres_store.table
        assert await postgres_store.put(Binding(owner="alice", sandbox_id="sb",
                                                provider="x"))
        found = await named.get("alice")
        assert found is not None
        assert found.sandbox_id == "sb"


# ------------------------------------------------------------------- CLI


async def _psdk(*argv: str) -> int:
    return await anyio.to_thread.run_sync(main, list(argv))  # psdk runs its own loop


async def _reap_through_cli(provider: LocalProvider, store_url: str,
                            monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setenv("PSDK_HOME", str(provider.home))
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it
    code = await _psdk("reap", "--provider", "local", "--store", store_url, "--json")
    out, err = capsys.readouterr()
    return code, out, err


async def test_psdk_reap_on_redis_kills_only_what_the_prefixed_bindings_do_not_hold(
        provider: LocalProvider, redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    bound = await SandboxManager(provider, redis_store).acquire("alice")
    orphan = await provider.create(metadata={OWNER_LABEL: "bob"})
    url = f"{redis_store._url.reveal()}?prefix={redis_store.prefix}"
    code, out, err = await _reap_through_cli(provider, url, monkeypatch, capsys)
    assert code == 0, err
    assert [i["id"] for i in json.loads(out)] == [orphan.id]
    assert [i.id for i in await provider.list()] == [bound.id]


async def test_psdk_reap_on_postgres_kills_only_what_the_tables_bindings_do_not_hold(
        provider: LocalProvider, postgres_store: PostgresStore,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bound = await SandboxManager(provider, postgres_store).acquire("alice")
    orphan = await provider.create(metadata={OWNER_LABEL: "bob"})
    url = f"{postgres_store._dsn.reveal()}?table={postgres_store.table}"
    code, out, err = await _reap_through_cli(provider, url, monkeypatch, capsys)
    assert code == 0, err
    assert [i["id"] for i in json.loads(out)] == [orphan.id]
    assert [i.id for i in await provider.list()] == [bound.id]


@pytest.mark.parametrize(("store", "says"), [
    ("", "name the managers' binding store"),
    ("redis://127.0.0.1:6379/0", "key prefix"),
    ("postgresql://psdk:psdk@127.0.0.1:5432/psdk", "table"),
    ("sqlite:///nonexistent/bindings.sqlite3", "does not exist"),
])
def test_psdk_reap_refuses_a_store_it_would_have_to_guess(
        store: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it
    monkeypatch.delenv("PSDK_MANAGER_STORE", raising=False)
    monkeypatch.setenv("PSDK_HOME", str(tmp_path / "psdk-home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # where the default file would be
    assert main(["reap", "--provider", "local", *(["--store", store] if store else [])]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "psdk" / "manager.sqlite3").exists()  # nothing was made
