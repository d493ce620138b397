"""A separate process for the clock tests: a replica whose wall clock is OFFSET seconds
off (``time.time`` skewed before anything is imported), sweeping idle sandboxes until a
line arrives on stdin, then printing the owners it paused as JSON.

Usage: ``python sweep_worker.py HOME STORE URL NAMESPACE OFFSET IDLE_PAUSE``, where STORE
is ``redis`` (NAMESPACE: a key prefix) or ``postgres`` (NAMESPACE: a table name).
"""

from __future__ import annotations

import sys
import time

_real_time = time.time
time.time = lambda: _real_time() + float(sys.argv[5])  # this machine's clock is off

import json  # noqa: E402

import anyio  # noqa: E402
import anyio.to_thread  # noqa: E402

from provider_sdk.local import LocalProvider  # noqa: E402
from provider_sdk.manager import BindingStore, PostgresStore, RedisStore, SandboxManager  # noqa: E402


def open_store(kind: str, url: str, namespace: str) -> BindingStore:
    if kind == "redis":
        return RedisStore(url, prefix=namespace)
    return PostgresStore(url, table=namespace)


async def main(home: str, kind: str, url: str, namespace: str, idle_pause: float) -> None:
    paused: list[str] = []
    async with open_store(kind, url, namespace) as store:
        manager = SandboxManager(LocalProvider(home=home), store, idle_pause=idle_pause)

        async def sweep() -> None:
            while True:
                paused.extend(await manager.pause_idle())
                await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sweep)
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            tg.cancel_scope.cancel()
    print(json.dumps(paused), flush=True)


if __name__ == "__main__":
    home, kind, url, namespace, _offset, idle = sys.argv[1:]
    anyio.run(main, home, kind, url, namespace, float(idle))
