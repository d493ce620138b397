"""The Cube provider runs the shared contract suite, through the real ``e2b`` SDK (and
Cube's own routes where they differ) against the emulator's CubeSandbox flavor."""

from __future__ import annotations

from provider_emulators import EmulatedContract


class TestCubeContract(EmulatedContract):
    provider_name = "cube"
