"""The E2B emulator's in-sandbox helper (``_inside``) answers as the commands it stands
in for do, on the local backend: links (to files, to directories, dangling, in a loop),
owners (known and unknown), user metadata and names that are not UTF-8; and when code in
the sandbox ends the helper, the next answer comes from the command, then from a helper
made anew."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engines import require_bwrap
from local_fixtures import provider_in
from provider_sdk_emulators.e2b import _envd_entries, _inside

from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

SETUP = r"""
set -e
mkdir -p /tmp/t/dir
printf data > /tmp/t/file
chmod 1751 /tmp/t/dir
ln -s file /tmp/t/to-file
ln -s dir /tmp/t/to-dir
ln -s missing /tmp/t/dangling
ln -s loop-b /tmp/t/loop-a
ln -s loop-a /tmp/t/loop-b
ln -s ../t/to-file /tmp/t/chain
printf x > "$(printf '/tmp/t/not-utf8-\377')"
python3 -c 'import os; os.setxattr("/tmp/t/file", "user.e2b.team", "psdk".encode())'
"""


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    require_bwrap()
    async with provider_in(tmp_path / "home") as provider:
        made = await provider.create()
        done = await made.exec(["/bin/sh", "-c", SETUP])
        assert done.exit_code == 0, done.stderr
        yield made


async def _paths(sandbox: Sandbox) -> list[str]:
    names = [entry.path for entry in await sandbox.files.list("/tmp/t")]
    assert len(names) == 9
    return [*names, "/tmp/t/gone", "/etc/passwd", "/proc/1"]


async def _by_command(sandbox: Sandbox, script: str, paths: list[str]) -> list[str]:
    done = await sandbox.exec(["/bin/sh", "-c", script, "sh", *paths])
    return done.stdout_bytes.decode("utf-8", "surrogateescape").split("\0")


@pytest.mark.parametrize(("function", "script"), [("_psdk_resolve", _envd_entries._RESOLVE),
                                                  ("_psdk_describe", _envd_entries._DESCRIBE)],
                         ids=["resolve", "describe"])
async def test_the_helper_gives_the_commands_fields(sandbox: Sandbox, function: str,
                                                    script: str) -> None:
    paths = await _paths(sandbox)
    helped = await _inside.ask_helper(sandbox, function, paths, timeout=30)
    assert helped is not None
    commanded = await _by_command(sandbox, script, paths)
    assert commanded[-1] == ""  # each field ends in a NUL
    assert helped == commanded[:-1]
    assert any(field.startswith("/tmp/t/not-utf8-\udcff") for field in helped)


async def test_the_answers_hold_what_was_set_up(sandbox: Sandbox) -> None:
    paths = ["/tmp/t/to-file", "/tmp/t/to-dir", "/tmp/t/dangling", "/tmp/t/loop-a",
             "/tmp/t/chain"]
    targets = await _envd_entries.resolve(sandbox, paths)
    assert [(str(t.type), t.mode, t.path) for t in targets.values()] == [
        ("file", 0o644, "/tmp/t/file"), ("directory", 0o751, "/tmp/t/dir"),
        ("None", 0, "/tmp/t/dangling"), ("None", 0, "/tmp/t/loop-a"),
        ("file", 0o644, "/tmp/t/file")]
    details = await _envd_entries.describe(sandbox, ["/tmp/t/file", "/etc/passwd"])
    assert (details["/etc/passwd"].owner, details["/etc/passwd"].group) == ("root", "root")
    assert details["/tmp/t/file"].owner == "user"
    assert details["/tmp/t/file"].metadata == {"team": "psdk"}


async def test_a_helper_ended_inside_is_stood_in_for_then_made_anew(
        sandbox: Sandbox) -> None:
    before = await _envd_entries.describe(sandbox, ["/tmp/t/file"])
    helpers = _inside._BY_PROVIDER[sandbox.provider]
    first = helpers.contexts[sandbox.id]
    await sandbox.code.close_context(first)  # its interpreter ends
    assert await _envd_entries.describe(sandbox, ["/tmp/t/file"]) == before  # by command
    assert sandbox.id not in helpers.contexts
    assert await _envd_entries.describe(sandbox, ["/tmp/t/file"]) == before  # a new helper
    assert helpers.contexts[sandbox.id] != first


async def test_a_helper_tampered_with_inside_is_not_believed(sandbox: Sandbox) -> None:
    before = await _envd_entries.describe(sandbox, ["/tmp/t/file"])
    context = _inside._BY_PROVIDER[sandbox.provider].contexts[sandbox.id]
    await sandbox.code.run("def _psdk_describe(paths):\n    print('not json')",
                           context=context)
    assert await _envd_entries.describe(sandbox, ["/tmp/t/file"]) == before
