"""langchain-tests' ``SandboxIntegrationTests``, unmodified, against ``ProviderSandbox``
on the Daytona provider, through its SDK, against the session's Daytona emulator
(``tests/daytona``'s), backed by the local provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from daytona_emulator_fixtures import daytona_emulator, provider_options
from deepagents.backends.protocol import SandboxBackendProtocol
from deepagents_fixtures import suite_backend
from langchain_tests.integration_tests import SandboxIntegrationTests

pytestmark = pytest.mark.anyio  # the suite's async tests run on the anyio plugin

__all__ = ["daytona_emulator"]  # the emulator fixture, for this module's tests


class TestDaytonaSandboxIntegration(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    def sandbox(self) -> Iterator[SandboxBackendProtocol]:
        with suite_backend("daytona", provider_options()) as backend:
            yield backend
