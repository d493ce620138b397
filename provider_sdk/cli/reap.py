"""``psdk reap``: kill owner-tagged sandboxes that no binding holds (and free members of
warm pools nobody runs, past their age), and remove broken records (state a provider
could not read: corrupt, or left half created), through the library's
:func:`~provider_sdk.manager.reap`.

The store must name exactly what the application's managers use: the reaper kills what
its bindings do not hold, so a wrong store (an empty default file, another key prefix,
another table) would kill every sandbox in use. It is never guessed: ``--store`` (or
``PSDK_MANAGER_STORE``) must be given, a Redis URL must name its key prefix
(``?prefix=``) and a PostgreSQL one its table (``?table=``), and a SQLite file must
exist already.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from provider_sdk.cli.commands import provider_from
from provider_sdk.cli.console import MAX_LABEL_VALUE, CliError, Console, cell, dump_json
from provider_sdk.manager import (
    POOL_LABEL,
    BindingStore,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    open_store,
    reap,
)
from provider_sdk.manager.stores import store_option
from provider_sdk.models import broken_reason

__all__ = ["cmd_reap"]


async def cmd_reap(args: argparse.Namespace, console: Console) -> int:
    """Kill (or with ``--dry-run`` list) the sandboxes the store's bindings do not hold,
    and the provider's broken records."""
    store = _exact_store(args.store or os.environ.get("PSDK_MANAGER_STORE") or "")
    async with provider_from(args) as provider, store:
        victims = await reap(provider, store, owner_key=args.owner_key,
                             older_than=args.older_than, dry_run=args.dry_run)
    if args.json:
        console.out(dump_json(victims))
        return 0
    broken = [i for i in victims if broken_reason(i) is not None]
    for info in victims:
        reason = broken_reason(info)
        if reason is not None:
            console.out(f"{cell(info.id)}  broken: {cell(reason)}")
            continue
        # A warm pool's member carries its pool's label instead of an owner's.
        key = args.owner_key if args.owner_key in info.metadata else POOL_LABEL
        console.out(f"{cell(info.id)}  {cell(key, MAX_LABEL_VALUE)}="
                    f"{cell(info.metadata.get(key, ''), MAX_LABEL_VALUE)}")
    unbound = len(victims) - len(broken)
    verb = "would kill" if args.dry_run else "killed"
    noun = "sandbox" if unbound == 1 else "sandboxes"
    summary = f"{verb} {unbound} unbound {noun}"
    if broken:
        summary += (f" and {'would remove' if args.dry_run else 'removed'} {len(broken)} "
                    f"broken record{'' if len(broken) == 1 else 's'}")
    console.note(f"{summary} on {provider.name!r}")
    return 0


def _exact_store(url: str) -> BindingStore:
    """The store ``url`` names, if it names exactly one the managers may have written;
    a :class:`CliError` (exit status 2) saying what is missing otherwise."""
    if not url:
        raise CliError("name the managers' binding store with --store (or "
                       "PSDK_MANAGER_STORE): the reaper kills every tagged sandbox its "
                       "bindings do not hold, so it never guesses one", code=2)
    store = open_store(url)
    if isinstance(store, MemoryStore):
        raise CliError("--store memory: is empty in a new process, so every owner-tagged "
                       "sandbox would be killed; name the store the managers use", code=2)
    if isinstance(store, RedisStore) and store_option(url, "prefix")[1] is None:
        raise CliError("--store: name the managers' key prefix in the Redis URL "
                       "(?prefix=psdk:manager: is the default one)", code=2)
    if isinstance(store, PostgresStore) and store_option(url, "table")[1] is None:
        raise CliError("--store: name the managers' table in the PostgreSQL URL "
                       "(?table=psdk_bindings is the default one)", code=2)
    if isinstance(store, SQLiteStore) and not Path(store.path).is_file():
        raise CliError(f"--store: {store.path} does not exist; name the file the "
                       "managers use", code=2)
    return store
