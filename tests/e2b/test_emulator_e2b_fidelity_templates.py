"""The emulator's E2B flavor serves templates as E2B's API does where a client can tell:
each test drives the unmodified ``e2b`` SDK's ``Template`` and checks one behaviour of
the real service. The builds need a Docker Engine and the base image; they skip
without them, except under CI (``CI=true``), which has both."""

from __future__ import annotations

import hashlib
import io
import secrets
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox, Template
from engines import require_docker
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk.emulators import EmulatorOptions, RunningEmulator


@pytest.fixture(scope="module")
def docker_emulator() -> Iterator[RunningEmulator]:
    require_docker()
    options = EmulatorOptions(api_key=secrets.token_urlsafe(16), backend="docker")
    with run_in_thread("e2b", options) as running:
        yield running


@pytest.fixture
def docker_e2b(docker_emulator: RunningEmulator,
               monkeypatch: pytest.MonkeyPatch) -> RunningEmulator:
    for key, value in docker_emulator.environment().items():
        monkeypatch.setenv(key, value)
    return docker_emulator


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def test_base_template_exists(e2b_emulator: RunningEmulator) -> None:
    # E2B's public base template is found by name; an unknown name is not.
    assert Template.exists("base") is True
    assert Template.exists(f"nonexistent-{uuid.uuid4()}") is False


def test_template_built_from_the_base_template_runs(docker_e2b: RunningEmulator) -> None:
    marker = _name("from-base")
    name = _name("psdk-from-base")
    template = Template().from_template("base").run_cmd(f"echo {marker} > /tmp/marker")
    Template.build(template, name)
    sandbox = Sandbox.create(template=name)
    try:
        assert sandbox.files.read("/tmp/marker") == f"{marker}\n"
        assert sandbox.commands.run("id -un").stdout == "user\n"
    finally:
        sandbox.kill()


def test_copied_folder_keeps_an_absolute_symlink(docker_e2b: RunningEmulator,
                                                 tmp_path: Path) -> None:
    # The SDK tars a link as a link (resolve_symlinks is off by default), and E2B's
    # builder copies it into the template as it is, absolute target included.
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "data.txt").write_text("data\n")
    (folder / "to-etc").symlink_to("/etc/hostname")
    (folder / "to-data").symlink_to("/opt/folder/data.txt")
    name = _name("psdk-abs-link")
    template = Template(file_context_path=str(tmp_path)).from_template("base") \
        .copy("folder", "/opt/folder")
    Template.build(template, name)
    sandbox = Sandbox.create(template=name)
    try:
        links = sandbox.commands.run(
            "readlink /opt/folder/to-etc /opt/folder/to-data; cat /opt/folder/to-data")
        assert links.stdout == "/etc/hostname\n/opt/folder/data.txt\ndata\n"
    finally:
        sandbox.kill()


def test_upload_that_passes_through_an_absolute_link_is_refused(
        docker_e2b: RunningEmulator, tmp_path: Path) -> None:
    # A link may name an absolute target, but the build context never follows it: a
    # member written through it would land outside the context, on the host.
    archive = tmp_path / "files.tar"
    with tarfile.open(archive, "w") as tar:
        link = tarfile.TarInfo("folder/escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path)
        tar.addfile(link)
        data = b"outside"
        member = tarfile.TarInfo("folder/escape/planted.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    files_hash = hashlib.sha256(archive.read_bytes()).hexdigest()
    with httpx.Client(base_url=docker_e2b.url,
                      headers={"X-API-Key": docker_e2b.api_key.reveal()}) as api:
        made = api.post("/v3/templates", json={"name": _name("psdk-escape")}).json()
        template, build = made["templateID"], made["buildID"]
        link_answer = api.get(f"/templates/{template}/files/{files_hash}").json()
        assert httpx.put(link_answer["url"], content=archive.read_bytes()).status_code == 200
        started = api.post(f"/v2/templates/{template}/builds/{build}", json={
            "fromTemplate": "base", "steps": [
                {"type": "COPY", "args": ["folder", "/opt/folder"], "filesHash": files_hash}]})
        assert started.status_code == 202
        deadline = time.monotonic() + 60
        while (status := api.get(f"/templates/{template}/builds/{build}/status").json())[
                "status"] == "building" and time.monotonic() < deadline:
            time.sleep(0.2)
    assert status["status"] == "error"
    assert "outside the destination" in status["reason"]["message"]
    assert not (tmp_path / "planted.txt").exists()


def test_a_build_from_base_without_the_docker_plugin_names_its_distribution(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the Docker plugin, a build from ``base`` is a 400 that names the plugin's
    distribution and the command that installs it."""
    from provider_sdk_emulators.e2b import _templates_e2b
    from provider_sdk_emulators.e2b._world import ApiError

    monkeypatch.setitem(sys.modules, "provider_sdk_docker", None)  # not importable
    with pytest.raises(ApiError) as caught:
        _templates_e2b._base_image()
    assert caught.value.status == 400
    assert "needs the distribution sandbox-provider-sdk-docker: pip install" in \
        caught.value.message
