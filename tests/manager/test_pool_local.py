"""Warm pools on the local provider (real bubblewrap): a claimed member runs commands
with the caller's environment, paused members come back running, a member whose
processes died is replaced, and a manager binds a new owner to a pooled sandbox
through a SQLite store."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from provider_sdk.local import LocalProvider, _launch
from provider_sdk.local._home import read_meta
from provider_sdk.manager import POOL_LABEL, SandboxManager, SQLiteStore, WarmPool
from provider_sdk.models import SandboxSpec, SandboxState

pytestmark = pytest.mark.anyio

BOUND = 60.0


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
