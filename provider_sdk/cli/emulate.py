"""``psdk emulate``: serve a vendor's API on 127.0.0.1, backed by a neutral provider.

The API key comes from ``--api-key-file PATH``, else ``$PSDK_EMULATOR_API_KEY``, else the
vendor's usual setting (``E2B_API_KEY``...); ``--api-key KEY`` still works, but a command
line is readable by every local user (``ps``). The key is never printed or logged.

On start it prints, on stdout, ``export`` lines to paste into the shell of a client: the
settings that point it at the emulator, and the key's settings as a reference to where
the key is (``"$PSDK_EMULATOR_API_KEY"``, ``"$(cat PATH)"``), never the key itself.
Ctrl-C, SIGTERM or SIGHUP stops it: the sandboxes it made are removed, one line says so,
and the status is 0.
"""

from __future__ import annotations

import argparse
import os
import shlex

import anyio

from provider_sdk import emulators
from provider_sdk.cli.console import Console
from provider_sdk.cli.secret_file import read_secret_file
from provider_sdk.config import Secret

__all__ = ["KEY_SETTING", "api_key_from", "cmd_emulate", "options_from"]

KEY_SETTING = "PSDK_EMULATOR_API_KEY"
"""The environment variable ``psdk emulate`` reads its API key from."""

def api_key_from(args: argparse.Namespace) -> Secret | None:
    """The key given: ``--api-key``, ``--api-key-file``, then ``$PSDK_EMULATOR_API_KEY``;
    ``None`` lets the emulator read its vendor's setting.

    Raises:
        ConfigError: the key file cannot be read, or does not hold one key.
    """
    if getattr(args, "api_key", None):
        return Secret(args.api_key)
    if getattr(args, "api_key_file", None):
        return read_secret_file(args.api_key_file, "--api-key-file")
    from_env = os.environ.get(KEY_SETTING, "").strip()
    return Secret(from_env) if from_env else None


def options_from(args: argparse.Namespace) -> emulators.EmulatorOptions:
    """The emulator options given on the command line."""
    return emulators.EmulatorOptions(port=args.port, backend=args.backend,
                                     api_key=api_key_from(args), faults=dict(args.fault))


def key_reference(args: argparse.Namespace, running: emulators.RunningEmulator
                  ) -> tuple[str | None, str | None]:
    """Where the emulator's key is, as a shell expression that yields it
    (``"$PSDK_EMULATOR_API_KEY"``, ``"$(cat PATH)"``, ``"$E2B_API_KEY"``) and the variable
    it is already in (``None``: none); ``(None, None)`` for a key given on the command
    line, which only its user knows."""
    if getattr(args, "api_key", None):
        return None, None
    if getattr(args, "api_key_file", None):
        return f'"$(cat {shlex.quote(os.path.abspath(args.api_key_file))})"', None
    if os.environ.get(KEY_SETTING, "").strip():
        return f'"${KEY_SETTING}"', KEY_SETTING
    key = running.api_key.reveal()
    for name in running.api_key_settings:
        if os.environ.get(name, "").strip() == key:
            return f'"${name}"', name
    return None, None


async def cmd_emulate(args: argparse.Namespace, console: Console) -> int:
    """Run the emulator until stopped; print ``export`` lines that point a client at it."""
    try:
        async with emulators.run(args.name, options_from(args)) as running:
            console.note(f"{running.name} emulator on {running.url}, backed by "
                         f"{args.backend!r}; paste these lines into the client's shell; "
                         "Ctrl-C stops it")
            for key, value in running.settings.items():
                console.out(f"export {key}={shlex.quote(value)}")
            reference, holder = key_reference(args, running)
            for key in running.api_key_settings:
                if reference is None:
                    console.note(f"psdk: set {key} to the key given with --api-key "
                                 "(it is never printed)")
                elif key != holder:
                    console.out(f"export {key}={reference}")
            await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        console.done(f"{args.name} emulator stopped; the sandboxes it made are removed")
        raise
    return 0  # pragma: no cover - only a stop ends the wait above
