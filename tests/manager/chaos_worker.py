"""A replica for the chaos test: a running ``SandboxManager`` on the local provider whose
wall clock is OFFSET seconds off (``time.time`` skewed before anything is imported),
acquiring random owners (forgetting some first, so that the store answers; now and then
a new one, so that a sandbox is made) and running
a command in each sandbox it gets, from two tasks,
until UNTIL (on the machine's monotonic clock, which every process shares). Each
outcome is a JSON line appended to OUT as it happens, so a SIGKILL loses only the ones
in flight; so is each stall of its event loop (the machine too busy to run it). Says
``ready`` once its store is open.

Usage: ``python chaos_worker.py HOME STORE URL NAMESPACE OFFSET SEED UNTIL OWNERS OUT``,
where STORE is ``sqlite`` (URL: the file), ``redis`` (NAMESPACE: a key prefix) or
``postgres`` (NAMESPACE: a table name).
"""

from __future__ import annotations

import sys
import time

_real_time = time.time
time.time = lambda: _real_time() + float(sys.argv[5])  # this replica's clock is off

import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
from typing import IO, Any  # noqa: E402

import anyio  # noqa: E402

from provider_sdk.errors import SandboxError  # noqa: E402
from provider_sdk.local import LocalProvider  # noqa: E402
from provider_sdk.manager import (  # noqa: E402
    BindingStore,
    ManagedSandbox,
    PostgresStore,
    RedisStore,
    SandboxManager,
    SQLiteStore,
)

ACQUIRE_TIMEOUT = 3.0
IDLE_PAUSE = 3.0
CLAIM_TTL = 3.0
HEALTH_TIMEOUT = 30.0  # longer than an acquire: a slow probe times out, never replaces
TASKS = 2
LONG = "sleep 4; echo done"  # longer than IDLE_PAUSE: no sweep may pause it
SHORT = "echo done"


def open_store(kind: str, url: str, namespace: str) -> BindingStore:
    if kind == "sqlite":
        return SQLiteStore(url)
    if kind == "redis":
        return RedisStore(url, prefix=namespace)
    return PostgresStore(url, table=namespace)


def _error(exc: BaseException) -> dict[str, Any]:
    return {"error": type(exc).__name__, "typed": isinstance(exc, SandboxError)}


class _Log:
    def __init__(self, out: IO[str], pid: int) -> None:
        self.out = out
        self.pid = pid

    def write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps({**record, "pid": self.pid}) + "\n")
        self.out.flush()


async def _exec(log: _Log, owner: str, sandbox: ManagedSandbox, long: bool) -> None:
    start = time.monotonic()
    record: dict[str, Any] = {"op": "exec", "owner": owner, "id": sandbox.id, "long": long}
    try:
        result = await sandbox.exec(LONG if long else SHORT, timeout=15 if long else 8)
        record["ok"] = result.stdout == "done\n"
    except Exception as exc:
        record.update(_error(exc))
    log.write({**record, "start": start, "end": time.monotonic()})


async def _cycles(manager: SandboxManager, log: _Log, rng: random.Random, until: float,
                  owners: int) -> None:
    made = 0
    while time.monotonic() < until:
        owner = f"user-{rng.randrange(owners)}"
        if rng.random() < 0.05:  # now and then a new owner: a create, which a kill may cut
            made += 1
            owner = f"new-{rng.randrange(1 << 30)}-{made}"
        if rng.random() < 0.3:
            manager.forget(owner)  # as a replica that never saw it: the store answers
        start = time.monotonic()
        record: dict[str, Any] = {"op": "acquire", "owner": owner}
        sandbox = None
        try:
            sandbox = await manager.acquire(owner, timeout=ACQUIRE_TIMEOUT)
            record["id"] = sandbox.id
        except Exception as exc:
            record.update(_error(exc))
        log.write({**record, "start": start, "end": time.monotonic()})
        if sandbox is not None:
            await _exec(log, owner, sandbox, long=rng.random() < 0.15)
        await anyio.sleep(rng.uniform(0, 0.2))


async def _watch_stalls(log: _Log, until: float) -> None:
    """Log each time this process's event loop was not run for a while (the machine was
    busy): a deadline cannot be kept by a process that is not scheduled."""
    while time.monotonic() < until:
        start = time.monotonic()
        await anyio.sleep(0.05)
        stall = time.monotonic() - start - 0.05
        if stall > 0.02:
            log.write({"op": "stall", "at": time.monotonic(), "stall": stall})


async def main(home: str, kind: str, url: str, namespace: str, seed: int, until: float,
               owners: int, log: _Log) -> None:
    rng = random.Random(seed)
    async with open_store(kind, url, namespace) as store, SandboxManager(
            LocalProvider(home=home), store, idle_pause=IDLE_PAUSE, claim_ttl=CLAIM_TTL,
            health_timeout=HEALTH_TIMEOUT) as manager:
        print("ready", flush=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_stalls, log, until)
            for _ in range(TASKS):
                tg.start_soon(_cycles, manager, log, random.Random(rng.random()), until,
                              owners)
        log.write({"op": "failures", "counts": dict(manager.failures.counts)})


if __name__ == "__main__":
    home, kind, url, namespace, _offset, seed, until, owners, out = sys.argv[1:]
    with open(out, "a") as appended:
        anyio.run(main, home, kind, url, namespace, int(seed), float(until), int(owners),
                  _Log(appended, os.getpid()))
