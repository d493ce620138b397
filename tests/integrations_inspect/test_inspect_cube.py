"""Inspect's portable sandbox checks, unmodified, and what the environment adds, on
the Cube provider: the real ``e2b`` SDK against the emulator's cube flavor, on
127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403
from inspect_checks import (
    emulated_sample,
    sandbox_env_fixture,
    test_psdk_connection_where_a_shell_command_can_reach_the_provider,  # noqa: F401
    test_psdk_exec_remote_streams_output_and_kill_ends_it,  # noqa: F401
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def psdk_sample(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    async for environments in emulated_sample("cube", tmp_path_factory):
        yield environments


sandbox_env = sandbox_env_fixture()
