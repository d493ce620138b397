"""Warm pools on the local provider (real bubblewrap): a claimed member runs commands
with the caller's environment, paused members come back running, a member whose
processes died is replaced, a manager binds a new owner to a pooled sandbox through a
SQLite store, two processes racing for the same members each get distinct ones, and
``psdk reap`` kills the free members of a pool nobody runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from provider_sdk.cli import main
from provider_sdk.local import LocalProvider, _launch
from provider_sdk.local._home import read_meta
from provider_sdk.manager import POOL_LABEL, SandboxManager, SQLiteStore, WarmPool
from provider_sdk.models import SandboxSpec, SandboxState

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 60.0
AGE = 3.0  # max_age of pools whose members must expire: room for a loaded machine to
# claim one first
WORKER = Path(__file__).with_name("pool_worker.py")


async def _members(provider: LocalProvider) -> dict[str, SandboxState]:
    return {i.id: i.state for i in await provider.list(metadata={POOL_LABEL: "default"})}


async def test_a_claimed_member_has_the_callers_environment(provider: LocalProvider) -> None:
    async with WarmPool(provider, SandboxSpec(env={"STAGE": "pool"}), size=1) as pool:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        async with await pool.claim(env={"USER_ID": "alice"}) as sandbox:
            assert sandbox.id == member
            result = await sandbox.exec('echo "$USER_ID $STAGE"')
            assert result.stdout == "alice pool\n"


async def test_a_member_handed_out_through_another_store_is_not_handed_out_again(
        provider: LocalProvider) -> None:
    # Two pools of one name, each with a store of its own (two processes' memory), that
    # both saw the same free members: what one hands out carries the taken label, which
    # the other reads as it claims.
    async with WarmPool(provider, size=1, interval=60) as first:
        await first.wait_filled(BOUND)
        async with WarmPool(provider, size=1, interval=60) as second:
            await second.wait_filled(BOUND)
            assert second._free.keys() == first._free.keys()
            alice = await first.claim()
            bob = await second.claim()  # made for bob: the one it knew is alice's
            assert bob.id != alice.id
            assert (await alice.exec("echo alice")).stdout == "alice\n"
            await bob.kill()
        await alice.kill()
        await first.drain()


async def test_paused_members_come_back_running(provider: LocalProvider) -> None:
    async with WarmPool(provider, size=1, paused=True) as pool:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        assert (await _members(provider))[member] == SandboxState.PAUSED
        async with await pool.claim() as sandbox:
            assert sandbox.info.state == SandboxState.RUNNING
            assert (await sandbox.exec("echo up")).stdout == "up\n"


async def test_a_member_whose_processes_died_is_replaced(provider: LocalProvider) -> None:
    async with WarmPool(provider, size=1, interval=0.2) as pool:
        await pool.wait_filled(BOUND)
        (dead,) = pool._free
        meta = read_meta(provider.home / "sandboxes" / dead)
        assert meta is not None
        os.kill(_launch.Launched(**meta["launch"]).init_pid, signal.SIGKILL)
        with anyio.fail_after(BOUND):
            while True:
                members = await _members(provider)
                if dead not in members and list(members.values()) == [SandboxState.RUNNING]:
                    break
                await anyio.sleep(0.1)
        async with await pool.claim() as sandbox:
            assert sandbox.id != dead
            assert (await sandbox.exec("echo ok")).stdout == "ok\n"


async def test_a_manager_binds_a_new_owner_to_a_pooled_sandbox(
        provider: LocalProvider, store: SQLiteStore) -> None:
    async with WarmPool(provider, size=1, store=store) as pool, \
            SandboxManager(provider, store, pool=pool) as manager:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        sandbox = await manager.acquire("alice")
        assert sandbox.id == member
        await sandbox.set_env(GREETING="hi alice")
        assert (await sandbox.exec("echo $GREETING")).stdout == "hi alice\n"
        binding = await store.get("alice")
        assert binding is not None
        assert binding.sandbox_id == member
        await pool.wait_filled(BOUND)  # refilled behind the claim
        assert member not in pool._free


async def test_psdk_reap_kills_free_members_of_a_pool_nobody_runs(
        provider: LocalProvider, db_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PSDK_HOME", str(provider.home))
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # psdk sets it
    async with SQLiteStore(db_path) as store:
        async with WarmPool(provider, size=2, store=store, max_age=AGE) as pool:
            await pool.wait_filled(BOUND)
            (kept, member) = pool._free
            claimed = await pool.take()
            assert claimed is not None
            assert claimed.id == kept
        # Free: every member but the one taken (and a refill may have added one).
        free = set(await _members(provider)) - {kept}
        assert member in free
        await anyio.sleep(AGE + 0.1)  # past max_age
    argv = ["reap", "--provider", "local", "--store", f"sqlite://{db_path}"]
    assert await anyio.to_thread.run_sync(main, argv) == 0  # psdk runs its own loop
    out = capsys.readouterr().out
    assert sorted(out.splitlines()) == sorted(f"{i}  {POOL_LABEL}=default" for i in free)
    assert set(await _members(provider)) == {kept}


async def test_two_processes_never_hand_out_the_same_member(
        provider: LocalProvider, db_path: Path) -> None:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(provider.home), str(db_path), "3"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [await anyio.to_thread.run_sync(start) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            assert line == "ready\n", proc.communicate()[1]
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = []
        for proc in procs:
            out, err = await anyio.to_thread.run_sync(lambda p=proc: p.communicate(timeout=120))
            assert proc.returncode == 0, err
            outcomes.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    first, second = outcomes
    assert first["free"] == second["free"], outcomes  # they raced for the same members
    assert len(first["free"]) == 2
    claimed = first["claimed"] + second["claimed"]
    assert len(claimed) == len(set(claimed)), outcomes  # none went to both processes
    assert set(first["free"]) <= set(claimed), outcomes
