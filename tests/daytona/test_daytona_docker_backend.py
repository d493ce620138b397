"""The Daytona emulator on the Docker backend (``--backend docker``): the provider's
everyday operations through containers instead of bubblewrap sandboxes.

Skipped, with the reason, where the Docker provider is not installed or no engine
answers, except under CI (``CI=true``), where a missing engine is a failure."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest
from anyio.from_thread import start_blocking_portal
from daytona import (
    AsyncDaytona,
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    DaytonaConfig,
    DaytonaNotFoundError,
    Image,
)
from engines import require_docker
from provider_sdk_daytona.provider import DaytonaProvider

from provider_sdk import emulators, open_provider
from provider_sdk.errors import TemplateBuildError, TemplateNotFound
from provider_sdk.models import SandboxState, TemplateSpec

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def docker_emulator() -> Iterator[emulators.RunningEmulator]:
    require_docker()
    options = emulators.EmulatorOptions(api_key=secrets.token_urlsafe(16), backend="docker")
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(emulators.run("daytona", options)) as running:
        yield running


@pytest.fixture
async def provider(docker_emulator: emulators.RunningEmulator
                   ) -> AsyncIterator[DaytonaProvider]:
    settings = docker_emulator.settings
    async with DaytonaProvider(api_key=docker_emulator.api_key.reveal(),
                               api_url=settings["DAYTONA_API_URL"]) as provider:
        yield provider


async def test_exec_files_and_shell_on_docker(provider: DaytonaProvider) -> None:
    async with provider.create(env={"FROM_SPEC": "yes"}) as sandbox:
        result = await sandbox.exec('echo "$FROM_SPEC"; echo err >&2; exit 2')
        assert (result.exit_code, result.stdout, result.stderr) == (2, "yes\n", "err\n")
        await sandbox.files.write("/tmp/d/x.bin", b"\x00\xff" * 1000)
        assert await sandbox.files.read("/tmp/d/x.bin") == b"\x00\xff" * 1000
        async with await sandbox.shell() as shell:
            await shell.run("cd /tmp/d && export K=v")
            assert (await shell.run('echo "$PWD $K"')).stdout == "/tmp/d v\n"


async def test_pause_resume_and_snapshot_on_docker(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.files.write("/tmp/kept.txt", b"kept")
        assert (await sandbox.pause()).state == SandboxState.PAUSED
        await sandbox.resume()
        assert await sandbox.files.read("/tmp/kept.txt") == b"kept"
        snapshot = await sandbox.snapshot()
        try:
            async with provider.create(snapshot=snapshot.id) as copy:
                assert await copy.files.read("/tmp/kept.txt") == b"kept"
        finally:
            await provider.delete_snapshot(snapshot.id)


@pytest.fixture
def base_image() -> str:
    """The image the Docker backend's sandboxes start from (a local one: nothing is
    pulled)."""
    provider = open_provider("docker")
    return str(provider.template)  # type: ignore[attr-defined]


async def test_templates_build_from_a_dockerfile(provider: DaytonaProvider,
                                                 base_image: str) -> None:
    spec = TemplateSpec(name="psdk-daytona-build",
                        dockerfile=f"FROM {base_image}\nRUN echo built > /etc/psdk-built\n")
    progress: list[str] = []
    template = await provider.build_template(spec, on_progress=progress.append)
    try:
        assert progress, "no build progress reported"
        again = await provider.build_template(spec)
        assert (again.id, again.content_hash) == (template.id, template.content_hash)
        assert template.id in {t.id for t in await provider.list_templates()}
        assert template.id not in {s.id for s in await provider.list_snapshots()}
        async with provider.create(template=template.id) as sandbox:
            assert await sandbox.files.read("/etc/psdk-built") == b"built\n"
    finally:
        await provider.delete_template(template.id)
    with pytest.raises(TemplateNotFound):
        await provider.delete_template(template.id)


async def test_a_failing_build_is_a_template_build_error(provider: DaytonaProvider,
                                                         base_image: str) -> None:
    spec = TemplateSpec(name="psdk-daytona-fails", dockerfile=f"FROM {base_image}\nRUN exit 3\n")
    with pytest.raises(TemplateBuildError) as caught:
        await provider.build_template(spec)
    assert caught.value.step == "Step 2/4 : RUN exit 3"
    failed = [t for t in await provider.list_templates() if t.id.startswith(spec.name)]
    assert [t.extra["state"] for t in failed] == ["build_failed"]
    await provider.delete_template(failed[0].id)


async def test_an_image_built_from_a_dockerfile_keeps_its_working_directory(
        docker_emulator: emulators.RunningEmulator, base_image: str) -> None:
    """Only Daytona's default image runs in /home/daytona: a snapshot built from a
    Dockerfile, and one taken from a sandbox of it, keep the image's WORKDIR."""
    config = DaytonaConfig(api_key=docker_emulator.api_key.reveal(),
                           api_url=docker_emulator.settings["DAYTONA_API_URL"])
    name = f"fidelity-workdir-{secrets.token_hex(4)}"
    async with AsyncDaytona(config) as client:
        built = await client.snapshot.create(CreateSnapshotParams(
            name=name, image=Image.base(base_image).workdir("/srv")))
        copy_name = f"{name}-copy"
        try:
            sandbox = await client.create(CreateSandboxFromSnapshotParams(snapshot=name))
            try:
                assert (await sandbox.process.exec("pwd")).result == "/srv\n"
                await sandbox.create_snapshot(copy_name)
            finally:
                await client.delete(sandbox)
            copy = await client.create(CreateSandboxFromSnapshotParams(snapshot=copy_name))
            try:
                assert (await copy.process.exec("pwd")).result == "/srv\n"
                assert await copy.get_work_dir() == "/srv"
            finally:
                await client.delete(copy)
        finally:
            for made in (copy_name, name):
                with contextlib.suppress(DaytonaNotFoundError):
                    await client.snapshot.delete(made)
        assert built.state == "active"
