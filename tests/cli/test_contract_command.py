"""``psdk contract``: a generated test module, pytest in a subprocess, pytest's status."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from memory_provider import Store
from psdk_fixtures import Psdk

from provider_sdk.cli import contract

pytestmark = pytest.mark.slow


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
    assert command[1:7] == ["-m", "pytest", "-p", "provider_sdk_contract.plugin",
                           "-p", "provider_sdk.cli.contract_summary"]
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


def _env_without_config() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("PSDK_PROVIDER", "PSDK_CONFIG")}


def test_contract_ends_with_a_summary_of_skips_with_their_reasons(tmp_path: Path) -> None:
    import sys

    env = {**_env_without_config(), "PSDK_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-m", "provider_sdk.cli", "contract", "--provider", "local", "--",
         "-k", "exec_as or kill_twice", "-p", "no:cacheprovider"],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.split("contract summary", 1)[1]
    assert "1 passed, 0 failed, 2 skipped, 0 known failures" in summary
    assert "2 x provider 'local' does not declare: exec.user" in summary


def test_the_summary_lists_known_failures_with_their_reasons_and_failures(
        tmp_path: Path) -> None:
    import sys

    (tmp_path / "test_some.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    pass\n\n"
        "@pytest.mark.skip(reason='no engine here')\ndef test_skipped():\n    pass\n\n"
        "@pytest.mark.xfail(reason='the backend drops stdin', strict=True)\n"
        "def test_known():\n    assert False\n\n"
        "def test_broken():\n    assert False\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "provider_sdk.cli.contract_summary",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        cwd=tmp_path)
    assert result.returncode == 1
    summary = result.stdout.split("contract summary", 1)[1]
    assert "1 passed, 1 failed, 1 skipped, 1 known failures" in summary
    assert "1 x no engine here" in summary
    assert "test_known: the backend drops stdin" in summary
    assert "failed:\n  test_broken" in summary
