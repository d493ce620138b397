"""``psdk mcp`` over vendor providers: the same client flow on ``e2b`` and ``daytona``,
each reached through its unmodified vendor SDK against its emulator (started here on
127.0.0.1, backed by the local provider, as ``tests/e2b`` and ``tests/daytona`` start
theirs). Sandboxes made by hand on the same backend stand for those of other users.
Stopping the emulator removes every sandbox it made.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import attrs
import pytest
from anyio.from_thread import start_blocking_portal
from mcp_clients import Session, environment, stdio_session

from provider_sdk import emulators, open_provider, registry
from provider_sdk.mcp import SCOPE_LABEL

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def emulator(name: str, home: Path) -> Iterator[dict[str, str]]:
    """The ``name`` emulator, backed by the local provider in ``home``; the settings
    that point its provider at it."""
    if name not in registry.available() or name not in emulators.available():
        pytest.skip(f"the {name!r} provider or emulator plugin is not installed")
    saved = os.environ.get("PSDK_HOME")
    os.environ["PSDK_HOME"] = str(home)  # read once, when the backend is opened
    options = emulators.EmulatorOptions(api_key=secrets.token_urlsafe(16))
    try:
        with start_blocking_portal() as portal, \
                portal.wrap_async_context_manager(emulators.run(name, options)) as running:
            if saved is None:
                os.environ.pop("PSDK_HOME", None)
            else:
                os.environ["PSDK_HOME"] = saved
            yield running.environment()
    finally:
        if saved is None:
            os.environ.pop("PSDK_HOME", None)
        else:
            os.environ["PSDK_HOME"] = saved


@pytest.fixture(scope="module", params=["e2b", "daytona"])
def vendor(request: pytest.FixtureRequest, home: Path) -> Iterator[Vendor]:
    """A provider's name, its settings, and a server of the default scope on it."""
    name: str = request.param
    with emulator(name, home / f"{name}-backend") as settings:
        args = ["--provider", name, "--output-limit", "100", "--exec-timeout", "30"]
        with stdio_session(args, environment(home, **settings)) as session:
            yield Vendor(name, settings, session)


@attrs.frozen
class Vendor:
    name: str
    settings: dict[str, str]
    session: Session

    def made_by_hand(self, labels: dict[str, str]) -> str:
        """A sandbox made on the server's backend, not through it."""
        async def create() -> str:
            async with open_provider(self.name) as provider:
                return (await provider.create(metadata=labels)).id

        with pytest.MonkeyPatch.context() as patch:
            for key, value in self.settings.items():
                patch.setenv(key, value)
            return anyio.run(create)


def test_the_client_flow(vendor: Vendor) -> None:
    name, session = vendor.name, vendor.session
    assert {"sandbox_create", "sandbox_exec", "sandbox_read_file", "sandbox_write_file",
            "sandbox_list_files", "sandbox_kill", "sandbox_list"} <= set(session.tools())
    made = session.ok("sandbox_create", {"labels": {"team": "mcp"}})
    assert made["provider"] == name
    assert made["labels"] == {"team": "mcp", SCOPE_LABEL: "default"}
    sid = made["id"]

    out = session.ok("sandbox_exec", {"sandbox_id": sid, "command": "echo hi; exit 4"})
    assert (out["exit_code"], out["stdout"]) == (4, "hi\n")
    long = session.ok("sandbox_exec", {"sandbox_id": sid,
                                       "command": "head -c 300 /dev/zero | tr '\\0' z"})
    assert long["stdout"] == "z" * 100
    assert long["stdout_truncated_bytes"] == 200

    data = bytes(range(255, -1, -1))  # not UTF-8 from its first byte
    session.ok("sandbox_write_file", {"sandbox_id": sid, "path": "/tmp/mcp/blob",
                                      "content": base64.b64encode(data).decode(),
                                      "encoding": "base64"})
    read = session.ok("sandbox_read_file", {"sandbox_id": sid, "path": "/tmp/mcp/blob"})
    assert read["encoding"] == "base64"
    assert read["size"] == 256
    assert base64.b64decode(read["content"]) == data[:100]
    assert read["truncated_bytes"] == 156
    session.ok("sandbox_write_file", {"sandbox_id": sid, "path": "/tmp/mcp/t.txt",
                                      "content": "text"})
    assert session.ok("sandbox_read_file", {"sandbox_id": sid, "path": "/tmp/mcp/t.txt"}
                      )["content"] == "text"
    names = [e["name"] for e in session.ok("sandbox_list_files",
                                           {"sandbox_id": sid, "path": "/tmp/mcp"})["entries"]]
    assert names == ["blob", "t.txt"]

    assert "FileNotFound" in session.error("sandbox_read_file",
                                           {"sandbox_id": sid, "path": "/tmp/mcp/none"})
    assert "InvalidInput" in session.error("sandbox_read_file",
                                           {"sandbox_id": sid, "path": "a\x00b"})
    timed_out = session.call("sandbox_exec", {"sandbox_id": sid, "timeout": 1,
                                              "command": "echo begun; sleep 20"})
    assert timed_out.is_error
    assert timed_out.structured_content is not None
    assert timed_out.structured_content["timed_out"] is True
    assert timed_out.structured_content["stdout"] == "begun\n"

    session.ok("code_run", {"sandbox_id": sid, "code": "x = 6"})
    ran = session.ok("code_run", {"sandbox_id": sid, "code": "print('out')\nx * 7"})
    assert (ran["text"], ran["stdout"], ran["error"]) == ("42", "out\n", None)

    assert sid in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]
    assert session.ok("sandbox_kill", {"sandbox_id": sid})["killed"] is True
    assert sid not in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]


@pytest.mark.parametrize("labels", [{}, {SCOPE_LABEL: "other"}],
                         ids=["unlabelled", "other-scope"])
def test_a_sandbox_out_of_scope_is_unreachable(vendor: Vendor,
                                               labels: dict[str, str]) -> None:
    session = vendor.session
    theirs = vendor.made_by_hand(labels)
    assert theirs not in [s["id"] for s in session.ok("sandbox_list")["sandboxes"]]
    for tool, extra in [("sandbox_exec", {"command": "true"}),
                        ("sandbox_read_file", {"path": "/etc/hostname"}),
                        ("sandbox_kill", {})]:
        assert "SandboxNotFound" in session.error(tool, {"sandbox_id": theirs, **extra})
    labelled = vendor.made_by_hand({SCOPE_LABEL: "default"})
    assert session.ok("sandbox_exec", {"sandbox_id": labelled, "command": "echo in"}
                      )["stdout"] == "in\n"
