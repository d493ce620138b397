"""``CodeSandboxProvider``, deepagents-code's provider, on the local provider: found
through deepagents-code's entry-point group, it creates, finds again by id, finds an
owner's sandbox again through the binding store after a restart, and deletes."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from engines import require_bwrap
from provider_sdk_deepagents import CodeSandboxProvider, ProviderSandbox

from provider_sdk import SandboxNotFound

GROUP = "deepagents_code.sandbox_providers"


@pytest.fixture
def params(tmp_path: Path) -> dict[str, Any]:
    """What deepagents-code's config would pass: the provider, its options, a store."""
    require_bwrap()
    return {"provider": "local", "provider_options": {"home": str(tmp_path / "home")},
            "store": f"sqlite:///{tmp_path / 'bindings.sqlite3'}"}


def test_entry_point_loads_a_provider_made_without_arguments() -> None:
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}
    assert "psdk" in found
    provider = found["psdk"].load()()
    assert isinstance(provider, CodeSandboxProvider)
    for method in ("get_or_create", "delete", "aget_or_create", "adelete"):
        assert callable(getattr(provider, method))


def test_metadata_is_deepagents_codes_own_type_when_it_is_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert CodeSandboxProvider().metadata is None  # deepagents-code is not installed here

    @dataclasses.dataclass(frozen=True)
    class SandboxProviderMetadata:  # the fields deepagents-code's registry reads
        name: str
        working_dir: str
        install: object = None
        supports_sandbox_id: bool = True
        supports_snapshot_name: bool = False
        backend_module: str | None = None

    module = types.ModuleType("deepagents_code.integrations.sandbox_provider")
    module.SandboxProviderMetadata = SandboxProviderMetadata  # type: ignore[attr-defined]
    for name in ("deepagents_code", "deepagents_code.integrations"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    meta = CodeSandboxProvider().metadata
    assert isinstance(meta, SandboxProviderMetadata)
    assert (meta.name, meta.working_dir) == ("psdk", "/home/user")
    assert (meta.supports_sandbox_id, meta.supports_snapshot_name) == (True, False)
    assert meta.backend_module is not None
    importlib.import_module(meta.backend_module)  # the registry's pre-flight probe


def test_provider_options_which_may_hold_credentials_stay_out_of_reprs(
        params: dict[str, Any]) -> None:
    provider = CodeSandboxProvider()
    options = {**params["provider_options"]}
    made = provider.get_or_create(provider="local", provider_options=options)
    try:
        shown = repr(provider) + repr(made) + repr(provider._made[made.id])
        assert params["provider_options"]["home"] not in shown
    finally:
        provider.delete(sandbox_id=made.id)


def test_get_or_create_creates_and_finds_again_by_id(params: dict[str, Any]) -> None:
    provider = CodeSandboxProvider()
    made = provider.get_or_create(**params)
    try:
        assert isinstance(made, ProviderSandbox)
        assert made.write("/tmp/note.txt", "kept").error is None
        again = provider.get_or_create(sandbox_id=made.id, **params)
        assert again.id == made.id
        assert again.download_files(["/tmp/note.txt"])[0].content == b"kept"
        again.close()
    finally:
        provider.delete(sandbox_id=made.id)
    with pytest.raises(SandboxNotFound):
        CodeSandboxProvider().get_or_create(sandbox_id=made.id, **params)


def test_owner_finds_its_sandbox_again_after_a_restart(params: dict[str, Any]) -> None:
    first = CodeSandboxProvider()
    made = first.get_or_create(owner="alice", **params)
    assert made.write("/tmp/work.txt", "in progress").error is None
    first.delete(sandbox_id=made.id)  # the session ends: the sandbox stays resident

    restarted = CodeSandboxProvider()  # a new process: new provider, same store
    found = restarted.get_or_create(owner="alice", **params)
    assert found.id == made.id
    assert found.read("/tmp/work.txt").file_data == {"content": "in progress",
                                                       "encoding": "utf-8"}
    other = restarted.get_or_create(owner="bob", **params)
    assert other.id != made.id

    restarted.delete(sandbox_id=other.id, owner="bob")
    restarted.delete(sandbox_id=found.id, owner="alice")  # released: killed, unbound
    with pytest.raises(SandboxNotFound):
        CodeSandboxProvider().get_or_create(sandbox_id=made.id, **params)
    fresh = CodeSandboxProvider()
    replacement = fresh.get_or_create(owner="alice", **params)
    try:
        assert replacement.id != made.id
    finally:
        fresh.delete(sandbox_id=replacement.id, owner="alice")


def test_delete_kills_a_sandbox_it_did_not_make(params: dict[str, Any]) -> None:
    made = CodeSandboxProvider().get_or_create(**params)
    made.close()
    CodeSandboxProvider().delete(sandbox_id=made.id, provider=params["provider"],
                                 provider_options=params["provider_options"])
    with pytest.raises(SandboxNotFound):
        CodeSandboxProvider().get_or_create(sandbox_id=made.id, **params)


@pytest.mark.anyio
async def test_async_methods_create_and_delete(params: dict[str, Any]) -> None:
    provider = CodeSandboxProvider()
    made = await provider.aget_or_create(**params)
    assert (await made.aexecute("echo ready")).output == "ready\n"
    await provider.adelete(sandbox_id=made.id)
    with pytest.raises(SandboxNotFound):
        await provider.aget_or_create(sandbox_id=made.id, **params)
