"""A local snapshot's and a local volume's records (``meta.json``) are checked like a
sandbox's: one written in the current shape loads, and a broken one is left out of
listings with a warning, refused with the reason (never with its values), and removed
by a delete."""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from provider_sdk import SnapshotNotFound, VolumeMount, VolumeNotFound
from provider_sdk.local import BrokenRecordWarning, LocalProvider

pytestmark = pytest.mark.anyio

T = TypeVar("T")
SECRET = "hunter2-not-in-any-message"


async def warned(call: Awaitable[T]) -> tuple[T, list[warnings.WarningMessage]]:
    """What ``call`` returns, and the broken-record warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = await call
    return result, [w for w in caught if issubclass(w.category, BrokenRecordWarning)]


def broken(path: Path, change: str | dict[str, Any] | None, drop: str | None) -> None:
    """Replace the record at ``path`` by ``change`` (a text, or keys laid over the good
    record), or by the good record without the key ``drop``."""
    meta = json.loads(path.read_text())
    if isinstance(change, str):
        path.write_text(change)
    elif change is not None:
        path.write_text(json.dumps({**meta, **change}))
    else:
        assert drop is not None
        path.write_text(json.dumps({k: v for k, v in meta.items() if k != drop}))


# Each: the record's new text (or keys laid over it), a key left out, and what the
# reason says. The broken values hold SECRET where they can: no message may show it.
BROKEN_SNAPSHOTS = [
    pytest.param(f'{{"id": "{SECRET}', None, "not valid JSON", id="not-json"),
    pytest.param("", None, "empty", id="empty"),
    pytest.param("{}", None, "lacks", id="empty-object"),
    pytest.param(f'["{SECRET}"]', None, "holds a list", id="a-list"),
    pytest.param(None, "template", "lacks template", id="missing-key"),
    pytest.param({"sandbox_id": {"TOKEN": SECRET}}, None, "'sandbox_id'", id="wrong-type"),
    pytest.param({"template": True}, None, "'template'", id="a-bool"),
    pytest.param({"created_at": SECRET}, None, "created_at", id="bad-time"),
    pytest.param({"id": "0123456789ab"}, None, "another snapshot", id="another-id"),
]


@pytest.mark.parametrize(("change", "drop", "reason"), BROKEN_SNAPSHOTS)
async def test_a_broken_snapshot_record_is_left_out_refused_and_deletable(
        provider: LocalProvider, change: str | dict[str, Any] | None, drop: str | None,
        reason: str) -> None:
    """Listing leaves a broken snapshot out and warns, naming it and why (at the
    caller's line); creating from it is ``SnapshotNotFound`` saying why; deleting it
    removes it. A good snapshot beside it is listed and used throughout."""
    async with provider.create() as sandbox:
        await sandbox.files.write("/tmp/kept.txt", "kept")
        bad = await sandbox.snapshot()
        good = await sandbox.snapshot()
    broken(provider._shared.home.snapshot(bad.id) / "meta.json", change, drop)

    for call in (provider.list_snapshots(), provider.list_snapshots(sandbox_id=sandbox.id)):
        found, said = await warned(call)
        assert [s.id for s in found] == [good.id]
        assert len(said) == 1
        assert said[0].filename == __file__
        message = str(said[0].message)
        assert bad.id in message
        assert reason in message
        assert SECRET not in message
    with pytest.raises(SnapshotNotFound, match="broken") as caught:
        await provider.create(snapshot=bad.id)
    assert reason in str(caught.value)
    assert SECRET not in str(caught.value)
    assert await provider.list() == []

    async with provider.create(snapshot=good.id) as restored:
        assert await restored.files.read_text("/tmp/kept.txt") == "kept"
    await provider.delete_snapshot(bad.id)
    assert not provider._shared.home.snapshot(bad.id).exists()
    assert await warned(provider.list_snapshots()) == ([good], [])
    with pytest.raises(SnapshotNotFound, match="does not exist"):
        await provider.delete_snapshot(bad.id)
    with pytest.raises(SnapshotNotFound, match="does not exist"):
        await provider.create(snapshot=bad.id)


BROKEN_VOLUMES = [
    pytest.param(f'{{"name": "{SECRET}', None, "not valid JSON", id="not-json"),
    pytest.param("", None, "empty", id="empty"),
    pytest.param("{}", None, "lacks", id="empty-object"),
    pytest.param('"psdk-broken"', None, "holds a str", id="a-string"),
    pytest.param(None, "created_at", "lacks created_at", id="missing-key"),
    pytest.param({"disk_mb": SECRET}, None, "'disk_mb'", id="wrong-type"),
    pytest.param({"disk_mb": True}, None, "'disk_mb'", id="a-bool"),
    pytest.param({"created_at": [SECRET]}, None, "'created_at'", id="wrong-time-type"),
    pytest.param({"created_at": SECRET}, None, "created_at", id="bad-time"),
    pytest.param({"name": "psdk-other"}, None, "another volume", id="another-name"),
]


@pytest.mark.parametrize(("change", "drop", "reason"), BROKEN_VOLUMES)
async def test_a_broken_volume_record_is_left_out_refused_and_deletable(
        provider: LocalProvider, change: str | dict[str, Any] | None, drop: str | None,
        reason: str) -> None:
    """Listing leaves a broken volume out and warns, naming it and why (at the caller's
    line); getting it, or mounting it into a new sandbox, is ``VolumeNotFound`` saying
    why; deleting it removes it and its data. A good volume beside it is unaffected."""
    bad = await provider.create_volume("psdk-broken")
    good = await provider.create_volume("psdk-good")
    try:
        assert (await provider.get_volume(bad.name)).name == bad.name
        broken(provider._shared.home.volume(bad.name) / "meta.json", change, drop)

        found, said = await warned(provider.list_volumes())
        assert [v.name for v in found] == [good.name]
        assert len(said) == 1
        assert said[0].filename == __file__
        message = str(said[0].message)
        assert bad.name in message
        assert reason in message
        assert SECRET not in message
        for refused in (provider.get_volume(bad.name),
                        provider.create(volumes=[VolumeMount(volume=bad.name, path="/mnt/v")])):
            with pytest.raises(VolumeNotFound, match="broken") as caught:
                await refused
            assert reason in str(caught.value)
            assert SECRET not in str(caught.value)
        assert await provider.list() == []
        assert (await provider.get_volume(good.name)).name == good.name

        await provider.delete_volume(bad.name)
        assert not provider._shared.home.volume(bad.name).exists()
        assert [v.name for v in (await warned(provider.list_volumes()))[0]] == [good.name]
        with pytest.raises(VolumeNotFound, match="does not exist"):
            await provider.delete_volume(bad.name)
        with pytest.raises(VolumeNotFound, match="does not exist"):
            await provider.get_volume(bad.name)
    finally:
        for volume in (bad, good):
            if provider._shared.home.volume(volume.name).exists():
                await provider.delete_volume(volume.name)


async def test_volume_records_in_the_current_shape_load(provider: LocalProvider) -> None:
    """A volume record written by hand in the shape this version writes (with and
    without a quota, and with ``disk_mb`` null) is listed, got and mounted."""
    volume = await provider.create_volume("psdk-shapes")
    path = provider._shared.home.volume(volume.name) / "meta.json"
    try:
        for disk_mb in ({}, {"disk_mb": None}, {"disk_mb": 64}):
            path.write_text(json.dumps({"name": volume.name,
                                        "created_at": "2025-01-02T03:04:05+00:00",
                                        **disk_mb}))
            found, said = await warned(provider.list_volumes())
            assert said == []
            assert [(v.name, v.created_at.year, v.extra["disk_mb"]) for v in found] == [
                (volume.name, 2025, disk_mb.get("disk_mb"))]
            assert (await provider.get_volume(volume.name)).created_at.year == 2025
        async with provider.create(volumes=[VolumeMount(volume=volume.name,
                                                        path="/mnt/v")]) as sandbox:
            assert (await sandbox.exec("echo hi > /mnt/v/f && cat /mnt/v/f")).stdout == "hi\n"
    finally:
        await provider.delete_volume(volume.name)


@pytest.mark.parametrize("name", ["..", ".hidden", "."])
async def test_a_name_outside_the_records_is_no_snapshot(
        provider: LocalProvider, name: str) -> None:
    """A snapshot id that is not one directory of the home's records is not found,
    and deleting it removes nothing."""
    hidden = provider._shared.home.path / "snapshots" / ".hidden"
    hidden.mkdir()
    (hidden / "meta.json").write_text("{}")
    with pytest.raises(SnapshotNotFound, match="does not exist"):
        await provider.delete_snapshot(name)
    with pytest.raises(SnapshotNotFound, match="does not exist"):
        await provider.create(snapshot=name)
    assert hidden.is_dir()
    assert (provider._shared.home.path / "snapshots").is_dir()
