"""Inspect's portable sandbox checks, unmodified, on the Cube provider: the real
``e2b`` SDK against the emulator's cube flavor, on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403
from inspect_checks import emulated_sample, sandbox_env_fixture

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def psdk_sample(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    async for environments in emulated_sample("cube", tmp_path_factory):
        yield environments


sandbox_env = sandbox_env_fixture()
