"""``psdk reap``: kill owner-tagged sandboxes that no binding holds."""

from __future__ import annotations

import argparse

from provider_sdk.cli.commands import provider_from
from provider_sdk.cli.console import Console, dump_json
from provider_sdk.manager import open_store, reap

__all__ = ["cmd_reap"]


async def cmd_reap(args: argparse.Namespace, console: Console) -> int:
    """Kill (or with ``--dry-run`` list) the sandboxes the store's bindings do not hold."""
    async with provider_from(args) as provider, open_store(args.store) as store:
        victims = await reap(provider, store, owner_key=args.owner_key,
                             older_than=args.older_than, dry_run=args.dry_run)
    if args.json:
        console.out(dump_json(victims))
        return 0
    for info in victims:
        console.out(f"{info.id}  {args.owner_key}={info.metadata.get(args.owner_key, '')}")
    verb = "would kill" if args.dry_run else "killed"
    noun = "sandbox" if len(victims) == 1 else "sandboxes"
    console.note(f"{verb} {len(victims)} unbound {noun} on {provider.name!r}")
    return 0
