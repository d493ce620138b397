"""A Dockerfile becomes a Cube template, end to end on real parts: Docker Engine builds
the image, a registry on 127.0.0.1 (with basic auth) receives it, and the Cube
emulator (docker backend) pulls it from there and runs sandboxes on it, all driven
through ``CubeProvider``. Every bad input fails as a ``TemplateBuildError`` naming its
step.

Needs a Docker Engine with the base image, and the registry CI starts
(``PSDK_TEST_REGISTRY``, ``PSDK_TEST_REGISTRY_USERNAME``, ``PSDK_TEST_REGISTRY_PASSWORD``);
without them the tests skip, except under CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import re
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from engines import require_docker, require_registry
from provider_sdk_docker import DEFAULT_TEMPLATE
from provider_sdk_e2b.cube import CubeProvider
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.errors import TemplateBuildError, TemplateNotFound
from provider_sdk.models import SandboxSpec, TemplateSpec
from provider_sdk.templates import content_hash, from_dockerfile

pytestmark = pytest.mark.anyio

ENVD_STAND_IN = "#!/bin/sh\n# stands in for E2B's envd, which the emulator serves itself\n" \
                "exec sleep infinity\n"


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    require_docker()
    require_registry()
    with run_in_thread("cube", EmulatorOptions(api_key="cube-build-key",
                                               backend="docker")) as running:
        yield running


@pytest.fixture
def envd(tmp_path: Path) -> Path:
    path = tmp_path / "envd"
    path.write_text(ENVD_STAND_IN)
    return path


@pytest.fixture
def cube_settings(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in emulator.environment().items():
        monkeypatch.setenv(key, value)
    address, username, password = require_registry()
    monkeypatch.setenv("PSDK_REGISTRY", address)
    monkeypatch.setenv("PSDK_REGISTRY_USERNAME", username)
    monkeypatch.setenv("PSDK_REGISTRY_PASSWORD", password)
    monkeypatch.delenv("PSDK_CUBE_ENVD", raising=False)


@pytest.fixture
async def cube(cube_settings: None, envd: Path) -> AsyncIterator[CubeProvider]:
    async with CubeProvider(envd=str(envd)) as provider:
        yield provider


def project(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / f"proj-{secrets.token_hex(4)}"
    folder.mkdir()
    (folder / "Dockerfile").write_text(f"FROM {DEFAULT_TEMPLATE}\n{body}")
    return folder


def spec_for(tmp_path: Path, body: str) -> TemplateSpec:
    folder = project(tmp_path, body)
    return from_dockerfile(folder, name=f"psdk-cube-{secrets.token_hex(4)}")


async def test_a_dockerfile_becomes_a_cube_template_that_sandboxes_run(
        cube: CubeProvider, tmp_path: Path) -> None:
    marker = secrets.token_hex(8)
    folder = project(tmp_path, f"COPY note.txt /opt/note.txt\nRUN echo {marker} > /opt/marker\n")
    (folder / "note.txt").write_text("copied from the context\n")
    spec = from_dockerfile(folder, name=f"psdk-cube-{secrets.token_hex(4)}")
    progress: list[str] = []
    template = await cube.build_template(spec, on_progress=progress.append)
    try:
        assert template.id.startswith("tpl-")
        assert template.extra["alias"] == spec.name
        assert template.content_hash == content_hash(spec)
        assert any(line.startswith("Step ") for line in progress), "no image build reported"
        assert any(line.startswith("cube: ready 100%") for line in progress)
        assert any(re.search(r": Pushing \d+/\d+ bytes$", line) for line in progress), \
            "no pushed bytes reported"
        for name in (template.id, spec.name):  # by id, and by alias
            async with await cube.create(SandboxSpec(template=name)) as sandbox:
                assert await sandbox.files.read_text("/opt/marker") == f"{marker}\n"
                assert await sandbox.files.read_text("/opt/note.txt") == \
                    "copied from the context\n"
        assert template.id in [t.id for t in await cube.list_templates()]
    finally:
        await cube.delete_template(template.id)
    assert template.id not in [t.id for t in await cube.list_templates()]
    with pytest.raises(TemplateNotFound):
        await cube.delete_template(template.id)


async def test_an_unchanged_spec_is_not_rebuilt_and_a_changed_one_takes_the_alias(
        cube: CubeProvider, tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "RUN echo one > /opt/version\n")
    first = await cube.build_template(spec)
    progress: list[str] = []
    again = await cube.build_template(spec, on_progress=progress.append)
    assert (again.id, again.content_hash) == (first.id, first.content_hash)
    assert progress == [], "an unchanged spec was built again"
    changed = TemplateSpec(name=spec.name, dockerfile=spec.dockerfile.replace("one", "two"))
    second = await cube.build_template(changed)
    try:
        assert second.id != first.id
        async with await cube.create(SandboxSpec(template=spec.name)) as sandbox:
            assert await sandbox.files.read_text("/opt/version") == "two\n"
        forced: list[str] = []
        rebuilt = await cube.build_template(changed, force=True, on_progress=forced.append)
        assert rebuilt.id != second.id
        assert any(line.startswith("cube: ready 100%") for line in forced)
        await cube.delete_template(rebuilt.id)
    finally:
        for template in (first, second):
            await cube.delete_template(template.id)


async def test_an_image_with_its_own_envd_is_used_as_is(cube_settings: None,
                                                        tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "RUN printf '#!/bin/sh\\nexec sleep infinity\\n' > /usr/bin/envd"
                              " && chmod 755 /usr/bin/envd && echo own > /opt/own\n")
    async with CubeProvider() as cube:  # no envd configured: none is needed
        template = await cube.build_template(spec)
        try:
            async with await cube.create(SandboxSpec(template=template.id)) as sandbox:
                assert await sandbox.files.read_text("/opt/own") == "own\n"
        finally:
            await cube.delete_template(template.id)


async def test_an_image_without_envd_and_none_configured_fails_at_envd(
        cube_settings: None, tmp_path: Path) -> None:
    async with CubeProvider() as cube:
        with pytest.raises(TemplateBuildError) as caught:
            await cube.build_template(spec_for(tmp_path, "RUN true\n"))
    assert caught.value.step == "envd"
    assert "PSDK_CUBE_ENVD" in str(caught.value)


def test_a_dockerfile_that_does_not_parse_fails_at_parse(tmp_path: Path) -> None:
    with pytest.raises(TemplateBuildError) as caught:
        from_dockerfile(project(tmp_path, "RUN true\nRUNN false\n"))
    assert caught.value.step == "parse"
    assert "line 3: unknown instruction 'RUNN'" in str(caught.value)


async def test_a_from_image_that_does_not_exist_fails_at_from(cube: CubeProvider,
                                                              tmp_path: Path) -> None:
    folder = tmp_path / "missing-base"
    folder.mkdir()
    (folder / "Dockerfile").write_text("# no such image here, and nothing is pulled\n"
                                       "FROM psdk-no-such-image:404\nRUN true\n")
    with pytest.raises(TemplateBuildError) as caught:
        await cube.build_template(from_dockerfile(folder, name="psdk-nobase"))
    assert caught.value.step == "FROM (line 2)"
    assert "'psdk-no-such-image:404' is not in the Docker Engine" in str(caught.value)


async def test_a_failing_run_fails_at_that_step_with_its_log(cube: CubeProvider,
                                                             tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "RUN echo psdk-before-failure && exit 7\n")
    with pytest.raises(TemplateBuildError) as caught:
        await cube.build_template(spec)
    assert caught.value.step.startswith("Step 2/")
    assert "RUN echo psdk-before-failure" in caught.value.step
    assert "psdk-before-failure" in caught.value.log_tail


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_unreachable_registry_fails_at_push(cube_settings: None, envd: Path,
                                                     tmp_path: Path) -> None:
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    async with CubeProvider(envd=str(envd), registry=address) as cube:
        with pytest.raises(TemplateBuildError) as caught:
            await cube.build_template(spec_for(tmp_path, "RUN true\n"))
    assert caught.value.step == "push"
    assert address in str(caught.value)


async def test_a_refused_password_fails_at_push_without_showing_it(
        cube_settings: None, envd: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = f"wrong-{secrets.token_hex(8)}"
    monkeypatch.setenv("PSDK_REGISTRY_PASSWORD", wrong)
    async with CubeProvider(envd=str(envd)) as cube:
        with pytest.raises(TemplateBuildError) as caught:
            await cube.build_template(spec_for(tmp_path, "RUN true\n"))
    assert caught.value.step == "push"
    assert "unauthorized" in str(caught.value).lower()
    for text in (str(caught.value), caught.value.log_tail, repr(caught.value)):
        assert wrong not in text


async def test_without_a_registry_the_build_says_what_to_set(cube_settings: None,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.delenv("PSDK_REGISTRY")
    async with CubeProvider() as cube:
        with pytest.raises(Exception, match="PSDK_REGISTRY") as caught:
            await cube.build_template(spec_for(tmp_path, "RUN true\n"))
    assert type(caught.value).__name__ == "ConfigError"


async def test_start_cmd_is_refused_before_anything_is_built(cube: CubeProvider,
                                                             tmp_path: Path) -> None:
    folder = project(tmp_path, "RUN true\n")
    spec = from_dockerfile(folder, name="psdk-startcmd", start_cmd="serve")
    assert [p.what for p in cube.check_template(spec)] == ["start_cmd"]
    with pytest.raises(TemplateBuildError) as caught:
        await cube.build_template(spec)
    assert caught.value.step == "check"
