"""A separate process for the pool's cross-process test: run a ``WarmPool`` on the local
provider over a SQLite file, wait until it is full, say ``ready``; after a go signal (a
line on stdin), make N concurrent claims and print ``{"free": [...], "claimed": [...]}``
(the members it knew free before, the sandboxes it got) as JSON.

Usage: ``python pool_worker.py HOME DB CALLS``.
"""

from __future__ import annotations

import json
import sys

import anyio
import anyio.to_thread

from provider_sdk.local import LocalProvider
from provider_sdk.manager import SQLiteStore, WarmPool


async def main(home: str, db: str, calls: int) -> None:
    claimed: list[str] = []
    async with SQLiteStore(db) as store, \
            WarmPool(LocalProvider(home=home), size=2, store=store, interval=0.5) as pool:
        await pool.wait_filled(120)
        print("ready", flush=True)
        with anyio.fail_after(120):  # the go signal: a line on stdin
            await anyio.to_thread.run_sync(sys.stdin.readline)
        free = sorted(pool._free)  # nothing was claimed yet: both know the same members

        async def claim() -> None:
            sandbox = await pool.take()
            if sandbox is not None:
                claimed.append(sandbox.id)

        async with anyio.create_task_group() as tg:
            for _ in range(calls):
                tg.start_soon(claim)
    print(json.dumps({"free": free, "claimed": claimed}), flush=True)


if __name__ == "__main__":
    home, db, calls = sys.argv[1:]
    anyio.run(main, home, db, int(calls))
