"""``psdk mcp`` on stdio, on the local provider, through the ``mcp`` package's client:
every tool, its errors, the output limit, and the server's scope.

One server (``--output-limit 1000``, ``--exec-timeout 20``) and one sandbox serve the
module; tests that kill or need another sandbox make their own.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_clients import Session, environment, stdio_session

from provider_sdk.local import LocalProvider
from provider_sdk.mcp import SCOPE_LABEL

pytestmark = pytest.mark.slow

LIMIT = 1000
TOOLS = {"sandbox_create", "sandbox_exec", "sandbox_read_file", "sandbox_write_file",
         "sandbox_list_files", "sandbox_kill", "sandbox_list", "port_expose", "code_run"}


@pytest.fixture(scope="module")
def session(home: Path) -> Iterator[Session]:
    with stdio_session(["--output-limit", str(LIMIT), "--exec-timeout", "20"],
                       environment(home)) as made:
        yield made


@pytest.fixture(scope="module")
def sandbox(session: Session) -> str:
    """The module's sandbox, made through the server."""
    made: str = session.ok("sandbox_create", {"labels": {"team": "mcp"}})["id"]
    return made


def made_by_hand(home: Path, labels: dict[str, str]) -> str:
    """A sandbox made on the server's backend, not through it."""
    async def create() -> str:
        async with LocalProvider(home=home / "psdk") as provider:
            sandbox = await provider.create(metadata=labels)
            return sandbox.id
    return anyio.run(create)


def state_of(home: Path, sandbox_id: str) -> str:
    async def read() -> str:
        async with LocalProvider(home=home / "psdk") as provider:
            return str((await provider.get_info(sandbox_id)).state)
    return anyio.run(read)


# ------------------------------------------------------------------ the tools


def test_every_tool_is_listed_with_a_typed_input_and_output_schema(session: Session) -> None:
    tools = session.tools()
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object"
        for name, prop in tool.input_schema.get("properties", {}).items():
            kinds = prop.get("anyOf", [prop])
            assert all("type" in kind or "$ref" in kind for kind in kinds), (tool.name, name)
            for kind in kinds:  # a mapping says what its values are
                if kind.get("type") == "object":
                    assert kind["additionalProperties"] == {"type": "string"}, (tool.name, name)
    assert tools["sandbox_exec"].input_schema["required"] == ["command"]
    assert tools["sandbox_write_file"].input_schema["properties"]["encoding"]["enum"] == [
        "utf-8", "base64"]


def test_create_returns_the_sandbox_with_the_scope_label(session: Session,
                                                         sandbox: str) -> None:
    listed = session.ok("sandbox_list")["sandboxes"]
    mine = [s for s in listed if s["id"] == sandbox]
    assert len(mine) == 1
    assert mine[0]["provider"] == "local"
    assert mine[0]["state"] == "running"
    assert mine[0]["labels"] == {"team": "mcp", SCOPE_LABEL: "default"}


def test_exec_returns_the_exit_code_and_both_streams(session: Session, sandbox: str) -> None:
    out = session.ok("sandbox_exec", {"sandbox_id": sandbox,
                                      "command": "echo out; echo err >&2; exit 3"})
    assert (out["exit_code"], out["stdout"], out["stderr"]) == (3, "out\n", "err\n")
    assert out["timed_out"] is False
    assert out["stdout_truncated_bytes"] == out["stderr_truncated_bytes"] == 0


def test_exec_takes_an_argv_list_env_cwd_and_stdin(session: Session, sandbox: str) -> None:
    out = session.ok("sandbox_exec", {
        "sandbox_id": sandbox, "command": ["/bin/sh", "-c", 'echo "$GREETING $(pwd)"; cat'],
        "env": {"GREETING": "hello", "PATH": "/usr/bin:/bin"}, "cwd": "/tmp",
        "stdin": "from stdin"})
    assert out["stdout"] == "hello /tmp\nfrom stdin"


