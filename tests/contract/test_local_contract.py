"""The embedded local provider runs the shared contract suite, and the sections that
lean on the event loop again on trio."""

from __future__ import annotations

from typing import Any

import pytest
from engines import require_docker
from provider_sdk_contract import EventLoopContract, ProviderContract


class LocalSettings:
    """How the local provider's contract classes make their provider."""

    provider_name = "local"

    @property
    def template_base(self) -> str:
        """Local templates are built with Docker Engine: without one the template tests
        skip (fail under CI), saying so."""
        require_docker()
        return "psdk-base:bookworm-2"

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return {"home": str(tmp_path_factory.mktemp("psdk-local"))}


class TestLocalContract(LocalSettings, ProviderContract):
    """The whole suite."""


class TestLocalContractOnTrio(LocalSettings, EventLoopContract):
    """The sections that lean on the event loop again, on trio: the local provider is
    anyio throughout."""

    async_backend = "trio"
