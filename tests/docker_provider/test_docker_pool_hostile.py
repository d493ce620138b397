"""Warm pools on Docker against the code in their members: code that ran as root in a
free member before the claim (killing or stopping every process it can, forking without
end) never leaves the caller with a sandbox whose first command fails, and a member
paused with memory comes back with its processes as they were."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from provider_sdk_docker import DockerProvider

from provider_sdk.manager import WarmPool
from provider_sdk.models import Resources, SandboxSpec

pytestmark = pytest.mark.anyio

BOUND = 60.0
CHECK = 5.0
ATTACKS = {
    "kill-all": "sleep 0.3; kill -9 -1",  # once start() returned: it kills its supervisor
    "stop-all": "sleep 300 & sleep 0.3; kill -STOP -1",
    "fork-bomb": "f() { f | f & }; f",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def provider() -> AsyncIterator[DockerProvider]:
    provider = DockerProvider(pids_limit=128)
    yield provider
    await provider.aclose()


@pytest.fixture
async def pool(provider: DockerProvider, request: pytest.FixtureRequest
               ) -> AsyncIterator[WarmPool]:
    """A pool of two of its own on the shared Engine, drained afterwards."""
    paused = bool(getattr(request, "param", False))
    made = WarmPool(provider, SandboxSpec(resources=Resources(cpu=0.5)), size=2,
                    name=f"hostile-{secrets.token_hex(4)}", interval=60,
                    check_timeout=CHECK, paused=paused)
    try:
        async with made:
            await made.wait_filled(BOUND)
            yield made
    finally:
        await made.drain()


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
async def test_a_claim_after_the_members_code_attacked_it_works(
        provider: DockerProvider, pool: WarmPool, attack: str) -> None:
    attacked, other = pool._free
    member = await provider.connect(attacked, resume=False)
    await member.start(["/bin/sh", "-c", attack], user="0")
    await anyio.sleep(1)
    started = time.monotonic()
    async with await pool.claim(env={"USER_ID": "alice"}) as sandbox:
        result = await sandbox.exec("echo $USER_ID", timeout=10)
        assert result.stdout == "alice\n"
        assert time.monotonic() - started < CHECK + 10
        if attack == ATTACKS["fork-bomb"] and sandbox.id == other:
            return  # the bombed member was too slow to answer: discarded
        # The Engine runs commands whatever the container's own processes do: the
        # attacked member answers, and is handed out as its code left it.
        assert sandbox.id == attacked


@pytest.mark.parametrize("pool", [True], indirect=True, ids=["paused"])
async def test_a_paused_member_comes_back_as_its_code_left_it(
        provider: DockerProvider, pool: WarmPool) -> None:
    counter = ("echo $$ > /tmp/pid; i=0; "
               "while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done")
    first, _second = pool._free
    member = await provider.connect(first)  # resumed, as its code runs
    await member.start(["/bin/sh", "-c", counter])
    with anyio.fail_after(BOUND):
        while not (await member.exec("cat /tmp/count")).stdout.strip():  # noqa: ASYNC110
            await anyio.sleep(0.05)  # polls the sandbox's files
    pid = await member.files.read_text("/tmp/pid")
    count = int(await member.files.read_text("/tmp/count"))
    await member.pause()
    async with await pool.claim() as sandbox:
        assert sandbox.id == first
        assert await sandbox.files.read_text("/tmp/pid") == pid  # the same process
        now = int(await sandbox.files.read_text("/tmp/count"))
        assert now >= count  # counting on from where it was paused
        await anyio.sleep(0.3)
        assert int(await sandbox.files.read_text("/tmp/count")) > now