def test_exec_output_over_the_limit_is_cut_and_says_so(session: Session, sandbox: str) -> None:
    out = session.ok("sandbox_exec", {
        "sandbox_id": sandbox,
        "command": "head -c 5000 /dev/zero | tr '\\0' a; head -c 1500 /dev/zero >&2"})
    assert out["stdout"] == "a" * LIMIT
    assert out["stdout_truncated_bytes"] == 5000 - LIMIT
    assert out["stderr_truncated_bytes"] == 1500 - LIMIT


def test_exec_timeout_is_a_tool_error_with_the_partial_output(session: Session,
                                                              sandbox: str) -> None:
    result = session.call("sandbox_exec", {"sandbox_id": sandbox, "timeout": 1,
                                           "command": "echo started; sleep 30; echo never"})
    assert result.is_error
    assert result.content[0].text.startswith("CommandTimeout: ")  # type: ignore[union-attr]
    out = result.structured_content
    assert out is not None
    assert out["timed_out"] is True
    assert out["exit_code"] is None
    assert out["stdout"] == "started\n"
    assert out["duration_seconds"] < 10


def test_a_timeout_past_the_servers_is_refused(session: Session, sandbox: str) -> None:
    text = session.error("sandbox_exec", {"sandbox_id": sandbox, "command": "true",
                                          "timeout": 21})
    assert "InvalidInput" in text
    assert "20s" in text


def test_text_files_round_trip(session: Session, sandbox: str) -> None:
    written = session.ok("sandbox_write_file", {"sandbox_id": sandbox,
                                                "path": "notes/hello.txt",
                                                "content": "héllo\n"})
    assert written == {"path": "notes/hello.txt", "size": 7}
    read = session.ok("sandbox_read_file", {"sandbox_id": sandbox,
                                            "path": "/home/user/notes/hello.txt"})
    assert read == {"path": "/home/user/notes/hello.txt", "content": "héllo\n",
                    "encoding": "utf-8", "size": 7, "truncated_bytes": 0}


def test_binary_files_travel_as_base64(session: Session, sandbox: str) -> None:
    data = bytes(range(256))
    session.ok("sandbox_write_file", {"sandbox_id": sandbox, "path": "blob.bin",
                                      "content": base64.b64encode(data).decode(),
                                      "encoding": "base64"})
    out = session.ok("sandbox_exec", {"sandbox_id": sandbox, "command": "sha256sum blob.bin"})
    import hashlib
    assert out["stdout"].split()[0] == hashlib.sha256(data).hexdigest()
    read = session.ok("sandbox_read_file", {"sandbox_id": sandbox, "path": "blob.bin"})
    assert read["encoding"] == "base64"
    assert base64.b64decode(read["content"]) == data


def test_a_file_over_the_limit_is_cut_there_and_says_so(session: Session,
                                                         sandbox: str) -> None:
    # 'é' is two bytes: the limit (1000) falls between characters; 'x' + 'é'... puts
    # it through one, which is dropped rather than the whole turned into base64.
    session.ok("sandbox_write_file", {"sandbox_id": sandbox, "path": "big.txt",
                                      "content": "x" + "é" * 1500})
    read = session.ok("sandbox_read_file", {"sandbox_id": sandbox, "path": "big.txt"})
    assert read["encoding"] == "utf-8"
    assert read["content"] == "x" + "é" * 499
    assert read["size"] == 3001
    assert read["truncated_bytes"] == 3001 - LIMIT


def test_a_huge_file_is_read_no_further_than_the_limit(session: Session,
                                                       sandbox: str) -> None:
    size = 64 << 30  # sparse: nothing on disk, but a whole read would take minutes
    session.ok("sandbox_exec", {"sandbox_id": sandbox,
                                "command": f"truncate -s {size} sparse"})
    read = session.ok("sandbox_read_file", {"sandbox_id": sandbox, "path": "sparse"})
    assert read["content"] == "\x00" * LIMIT
    assert read["size"] == size
    assert read["truncated_bytes"] == size - LIMIT


