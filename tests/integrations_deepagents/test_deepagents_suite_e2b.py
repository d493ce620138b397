"""langchain-tests' ``SandboxIntegrationTests``, unmodified, against ``ProviderSandbox``
on the E2B and Cube providers, through their SDKs, against the emulator of each
(``tests/e2b``'s), backed by the local provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol
from deepagents_fixtures import suite_backend
from langchain_tests.integration_tests import SandboxIntegrationTests
from provider_emulators import emulator, provider_options

pytestmark = pytest.mark.anyio  # the suite's async tests run on the anyio plugin


def _backend(name: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[SandboxBackendProtocol]:
    with emulator(name, tmp_path_factory.mktemp(f"deepagents-{name}")) as running, \
            suite_backend(name, provider_options(running)) as backend:
        yield backend


class TestE2BSandboxIntegration(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[SandboxBackendProtocol]:
        yield from _backend("e2b", tmp_path_factory)


class TestCubeSandboxIntegration(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[SandboxBackendProtocol]:
        yield from _backend("cube", tmp_path_factory)
