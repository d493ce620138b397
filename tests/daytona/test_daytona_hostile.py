"""The Daytona provider against code that attacks the caller, through the emulator,
where it goes past the contract's hostile sections (which it runs too): a timeout, a
cancellation or a kill takes the whole tree down, odd process names, new sessions and a
double fork's orphan included, and a toolbox that stops answering ends in a typed
error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from daytona_emulator_fixtures import admin, provider_options
from process_trees import TREE, sleepers, until_started
from provider_sdk_daytona.provider import DaytonaProvider

from provider_sdk import errors
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_faults_left() -> Any:
    yield
    admin({name: 0 for name in admin()["known"]})


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with DaytonaProvider(**provider_options(), unavailable_window=5) as provider, \
            provider.create() as made:
        yield made


async def test_a_timeout_kills_the_whole_tree(sandbox: Sandbox) -> None:
    with anyio.fail_after(60), pytest.raises(errors.CommandTimeout):
        await sandbox.exec(TREE, timeout=3)
    assert await sleepers(sandbox) == []


async def test_a_cancelled_exec_kills_the_whole_tree(sandbox: Sandbox) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(sandbox.exec, TREE)
        await until_started(sandbox, 5)
        tg.cancel_scope.cancel()
    assert await sleepers(sandbox) == []


async def test_killing_a_process_kills_its_whole_tree(sandbox: Sandbox) -> None:
    process = await sandbox.start(["bash", "-c", TREE])
    await until_started(sandbox, 5)
    await process.kill()
    with anyio.fail_after(30):
        result = await process.wait()
    assert result.exit_code == -9
    assert await sleepers(sandbox) == []


async def test_a_toolbox_that_stops_answering_ends_in_a_typed_error() -> None:
    async with DaytonaProvider(**provider_options(), unavailable_window=5,
                               request_timeout=1) as provider, provider.create() as sandbox:
        await sandbox.files.write("/tmp/f", b"x")
        admin({"latency": 5})
        with anyio.fail_after(30):
            for call in (sandbox.files.read("/tmp/f"), sandbox.files.stat("/tmp/f"),
                         sandbox.exec("true", timeout=1)):
                with pytest.raises(errors.OperationTimeout):
                    await call
        admin({"latency": 0})


def test_request_timeout_must_be_a_positive_number() -> None:
    for bad in (0, -1, float("inf"), float("nan"), "5", True):
        with pytest.raises(errors.ConfigError):
            DaytonaProvider(**provider_options(), request_timeout=bad)  # type: ignore[arg-type]
