"""Warm pools against the code in their members (the local provider, real bubblewrap).

A member's own code runs before anyone claims it: what its spec or template started, or
anything those processes start in turn. Here that code is started in a free member
through its handle, as the template's code would be, and it attacks:

- it kills every process it can, stops them, or forks without end: ``claim`` hands out
  only a member that answers a first command within ``check_timeout``; one that does
  not is discarded (killed) and the caller gets another, or a new sandbox;
- its agent is gone or stopped (what a backend that lets code signal its agent would
  allow): the member is discarded; and where what starts its commands is stopped, a
  claim given up while it waits on the member's check still has the member discarded;
- it leaves a daemon behind: the caller gets the member as its code left it (the pool
  neither resets nor inspects it), and no other member sees any of it;
- it reads whatever it can reach while others claim: it never sees another claimer's
  environment or labels, the store's claims are out of its reach, and a claim's
  labels land on the claimed member alone;
- paused with memory: a member comes back with its processes as they were before the
  pause, and no claimer's state reaches another member;
- a member handed out is marked as such on itself, so a pool or reaper whose store
  forgot the claim never hands it to another caller or kills it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.local import LocalProvider, _launch, _procs
from provider_sdk.local._home import read_meta
from provider_sdk.manager import (
    OWNER_LABEL,
    POOL_LABEL,
    MemoryStore,
    SandboxManager,
    SQLiteStore,
    WarmPool,
    reap,
)
from provider_sdk.manager.pool import TAKEN_LABEL
from provider_sdk.models import Resources, SandboxSpec, SandboxState
from provider_sdk.sandbox import Sandbox

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND = 60.0  # seconds a wait may take on a loaded machine
AGE = 3.0  # max_age of pools whose members must expire: room for a loaded machine to
# claim one first
CHECK = 2.0  # the pools' check_timeout here

KILL_ALL = "kill -9 -1"
STOP_ALL = "sleep 300 & kill -STOP -1"
FORK_BOMB = """
python3 -c 'import os, time
while True:
    try:
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "600"])
    except OSError:
        time.sleep(0.01)' &
