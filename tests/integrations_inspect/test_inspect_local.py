"""Inspect's portable sandbox checks, unmodified, and what the environment adds, on
the local provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from engines import require_bwrap
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403
from inspect_checks import (
    sample_environments,
    sandbox_env_fixture,
    test_psdk_connection_where_a_shell_command_can_reach_the_provider,  # noqa: F401
    test_psdk_exec_remote_streams_output_and_kill_ends_it,  # noqa: F401
)
from provider_sdk_inspect import PsdkConfig

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def psdk_sample(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    require_bwrap()
    home = tmp_path_factory.mktemp("psdk-inspect-local")
    config = PsdkConfig(provider="local", options={"home": str(home)})
    async for environments in sample_environments(config):
        yield environments


sandbox_env = sandbox_env_fixture()
