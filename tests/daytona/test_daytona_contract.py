"""The Daytona provider runs the shared contract suite, through the real ``daytona`` SDK
against the emulator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
from daytona_emulator_fixtures import provider_options
from provider_sdk_contract import ProviderContract

_NO_READ_ONLY = ("Daytona's VolumeMount has no read-only flag, so the provider refuses "
                 "VolumeMount(read_only=True) with UnsupportedCapability")


class TestDaytonaContract(ProviderContract):
    provider_name = "daytona"
    known_failures: ClassVar[Mapping[str, str]] = {
        "test_read_only_mount_is_readable": _NO_READ_ONLY,
        "test_read_only_mount_refuses_file_writes": _NO_READ_ONLY,
        "test_read_only_mount_refuses_command_writes": _NO_READ_ONLY,
    }

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return provider_options()
