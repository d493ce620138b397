"""E2B template builds, end to end: ``E2BProvider.build_template`` and the raw ``e2b``
SDK's ``AsyncTemplate.build`` against the emulator, whose Docker backend really builds.

Skips without a Docker Engine and the base image, except under CI (``CI=true``), which
has both.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from e2b import AsyncSandbox, AsyncTemplate
from engines import require_docker
from provider_emulators import provider_options
from provider_sdk_contract.templates import TemplateContract
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk import open_provider
from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.errors import TemplateBuildError, TemplateNotFound
from provider_sdk.models import SandboxSpec, TemplateSpec
from provider_sdk.provider import SandboxProvider
from provider_sdk.templates import content_hash, from_dockerfile

pytestmark = pytest.mark.anyio

BASE = "psdk-base:bookworm-2"


@pytest.fixture(scope="module")
def docker_emulator() -> Iterator[RunningEmulator]:
    require_docker()
    options = EmulatorOptions(api_key=secrets.token_urlsafe(16), backend="docker")
    with run_in_thread("e2b", options) as running:
        yield running


@pytest.fixture
async def provider(docker_emulator: RunningEmulator) -> AsyncIterator[SandboxProvider]:
    async with open_provider("e2b", **provider_options(docker_emulator)) as opened:
        before = {t.id for t in await opened.list_templates()}
        yield opened
        for template in await opened.list_templates():
            if template.id not in before:
                await opened.delete_template(template.id)


def _marker(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def _spec(tmp_path: Path, body: str, *, name: str | None = None) -> TemplateSpec:
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\n{body}")
    return from_dockerfile(tmp_path, name=name or _marker("psdk-e2b"))


async def test_dockerfile_with_run_and_copy_becomes_a_template(
        provider: SandboxProvider, tmp_path: Path) -> None:
    """What a RUN wrote and what a COPY took from the context are in a sandbox created
    from the template; the build reported progress."""
    marker = _marker("built")
    (tmp_path / "hello.txt").write_text(f"copied {marker}\n")
    spec = _spec(tmp_path, f"RUN echo {marker} > /psdk-marker\nCOPY hello.txt /opt/hello.txt\n")
    progress: list[str] = []
    template = await provider.build_template(spec, on_progress=progress.append)
    assert template.content_hash == content_hash(spec)
    assert any("Uploaded 'hello.txt'" in line for line in progress), progress
    assert any(marker in line for line in progress), "the RUN step's log was not forwarded"
    async with provider.create(SandboxSpec(template=template.id)) as sandbox:
        assert await sandbox.files.read_text("/psdk-marker") == f"{marker}\n"
        assert await sandbox.files.read_text("/opt/hello.txt") == f"copied {marker}\n"
        # The SDK's conversion ends with E2B's defaults: the user account and its home.
        result = await sandbox.exec("id -un; pwd")
        assert result.stdout == "user\n/home/user\n"
    assert template.id in [t.id for t in await provider.list_templates()]


async def test_unchanged_spec_is_not_rebuilt_and_force_rebuilds(
        provider: SandboxProvider, tmp_path: Path) -> None:
    spec = _spec(tmp_path, f"RUN echo {_marker('cache')} > /psdk-cache\n")
    first = await provider.build_template(spec)
    progress: list[str] = []
    again = await provider.build_template(spec, on_progress=progress.append)
    assert (again.id, again.content_hash) == (first.id, first.content_hash)
    assert progress == [], "an unchanged spec was built again"
    forced = await provider.build_template(spec, force=True, on_progress=progress.append)
    assert forced.id == first.id
    assert any("Requesting build" in line for line in progress), progress


async def test_changed_context_file_is_a_new_build(provider: SandboxProvider,
                                                   tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("one\n")
    spec = _spec(tmp_path, "COPY data.txt /opt/data.txt\n", name=_marker("psdk-ctx"))
    first = await provider.build_template(spec)
    (tmp_path / "data.txt").write_text("two\n")
    changed = from_dockerfile(tmp_path, name=spec.name)
    second = await provider.build_template(changed)
    assert second.id != first.id
    async with provider.create(SandboxSpec(template=second.id)) as sandbox:
        assert await sandbox.files.read_text("/opt/data.txt") == "two\n"


async def test_failing_run_raises_template_build_error_naming_the_step(
        provider: SandboxProvider, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "ENV PSDK_X=1\nRUN echo psdk-before-failure && exit 3\n")
    with pytest.raises(TemplateBuildError) as caught:
        await provider.build_template(spec)
    error = caught.value
    assert error.step == "RUN echo psdk-before-failure && exit 3 (line 3)"
    assert "psdk-before-failure" in error.log_tail
    assert "non-zero code: 3" in error.log_tail


async def test_multi_stage_dockerfile_is_refused_before_any_request(tmp_path: Path) -> None:
    """Nothing listens at the provider's URL: a request would fail otherwise."""
    text = f"FROM {BASE} AS build\nRUN true\nFROM {BASE}\nCOPY --from=build /etc/hostname /x\n"
    spec = TemplateSpec(name="psdk-multi", dockerfile=text)
    async with open_provider("e2b", api_key="unused", api_url="http://127.0.0.1:9",
                             domain="e2b.localhost", retries=0) as provider:
        problems = provider.check_template(spec)
        assert [(p.line, p.what) for p in problems] == [(3, "FROM")]
        with pytest.raises(TemplateBuildError) as caught:
            await provider.build_template(spec)
    assert caught.value.step == "check"
    assert "line 3" in str(caught.value)


