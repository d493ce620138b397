"""Inspect's portable sandbox checks, unmodified, and what the environment adds, on
every provider: local and docker as they are, and e2b, cube and daytona through their
emulators (the real vendor SDKs, on 127.0.0.1). Each provider's sample lives for the
checks that use it; a vendor provider takes its settings, key included, from the
environment, and the config names only the provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from daytona_emulator_fixtures import daytona_emulator, running
from engines import require_bwrap, require_docker
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403
from inspect_checks import (
    emulated_sample,
    sample_environments,
    sandbox_env_fixture,
    test_psdk_connection_where_a_shell_command_can_reach_the_provider,  # noqa: F401
    test_psdk_exec_remote_streams_output_and_kill_ends_it,  # noqa: F401
)
from provider_sdk_inspect import PsdkConfig

__all__ = ["daytona_emulator"]

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["local", "docker", "e2b", "cube", "daytona"])
async def psdk_sample(request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    name: str = request.param
    if name in ("e2b", "cube"):
        async for environments in emulated_sample(name, tmp_path_factory):
            yield environments
        return
    if name == "daytona":
        with pytest.MonkeyPatch.context() as patch:
            for key, value in running().environment().items():
                patch.setenv(key, value)
            async for environments in sample_environments(PsdkConfig(provider=name)):
                yield environments
        return
    options = {}
    if name == "local":
        require_bwrap()
        options["home"] = str(tmp_path_factory.mktemp("psdk-inspect-local"))
    else:
        require_docker()
    async for environments in sample_environments(PsdkConfig(provider=name, options=options)):
        yield environments


sandbox_env = sandbox_env_fixture()
