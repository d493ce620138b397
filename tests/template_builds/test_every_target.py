"""One Dockerfile, every target: the same file builds into a template on Docker, on the
local provider, on E2B, on Daytona and on Cube (the vendors through their emulators on
the docker backend, driven by their unmodified SDKs), and a sandbox made from each
reads what its ``RUN`` wrote.

Needs a Docker Engine with the base image (all targets), bubblewrap (local) and the
test registry (Cube); without them the tests skip, except under CI (``CI=true``).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engines import require_bwrap, require_docker, require_registry
from provider_sdk_docker import DEFAULT_TEMPLATE

from provider_sdk import emulators
from provider_sdk.models import SandboxSpec
from provider_sdk.provider import SandboxProvider
from provider_sdk.templates import from_dockerfile

pytestmark = pytest.mark.anyio

TARGETS = ["docker", "local", "e2b", "daytona", "cube"]


@pytest.fixture(scope="module")
def emulator_pool() -> Iterator[Callable[[str], emulators.RunningEmulator]]:
    """Emulators on the docker backend, started on first use, one per vendor."""
    from provider_sdk_emulators.e2b import run_in_thread

    started: dict[str, emulators.RunningEmulator] = {}
    with contextlib.ExitStack() as stack:
        def get(name: str) -> emulators.RunningEmulator:
            if name not in started:
                started[name] = stack.enter_context(run_in_thread(name, emulators.EmulatorOptions(
                    api_key=secrets.token_urlsafe(16), backend="docker")))
            return started[name]

        yield get


@contextlib.asynccontextmanager
async def target(name: str, pool: Callable[[str], emulators.RunningEmulator],
                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> AsyncIterator[SandboxProvider]:
    """A provider for ``name`` that can build templates here."""
    require_docker()
    provider: Any
    if name == "docker":
        from provider_sdk_docker import DockerProvider

        provider = DockerProvider()
    elif name == "local":
        require_bwrap()
        from provider_sdk.local import LocalProvider

        provider = LocalProvider(home=tmp_path / "home")
    elif name == "daytona":
        from provider_sdk_daytona.provider import DaytonaProvider

        running = pool("daytona")
        provider = DaytonaProvider(api_key=running.api_key.reveal(),
                                   api_url=running.settings["DAYTONA_API_URL"])
    else:
        running = pool(name)
        for key, value in running.environment().items():
            monkeypatch.setenv(key, value)
        if name == "e2b":
            from provider_sdk_e2b.provider import E2BProvider

            provider = E2BProvider()
        else:
            from provider_sdk_e2b.cube import CubeProvider

            address, username, password = require_registry()
            envd = tmp_path / "envd"
            envd.write_text("#!/bin/sh\nexec sleep infinity\n")  # the emulator serves envd
            provider = CubeProvider(registry=address, envd=str(envd))
            monkeypatch.setenv("PSDK_REGISTRY_USERNAME", username)
            monkeypatch.setenv("PSDK_REGISTRY_PASSWORD", password)
    async with provider:
        yield provider


@pytest.mark.parametrize("name", TARGETS)
async def test_the_same_dockerfile_builds_and_runs_on_every_target(
        name: str, emulator_pool: Callable[[str], emulators.RunningEmulator],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = secrets.token_hex(8)
    folder = tmp_path / "image"
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f"FROM {DEFAULT_TEMPLATE}\n"
        "# what every target must honour: a RUN step's files\n"
        f"RUN mkdir -p /opt/psdk && echo {marker} > /opt/psdk/marker\n")
    spec = from_dockerfile(folder, name=f"psdk-every-{name}-{marker[:6]}")
    async with target(name, emulator_pool, tmp_path, monkeypatch) as provider:
        assert provider.check_template(spec) == []
        template = await provider.build_template(spec)
        try:
            async with await provider.create(SandboxSpec(template=template.id)) as sandbox:
                assert await sandbox.files.read_text("/opt/psdk/marker") == f"{marker}\n"
            again = await provider.build_template(spec)
            assert again.id == template.id
        finally:
            await provider.delete_template(template.id)