def test_a_missing_file_is_a_tool_error(session: Session, sandbox: str) -> None:
    text = session.error("sandbox_read_file", {"sandbox_id": sandbox, "path": "/no/such"})
    assert "FileNotFound" in text
    assert "/no/such" in text


@pytest.mark.parametrize(("tool", "extra"), [
    ("sandbox_read_file", {}), ("sandbox_write_file", {"content": "x"}),
    ("sandbox_list_files", {})])
def test_a_path_with_a_nul_byte_is_invalid_input(session: Session, sandbox: str, tool: str,
                                                 extra: dict[str, Any]) -> None:
    text = session.error(tool, {"sandbox_id": sandbox, "path": "a\x00b", **extra})
    assert "InvalidInput" in text
    assert "NUL" in text


def test_reading_a_directory_is_refused(session: Session, sandbox: str) -> None:
    assert "is a directory" in session.error("sandbox_read_file",
                                             {"sandbox_id": sandbox, "path": "/tmp"})


def test_bad_base64_is_invalid_input(session: Session, sandbox: str) -> None:
    text = session.error("sandbox_write_file", {"sandbox_id": sandbox, "path": "x",
                                                "content": "not base64!",
                                                "encoding": "base64"})
    assert "InvalidInput" in text
    assert "base64" in text


def test_list_files_shows_the_entries(session: Session, sandbox: str) -> None:
    session.ok("sandbox_exec", {"sandbox_id": sandbox,
                                "command": "mkdir -p tree/sub && printf 12345 > tree/f && "
                                           "ln -s f tree/link"})
    listing = session.ok("sandbox_list_files", {"sandbox_id": sandbox, "path": "tree"})
    entries = {e["name"]: e for e in listing["entries"]}
    assert set(entries) == {"f", "link", "sub"}
    assert (entries["f"]["type"], entries["f"]["size"]) == ("file", 5)
    assert entries["f"]["path"] == "/home/user/tree/f"
    assert entries["sub"]["type"] == "directory"
    assert entries["link"]["symlink_target"] == "f"
    assert listing["omitted"] == 0


def test_arguments_of_the_wrong_type_are_refused_and_the_server_goes_on(
        session: Session, sandbox: str) -> None:
    text = session.error("sandbox_exec", {"sandbox_id": sandbox, "command": 42})
    assert "command" in text
    assert session.ok("sandbox_exec", {"sandbox_id": sandbox, "command": "echo alive"}
                      )["stdout"] == "alive\n"


def test_reserved_labels_are_refused(session: Session) -> None:
    text = session.error("sandbox_create", {"labels": {SCOPE_LABEL: "other"}})
    assert "InvalidInput" in text
    assert "reserved" in text


