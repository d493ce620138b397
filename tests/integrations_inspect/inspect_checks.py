"""Inspect's portable sandbox checks (``inspect_ai.util._sandbox.self_check``), run
unmodified against ``PsdkSandboxEnvironment`` on one provider per test module.

A module imports the checks and defines its sandbox with :func:`sample_fixture`; the
``sandbox_env`` fixture here hands each check the module's default sandbox, and marks
as a strict known failure a check that needs a capability the provider does not
declare, with a reason naming it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from inspect_ai.util import SandboxEnvironment
from provider_sdk_inspect import PsdkConfig, PsdkSandboxEnvironment

from provider_sdk import Capability

#: Checks that need a capability, by name.
NEEDS: Mapping[str, Capability] = {
    "test_exec_as_user": Capability.EXEC_USER,
}

TASK = "psdk-self-check"


def known_failure(check: str, provider: str,
                  capabilities: frozenset[Capability]) -> str | None:
    """Why ``check`` cannot pass on ``provider``, or ``None`` if it must."""
    needed = NEEDS.get(check)
    if needed is not None and needed not in capabilities:
        return f"provider {provider!r} does not declare {needed.value!r}"
    return None


async def sample_environments(config: PsdkConfig) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    """The task's and one sample's lifecycle around the caller's checks."""
    await PsdkSandboxEnvironment.task_init(TASK, config)
    environments = await PsdkSandboxEnvironment.sample_init(TASK, config, {})
    try:
        yield environments
    finally:
        await PsdkSandboxEnvironment.sample_cleanup(TASK, config, environments, False)
        await PsdkSandboxEnvironment.task_cleanup(TASK, config, True)


def sandbox_env_fixture() -> Callable[..., Any]:
    """The ``sandbox_env`` fixture the checks take, over the module's ``psdk_sample``."""

    @pytest.fixture
    def sandbox_env(request: pytest.FixtureRequest,
                    psdk_sample: dict[str, SandboxEnvironment]) -> SandboxEnvironment:
        env = psdk_sample["default"].as_type(PsdkSandboxEnvironment)
        provider = env.sandbox.provider
        reason = known_failure(request.node.originalname, provider.name,
                               provider.capabilities)
        if reason is not None:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        return env

    return sandbox_env


async def emulated_sample(name: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[
        dict[str, SandboxEnvironment]]:
    """A sample on the ``e2b`` or ``cube`` provider, against that emulator (started for
    the module, backed by the local provider); the provider's settings, key included,
    come from the environment, and the config names only the provider."""
    from provider_emulators import emulator

    with emulator(name, tmp_path_factory.mktemp(f"inspect-{name}-backend")) as running, \
            pytest.MonkeyPatch.context() as patch:
        for key, value in running.environment().items():
            patch.setenv(key, value)
        async for environments in sample_environments(PsdkConfig(provider=name)):
            yield environments
