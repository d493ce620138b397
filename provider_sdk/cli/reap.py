"""``psdk reap``: kill owner-tagged sandboxes that no binding holds (and free members of
warm pools nobody runs, past their age), and remove broken
records (state a provider could not read: corrupt, or left half created)."""

from __future__ import annotations

import argparse
import datetime as dt

from provider_sdk.cli.commands import broken_reason, provider_from
from provider_sdk.cli.console import MAX_LABEL_VALUE, CliError, Console, cell, dump_json
from provider_sdk.manager import POOL_LABEL, MemoryStore, open_store, reap
from provider_sdk.models import SandboxInfo
from provider_sdk.provider import SandboxProvider

__all__ = ["cmd_reap"]


async def cmd_reap(args: argparse.Namespace, console: Console) -> int:
    """Kill (or with ``--dry-run`` list) the sandboxes the store's bindings do not hold,
    and the provider's broken records."""
    store = open_store(args.store)
    if isinstance(store, MemoryStore):
        raise CliError("--store memory: is empty in a new process, so every owner-tagged "
                       "sandbox would be killed; name the store the managers use", code=2)
    async with provider_from(args) as provider, store:
        victims = await reap(provider, store, owner_key=args.owner_key,
                             older_than=args.older_than, dry_run=args.dry_run)
        broken = await _reap_broken(provider, {i.id for i in victims},
                                    older_than=args.older_than, dry_run=args.dry_run)
    if args.json:
        console.out(dump_json([*victims, *broken]))
        return 0
    for info in victims:
        # A warm pool's member carries its pool's label instead of an owner's.
        key = args.owner_key if args.owner_key in info.metadata else POOL_LABEL
        console.out(f"{cell(info.id)}  {cell(key, MAX_LABEL_VALUE)}="
                    f"{cell(info.metadata.get(key, ''), MAX_LABEL_VALUE)}")
    for info in broken:
        console.out(f"{cell(info.id)}  broken: {cell(broken_reason(info))}")
    verb = "would kill" if args.dry_run else "killed"
    noun = "sandbox" if len(victims) == 1 else "sandboxes"
    summary = f"{verb} {len(victims)} unbound {noun}"
    if broken:
        summary += (f" and {'would remove' if args.dry_run else 'removed'} {len(broken)} "
                    f"broken record{'' if len(broken) == 1 else 's'}")
    console.note(f"{summary} on {provider.name!r}")
    return 0


async def _reap_broken(provider: SandboxProvider, done: set[str], *,
                       older_than: float | None, dry_run: bool) -> list[SandboxInfo]:
    """Remove the broken records not already reaped; with ``older_than``, only those
    known to be at least that old (one being created right now may look half made)."""
    now = dt.datetime.now(dt.timezone.utc)
    found: list[SandboxInfo] = []
    for info in await provider.list():
        if info.id in done or broken_reason(info) is None:
            continue
        if older_than is not None:
            created = info.created_at
            if created is None:
                continue
            if created.tzinfo is None:
                created = created.replace(tzinfo=dt.timezone.utc)
            if (now - created).total_seconds() < older_than:
                continue
        found.append(info)
        if not dry_run:
            await provider.kill(info.id)
    return found
