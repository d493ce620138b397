"""Lifecycle steps on one sandbox are serialised across processes: create, resume, pause
and kill each hold the sandbox's lock for the whole step, so a resume that catches a
kill in another process half done (its processes gone: "stopped") waits for it, and
finds the sandbox gone, instead of mounting and starting again what the kill removes.

``PSDK_LIFECYCLE_RACE_CYCLES`` sets how many kill-against-resume cycles the race runs
(default 12; the figure in the changelog comes from 500)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from local_leaks import nothing_left

from provider_sdk.errors import SandboxError, SandboxNotFound
from provider_sdk.local import LocalProvider, _launch
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("kill_worker.py")


class _Worker:
    """The kill worker in another process, spoken to a line at a time."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKER), str(home)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    async def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    async def hear(self) -> str:
        assert self.proc.stdout is not None
        with anyio.fail_after(60):
            return (await anyio.to_thread.run_sync(self.proc.stdout.readline)).strip()


@pytest.fixture
async def worker(provider: LocalProvider) -> AsyncIterator[_Worker]:
    made = _Worker(provider.home)
    try:
        yield made
    finally:
        made.proc.kill()
        made.proc.wait()


def _stop_processes(provider: LocalProvider, sandbox_id: str) -> None:
    meta = json.loads((provider.home / "sandboxes" / sandbox_id / "meta.json").read_text())
    _launch.kill(_launch.Launched(**meta["launch"]))


async def test_a_resume_waits_for_another_processs_step_on_the_sandbox(
        provider: LocalProvider, worker: _Worker) -> None:
    sandbox = await provider.create()
    _stop_processes(provider, sandbox.id)  # as a kill does first
    assert (await sandbox.refresh()).state == SandboxState.STOPPED
    await worker.say(f"hold {provider.home / 'sandboxes' / sandbox.id}")
    assert await worker.hear() == "held"
    resumed = anyio.Event()

    async def resume() -> None:
        await sandbox.resume()
        resumed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(resume)
        with anyio.move_on_after(1):
            await resumed.wait()
        assert not resumed.is_set()  # it waits for the other process's step...
        assert (await sandbox.refresh()).state == SandboxState.STOPPED  # ...and starts nothing
        await worker.say("go on")
        assert await worker.hear() == "let go"
    assert (await sandbox.refresh()).state == SandboxState.RUNNING
    assert (await sandbox.exec("echo back")).stdout == "back\n"


async def test_a_kill_racing_resumes_in_another_process_leaves_nothing(
        provider: LocalProvider, worker: _Worker) -> None:
    cycles = int(os.environ.get("PSDK_LIFECYCLE_RACE_CYCLES", "12"))
    rng = random.Random(7)
    untyped: list[BaseException] = []
    for _ in range(cycles):
        sandbox = await provider.create()
        await worker.say(f"{sandbox.id} {rng.randrange(0, 60)}")
        with anyio.fail_after(60):
            while True:  # resume as a handle does when it sees the sandbox stop
                try:
                    await sandbox.resume()
                except SandboxNotFound:
                    break
                except SandboxError:
                    continue  # typed: the kill is under way
                except Exception as exc:  # anything else is a defect
                    untyped.append(exc)
                    break
        assert await worker.hear() in (f"killed {sandbox.id}",
                                       f"error {sandbox.id} SandboxNotFound")
    assert untyped == []
    assert await provider.list() == []
    assert nothing_left(provider.home) == {}