def test_port_expose_serves_the_port_behind_its_token(session: Session, sandbox: str) -> None:
    exposed = session.ok("port_expose", {"sandbox_id": sandbox, "port": 8000})
    assert exposed["port"] == 8000
    assert exposed["url"].startswith("http://127.0.0.1:")
    assert exposed["token"]
    assert exposed["token"] in exposed["url"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(exposed["base_url"], timeout=10)  # 127.0.0.1 only
    assert refused.value.code in (401, 403)
    with pytest.raises(urllib.error.HTTPError) as nothing_there:
        urllib.request.urlopen(exposed["url"], timeout=10)  # 127.0.0.1 only
    assert nothing_there.value.code == 502  # through: nothing listens in the sandbox


def test_code_run_keeps_state_from_one_call_to_the_next(session: Session,
                                                          sandbox: str) -> None:
    first = session.ok("code_run", {"sandbox_id": sandbox,
                                    "code": "x = 41\nprint('set')"})
    assert (first["text"], first["stdout"], first["error"]) == (None, "set\n", None)
    second = session.ok("code_run", {"sandbox_id": sandbox, "code": "x + 1"})
    assert second["text"] == "42"
    assert second["execution_count"] == first["execution_count"] + 1


def test_code_run_reports_an_exception_as_a_result(session: Session, sandbox: str) -> None:
    out = session.ok("code_run", {"sandbox_id": sandbox,
                                  "code": "import sys\nprint('to err', file=sys.stderr)\n1/0"})
    assert out["stderr"] == "to err\n"
    assert out["text"] is None
    assert out["error"]["name"] == "ZeroDivisionError"
    assert out["error"]["value"] == "division by zero"
    assert "1/0" in out["error"]["traceback"]


def test_code_run_output_over_the_limit_is_cut_and_says_so(session: Session,
                                                           sandbox: str) -> None:
    out = session.ok("code_run", {"sandbox_id": sandbox,
                                  "code": "print('a' * 4999)\n'b' * 3000"})
    assert out["stdout"] == "a" * LIMIT
    assert out["stdout_truncated_bytes"] == 5000 - LIMIT
    assert out["text_truncated_bytes"] == 3002 - LIMIT  # the repr's quotes count
    assert len(out["text"]) == LIMIT


def test_code_run_timeout_interrupts_and_keeps_the_state(session: Session,
                                                         sandbox: str) -> None:
    session.ok("code_run", {"sandbox_id": sandbox, "code": "kept = 'yes'"})
    result = session.call("code_run", {"sandbox_id": sandbox, "timeout": 1,
                                       "code": "import time\nprint('begun', flush=True)\n"
                                               "time.sleep(30)"})
    assert result.is_error
    assert result.content[0].text.startswith("CodeTimeout: ")  # type: ignore[union-attr]
    out = result.structured_content
    assert out is not None
    assert (out["timed_out"], out["state_kept"], out["stdout"]) == (True, True, "begun\n")
    assert out["error"]["name"] == "KeyboardInterrupt"
    assert session.ok("code_run", {"sandbox_id": sandbox, "code": "kept"})["text"] == "'yes'"
    text = session.error("code_run", {"sandbox_id": sandbox, "code": "1", "timeout": 21})
    assert "InvalidInput" in text


def test_a_killed_sandbox_is_gone(session: Session) -> None:
    made = session.ok("sandbox_create")["id"]
    assert session.ok("sandbox_kill", {"sandbox_id": made}) == {"id": made, "killed": True}
    assert made not in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]
    assert "SandboxNotFound" in session.error("sandbox_exec", {"sandbox_id": made,
                                                               "command": "true"})


def test_an_unknown_sandbox_is_not_found(session: Session) -> None:
    assert "SandboxNotFound" in session.error("sandbox_read_file",
                                              {"sandbox_id": "nosuchid", "path": "x"})


def test_a_sandbox_id_is_required(session: Session) -> None:
    assert "sandbox_id is required" in session.error("sandbox_exec", {"command": "true"})


# ------------------------------------------------------------------ the scope


@pytest.mark.parametrize("labels", [{}, {SCOPE_LABEL: "someone-else"}],
                         ids=["unlabelled", "other-scope"])
def test_a_sandbox_out_of_scope_is_unreachable_and_untouched(
        session: Session, home: Path, labels: dict[str, str]) -> None:
    foreign = made_by_hand(home, labels)
    assert foreign not in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]
    for tool, extra in [("sandbox_exec", {"command": "true"}),
                        ("sandbox_read_file", {"path": "/etc/hostname"}),
                        ("sandbox_write_file", {"path": "x", "content": "x"}),
                        ("sandbox_list_files", {}), ("port_expose", {"port": 80}),
                        ("code_run", {"code": "1"}), ("sandbox_kill", {})]:
        text = session.error(tool, {"sandbox_id": foreign, **extra})
        assert "SandboxNotFound" in text, tool
        assert "in scope 'default'" in text, tool
    assert state_of(home, foreign) == "running"


def test_a_sandbox_labelled_with_the_scope_is_reachable(session: Session,
                                                        home: Path) -> None:
    labelled = made_by_hand(home, {SCOPE_LABEL: "default"})
    assert labelled in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]
    assert session.ok("sandbox_exec", {"sandbox_id": labelled, "command": "echo in"}
                      )["stdout"] == "in\n"
    session.ok("sandbox_kill", {"sandbox_id": labelled})
