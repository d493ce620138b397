"""Pause and resume on a real Engine, where its record of a container's state lags and
where the runtime gives up freezing a container.

The Engine records a pause (or an unpause) twice: when its API call returns, and again
when the runtime's event for it arrives, handled in order with the container's other
events. A late "paused" that lands after the next unpause says paused again until the
"resumed" behind it lands. The tests hold the Engine's handling of one container's
events back the way any client can (a command's output that nobody reads: the Engine
waits for it before it goes on), so the lag is there every time, not once in a few
hundred runs.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import docker
import docker.errors
import pytest
import requests
from provider_sdk_docker import DockerProvider
from provider_sdk_docker import _control as docker_control_module

from provider_sdk import errors
from provider_sdk.models import SandboxState, Snapshot
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

#: Starts a child that writes more than any socket holds, and exits at once: the Engine
#: handles the exit only once the child's output is read (or its reader goes away).
_UNREAD = "head -c 67108864 /dev/zero & exit 0"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine() -> Iterator[docker.APIClient]:
    client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                              or "unix:///var/run/docker.sock", version="auto")
    yield client
    client.close()


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with DockerProvider() as provider, provider.create() as sandbox:
        yield sandbox


class _HeldEvents:
    """Holds back the Engine's handling of a container's events until released."""

    def __init__(self, engine: docker.APIClient, container: str) -> None:
        self._engine = engine
        started = engine.exec_create(container, ["/bin/sh", "-c", _UNREAD])
        self._socket: socket.socket = engine.exec_start(started["Id"], socket=True)._sock
        # The Engine marks the exec exited, then waits for its output: from now on every
        # later event of the container waits too. "Not running" alone is also what an
        # exec the runtime has not started yet reads as: wait for its exit code.
        deadline = time.monotonic() + 30
        while engine.exec_inspect(started["Id"])["ExitCode"] is None:
            assert time.monotonic() < deadline, "the command did not exit"
            time.sleep(0.01)

    def release(self) -> None:
        """Let the Engine go on: its reader of the output goes away."""
        if self._socket.fileno() != -1:
            self._socket.shutdown(socket.SHUT_RDWR)
            self._socket.close()


def _pauses_after(engine: docker.APIClient, container: str, since_ns: int) -> list[str]:
    """The pause and unpause events the Engine logged for ``container`` after ``since_ns``."""
    events = engine.events(since=since_ns // 10**9, until=int(time.time()) + 1,
                           filters={"container": container, "event": ["pause", "unpause"]},
                           decode=True)
    return [e["Action"] for e in events if e["timeNano"] > since_ns]


async def _returned_while_held(held: _HeldEvents, op: Callable[[], Awaitable[object]]) -> int:
    """Run ``op`` while the Engine's events are held; release them once it returns, or
    after a second if it waits for them. The time it returned, in ns."""
    returned: list[int] = []
    done = anyio.Event()

    async def run() -> None:
        await op()
        returned.append(time.time_ns())
        done.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.move_on_after(1):
                await done.wait()
            held.release()
    finally:
        held.release()
    return returned[0]


async def _engine_said_paused_after(sandbox: Sandbox, engine: docker.APIClient,
                                    since_ns: int) -> list[str]:
    # A command's exit is handled after every event before it: once it is reported, so
    # is anything the Engine still had to say about a pause.
    assert (await sandbox.exec(["true"])).exit_code == 0
    return await anyio.to_thread.run_sync(_pauses_after, engine, f"psdk-{sandbox.id}",
                                          since_ns)


async def test_resume_returns_once_the_engine_says_running_for_good(
        sandbox: Sandbox, engine: docker.APIClient) -> None:
    """After ``resume`` returns, the Engine does not report the sandbox paused again: a
    late "paused" it had not handled yet is handled before ``resume`` returns."""
    held = await anyio.to_thread.run_sync(_HeldEvents, engine, f"psdk-{sandbox.id}")
    assert (await sandbox.pause()).state == SandboxState.PAUSED

    async def resume() -> None:
        assert (await sandbox.resume()).state == SandboxState.RUNNING

    returned = await _returned_while_held(held, resume)
    late = await _engine_said_paused_after(sandbox, engine, returned)
    assert "pause" not in late, f"the Engine said paused after resume returned: {late}"
    assert (await sandbox.refresh()).state == SandboxState.RUNNING


async def test_snapshot_returns_once_the_engine_says_running_for_good(
        sandbox: Sandbox, engine: docker.APIClient) -> None:
    """A snapshot pauses and resumes the container for its commit: after ``snapshot``
    returns, the Engine does not report the sandbox paused again."""
    held = await anyio.to_thread.run_sync(_HeldEvents, engine, f"psdk-{sandbox.id}")
    snapshots: list[Snapshot] = []

    async def snapshot() -> None:
        snapshots.append(await sandbox.snapshot())

    returned = await _returned_while_held(held, snapshot)
    await sandbox.provider.delete_snapshot(snapshots[0].id)
    late = await _engine_said_paused_after(sandbox, engine, returned)
    assert "pause" not in late, f"the Engine said paused after snapshot returned: {late}"


async def test_pause_and_resume_in_a_row_report_their_states(sandbox: Sandbox) -> None:
    """Pause and resume, back to back, each report their own state, every time."""
    for _ in range(25):
        assert (await sandbox.pause()).state == SandboxState.PAUSED
        assert (await sandbox.resume()).state == SandboxState.RUNNING
    assert (await sandbox.exec(["echo", "back"])).stdout == "back\n"


def _refusing_freezes(provider: DockerProvider, times: float) -> list[str]:
    """Make the Engine's ``pause`` fail ``times`` times first as runc fails it on a busy
    host (it then thaws the container, so the Engine pauses nothing); the rest go to the
    Engine. Returns the calls seen."""
    real = provider.engine.api
    calls: list[str] = []

    async def api(method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "pause":
            calls.append(method)
            if len(calls) <= times:
                response = requests.Response()
                response.status_code = 500
                raise provider.engine.translate(
                    docker.errors.APIError(
                        "500 Server Error", response=response,
                        explanation=f"Cannot pause container {args[0]}: OCI runtime pause "
                                    "failed: unable to freeze: unknown"),
                    kind="sandbox", what=kwargs.get("what"), sandbox_id=kwargs.get("sandbox_id"))
        return await real(method, *args, **kwargs)

    provider.engine.api = api  # type: ignore[method-assign]
    return calls


async def test_a_pause_the_runtime_gave_up_on_is_tried_again(sandbox: Sandbox) -> None:
    """runc gives up freezing a container whose processes do not all stop in time (one
    in the kernel on a busy host), and thaws them: the pause is tried again."""
    provider = sandbox.provider
    assert isinstance(provider, DockerProvider)
    calls = _refusing_freezes(provider, times=2)
    assert (await sandbox.pause()).state == SandboxState.PAUSED
    assert calls == ["pause"] * 3
    assert (await sandbox.resume()).state == SandboxState.RUNNING


async def test_a_pause_the_runtime_never_manages_is_unavailable(
        sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its deadline, a pause the runtime keeps giving up on is ``Unavailable``
    (transient), naming why, and the sandbox still runs commands."""
    provider = sandbox.provider
    assert isinstance(provider, DockerProvider)
    monkeypatch.setattr(docker_control_module, "FREEZE_DEADLINE", 0.3)
    calls = _refusing_freezes(provider, times=math.inf)
    with pytest.raises(errors.Unavailable, match="did not all stop in time"):
        await sandbox.pause()
    assert len(calls) > 1
    assert (await sandbox.exec(["echo", "still"])).stdout == "still\n"
