"""The reaper kills owner-tagged sandboxes that no binding holds, and spares the bound,
the untagged, the claimed and the young; ``psdk reap`` does the same from a shell."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from provider_sdk.cli import main
from provider_sdk.errors import InvalidInput
from provider_sdk.local import LocalProvider
from provider_sdk.manager import OWNER_LABEL, SandboxManager, SQLiteStore, owner_claim, reap

pytestmark = pytest.mark.anyio


async def _ids(provider: LocalProvider) -> set[str]:
    return {i.id for i in await provider.list()}


async def test_reap_kills_unbound_tagged_sandboxes_only(provider: LocalProvider,
                                                        store: SQLiteStore) -> None:
    bound = await SandboxManager(provider, store).acquire("alice")
    orphan = await provider.create(metadata={OWNER_LABEL: "alice"})
    nobody = await provider.create(metadata={OWNER_LABEL: "bob"})  # bob has no binding
    untagged = await provider.create(metadata={"team": "x"})
    victims = await reap(provider, store)
    assert {i.id for i in victims} == {orphan.id, nobody.id}
    assert await _ids(provider) == {bound.id, untagged.id}


async def test_dry_run_kills_nothing(provider: LocalProvider, store: SQLiteStore) -> None:
    orphan = await provider.create(metadata={OWNER_LABEL: "bob"})
    victims = await reap(provider, store, dry_run=True)
    assert [i.id for i in victims] == [orphan.id]
    assert await _ids(provider) == {orphan.id}


async def test_a_sandbox_whose_owner_is_being_created_is_spared(
        provider: LocalProvider, store: SQLiteStore) -> None:
    # A manager holds bob's claim: it made this sandbox and has not bound it yet.
    in_flight = await provider.create(metadata={OWNER_LABEL: "bob"})
    assert await store.claim(owner_claim("bob"), "creator", 60)
    assert await reap(provider, store) == []
    assert await _ids(provider) == {in_flight.id}


async def test_older_than_spares_young_sandboxes(provider: LocalProvider,
                                                 store: SQLiteStore) -> None:
    young = await provider.create(metadata={OWNER_LABEL: "bob"})
    assert await reap(provider, store, older_than=3600) == []
    assert [i.id for i in await reap(provider, store, older_than=0)] == [young.id]


async def test_a_custom_owner_key_is_honoured(provider: LocalProvider,
                                              store: SQLiteStore) -> None:
    tagged = await provider.create(metadata={"user": "carol"})
    other = await provider.create(metadata={OWNER_LABEL: "carol"})
    assert [i.id for i in await reap(provider, store, owner_key="user")] == [tagged.id]
    assert await _ids(provider) == {other.id}


async def test_a_negative_age_is_invalid_input(provider: LocalProvider,
                                               store: SQLiteStore) -> None:
    with pytest.raises(InvalidInput, match="older_than"):
        await reap(provider, store, older_than=-1)


# --------------------------------------------------------------------- CLI


async def test_psdk_reap_kills_unbound_sandboxes_and_says_how_many(
        provider: LocalProvider, db_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PSDK_HOME", str(provider.home))
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it
    async with SQLiteStore(db_path) as store:
        bound = await SandboxManager(provider, store).acquire("alice")
    orphan = await provider.create(metadata={OWNER_LABEL: "bob"})
    store_url = f"sqlite://{db_path}"

    async def psdk(*argv: str) -> int:
        return await anyio.to_thread.run_sync(main, list(argv))  # psdk runs its own loop

    assert await psdk("reap", "--provider", "local", "--store", store_url, "--dry-run") == 0
    out, err = capsys.readouterr()
    assert out == f"{orphan.id}  {OWNER_LABEL}=bob\n"
    assert "would kill 1 unbound sandbox" in err
    assert await _ids(provider) == {bound.id, orphan.id}

    assert await psdk("reap", "--provider", "local", "--store", store_url,
                      "--older-than", "1h") == 0
    assert capsys.readouterr().out == ""
    assert await _ids(provider) == {bound.id, orphan.id}

    assert await psdk("reap", "--provider", "local", "--store", store_url, "--json") == 0
    assert [i["id"] for i in json.loads(capsys.readouterr().out)] == [orphan.id]
    assert await _ids(provider) == {bound.id}


@pytest.mark.parametrize("text", ["", "soon", "1h30", "-5m", "1.5.5"])
def test_psdk_reap_refuses_a_malformed_duration(
        text: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it
    assert main(["reap", f"--older-than={text}", "--store", "sqlite:///nonexistent/x"]) == 2
    assert "expected a duration" in capsys.readouterr().err


def test_psdk_reap_refuses_a_memory_store(capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it
    assert main(["reap", "--store", "memory:"]) == 2
    assert "every owner-tagged sandbox would be killed" in capsys.readouterr().err
