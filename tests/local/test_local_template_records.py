"""A local template's record (``templates/<id>/meta.json``) is a typed
``TemplateRecord``: it keeps the keys and shapes earlier versions wrote (and their
records load), and a broken one is left out of listings with a warning, refused with
the reason, and replaced by a build or removed by a delete.

The builds need a Docker Engine with ``psdk-base:bookworm-2``; without one these tests
skip, and fail under CI.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from engines import require_bwrap, require_docker

from provider_sdk import TemplateNotFound
from provider_sdk.local import BrokenRecordWarning, LocalProvider
from provider_sdk.local._records import TemplateRecord
from provider_sdk.models import Template, TemplateSpec

pytestmark = pytest.mark.anyio

SECRET = "hunter2-not-in-any-message"
SPEC = TemplateSpec(name="psdk-test-records", dockerfile=(
    "FROM psdk-base:bookworm-2\n"
    f"ENV GREETING=hello TOKEN={SECRET}\n"
    "WORKDIR /srv/app\n"
    "RUN mkdir -p /srv/app && echo kept > /srv/app/kept\n"),
    memory_mb=256, start_cmd="exec sleep 1000")

# The keys a template's meta.json holds, as every version since templates wrote them.
RECORD_KEYS = {"id", "name", "content_hash", "created_at", "image", "env", "workdir",
               "user", "cpu", "memory_mb", "start_cmd", "ready_cmd"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Template]:
    require_bwrap()
    require_docker()
    home = tmp_path_factory.mktemp("psdk-template-records")

    async def build() -> Template:
        return await LocalProvider(home=home).build_template(SPEC)

    return home, anyio.run(build)


@pytest.fixture
def record_path(built: tuple[Path, Template]) -> Iterator[anyio.Path]:
    """The template's meta.json, put back as it was after the test."""
    path = built[0] / "templates" / str(built[1].id) / "meta.json"
    kept = path.read_text()
    try:
        yield anyio.Path(path)
    finally:
        path.write_text(kept)


async def listed(provider: LocalProvider) -> tuple[dict[str, Template], list[str]]:
    """``list_templates()`` by id, and the broken-record warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = await provider.list_templates()
    broken = [w for w in caught if issubclass(w.category, BrokenRecordWarning)]
    assert all(w.filename == __file__ for w in broken), [w.filename for w in broken]
    said = [str(w.message) for w in broken]
    return {str(t.id): t for t in found}, said


async def test_a_template_record_is_written_in_the_shape_earlier_versions_read(
        record_path: anyio.Path, built: tuple[Path, Template]) -> None:
    """meta.json keeps its keys and their JSON shapes, and reads back as it was."""
    meta = json.loads(await record_path.read_text())
    assert set(meta) == RECORD_KEYS
    assert meta["id"] == built[1].id
    assert meta["env"]["GREETING"] == "hello"
    assert (meta["workdir"], meta["memory_mb"], meta["cpu"]) == ("/srv/app", 256, None)
    assert isinstance(meta["created_at"], str)
    assert TemplateRecord.from_json(meta).to_json() == meta


@pytest.mark.parametrize("optional", [True, False], ids=["whole", "without-later-keys"])
async def test_a_template_record_written_by_an_earlier_version_still_loads(
        local: LocalProvider, record_path: anyio.Path, built: tuple[Path, Template],
        optional: bool) -> None:
    """A record file as earlier versions wrote it (and one without the keys the first
    of them read as optional) is listed and its sandboxes get its settings."""
    template_id = str(built[1].id)
    later = (', "cpu": null, "memory_mb": 256, "start_cmd": "exec sleep 1000", '
             '"ready_cmd": null') if optional else ""
    await record_path.write_text(
        f'{{"id": "{template_id}", "name": "psdk-test-records", '
        f'"content_hash": "{built[1].content_hash}", '
        '"created_at": "2025-01-02T03:04:05.678901+00:00", "image": "psdk-old-image:1", '
        f'"env": {{"GREETING": "from-the-old-record", "TOKEN": "{SECRET}"}}, '
        f'"workdir": "/srv/app", "user": null{later}}}')
    found, said = await listed(local)
    assert said == []
    template = found[template_id]
    assert template.created_at is not None
    assert template.created_at.year == 2025
    assert template.extra["image"] == "psdk-old-image:1"
    assert template.extra["start_cmd"] == ("exec sleep 1000" if optional else None)
    async with local.create(template=template_id) as sandbox:
        result = await sandbox.exec('pwd; echo "$GREETING"; cat kept')
        assert result.stdout == "/srv/app\nfrom-the-old-record\nkept\n"


@pytest.mark.parametrize(("change", "reason"), [
    ('{"id": "', "not valid JSON"),
    ("", "empty"),
    ("{}", "lacks"),
    ({"env": {"TOKEN": 1}}, "non-string env"),
    ({"created_at": "yesterday"}, "created_at"),
    ({"id": "someone-else-0123456789ab"}, "another template"),
    ({"cpu": "two"}, "'cpu'"),
    ({"workdir": ["/srv"]}, "'workdir'"),
])
async def test_a_broken_template_record_is_left_out_and_refused(
        local: LocalProvider, record_path: anyio.Path, built: tuple[Path, Template],
        change: str | dict[str, Any], reason: str) -> None:
    """Listing leaves a broken record out and warns, naming it and why; creating from
    it is ``TemplateNotFound`` saying why. Neither shows the record's values."""
    template_id = str(built[1].id)
    meta = json.loads(await record_path.read_text())
    await record_path.write_text(change if isinstance(change, str)
                                 else json.dumps({**meta, **change}))
    found, said = await listed(local)
    assert template_id not in found
    assert len(said) == 1
    assert template_id in said[0]
    assert reason in said[0]
    with pytest.raises(TemplateNotFound, match="broken") as caught:
        await local.create(template=template_id)
    assert reason in str(caught.value)
    assert all(SECRET not in text for text in [*said, str(caught.value)])
    assert await local.list() == []


async def test_a_broken_template_is_built_again_or_deleted(
        local: LocalProvider, record_path: anyio.Path, built: tuple[Path, Template]) -> None:
    """A build of the spec replaces a broken template (without ``force``); a delete
    removes one."""
    template_id = str(built[1].id)
    await record_path.write_text("{}")
    again = await local.build_template(SPEC)
    assert again.id == template_id
    found, said = await listed(local)
    assert (list(found), said) == ([template_id], [])
    await record_path.write_text('{"id": ')
    await local.delete_template(template_id)
    assert not await record_path.parent.exists()
    assert await listed(local) == ({}, [])
    with pytest.raises(TemplateNotFound, match="does not exist"):
        await local.delete_template(template_id)
    rebuilt = await local.build_template(SPEC)  # as the other tests found it
    assert rebuilt.id == template_id
