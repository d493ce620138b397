"""Inspect's portable sandbox checks, unmodified, on the Docker provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from engines import require_docker
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403
from inspect_checks import sample_environments, sandbox_env_fixture
from provider_sdk_inspect import PsdkConfig

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def psdk_sample() -> AsyncIterator[dict[str, SandboxEnvironment]]:
    require_docker()
    async for environments in sample_environments(PsdkConfig(provider="docker")):
        yield environments


sandbox_env = sandbox_env_fixture()
