"""``psdk contract``: a generated test module, pytest in a subprocess, pytest's status."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from memory_provider import Store
from psdk_fixtures import Psdk

from provider_sdk.cli import contract


def test_generated_module_subclasses_the_contract_for_the_provider() -> None:
    source = contract.test_module("my-provider")
    tree = ast.parse(source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert [c.name for c in classes] == ["TestContract"]
    assert ast.unparse(classes[0].bases[0]) == "ProviderContract"
    assert "provider_name = 'my-provider'" in source
    assert "from provider_sdk_contract import ProviderContract" in source


def test_runs_pytest_on_the_module_with_the_plugin_and_exits_with_its_status(
        psdk: Psdk, memory: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def call(command: list[str], env: dict[str, str] | None) -> int:
        module = Path(command[command.index("--rootdir") + 2])
        seen["command"] = command
        seen["source"] = module.read_text()
        seen["env"] = env
        return 5

    monkeypatch.setattr(subprocess, "call", call)
    outcome = psdk("contract", "--provider", "memory", "--", "-k", "lifecycle", "-x")
    assert outcome.code == 5
    command = seen["command"]
    assert isinstance(command, list)
    assert command[1:5] == ["-m", "pytest", "-p", "provider_sdk_contract.plugin"]
    assert command[-3:] == ["-k", "lifecycle", "-x"]
    assert seen["source"] == contract.test_module("memory")
    assert not Path(command[command.index("--rootdir") + 1]).exists()  # cleaned up


def test_defaults_to_the_configured_provider(psdk: Psdk, memory: Store,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    sources: list[str] = []
    monkeypatch.setattr(subprocess, "call",
                        lambda c, env: sources.append(Path(c[c.index("--rootdir") + 2]).read_text())
                        or 0)
    monkeypatch.setenv("PSDK_PROVIDER", "memory")
    assert psdk("contract").code == 0
    assert sources == [contract.test_module("memory")]
