"""Fixtures for the Daytona provider's tests: the session's emulator."""

from daytona_emulator_fixtures import daytona_emulator

__all__ = ["daytona_emulator"]
