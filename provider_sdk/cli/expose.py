"""``psdk expose ID PORT``: serve a port of a sandbox on 127.0.0.1 until stopped.

The URL printed on stdout carries the access token where the provider declares
``ports.url_token`` (``--json``: the port, the URLs, the token and the header it goes
in, on their own); anyone who can read it can open the port, so it goes to stdout only,
never to stderr or the logs. When nothing in the sandbox listens on the port yet, a
warning says so (requests fail with 502 until something does). Ctrl-C, SIGTERM or SIGHUP
unexposes the port, says so in one line and ends the command with status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json

import anyio

from provider_sdk.capabilities import Capability
from provider_sdk.cli.commands import connect_resuming, provider_holding
from provider_sdk.cli.console import Console
from provider_sdk.errors import SandboxError
from provider_sdk.sandbox import Sandbox

__all__ = ["cmd_expose", "listening"]

# TCP's LISTEN state in /proc/net/tcp and tcp6.
_LISTEN = "0A"


async def cmd_expose(args: argparse.Namespace, console: Console) -> int:
    """Expose the port, print its URL, and serve until stopped."""
    async with provider_holding(args, "sandbox", args.id) as provider:
        sandbox = await connect_resuming(provider, args.id, console)
        exposed = await sandbox.expose(args.port)
        stopped = False
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
            if await listening(sandbox, args.port) is False:
                console.note(f"psdk: warning: nothing in {sandbox.id} listens on port "
                             f"{args.port} yet; requests get 502 until something does")
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            stopped = True
            raise
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                await sandbox.unexpose(args.port)
            if stopped:
                console.done(f"stopped serving port {args.port} of {sandbox.id}")
    return 0  # pragma: no cover - only a stop ends the wait above


async def listening(sandbox: Sandbox, port: int) -> bool | None:
    """Whether a TCP socket in ``sandbox`` listens on ``port``, from the kernel's own table
    (``/proc/net/tcp`` and ``tcp6``), read in the sandbox; ``None`` when it cannot tell
    (no such table, or no command could run)."""
    try:
        result = await sandbox.exec(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=10)
    except SandboxError:
        return None
    ports = [_listening_port(line.split()) for line in result.stdout.splitlines()]
    if not any(p is not None for p in ports) and "local_address" not in result.stdout:
        return None
    return port in ports


def _listening_port(row: list[str]) -> int | None:
    """The port of a row of ``/proc/net/tcp`` (``sl local_address rem_address st ...``)
    if its socket listens, else ``None``."""
    if len(row) < 4 or row[3] != _LISTEN or ":" not in row[1]:
        return None
    try:
        return int(row[1].rsplit(":", 1)[1], 16)
    except ValueError:
        return None
