"""The Daytona provider runs the shared contract suite, through the real ``daytona`` SDK
against the emulator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from daytona_emulator_fixtures import admin, provider_options
from provider_sdk_contract import ProviderContract
from provider_sdk_contract.idle import IDLE_SECONDS


class TestDaytonaContract(ProviderContract):
    provider_name = "daytona"

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return provider_options()

    @pytest.fixture(autouse=True)
    def _short_minutes(self) -> Iterator[None]:
        """Daytona's auto-stop counts whole minutes: the emulator's last a few seconds
        here, so an idle sandbox is paused within the idle tests' window."""
        before = admin()["set"]["minute_seconds"]
        admin({"minute_seconds": IDLE_SECONDS})
        yield
        admin({"minute_seconds": before})
