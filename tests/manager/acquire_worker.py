"""A separate process for the concurrency tests: after a go signal (a line on stdin), run
N concurrent ``acquire`` calls over a few owners and print ``[[owner, sandbox_id], ...]`` as JSON.

Usage: ``python acquire_worker.py HOME STORE URL NAMESPACE CALLS OWNERS``, where
STORE is ``sqlite`` (URL: a file), ``redis`` (NAMESPACE: a key prefix) or ``postgres``
(NAMESPACE: a table name).
"""

from __future__ import annotations

import json
import sys

import anyio
import anyio.to_thread

from provider_sdk.local import LocalProvider
from provider_sdk.manager import (
    BindingStore,
    PostgresStore,
    RedisStore,
    SandboxManager,
    SQLiteStore,
)


def open_store(kind: str, url: str, namespace: str) -> BindingStore:
    if kind == "sqlite":
        return SQLiteStore(url)
    if kind == "redis":
        return RedisStore(url, prefix=namespace)
    return PostgresStore(url, table=namespace)


async def main(home: str, kind: str, url: str, namespace: str, calls: int, owners: int,
               ) -> None:
    results: list[tuple[str, str]] = []
    async with open_store(kind, url, namespace) as store, \
            SandboxManager(LocalProvider(home=home), store) as manager:
        print("ready", flush=True)
        with anyio.fail_after(30):  # the go signal: a line on stdin
            await anyio.to_thread.run_sync(sys.stdin.readline)

        async def acquire(owner: str) -> None:
            sandbox = await manager.acquire(owner)
            results.append((owner, sandbox.id))

        async with anyio.create_task_group() as tg:
            for i in range(calls):
                tg.start_soon(acquire, f"user-{i % owners}")
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    home, kind, url, namespace, calls, owners = sys.argv[1:]
    anyio.run(main, home, kind, url, namespace, int(calls), int(owners))
