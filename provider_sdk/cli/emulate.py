"""``psdk emulate``: serve a vendor's API on 127.0.0.1, backed by a neutral provider.

The API key comes from ``--api-key-file PATH``, else ``$PSDK_EMULATOR_API_KEY``, else the
vendor's usual setting (``E2B_API_KEY``...); ``--api-key KEY`` still works, but a command
line is readable by every local user (``ps``). The key is never printed or logged.
"""

from __future__ import annotations

import argparse
import os

import anyio

from provider_sdk import emulators
from provider_sdk.cli.console import Console
from provider_sdk.config import Secret
from provider_sdk.errors import ConfigError

__all__ = ["KEY_SETTING", "api_key_from", "cmd_emulate", "options_from"]

KEY_SETTING = "PSDK_EMULATOR_API_KEY"
"""The environment variable ``psdk emulate`` reads its API key from."""

_MAX_KEY_FILE = 64 << 10


def _read_key_file(path: str) -> Secret:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"--api-key-file {path}: cannot read it ({exc.strerror})") from None
    if len(data) > _MAX_KEY_FILE:
        raise ConfigError(f"--api-key-file {path}: larger than {_MAX_KEY_FILE} bytes; "
                          "it should hold the key alone")
    try:
        key = data.decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(f"--api-key-file {path}: not UTF-8 text") from None
    if not key or "\n" in key:
        raise ConfigError(f"--api-key-file {path}: it must hold the key alone, on one line")
    return Secret(key)


def api_key_from(args: argparse.Namespace) -> Secret | None:
    """The key given: ``--api-key``, ``--api-key-file``, then ``$PSDK_EMULATOR_API_KEY``;
    ``None`` lets the emulator read its vendor's setting.

    Raises:
        ConfigError: the key file cannot be read, or does not hold one key.
    """
    if getattr(args, "api_key", None):
        return Secret(args.api_key)
    if getattr(args, "api_key_file", None):
        return _read_key_file(args.api_key_file)
    from_env = os.environ.get(KEY_SETTING, "").strip()
    return Secret(from_env) if from_env else None


def options_from(args: argparse.Namespace) -> emulators.EmulatorOptions:
    """The emulator options given on the command line."""
    return emulators.EmulatorOptions(port=args.port, backend=args.backend,
                                     api_key=api_key_from(args), faults=dict(args.fault))


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
