"""The local provider's state records: a broken one never hides or breaks the others,
is reported, and is removed (with what it left) by kill; a full disk is a typed error
that leaves nothing behind."""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from local_fixtures import provider_in, tmpfs

from provider_sdk import (
    QuotaExceeded,
    Resources,
    SandboxNotRunning,
    SandboxState,
    VolumeMount,
    disks,
)
from provider_sdk.local import BrokenRecordWarning, LocalProvider, _launch
from provider_sdk.local._home import ABANDONED_AFTER
from provider_sdk.local._records import SandboxRecord, SnapshotRecord, VolumeRecord

pytestmark = pytest.mark.anyio


def corrupt(provider: LocalProvider, sandbox_id: str, text: str) -> dict[str, Any]:
    """Replace a record's meta.json with ``text``; return what it held."""
    path = provider._shared.home.sandbox(sandbox_id) / "meta.json"
    meta: dict[str, Any] = json.loads(path.read_text())
    path.write_text(text)
    return meta


def mounts() -> list[str]:
    return Path("/proc/self/mounts").read_text().splitlines()


def record(provider: LocalProvider, sandbox_id: str) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(
        (provider._shared.home.sandbox(sandbox_id) / "meta.json").read_text())
    return meta


async def listed(provider: LocalProvider) -> tuple[dict[str, Any], list[str]]:
    """``list()`` by id, and the broken-record warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos = await provider.list()
    broken = [w for w in caught if issubclass(w.category, BrokenRecordWarning)]
    assert all(w.filename == __file__ for w in broken), [w.filename for w in broken]
    said = [str(w.message) for w in broken]
    return {info.id: info for info in infos}, said


# The keys a sandbox's meta.json holds, as every version since templates wrote them;
# where sandboxes have host ids of their own (run as root), "ids" too.
RECORD_KEYS = {"id", "created_at", "template", "metadata", "image_env", "env", "cwd",
               "resources", "start_cmd", "ready_cmd", "idle_timeout", "volumes", "snapshot",
               "unisolated", "launch"}


def with_ids(provider: LocalProvider, keys: set[str]) -> set[str]:
    """``keys``, and ``ids`` where the provider gives sandboxes host ids of their own."""
    return keys | {"ids"} if provider._shared.separate else keys


async def test_a_record_is_written_in_the_shape_earlier_versions_read(
        provider: LocalProvider, tmp_path: Path) -> None:
    """meta.json keeps its keys and their JSON shapes, and reads back as it was."""
    volume = await provider.create_volume("psdk-records")
    try:
        async with provider.create(metadata={"k": "v"}, env={"E": "1"}, volumes=[
                VolumeMount(volume=volume.name, path="/mnt/v", read_only=True)]) as sandbox:
            meta = record(provider, sandbox.id)
            assert set(meta) == with_ids(provider, RECORD_KEYS)
            assert meta["volumes"] == [["psdk-records", "/mnt/v", True]]
            assert (meta["metadata"], meta["env"]) == ({"k": "v"}, {"E": "1"})
            assert isinstance(meta["created_at"], str)
            assert isinstance(meta["launch"], dict)
            assert isinstance(meta["resources"], dict)
            assert SandboxRecord.from_json(meta).to_json() == meta
    finally:
        await provider.delete_volume(volume.name)


async def test_snapshot_and_volume_records_keep_the_shape_earlier_versions_read(
        provider: LocalProvider) -> None:
    """A snapshot's and a volume's meta.json keep their keys, and a record written by
    hand in that shape (as an earlier version would) is listed and used."""
    volume = await provider.create_volume("psdk-vol-record")
    try:
        vol_path = provider._shared.home.volume(volume.name) / "meta.json"
        vol_meta = json.loads(vol_path.read_text())
        assert set(vol_meta) in (with_ids(provider, {"name", "created_at"}),
                                 with_ids(provider, {"name", "created_at", "disk_mb"}))
        assert VolumeRecord.from_json(vol_meta).to_json() == vol_meta
        async with provider.create() as sandbox:
            await sandbox.files.write("/tmp/kept.txt", "kept")
            snapshot = await sandbox.snapshot()
        snap_path = provider._shared.home.snapshot(snapshot.id) / "meta.json"
        snap_meta = json.loads(snap_path.read_text())
        assert set(snap_meta) == with_ids(provider, {"id", "sandbox_id", "created_at",
                                                     "template"})
        assert SnapshotRecord.from_json(snap_meta).to_json() == snap_meta
        snap_path.write_text(json.dumps({"id": snapshot.id, "sandbox_id": sandbox.id,
                                         "created_at": "2025-01-02T03:04:05+00:00",
                                         "template": "default"}))
        listed_snaps = {s.id: s for s in await provider.list_snapshots()}
        assert listed_snaps[snapshot.id].created_at.year == 2025
        async with provider.create(snapshot=snapshot.id) as restored:
            assert await restored.files.read_text("/tmp/kept.txt") == "kept"
        await provider.delete_snapshot(snapshot.id)
        assert (await provider.get_volume(volume.name)).name == volume.name
    finally:
        await provider.delete_volume(volume.name)


async def test_a_record_written_before_templates_still_loads(provider: LocalProvider) -> None:
    """A meta.json without the keys templates added (image_env, start_cmd, ready_cmd),
    as an earlier version wrote it, is a good record: its sandbox is listed, runs
    commands, and is killed as any other."""
    async with provider.create(metadata={"k": "v"}) as sandbox:
        meta = record(provider, sandbox.id)
        older = {k: v for k, v in meta.items()
                 if k not in ("image_env", "start_cmd", "ready_cmd")}
        corrupt(provider, sandbox.id, json.dumps(older))
        found, said = await listed(provider)
        assert said == []
        assert found[sandbox.id].state == SandboxState.RUNNING
        assert found[sandbox.id].metadata == {"k": "v"}
        assert (await sandbox.exec(["echo", "ok"])).stdout == "ok\n"


@pytest.mark.parametrize(("text", "reason"), [
    ('{"id": "', "not valid JSON"),
    ("", "empty"),
    ("{}", "lacks"),
    ("[1, 2]", "list"),
])
async def test_a_broken_record_is_listed_as_broken_beside_the_good_ones(
        provider: LocalProvider, text: str, reason: str) -> None:
    """A truncated, empty, ``{}`` or non-object meta.json: list() still lists the
    good sandbox, reports the bad one as ERROR with the reason, and warns."""
    good = await provider.create(metadata={"role": "good"})
    bad = await provider.create()
    corrupt(provider, bad.id, text)
    found, said = await listed(provider)
    assert found[good.id].state == SandboxState.RUNNING
    assert found[good.id].metadata == {"role": "good"}
    assert found[bad.id].state == SandboxState.ERROR
    assert reason in found[bad.id].extra["broken"]
    assert any(bad.id in message for message in said)
    info = await provider.get_info(bad.id)
    assert info.state == SandboxState.ERROR
    assert info.extra["broken"] == found[bad.id].extra["broken"]
    with pytest.warns(BrokenRecordWarning, match=bad.id):
        assert (await provider.list(metadata={"role": "good"}))[0].id == good.id


@pytest.mark.parametrize("change", [
    {"metadata": ["a"]}, {"resources": {"memory_mb": "lots"}}, {"unisolated": "false"},
    {"created_at": "yesterday"}, {"launch": {"init_pid": "1"}}, {"id": "someone-else"},
    {"volumes": [["data"]]}, {"env": {"KEY": 1}},
])
async def test_a_record_with_wrong_types_is_broken(provider: LocalProvider,
                                                   change: dict[str, Any]) -> None:
    """Each field the provider relies on is checked before it is used; the reason
    names the field, never a value (env values may be secrets)."""
    sandbox = await provider.create()
    meta = record(provider, sandbox.id)
    corrupt(provider, sandbox.id, json.dumps({**meta, **change}))
    found, _said = await listed(provider)
    assert found[sandbox.id].state == SandboxState.ERROR
    assert "lots" not in found[sandbox.id].extra["broken"]
    with pytest.raises(SandboxNotRunning, match="broken"):
        await sandbox.exec("true")


async def test_kill_of_a_broken_record_removes_its_processes_cgroups_and_mount(
        provider: LocalProvider) -> None:
    """A running sandbox whose record broke is still found by name: kill ends its
    processes, removes its cgroups, unmounts its layer and deletes its directory."""
    sandbox = await provider.create()
    meta = corrupt(provider, sandbox.id, "{}")
    directory = provider._shared.home.sandbox(sandbox.id)
    launched = _launch.Launched(**meta["launch"])
    assert _launch.alive(launched)
    await provider.kill(sandbox.id)
    assert not _launch.alive(launched)
    assert not provider._shared.cgroup(sandbox.id).exists()
    assert not directory.exists()
    assert not any(str(directory) in line for line in mounts())
    assert (await listed(provider))[0] == {}


async def test_a_half_created_record_is_broken_once_its_creator_is_gone(
        provider: LocalProvider) -> None:
    """A directory with no meta.json (its creator was killed mid-create) is broken and
    killable; while its creator holds it, it is being made and listed as nothing."""
    sandbox_id, claim = provider._shared.home.claim("sandboxes")
    try:
        found, said = await listed(provider)
        assert found == {}
        assert said == []
        with pytest.raises(SandboxNotRunning, match="being created"):
            await provider.get_info(sandbox_id)
    finally:
        claim.release()
    found, said = await listed(provider)
    assert found[sandbox_id].state == SandboxState.ERROR
    assert "no meta.json" in found[sandbox_id].extra["broken"]
    await provider.kill(sandbox_id)
    assert not provider._shared.home.sandbox(sandbox_id).exists()


async def test_a_record_never_started_is_broken_once_its_creator_is_gone(
        provider: LocalProvider) -> None:
    """A record written but never launched (the creator died between the two) is
    broken, not 'starting' for ever."""
    sandbox = await provider.create()
    meta = record(provider, sandbox.id)
    del meta["launch"]
    corrupt(provider, sandbox.id, json.dumps(meta))
    found, _said = await listed(provider)
    assert found[sandbox.id].extra["broken"] == "its creator stopped before starting it"


async def test_an_abandoned_claim_is_removed_by_listing(provider: LocalProvider) -> None:
    """A creator killed before its record had a name leaves a hidden directory that
    listing removes (it never held a sandbox), once it is old enough that it cannot be
    a claim between its mkdir and its lock."""
    sandboxes = provider._shared.home.path / "sandboxes"
    staging, fresh = sandboxes / ".new-abandoned", sandboxes / ".new-just-made"
    for path in (staging, fresh):
        path.mkdir()
        (path / ".lock").touch()
    long_ago = time.time() - ABANDONED_AFTER - 1
    os.utime(staging, (long_ago, long_ago))
    await provider.list()
    assert not staging.exists()
    assert fresh.exists()  # it may be a claim about to be locked


@pytest.fixture
def full_home(tmp_path: Path) -> Iterator[Path]:
    """A home on a 48 MiB tmpfs of its own (root only), to fill up."""
    with tmpfs(tmp_path / "full-home", "48m") as home:
        yield home


@pytest.fixture
async def full_provider(full_home: Path) -> AsyncIterator[LocalProvider]:
    async with provider_in(full_home) as provider:
        yield provider


def fill(home: Path) -> None:
    """Fill the home's filesystem to the last block."""
    with open(home / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass


async def test_a_snapshot_on_a_full_disk_is_a_typed_error_and_leaves_nothing(
        full_provider: LocalProvider, full_home: Path) -> None:
    """QuotaExceeded names the cause; no partial snapshot remains; the sandbox runs on."""
    resources = Resources(disk_mb=32) if disks.available() else Resources()
    async with full_provider.create(resources=resources) as sandbox:
        await sandbox.exec("head -c 12M /dev/urandom > /home/user/data")
        fill(full_home)
        with pytest.raises(QuotaExceeded, match="out of disk space"):
            await sandbox.snapshot()
        assert list((full_home / "snapshots").iterdir()) == []
        assert await full_provider.list_snapshots() == []
        (full_home / "filler").unlink()
        assert (await sandbox.exec("wc -c < /home/user/data")).stdout.strip() == str(12 << 20)


async def test_a_create_on_a_full_disk_is_a_typed_error_and_leaves_nothing(
        full_provider: LocalProvider, full_home: Path) -> None:
    """QuotaExceeded names the cause and no sandbox directory is left."""
    resources = Resources(disk_mb=32) if disks.available() else Resources()
    fill(full_home)
    with pytest.raises(QuotaExceeded, match="out of disk space"):
        await full_provider.create(resources=resources)
    assert [p.name for p in (full_home / "sandboxes").iterdir()] == []
    assert await full_provider.list() == []
