"""``psdk providers``: the installed providers, and with ``--matrix`` which capabilities
each declares.

It reads each provider's declared capabilities without importing the provider's own
modules or its vendor SDK (see :func:`provider_sdk.registry.declared_capabilities`), so it
answers at once; a provider that declares none is loaded to ask its class. The default
listing is one line per provider (how many capabilities it declares);
``--matrix`` is one row per capability and one column per provider, as the
documentation's capability matrix is.
"""

from __future__ import annotations

import argparse

from provider_sdk import config, registry
from provider_sdk.capabilities import Capability
from provider_sdk.cli.console import Console, dump_json, table
from provider_sdk.errors import ConfigError

__all__ = ["cmd_providers", "matrix"]

Row = tuple[str, list[str], str | None]


async def cmd_providers(args: argparse.Namespace, console: Console) -> int:
    """List installed providers (or the one ``--provider`` names) and their capabilities;
    the default is starred."""
    try:
        default: str | None = config.provider_name()
    except ConfigError:
        default = None
    names = [args.provider] if args.provider else \
        sorted(registry.available(), key=lambda n: (n != "local", n))
    rows: list[Row] = []
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
                               for name, caps, error in sorted(rows)]))
        return 0
    if not rows:
        console.note("no providers installed")
        return 0
    if args.matrix:
        for line in matrix({name: set(caps) for name, caps, error in rows if error is None},
                           default):
            console.out(line)
        for name, _, error in rows:
            if error is not None:
                console.note(f"psdk: warning: {name} is not shown: cannot load: {error}")
        return 0
    total = len(Capability)
    lines = table(["NAME", "CAPABILITIES"], [
        [f"{name}{' *' if name == default else ''}",
         f"(cannot load: {error})" if error else f"{len(caps)} of {total}"]
        for name, caps, error in rows], limit=4096)
    for line in lines:
        console.out(line)
    console.note("psdk providers --matrix shows which capabilities each one has")
    return 0


def matrix(declared: dict[str, set[str]], default: str | None = None) -> list[str]:
    """One row per capability, one column per provider (``yes`` or ``-``), the default
    provider's name starred: lines of a table."""
    names = list(declared)
    header = ["CAPABILITY", *(f"{n}*" if n == default else n for n in names)]
    rows = [[capability.value,
             *("yes" if capability.value in declared[n] else "-" for n in names)]
            for capability in Capability]
    return table(header, rows)
