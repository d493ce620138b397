"""langchain-tests' ``SandboxIntegrationTests``, unmodified, against ``ProviderSandbox``
on the local provider and on Docker, each with its default template."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol
from deepagents_fixtures import suite_backend
from engines import require_bwrap, require_docker
from langchain_tests.integration_tests import SandboxIntegrationTests

pytestmark = pytest.mark.anyio  # the suite's async tests run on the anyio plugin


class TestLocalSandboxIntegration(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[SandboxBackendProtocol]:
        require_bwrap()
        home = tmp_path_factory.mktemp("deepagents-local")
        with suite_backend("local", {"home": str(home)}) as backend:
            yield backend


class TestDockerSandboxIntegration(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self) -> Iterator[SandboxBackendProtocol]:
        require_docker()
        with suite_backend("docker", {}) as backend:
            yield backend
