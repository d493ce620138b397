"""``psdk mcp --owner NAME``: every session bound to one owner's resident sandbox through
the sandbox manager, on the local provider and a SQLite binding store.

Alice's and Bob's servers share the module's store; neither reaches the other's
sandbox, nor any sandbox the manager did not bind to its owner.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_clients import Session, environment, stdio_session

from provider_sdk.manager import OWNER_LABEL

pytestmark = pytest.mark.slow


def owner_args(home: Path, owner: str) -> list[str]:
    return ["--owner", owner, "--store", f"sqlite:///{home / 'bindings.sqlite3'}"]


@pytest.fixture(scope="module")
def alice(home: Path) -> Iterator[Session]:
    with stdio_session(owner_args(home, "alice"), environment(home)) as session:
        yield session


@pytest.fixture(scope="module")
def bob(home: Path) -> Iterator[Session]:
    with stdio_session(owner_args(home, "bob"), environment(home)) as session:
        yield session


def test_create_gives_the_owners_sandbox_and_the_same_one_again(alice: Session) -> None:
    first = alice.ok("sandbox_create")
    assert first["labels"] == {OWNER_LABEL: "alice"}
    assert alice.ok("sandbox_create")["id"] == first["id"]
    assert [s["id"] for s in alice.ok("sandbox_list")["sandboxes"]] == [first["id"]]


def test_the_tools_need_no_sandbox_id(alice: Session) -> None:
    alice.ok("sandbox_write_file", {"path": "who", "content": "alice"})
    assert alice.ok("sandbox_exec", {"command": "cat who"})["stdout"] == "alice"
    assert alice.ok("sandbox_read_file", {"path": "who"})["content"] == "alice"
    assert "who" in [e["name"] for e in alice.ok("sandbox_list_files")["entries"]]


def test_an_owner_cannot_reach_another_owners_sandbox(alice: Session, bob: Session) -> None:
    bobs = bob.ok("sandbox_create")["id"]
    alices = alice.ok("sandbox_create")["id"]
    assert bobs != alices
    assert [s["id"] for s in alice.ok("sandbox_list")["sandboxes"]] == [alices]
    for tool, extra in [("sandbox_exec", {"command": "true"}),
                        ("sandbox_read_file", {"path": "/etc/hostname"}),
                        ("sandbox_write_file", {"path": "x", "content": "x"}),
                        ("sandbox_list_files", {}), ("port_expose", {"port": 80}),
                        ("code_run", {"code": "1"}), ("sandbox_kill", {})]:
        text = alice.error(tool, {"sandbox_id": bobs, **extra})
        assert "SandboxNotFound" in text, tool
        assert "bound to owner 'alice'" in text, tool
    assert bob.ok("sandbox_exec", {"command": "echo still here"})["stdout"] == "still here\n"


def test_a_scope_sandbox_is_out_of_an_owners_reach(alice: Session, home: Path) -> None:
    with stdio_session([], environment(home)) as scoped:
        other = scoped.ok("sandbox_create")["id"]
        assert other not in [s["id"] for s in alice.ok("sandbox_list")["sandboxes"]]
        assert "SandboxNotFound" in alice.error("sandbox_exec", {"sandbox_id": other,
                                                                 "command": "true"})
        scoped.ok("sandbox_kill", {"sandbox_id": other})
        # ... and the scope's server does not reach the owners' sandboxes either.
        alices = alice.ok("sandbox_create")["id"]
        assert alices not in [s["id"] for s in scoped.ok("sandbox_list")["sandboxes"]]
        assert "SandboxNotFound" in scoped.error("sandbox_kill", {"sandbox_id": alices})


def test_the_owners_sandbox_outlives_the_server(alice: Session, home: Path) -> None:
    alices = alice.ok("sandbox_create")["id"]
    with stdio_session(owner_args(home, "alice"), environment(home)) as again:
        assert again.ok("sandbox_create")["id"] == alices
        assert again.ok("sandbox_read_file", {"path": "who"})["content"] == "alice"


def test_create_takes_no_template_labels_or_env(alice: Session) -> None:
    for arguments in ({"template": "other"}, {"labels": {"k": "v"}}, {"env": {"A": "1"}}):
        text = alice.error("sandbox_create", arguments)
        assert "InvalidInput" in text, arguments
        assert "owner 'alice'" in text, arguments


def test_kill_releases_the_owners_sandbox(bob: Session) -> None:
    bobs = bob.ok("sandbox_create")["id"]
    assert bob.ok("sandbox_kill") == {"id": bobs, "killed": True}
    assert bob.ok("sandbox_list")["sandboxes"] == []
    assert "SandboxNotFound" in bob.error("sandbox_kill")
    fresh = bob.ok("sandbox_create")["id"]
    assert fresh != bobs
    assert bob.ok("sandbox_exec", {"command": "test -e who; echo $?"})["stdout"] == "1\n"

