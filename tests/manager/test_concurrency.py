"""Exactly one sandbox per owner across processes: 2 processes x 25 concurrent acquires
over 5 owners, sharing one store, give exactly 5 sandboxes, on each shared store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from provider_sdk.local import LocalProvider
from provider_sdk.manager import OWNER_LABEL, PostgresStore, RedisStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("acquire_worker.py")
PROCESSES, CALLS, OWNERS = 2, 25, 5


async def _run_workers(provider: LocalProvider, kind: str, url: str,
                       namespace: str) -> list[tuple[str, str]]:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(provider.home), kind, url, namespace,
             str(CALLS), str(OWNERS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [await anyio.to_thread.run_sync(start) for _ in range(PROCESSES)]
    try:
        for proc in procs:  # every worker is up, its store open, before any acquires
            assert proc.stdout is not None
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            assert line == "ready\n", proc.communicate()[1]
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results: list[tuple[str, str]] = []
        for proc in procs:
            out, err = await anyio.to_thread.run_sync(lambda p=proc: p.communicate(timeout=120))
            assert proc.returncode == 0, err
            results += [tuple(pair) for pair in json.loads(out)]
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


async def _check_one_per_owner(provider: LocalProvider, results: list[tuple[str, str]]) -> None:
    assert len(results) == PROCESSES * CALLS
    by_owner: dict[str, set[str]] = {}
    for owner, sandbox_id in results:
        by_owner.setdefault(owner, set()).add(sandbox_id)
    assert sorted(by_owner) == [f"user-{i}" for i in range(OWNERS)]
    assert all(len(ids) == 1 for ids in by_owner.values()), by_owner
    alive = await provider.list()
    assert len(alive) == OWNERS
    assert {i.metadata[OWNER_LABEL]: i.id for i in alive} == {
        owner: next(iter(ids)) for owner, ids in by_owner.items()}


async def test_two_processes_on_one_sqlite_file_make_one_sandbox_per_owner(
        provider: LocalProvider, db_path: Path) -> None:
    results = await _run_workers(provider, "sqlite", str(db_path), "-")
    await _check_one_per_owner(provider, results)


async def test_two_processes_on_one_redis_make_one_sandbox_per_owner(
        provider: LocalProvider, redis_store: RedisStore) -> None:
    results = await _run_workers(provider, "redis", redis_store._url.reveal(),
                                 redis_store.prefix)
    await _check_one_per_owner(provider, results)
    assert len(await redis_store.list()) == OWNERS


async def test_two_processes_on_one_postgres_make_one_sandbox_per_owner(
        provider: LocalProvider, postgres_store: PostgresStore) -> None:
    results = await _run_workers(provider, "postgres", postgres_store._dsn.reveal(),
                                 postgres_store.table)
    await _check_one_per_owner(provider, results)
    assert len(await postgres_store.list()) == OWNERS