while :; do sleep 600 & done
"""
"""A fork bomb that keeps what it forked: the shell's loop fills the pids limit fast (and
ends when a fork fails), python's takes back every slot that frees, so the limit stays
full; a classic bomb's processes end and start all the time, and a command then gets a
slot now and then."""


def _spec(provider: LocalProvider, attack: str | None = None) -> SandboxSpec:
    """The pools' spec: half a core at most, where cgroups allow. A fork bomb runs only
    under a pids limit."""
    if attack == FORK_BOMB and not provider.supports(Capability.LIMITS_PIDS):
        pytest.skip("no pids limit on this host: a fork bomb would reach the host's")
    if provider.supports(Capability.RESOURCES_CPU):
        return SandboxSpec(resources=Resources(cpu=0.5))
    return SandboxSpec()


async def _member(provider: LocalProvider, sandbox_id: str) -> Sandbox:
    """A handle on a free member, as its own code has it (not a claim)."""
    return await provider.connect(sandbox_id, resume=False)


async def _pool_ids(provider: LocalProvider) -> set[str]:
    return {i.id for i in await provider.list(metadata={POOL_LABEL: "default"})}


async def _bombed(provider: LocalProvider, sandbox_id: str) -> None:
    """Start :data:`FORK_BOMB` in a member; return once its pids limit is full, and
    nothing but the bomb holds a slot it could free.

    The member keeps a spare supervisor ready for its next command, with a launcher
    that starts it: a launcher that cannot fork ends, and the slot it frees may go to
    its supervisor's fork before the bomb takes it back, so a member bombed with its
    spare ready answers its check now and then (rightly: the pool hands out a member
    that answers). Here the member must not answer: the spare is killed from the host
    and the bomb takes its slots too.
    """
    await (await _member(provider, sandbox_id)).start(["/bin/sh", "-c", FORK_BOMB])
    pids = provider._shared.cgroup(sandbox_id).path("pids")

    def full() -> bool:
        return (pids / "pids.current").read_text() == (pids / "pids.max").read_text()

    async def filled() -> None:
        with anyio.fail_after(BOUND):
            while not await anyio.to_thread.run_sync(full):  # noqa: ASYNC110
                await anyio.sleep(0.1)  # polls the cgroup: there is no event to wait on

    await filled()
    await anyio.sleep(0.5)  # the shell's loop has ended; python holds the slot it left
    with anyio.fail_after(BOUND):
        # One, made with a slot the shell's loop left; and again, until none is left, if
        # the spawner made another with a slot the kill freed before the bomb took it.
        while spares := _spares(provider, sandbox_id):
            for pid in spares:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await filled()
            await anyio.sleep(0.5)


def _spares(provider: LocalProvider, sandbox_id: str) -> list[int]:
    """The host pids of a member's spare supervisors and their launchers: a launcher
    at rest is the only process with the agent's user and the raised OOM score that
    commands get."""
    launched = _launch.find_agent(_launched(provider, sandbox_id))
    found = []
    for pid in _launch.namespace_pids(launched):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            raised = Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "1000"
        except OSError:
            continue
        fields = {k: v.split() for k, _, v in
                  (line.partition(":") for line in status.splitlines())}
        if raised and int(fields["Uid"][0]) == _uid(launched.agent_pid):
            found += [pid, int(fields["PPid"][0])]
    return found


def _uid(pid: int | None) -> int:
    assert pid is not None
    return os.stat(f"/proc/{pid}").st_uid


async def _gone(provider: LocalProvider, sandbox_id: str) -> None:
    """Wait until ``sandbox_id`` was killed."""
    with anyio.fail_after(BOUND):
        while sandbox_id in {i.id for i in await provider.list()}:  # noqa: ASYNC110
            await anyio.sleep(0.1)  # polls the provider: there is no event to wait on


def _launched(provider: LocalProvider, sandbox_id: str) -> _launch.Launched:
    meta = read_meta(provider.home / "sandboxes" / sandbox_id)
    assert meta is not None
    return _launch.Launched(**meta["launch"])


@pytest.mark.parametrize("attack", [KILL_ALL, STOP_ALL, FORK_BOMB],
                         ids=["kill-all", "stop-all", "fork-bomb"])
async def test_a_claim_hands_out_a_member_that_answers(provider: LocalProvider,
                                                       attack: str) -> None:
    async with WarmPool(provider, _spec(provider, attack), size=2, interval=60,
                        check_timeout=CHECK) as pool:
        await pool.wait_filled(BOUND)
        attacked, other = pool._free
        if attack == FORK_BOMB:
            await _bombed(provider, attacked)
        else:
            await (await _member(provider, attacked)).start(["/bin/sh", "-c", attack])
            await anyio.sleep(1)  # let it do its worst
        started = time.monotonic()
        async with await pool.claim(env={"USER_ID": "alice"}) as sandbox:
            result = await sandbox.exec("echo $USER_ID", timeout=10)
            took = time.monotonic() - started
            assert result.stdout == "alice\n"
            assert took < CHECK + 10, took  # at most one check timed out, then a hit
            if attack == FORK_BOMB:
                assert sandbox.id == other  # the bombed member did not answer in time
                await _gone(provider, attacked)
            elif provider.supports(Capability.EXEC_CONTAINED):
                # Its commands cannot reach what serves it: the member's own processes
                # are gone or stopped, but it answers, and is handed out as its code
                # left it.
                assert sandbox.id == attacked
            elif sandbox.id == other:  # here its code could stop what serves it
                await _gone(provider, attacked)


@pytest.mark.parametrize("how", ["dead", "stopped"])
async def test_a_member_whose_agent_is_gone_or_stopped_is_discarded(
        provider: LocalProvider, how: str) -> None:
    async with WarmPool(provider, size=2, interval=60, check_timeout=CHECK) as pool:
        await pool.wait_filled(BOUND)
        broken, other = pool._free
        launched = _launched(provider, broken)
        agent = _launch.find_agent(launched).agent_pid
        assert agent is not None
        os.kill(agent, signal.SIGKILL if how == "dead" else signal.SIGSTOP)
        with anyio.fail_after(CHECK + 10):
            sandbox = await pool.claim()
        async with sandbox:
            assert sandbox.id == other
            assert (await sandbox.exec("echo ok", timeout=10)).stdout == "ok\n"
            await _gone(provider, broken)


async def test_a_claim_that_finds_no_member_answering_makes_a_new_sandbox(
        provider: LocalProvider) -> None:
    pool = WarmPool(provider, _spec(provider, FORK_BOMB), size=1, interval=60,
                    check_timeout=CHECK)
    async with pool:
        await pool.wait_filled(BOUND)
    (bombed,) = pool._free  # the pool no longer runs, and knows its free member
    await _bombed(provider, bombed)
    with anyio.fail_after(CHECK + BOUND):  # with no pool running, it kills the member first
        sandbox = await pool.claim()
    async with sandbox:
        assert sandbox.id != bombed
        assert POOL_LABEL not in sandbox.metadata  # made now, for the caller
        assert (await sandbox.exec("echo fresh", timeout=10)).stdout == "fresh\n"
        assert await _pool_ids(provider) == set()  # the bombed member was killed


async def test_a_daemon_stays_with_its_own_member_only(provider: LocalProvider) -> None:
    daemon = ("i=0; head -c 4000000 /dev/zero > /tmp/ballast; "
              "(while :; do :; done) & "
              # Each count whole: a read never meets the file emptied for the next.
              "while :; do i=$((i+1)); echo $i > /tmp/ticks.new; mv /tmp/ticks.new /tmp/ticks; "
              "sleep 0.05; done")
    async with WarmPool(provider, _spec(provider), size=2, interval=60) as pool:
        await pool.wait_filled(BOUND)
        haunted, clean = pool._free
        await (await _member(provider, haunted)).start(["/bin/sh", "-c", daemon])
        await anyio.sleep(0.5)
        async with await pool.claim() as first, await pool.claim() as second:
            assert (first.id, second.id) == (haunted, clean)
            # The caller gets the member as its code left it: the daemon runs on.
            before = int(await first.files.read_text("/tmp/ticks"))
            await anyio.sleep(0.3)
            assert int(await first.files.read_text("/tmp/ticks")) > before
            assert (await first.files.stat("/tmp/ballast")).size == 4_000_000
            # The other member has none of it.
            result = await second.exec(
                "ls /tmp; for p in /proc/[0-9]*; do cat $p/cmdline; echo; done",
                timeout=10)
            assert "ticks" not in result.stdout
            assert "ballast" not in result.stdout
            assert "while" not in result.stdout


async def test_a_members_code_never_sees_another_claimers_identity(
        provider: LocalProvider, store: SQLiteStore, db_path: Path) -> None:
    spy = ("while :; do for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
           "tr '\\0' '\\n' < $f; done >> /tmp/seen 2>/dev/null; env >> /tmp/seen; "
           "sleep 0.1; done")
    async with WarmPool(provider, size=3, store=store, interval=60) as pool:
        await pool.wait_filled(BOUND)
        first, spying, spare = pool._free
        await (await _member(provider, spying)).start(["/bin/sh", "-c", spy])
        alice = await pool.claim(metadata={"user": "alice"}, env={"SECRET": "alice-s3cret"})
        assert alice.id == first
        await alice.start("sleep 60")  # alice's environment is in a process of hers
        assert (await alice.exec("echo $SECRET")).stdout == "alice-s3cret\n"
        await anyio.sleep(0.5)
        bob = await pool.claim(metadata={"user": "bob"}, env={"SECRET": "bob-s3cret"})
        assert bob.id == spying
        await bob.start("sleep 60")
        await anyio.sleep(0.5)
        seen = await bob.files.read_text("/tmp/seen")
        assert "bob-s3cret" in seen  # the spy works: it sees its own claimer's commands
        assert "alice" not in seen
        assert POOL_LABEL not in seen  # nor the pool's labels
        assert "pool-taken" not in seen  # nor its claims
        # The store is out of its reach; the claimers' environment is in no record.
        probe = await bob.exec(["test", "-e", str(db_path)])
        assert probe.exit_code != 0
        for path in [db_path, *provider.home.rglob("*.json")]:
            assert b"s3cret" not in path.read_bytes(), path
        # Each handle holds its own claimer's environment, and nothing else does.
        assert dict(alice.env) == {"SECRET": "alice-s3cret"}
        assert dict(bob.env) == {"SECRET": "bob-s3cret"}
        assert (await bob.exec("echo $SECRET")).stdout == "bob-s3cret\n"
        # Each claim's labels are on its member alone.
        for user, sandbox_id in (("alice", alice.id), ("bob", bob.id)):
            assert [i.id for i in await provider.list(metadata={"user": user})] \
                == [sandbox_id]
        assert "user" not in (await provider.get_info(spare)).metadata
        await alice.kill()
        await bob.kill()


async def test_a_paused_member_comes_back_as_its_code_left_it(
        provider: LocalProvider) -> None:
    counter = ("echo $$ > /tmp/pid; i=0; "
               "while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done")
    async with WarmPool(provider, size=2, paused=True, interval=60) as pool:
        await pool.wait_filled(BOUND)
        members = list(pool._free)
        before: dict[str, tuple[str, int]] = {}
        for member in members:
            sandbox = await provider.connect(member)  # resumed, as its code runs
            await sandbox.start(["/bin/sh", "-c", counter])
            with anyio.fail_after(BOUND):
                while not (await sandbox.exec("cat /tmp/count")).stdout.strip():  # noqa: ASYNC110
                    await anyio.sleep(0.05)  # polls the sandbox's files
            before[member] = (await sandbox.files.read_text("/tmp/pid"),
                              int(await sandbox.files.read_text("/tmp/count")))
            await sandbox.pause()
        assert {i.id: i.state for i in await provider.list()} == dict.fromkeys(
            members, SandboxState.PAUSED)
        alice = await pool.claim(env={"SECRET": "alice-s3cret"})
        await alice.exec("echo $SECRET > /tmp/mine")
        bob = await pool.claim()
        assert [alice.id, bob.id] == members
        for sandbox in (alice, bob):
            pid, count = before[sandbox.id]
            # The same process, counting on from where it was paused.
            assert await sandbox.files.read_text("/tmp/pid") == pid
            now = int(await sandbox.files.read_text("/tmp/count"))
            assert now >= count
            await anyio.sleep(0.3)
            assert int(await sandbox.files.read_text("/tmp/count")) > now
        assert not await bob.files.exists("/tmp/mine")
        await alice.kill()
        await bob.kill()


def _stop_spawner(provider: LocalProvider, sandbox_id: str) -> None:
    """Stop, from the host, what starts a member's commands: its agent's one child, the
    spawner, then the spare supervisor it forked ahead, if any (the agent hands it the
    next command itself). Every command it is asked for then waits, as in a member that
    does not answer, while the agent itself still takes calls."""
    agent = _launch.find_agent(_launched(provider, sandbox_id)).agent_pid
    assert agent is not None
    children = _procs.children_of().get(agent, [])
    assert len(children) == 1, children
    os.kill(children[0], signal.SIGSTOP)  # first: it forks no spare from now on
    for spare in _procs.children_of().get(children[0], []):
        os.kill(spare, signal.SIGSTOP)


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
async def test_a_claim_given_up_while_checking_a_member_still_discards_it(
        provider: LocalProvider, running: bool) -> None:
    pool = WarmPool(provider, _spec(provider), size=1, interval=60, check_timeout=BOUND)
    async with pool:
        await pool.wait_filled(BOUND)
        (silent,) = pool._free
        _stop_spawner(provider, silent)  # its check waits far longer than the claim
        if running:
            with anyio.move_on_after(1) as scope:
                await pool.claim()
            assert scope.cancelled_caught
            await _gone(provider, silent)
    if not running:  # the pool no longer runs, and still knows its member
        with anyio.move_on_after(1) as scope:
            await pool.claim()
        assert scope.cancelled_caught
        await _gone(provider, silent)


async def test_a_member_handed_out_stays_its_claimers_when_the_store_forgets(
        provider: LocalProvider) -> None:
    """Each pool here has a store of its own in memory, as after a restart: the member
    handed out carries the mark itself, so no later pool hands it out, drains it, or
    lets the reaper kill it."""
    async with WarmPool(provider, size=1, interval=60, max_age=AGE) as first:
        await first.wait_filled(BOUND)
        alice = await first.claim()
        await alice.exec("echo alice-private > /tmp/note")
    assert TAKEN_LABEL in (await provider.get_info(alice.id)).metadata
    async with WarmPool(provider, size=1, interval=60) as second:
        await second.wait_filled(BOUND)
        assert alice.id not in second._free
        async with await second.claim() as bob:
            assert bob.id != alice.id
            assert not await bob.files.exists("/tmp/note")
        await second.drain()
    await anyio.sleep(AGE + 0.1)  # alice's member is past the first pool's max_age
    assert alice.id not in {i.id for i in await reap(provider, MemoryStore())}
    assert (await alice.exec("cat /tmp/note")).stdout == "alice-private\n"
    await alice.kill()


async def test_a_manager_binds_its_owner_to_a_member_that_answers(
        provider: LocalProvider, store: SQLiteStore) -> None:
    async with WarmPool(provider, _spec(provider, FORK_BOMB), size=2, store=store,
                        interval=60, check_timeout=CHECK) as pool, \
            SandboxManager(provider, store, pool=pool) as manager:
        await pool.wait_filled(BOUND)
        bombed, other = pool._free
        await _bombed(provider, bombed)
        with anyio.fail_after(CHECK + 10):
            sandbox = await manager.acquire("alice")
        assert sandbox.id == other
        assert (await sandbox.exec("echo ok", timeout=10)).stdout == "ok\n"
        assert sandbox.metadata[OWNER_LABEL] == "alice"
        assert TAKEN_LABEL in sandbox.metadata  # set with the owner label, in one call
        tagged = await provider.list(metadata={OWNER_LABEL: "alice"})
        assert [i.id for i in tagged] == [other]
        await _gone(provider, bombed)
        await manager.release("alice")
