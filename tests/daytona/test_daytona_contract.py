"""The Daytona provider runs the shared contract suite, through the real ``daytona`` SDK
against the emulator."""

from __future__ import annotations

from typing import Any

import pytest
from daytona_emulator_fixtures import provider_options
from provider_sdk_contract import ProviderContract


class TestDaytonaContract(ProviderContract):
    provider_name = "daytona"

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return provider_options()
