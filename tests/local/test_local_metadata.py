"""Labels set on a local sandbox after create (``metadata.update``) are written to its
state record: another process listing by them finds it, the labels it had stay, a
killed sandbox cannot be labelled, and the label limit counts the labels it keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio.to_thread
import pytest

from provider_sdk.errors import InvalidInput, SandboxNotFound
from provider_sdk.labels import MAX_LABELS
from provider_sdk.local import LocalProvider
from provider_sdk.local._home import read_meta

pytestmark = pytest.mark.anyio

# Lists the sandboxes of a home carrying one label, in a process of its own.
_LIST = """
import json, sys, anyio
from provider_sdk.local import LocalProvider

async def main() -> None:
    async with LocalProvider(home=sys.argv[1]) as provider:
        found = await provider.list(metadata={sys.argv[2]: sys.argv[3]})
        print(json.dumps({i.id: dict(i.metadata) for i in found}))

anyio.run(main)
"""


def _listed(home: Path, key: str, value: str) -> dict[str, dict[str, str]]:
    done = subprocess.run([sys.executable, "-c", _LIST, str(home), key, value],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, dict[str, str]] = json.loads(done.stdout)
    return found


async def test_labels_set_are_seen_by_another_process(provider: LocalProvider,
                                                      home: Path) -> None:
    sandbox = await provider.create(metadata={"team": "ml"})
    other = await provider.create(metadata={"team": "ml"})
    assert await anyio.to_thread.run_sync(_listed, home, "owner", "alice") == {}
    info = await sandbox.set_metadata({"owner": "alice", "team": "search"})
    assert info.metadata == {"owner": "alice", "team": "search"}
    expected = {sandbox.id: {"owner": "alice", "team": "search"}}
    assert await anyio.to_thread.run_sync(_listed, home, "owner", "alice") == expected
    assert await anyio.to_thread.run_sync(_listed, home, "team", "ml") == {
        other.id: {"team": "ml"}}
    meta = read_meta(home / "sandboxes" / sandbox.id)
    assert meta is not None
    assert meta["metadata"] == {"owner": "alice", "team": "search"}
    assert (await sandbox.exec("echo still")).stdout == "still\n"


async def test_the_label_limit_counts_the_labels_kept(provider: LocalProvider) -> None:
    kept = {f"k{n}": "v" for n in range(MAX_LABELS - 1)}
    sandbox = await provider.create(metadata=kept)
    await sandbox.set_metadata({"k0": "changed"})  # a change adds no label
    with pytest.raises(InvalidInput, match=f"at most {MAX_LABELS}"):
        await sandbox.set_metadata({"one": "v", "two": "v"})
    assert (await provider.get_info(sandbox.id)).metadata == {**kept, "k0": "changed"}


async def test_a_killed_sandbox_cannot_be_labelled(provider: LocalProvider) -> None:
    sandbox = await provider.create()
    await provider.kill(sandbox.id)
    with pytest.raises(SandboxNotFound):
        await sandbox.set_metadata({"owner": "alice"})
