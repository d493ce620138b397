"""The Cube provider runs the shared contract suite, through the real ``e2b`` SDK (and
Cube's own routes where they differ) against the emulator's CubeSandbox flavor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from provider_emulators import EmulatedContract


class TestCubeContract(EmulatedContract):
    provider_name = "cube"
    known_failures: ClassVar[Mapping[str, str]] = {
        "test_files_stat_reports_a_symlink_without_following_it":
            "envd describes a symlink by what it leads to (the target's type and resolved "
            "path, the link's own path when it leads nowhere), so the link itself and "
            "its text are not seen: docs/emulators.md#how-files-are-described",
    }
