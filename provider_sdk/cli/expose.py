"""``psdk expose ID PORT``: serve a port of a sandbox on 127.0.0.1 until interrupted.

The URL printed on stdout carries the access token where the provider declares
``ports.url_token`` (``--json``: the port, the URLs, the token and the header it goes
in, on their own); anyone who can read it can open the port, so it goes to stdout only,
never to stderr or the logs. Ctrl-C, SIGTERM or SIGHUP unexposes the port before
the process exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json

import anyio

from provider_sdk.capabilities import Capability
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
                                        "base_url": exposed.base_url,
                                        "token": exposed.token.reveal(),
                                        "token_header": exposed.token_header}, indent=2))
            else:
                console.out(exposed.url)
            how = ("token required" if provider.supports(Capability.PORTS_URL_TOKEN) else
                   f"each request needs the token in the {exposed.token_header} header: "
                   "--json shows it")
            until = ("Ctrl-C stops it" if provider.supports(Capability.PORTS_REVOKE) else
                     "it stays reachable until the sandbox ends")
            console.note(f"port {exposed.port} of {sandbox.id} is served on "
                         f"{exposed.base_url} ({how}); {until}")
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                await sandbox.unexpose(args.port)
    return 0  # pragma: no cover - only an interrupt ends the loop
