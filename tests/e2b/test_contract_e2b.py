"""The E2B provider runs the shared contract suite, through the real ``e2b`` SDK against
the emulator's E2B flavor."""

from __future__ import annotations

from provider_emulators import EmulatedContract


class TestE2BContract(EmulatedContract):
    provider_name = "e2b"