async def test_deleted_template_is_gone(provider: SandboxProvider, tmp_path: Path) -> None:
    template = await provider.build_template(
        _spec(tmp_path, f"RUN echo {_marker('gone')} > /psdk-gone\n"))
    await provider.delete_template(template.id)
    assert template.id not in [t.id for t in await provider.list_templates()]
    with pytest.raises(TemplateNotFound):
        await provider.delete_template(template.id)


async def test_raw_sdk_builds_against_the_emulator(docker_emulator: RunningEmulator,
                                                   tmp_path: Path) -> None:
    """``AsyncTemplate.build`` itself: uploads, steps with a user and a mode, the log."""
    marker = _marker("raw")
    (tmp_path / "tool.sh").write_text(f"#!/bin/sh\necho {marker}\n")
    params = {"api_key": docker_emulator.api_key.reveal(),
              "api_url": docker_emulator.settings["E2B_API_URL"],
              "sandbox_url": docker_emulator.settings["E2B_SANDBOX_URL"],
              "domain": docker_emulator.settings["E2B_DOMAIN"]}
    template = (AsyncTemplate(file_context_path=str(tmp_path))
                .from_image(BASE)
                .copy("tool.sh", "/home/user/bin/", mode=0o755)
                .run_cmd("id -un > /home/user/built-by")
                .set_envs({"PSDK_RAW": marker})
                .run_cmd("echo $PSDK_RAW > /etc/psdk-raw", user="root"))
    name = _marker("psdk-raw")
    logs: list[str] = []
    info = await AsyncTemplate.build(template, name, on_build_logs=lambda e: logs.append(
        e.message), **params)  # type: ignore[arg-type]
    try:
        assert await AsyncTemplate.exists(name, **params)  # type: ignore[arg-type]
        assert any("Uploaded 'tool.sh'" in line for line in logs)
        sandbox = await AsyncSandbox.create(name, **params)  # type: ignore[arg-type]
        try:
            result = await sandbox.commands.run(
                "/home/user/bin/tool.sh; cat /home/user/built-by /etc/psdk-raw")
            assert result.stdout == f"{marker}\nuser\n{marker}\n"
        finally:
            await sandbox.kill()
    finally:
        async with open_provider("e2b", **provider_options(docker_emulator)) as provider:
            await provider.delete_template(info.template_id)



class TestE2BTemplateContractOnDocker(TemplateContract):
    """The contract's template tests, through the emulator on the Docker backend (the
    E2B contract run on the local backend skips them: it cannot build)."""

    provider_name = "e2b"
    template_base = BASE
    _running: ClassVar[RunningEmulator | None] = None

    @pytest.fixture(scope="class", autouse=True)
    def _emulator(self, request: pytest.FixtureRequest) -> RunningEmulator:
        # Kept until the session ends, so the suite's final sweep can still reach it.
        require_docker()
        if TestE2BTemplateContractOnDocker._running is None:
            stack = contextlib.ExitStack()
            request.config.add_cleanup(stack.close)
            TestE2BTemplateContractOnDocker._running = stack.enter_context(run_in_thread(
                "e2b", EmulatorOptions(api_key=secrets.token_urlsafe(16), backend="docker")))
        return TestE2BTemplateContractOnDocker._running

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        assert self._running is not None
        return provider_options(self._running)
