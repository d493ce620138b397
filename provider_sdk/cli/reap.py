"""``psdk reap``: kill owner-tagged sandboxes that no binding holds."""

from __future__ import annotations

import argparse

from provider_sdk.cli.commands import provider_from
from provider_sdk.cli.console import CliError, Console, dump_json
from provider_sdk.manager import MemoryStore, open_store, reap

__all__ = ["cmd_reap"]


async def cmd_reap(args: argparse.Namespace, console: Console) -> int:
    """Kill (or with ``--dry-run`` list) the sandboxes the store's bindings do not hold."""
    store = open_store(args.store)
    if isinstance(store, MemoryStore):
        raise CliError("--store memory: is empty in a new process, so every owner-tagged "
                       "sandbox would be killed; name the store the managers use", code=2)
    async with provider_from(args) as provider, store:
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
