"""``psdk expose ID PORT``: serve a port of a sandbox on 127.0.0.1 until interrupted.

The URL printed on stdout carries the access token (``--json``: the port, the URL and
the token on their own); anyone who can read it can open the port, so it goes to stdout
only, never to stderr or the logs. Ctrl-C, SIGTERM or SIGHUP unexposes the port before
the process exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json

import anyio

from provider_sdk.cli.commands import provider_holding
from provider_sdk.cli.console import Console
from provider_sdk.errors import SandboxError

__all__ = ["cmd_expose"]


async def cmd_expose(args: argparse.Namespace, console: Console) -> int:
    """Expose the port, print its URL, and serve until interrupted."""
    async with provider_holding(args, "sandbox", args.id) as provider:
        sandbox = await provider.connect(args.id)
        exposed = await sandbox.expose(args.port)
        try:
            if args.json:
                console.out(json.dumps({"port": exposed.port, "url": exposed.url,
                                        "token": exposed.token.reveal()}, indent=2))
            else:
                console.out(exposed.url)
            console.note(f"port {exposed.port} of {sandbox.id} is served on "
                         f"{exposed.base_url} (token required); Ctrl-C stops it")
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                await sandbox.unexpose(args.port)
    return 0  # pragma: no cover - only an interrupt ends the loop
