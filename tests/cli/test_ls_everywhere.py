"""``psdk ls`` lists what ``psdk`` finds by id: the sandboxes of the default provider and
of every provider ``psdk`` made one on (``--provider`` narrows it to one), each sandbox
once. A sandbox that the E2B emulator runs on the local provider is one e2b sandbox, not
also a local one, and no label a provider keeps for itself shows. Run in this process;
the emulator is real, on 127.0.0.1, backed by the local provider."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest
from anyio.from_thread import start_blocking_portal
from engines import require_bwrap
from memory_provider import Store
from psdk_fixtures import Psdk

from provider_sdk import emulators
from provider_sdk.cli.places import default_places


def _ids(psdk: Psdk, *argv: str) -> list[tuple[str, str]]:
    outcome = psdk("ls", *argv, "--json")
    assert outcome.code == 0, outcome.err
    return [(info["provider"], info["id"]) for info in json.loads(outcome.out)]


def test_ls_lists_the_default_provider_and_those_psdk_made_sandboxes_on(
        psdk: Psdk, memory: Store) -> None:
    require_bwrap()
    made = psdk("create", "--provider", "memory")
    assert made.code == 0, made.err
    sandbox_id = made.out.strip()
    assert _ids(psdk) == [("memory", sandbox_id)]  # the default, local, has none
    table = psdk("ls").out.splitlines()
    assert table[0].split()[:3] == ["ID", "PROVIDER", "STATE"]
    assert table[1].split()[:2] == [sandbox_id, "memory"]
    assert _ids(psdk, "--provider", "local") == []  # narrowed to one


def test_a_provider_that_cannot_be_asked_is_one_warning(psdk: Psdk, memory: Store) -> None:
    require_bwrap()
    default_places().remember("sandbox", "acme-1", "acme")
    outcome = psdk("ls")
    assert outcome.code == 0
    assert outcome.err.startswith("psdk: warning: the sandboxes psdk made on acme are not "
                                  "listed: no provider named 'acme'")
    assert outcome.err.count("\n") == 1


@pytest.fixture
def e2b_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The E2B emulator on 127.0.0.1, backed by the local provider in this test's psdk
    home, and the E2B settings that point the e2b provider at it."""
    require_bwrap()
    if "e2b" not in emulators.available():
        pytest.skip("the e2b emulator's plugin is not installed")
    options = emulators.EmulatorOptions(api_key=secrets.token_urlsafe(16))
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(emulators.run("e2b", options)) as running:
        for name, value in running.environment().items():
            monkeypatch.setenv(name, value)
        yield


def test_a_sandbox_an_emulator_runs_is_listed_once_without_internal_labels(
        psdk: Psdk, e2b_emulator: None) -> None:
    made = psdk("create", "--provider", "e2b", "--label", "owner=bob")
    assert made.code == 0, made.err
    e2b_id = made.out.strip()
    listed = json.loads(psdk("ls", "--json").out)
    assert [(i["provider"], i["id"], i["metadata"]) for i in listed] == [
        ("e2b", e2b_id, {"owner": "bob"})]
    table = psdk("ls").out
    assert "psdk=" not in table
    assert table.count(e2b_id) == 1
    # Asked alone, the backend shows what runs the e2b sandbox, and nothing else of it.
    [backing] = json.loads(psdk("ls", "--provider", "local", "--json").out)
    assert backing["metadata"] == {emulators.BACKING_LABEL: f"e2b {e2b_id}"}
    assert psdk("kill", e2b_id).code == 0
    assert _ids(psdk) == []
