"""Inspect's portable sandbox checks, unmodified, and what the environment adds, on
the Daytona provider: the real ``daytona`` SDK against the session's Daytona emulator,
on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from daytona_emulator_fixtures import daytona_emulator, running
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403
from inspect_checks import (
    sample_environments,
    sandbox_env_fixture,
    test_psdk_connection_where_a_shell_command_can_reach_the_provider,  # noqa: F401
    test_psdk_exec_remote_streams_output_and_kill_ends_it,  # noqa: F401
)
from provider_sdk_inspect import PsdkConfig

from provider_sdk import emulators

__all__ = ["daytona_emulator"]

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def psdk_sample(daytona_emulator: emulators.RunningEmulator) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in running().environment().items():
            patch.setenv(key, value)  # the provider's own settings; the config names it
        async for environments in sample_environments(PsdkConfig(provider="daytona")):
            yield environments


sandbox_env = sandbox_env_fixture()
