"""``psdk emulate``: serve a vendor's API on 127.0.0.1, backed by a neutral provider."""

from __future__ import annotations

import argparse

import anyio

from provider_sdk import emulators
from provider_sdk.cli.console import Console

__all__ = ["cmd_emulate", "options_from"]


def options_from(args: argparse.Namespace) -> emulators.EmulatorOptions:
    """The emulator options given on the command line."""
    return emulators.EmulatorOptions(port=args.port, backend=args.backend,
                                     api_key=args.api_key, faults=dict(args.fault))


async def cmd_emulate(args: argparse.Namespace, console: Console) -> int:
    """Run the emulator until interrupted; print the settings that point a client at it."""
    async with emulators.run(args.name, options_from(args)) as running:
        console.note(f"{running.name} emulator on {running.url}, backed by {args.backend!r}; "
                     "Ctrl-C stops it")
        for key, value in running.settings.items():
            console.out(f"{key}={value}")
        for key in running.api_key_settings:
            console.note(f"{key}: the API key it was given")
        await anyio.sleep_forever()
    return 0  # pragma: no cover - only an interrupt ends the loop
