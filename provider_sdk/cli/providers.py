"""``psdk providers``: the installed providers and their capabilities.

It reads each provider's declared capabilities without importing the provider's own
modules or its vendor SDK (see :func:`provider_sdk.registry.declared_capabilities`), so it
answers at once; a provider that declares none is loaded to ask its class.
"""

from __future__ import annotations

import argparse

from provider_sdk import config, registry
from provider_sdk.cli.console import Console, dump_json, table
from provider_sdk.errors import ConfigError

__all__ = ["cmd_providers"]


async def cmd_providers(args: argparse.Namespace, console: Console) -> int:
    """List installed providers (or the one ``--provider`` names) and their capabilities;
    the default is starred."""
    try:
        default: str | None = config.provider_name()
    except ConfigError:
        default = None
    names = [args.provider] if args.provider else registry.available()
    rows: list[tuple[str, list[str], str | None]] = []
    for name in names:
        try:
            caps = registry.declared_capabilities(name)
        except ConfigError as exc:  # ProviderNotFound included: a plugin that will not load
            if args.provider:
                raise
            rows.append((name, [], exc.message))
        else:
            rows.append((name, sorted(str(c) for c in caps), None))
    if args.json:
        console.out(dump_json([{"name": name, "default": name == default,
                                "capabilities": caps, "error": error}
                               for name, caps, error in rows]))
        return 0
    if not rows:
        console.note("no providers installed")
        return 0
    lines = table(["NAME", "CAPABILITIES"], [
        [f"{name}{' *' if name == default else ''}",
         f"(cannot load: {error})" if error else ", ".join(caps) or "(core only)"]
        for name, caps, error in rows], limit=4096)
    for line in lines:
        console.out(line)
    return 0
