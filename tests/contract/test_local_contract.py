"""The embedded local provider runs the shared contract suite."""

from __future__ import annotations

from typing import Any

import pytest
from engines import require_docker
from provider_sdk_contract import ProviderContract


class TestLocalContract(ProviderContract):
    provider_name = "local"

    @property
    def template_base(self) -> str:
        """Local templates are built with Docker Engine: without one the template tests
        skip (fail under CI), saying so."""
        require_docker()
        return "psdk-base:bookworm"

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return {"home": str(tmp_path_factory.mktemp("psdk-local"))}


class TestLocalContractOnTrio(TestLocalContract):
    """The whole suite again, on trio: the local provider is anyio throughout."""

    async_backend = "trio"
