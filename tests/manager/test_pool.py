"""Warm pools on the in-memory test provider, where rounds are fast: many claims at once
hand out each member once and the pool refills; dead, expired and extra members are
replaced or killed; a new spec or template build drains the old members; the reaper
spares running pools and handed-out members; hits and misses are counted."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import anyio
import attrs
import pytest
from memory_provider import MemoryControl, MemoryProvider, Store
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from provider_sdk import telemetry
from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, UnsupportedCapability
from provider_sdk.manager import (
    POOL_LABEL,
    MemoryStore,
    SandboxManager,
    WarmPool,
    reap,
)
from provider_sdk.manager.pool import EXPIRES_LABEL, SPEC_LABEL, TAKEN_LABEL
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState, Template

pytestmark = pytest.mark.anyio

FAST = 0.05  # seconds between rounds
BOUND = 10.0  # seconds any wait may take on a loaded machine
AGE = 3.0  # max_age of pools whose members must expire: room for a loaded machine to
# claim one first


def _members(memory: Store, name: str = "default") -> list[SandboxInfo]:
    return [b.info for b in memory.boxes.values() if b.info.metadata.get(POOL_LABEL) == name]


async def _until(condition: Any) -> None:
    with anyio.fail_after(BOUND):
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.01)


@pytest.mark.slow
async def test_concurrent_claims_hand_out_each_member_once_and_the_pool_refills(
        memory: Store) -> None:
    async with WarmPool(MemoryProvider(), size=5, interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        ready = {i.id for i in _members(memory)}
        got: list[str] = []

        async def claim() -> None:
            got.append((await pool.claim()).id)

        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(claim)
        assert len(got) == len(set(got)) == 12
        assert ready <= set(got)  # every free member went to one caller: 5 hits, 7 misses
        await pool.wait_filled(BOUND)
        free = set(pool._free)
        assert len(free) == 5
        assert not free & set(got)


class _Relabeling(MemoryControl):
    """Changes labels after create (``metadata.update``), recording whether it was
    asked to read them first."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.asked: list[str] = []

    async def set_metadata(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        self.asked.append("reread")
        return await self._relabel(sandbox_id, labels)

    async def set_metadata_as_seen(self, sandbox_id: str,
                                   labels: Mapping[str, str]) -> SandboxInfo:
        self.asked.append("as seen")
        return await self._relabel(sandbox_id, labels)

    async def _relabel(self, sandbox_id: str, labels: Mapping[str, str]) -> SandboxInfo:
        box = self.store.boxes[sandbox_id]
        box.info = attrs.evolve(box.info, metadata={**box.info.metadata, **labels})
        return await self.info(sandbox_id)


class _Relabels(MemoryProvider):
    """The memory provider with a control plane that changes labels."""

    capabilities = MemoryProvider.capabilities | {Capability.METADATA_UPDATE}
    control_role = _Relabeling
    control: _Relabeling


async def test_a_claim_labels_its_member_without_reading_its_labels_first(
        memory: Store) -> None:
    """Until a member is handed out its labels are the pool's: the claim merges the
    caller's and the taken label into them as the provider last saw them (no read
    first, where labels go only whole), over the spec's and the pool's; the caller's
    own ``set_metadata`` reads them first, as by default."""
    provider = _Relabels()
    async with WarmPool(provider, SandboxSpec(metadata={"team": "a"}), size=1,
                        interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        sandbox = await pool.claim(metadata={"user": "alice"})
        assert provider.control.asked == ["as seen"]
        assert {k: sandbox.metadata[k] for k in ("team", "user", POOL_LABEL)} == {
            "team": "a", "user": "alice", POOL_LABEL: "default"}
        assert TAKEN_LABEL in sandbox.metadata
        await sandbox.set_metadata({"stage": "review"})
        assert provider.control.asked == ["as seen", "reread"]


async def test_claim_gives_the_callers_environment(memory: Store) -> None:
    async with WarmPool(MemoryProvider(), SandboxSpec(env={"BASE": "b"}), size=1,
                        interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        sandbox = await pool.claim(env={"USER_ID": "alice", "BASE": "mine"})
        result = await sandbox.exec('echo "$USER_ID $BASE"')
        assert result.stdout == "alice mine\n"
        assert dict(sandbox.env) == {"USER_ID": "alice", "BASE": "mine"}
        assert (await sandbox.exec("echo $USER_ID", env={"USER_ID": "bob"})).stdout == "bob\n"


async def test_a_dead_member_is_replaced(memory: Store) -> None:
    async with WarmPool(MemoryProvider(), size=2, interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        dead = _members(memory)[0].id
        box = memory.boxes[dead]
        box.info = attrs.evolve(box.info, state=SandboxState.ERROR)
        await _until(lambda: dead not in memory.boxes and len(_members(memory)) == 2)
        await pool.wait_filled(BOUND)
        assert dead not in pool._free


async def test_a_member_killed_behind_the_pools_back_is_not_handed_out(memory: Store) -> None:
    provider = MemoryProvider()
    async with WarmPool(provider, size=1, interval=60) as pool:
        await pool.wait_filled(BOUND)
        (member,) = pool._free
        await provider.kill(member)
        sandbox = await pool.claim()
        assert sandbox.id != member
        assert (await sandbox.exec("echo ok")).stdout == "ok\n"


async def test_a_new_spec_drains_the_old_members(memory: Store) -> None:
    async with WarmPool(MemoryProvider(), SandboxSpec(metadata={"v": "1"}), size=3,
                        interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        old = {i.id for i in _members(memory)}
        await pool.set_spec(SandboxSpec(metadata={"v": "2"}))
        await _until(lambda: not old & set(memory.boxes)
                     and len(_members(memory)) == 3)
        assert {i.metadata["v"] for i in _members(memory)} == {"2"}
        sandbox = await pool.claim()
        assert sandbox.metadata["v"] == "2"


async def test_another_replicas_spec_is_drained_too(memory: Store) -> None:
    store = MemoryStore()
    async with WarmPool(MemoryProvider(), SandboxSpec(env={"A": "1"}), size=2, store=store,
                        interval=60) as old:
        await old.wait_filled(BOUND)
    stale = {i.id for i in _members(memory)}
    async with WarmPool(MemoryProvider(), SandboxSpec(env={"A": "2"}), size=2, store=store,
                        interval=60) as new:
        await new.wait_filled(BOUND)
        assert not stale & set(memory.boxes)
        assert len(_members(memory)) == 2


async def test_a_member_past_max_age_is_replaced(memory: Store) -> None:
    async with WarmPool(MemoryProvider(), size=2, max_age=0.5, interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        first = {i.id for i in _members(memory)}
        await _until(lambda: not first & set(memory.boxes) and len(_members(memory)) == 2)
        for info in _members(memory):
            assert float(info.metadata[EXPIRES_LABEL]) > time.time() - 1


async def test_the_pool_never_keeps_more_than_its_size(memory: Store) -> None:
    store = MemoryStore()
    pools = [WarmPool(MemoryProvider(), size=3, store=store, interval=FAST)
             for _ in range(4)]
    seen = 0
    async with pools[0], pools[1], pools[2], pools[3]:
        with anyio.move_on_after(1.0):
            while True:
                seen = max(seen, len(_members(memory)))
                await anyio.sleep(0.005)
    assert seen == 3


async def test_extra_members_are_killed(memory: Store) -> None:
    provider, store = MemoryProvider(), MemoryStore()
    async with WarmPool(provider, size=4, store=store, interval=60) as pool:
        await pool.wait_filled(BOUND)
    async with WarmPool(provider, size=2, store=store, interval=60) as smaller:
        await smaller.wait_filled(BOUND)
        assert len(_members(memory)) == 2


@pytest.mark.slow
async def test_a_pool_with_another_store_leaves_the_members_alone(memory: Store) -> None:
    # This provider's labels are fixed at create: only the store a member was made
    # through knows whether it was handed out.
    provider = MemoryProvider()
    async with WarmPool(provider, size=2, interval=60, max_age=AGE) as first:
        await first.wait_filled(BOUND)
        alice = await first.claim()
        await first.wait_filled(BOUND)
    made = {i.id for i in _members(memory)}
    assert len(made) == 3
    async with WarmPool(provider, size=1, interval=60) as again:
        await again.wait_filled(BOUND)
        await again.check()  # a round that counts extras
        bob = await again.claim()
        assert bob.id not in made
        await again.drain()
    await anyio.sleep(AGE)  # the first run's members are past max_age
    assert not {i.id for i in await reap(provider, MemoryStore())} & made
    assert made <= {i.id for i in _members(memory)}
    assert alice.id in memory.boxes


@pytest.mark.slow
async def test_pools_sharing_a_store_reuse_its_free_members(memory: Store) -> None:
    provider, store = MemoryProvider(), MemoryStore()
    async with WarmPool(provider, size=2, store=store, interval=60, max_age=AGE) as first:
        await first.wait_filled(BOUND)
        alice = await first.claim()
        await first.wait_filled(BOUND)
    free = {i.id for i in _members(memory)} - {alice.id}
    async with WarmPool(provider, size=2, store=store, interval=60) as again:
        await again.wait_filled(BOUND)
        assert (await again.claim()).id in free
    await anyio.sleep(AGE)
    reaped = {i.id for i in await reap(provider, store)}
    assert reaped
    assert reaped <= free
    assert alice.id in memory.boxes


async def test_drain_kills_free_members_only(memory: Store) -> None:
    async with WarmPool(MemoryProvider(), size=3, interval=60) as pool:
        await pool.wait_filled(BOUND)
        claimed = await pool.claim()
        assert await pool.drain() == 2
        assert {i.id for i in _members(memory)} == {claimed.id}


class _PauseLosesMemory(MemoryProvider):
    """The in-memory provider as a backend whose pause does not keep memory."""

    capabilities = MemoryProvider.capabilities - {Capability.PAUSE_MEMORY}


async def test_the_pools_labels_are_refused_in_its_spec(memory: Store) -> None:
    with pytest.raises(InvalidInput, match=r"psdk\.pool"):
        WarmPool(MemoryProvider(), SandboxSpec(metadata={SPEC_LABEL: "x"}), size=1)
    with pytest.raises(InvalidInput, match="size"):
        WarmPool(MemoryProvider(), size=0)
    with pytest.raises(UnsupportedCapability) as caught:
        WarmPool(_PauseLosesMemory(), size=1, paused=True)
    assert caught.value.capability == "pause.memory"
    WarmPool(MemoryProvider(), size=1, paused=True)  # it keeps memory: accepted


async def test_the_manager_takes_a_new_owners_sandbox_from_the_pool(memory: Store) -> None:
    provider, store = MemoryProvider(), MemoryStore()
    async with WarmPool(provider, size=2, store=store, interval=FAST) as pool, \
            SandboxManager(provider, store, pool=pool) as manager:
        await pool.wait_filled(BOUND)
        members = set(pool._free)
        alice = await manager.acquire("alice")
        assert alice.id in members
        await alice.set_env(TOKEN="t-alice")
        assert (await alice.exec("echo $TOKEN")).stdout == "t-alice\n"
        binding = await manager.binding("alice")
        assert binding is not None
        assert binding.sandbox_id == alice.id
        manager.forget("alice")
        assert (await manager.acquire("alice")).id == alice.id  # the store binds it
        await manager.release("alice")
        assert alice.id not in memory.boxes


async def test_reap_spares_running_pools_and_handed_out_members(memory: Store) -> None:
    provider, store = MemoryProvider(), MemoryStore()
    # max_age leaves a loaded machine time to hand out a member before it is too old.
    async with WarmPool(provider, size=2, store=store, max_age=1.0, interval=60) as pool:
        await pool.wait_filled(BOUND)
        members = set(pool._free)
        claimed = await pool.claim()
        assert claimed.id in members  # a hit: the member carries the pool's labels
        await anyio.sleep(1.1)
        assert await reap(provider, store) == []  # the pool runs: its rounds replace them
    await anyio.sleep(1.1)  # the members made after the claim are past max_age too
    free = {i.id for i in _members(memory)} - {claimed.id}
    assert free
    reaped = {i.id for i in await reap(provider, store)}
    assert reaped == free
    assert {i.id for i in _members(memory)} == {claimed.id}


async def test_reap_spares_free_members_younger_than_max_age(memory: Store) -> None:
    provider, store = MemoryProvider(), MemoryStore()
    async with WarmPool(provider, size=2, store=store, interval=60) as pool:
        await pool.wait_filled(BOUND)
    assert await reap(provider, store) == []
    assert len(_members(memory)) == 2


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    telemetry.enable(meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        yield reader
    finally:
        telemetry.disable()


def _points(reader: InMemoryMetricReader, metric: str) -> dict[tuple[Any, ...], Any]:
    data = reader.get_metrics_data()
    found = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for m in scope.metrics:
                if m.name == metric:
                    for point in m.data.data_points:
                        found[tuple(sorted((point.attributes or {}).items()))] = point.value
    return found


async def test_hits_and_misses_are_counted(memory: Store,
                                           reader: InMemoryMetricReader) -> None:
    provider, store = MemoryProvider(), MemoryStore()
    async with WarmPool(provider, size=1, store=store, name="web", interval=60) as pool, \
            SandboxManager(provider, store, pool=pool) as manager:
        await pool.wait_filled(BOUND)
        await manager.acquire("alice")  # the member: a hit
        await manager.acquire("bob")  # none left: a miss, then a create
    claims = _points(reader, "psdk.pool.claims")
    base = (("psdk.pool", "web"), ("psdk.provider", "memory"))
    assert claims == {(*base[:1], ("psdk.pool.outcome", "hit"), base[1]): 1,
                      (*base[:1], ("psdk.pool.outcome", "miss"), base[1]): 1}
    levels = {dict(k)["psdk.level"]: v for k, v in
              _points(reader, "psdk.manager.acquisitions").items()}
    assert levels == {"pool": 1, "create": 1}


class _Builds:
    """A template builder whose list the test rebuilds (only ``list`` is asked)."""

    built: ClassVar[list[Template]] = []

    async def list(self) -> list[Template]:
        return list(self.built)


class _WithBuilds(MemoryControl):
    """The memory provider's control plane with a template builder (a list)."""

    def template_builder(self) -> Any:
        return _Builds()


class _Templated(MemoryProvider):
    """The in-memory provider with a template list."""

    capabilities = MemoryProvider.capabilities | {Capability.TEMPLATES_BUILD}
    control_role = _WithBuilds


async def test_a_rebuilt_template_drains_the_old_members(memory: Store) -> None:
    _Builds.built = [Template(id="tpl-1", name="python", provider="memory",
                              content_hash="aaa")]
    async with WarmPool(_Templated(), SandboxSpec(template="python"), size=2,
                        interval=FAST) as pool:
        await pool.wait_filled(BOUND)
        old = {i.id for i in _members(memory)}
        _Builds.built = [Template(id="tpl-1", name="python", provider="memory",
                                  content_hash="bbb")]
        await _until(lambda: not old & set(memory.boxes) and len(_members(memory)) == 2)


async def test_without_the_check_a_member_is_handed_out_as_last_seen(memory: Store) -> None:
    async with WarmPool(MemoryProvider(), size=3, interval=60, check_on_claim=False) as pool:
        await pool.wait_filled(BOUND)
        members = set(pool._free)
        got = [await pool.claim() for _ in range(3)]
        assert {s.id for s in got} == members
        assert [(await s.exec("echo ok")).stdout for s in got] == ["ok\n"] * 3
