"""The embedded local provider runs the shared contract suite."""

from __future__ import annotations

from typing import Any

import pytest
from provider_sdk_contract import ProviderContract


class TestLocalContract(ProviderContract):
    provider_name = "local"

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return {"home": str(tmp_path_factory.mktemp("psdk-local"))}
