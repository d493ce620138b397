"""Daytona for provider-sdk: :class:`DaytonaProvider` and a Daytona-compatible emulator."""
