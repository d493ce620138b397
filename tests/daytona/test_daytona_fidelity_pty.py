"""The unmodified ``daytona`` SDK's PTY sessions against the emulator: a terminal in
the sandbox, typed into and read over the daemon's WebSocket, listed, resized, killed."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from daytona import AsyncDaytona, PtySize, Sandbox


def _until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + 20
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_terminal_runs_what_is_typed_and_reports_its_exit(sandbox: Sandbox) -> None:
    output: list[bytes] = []
    handle = sandbox.process.create_pty_session(
        id=f"pty-{uuid.uuid4().hex[:8]}", pty_size=PtySize(rows=24, cols=80),
        envs={"GREETING": "hello"})
    waiter = threading.Thread(target=lambda: handle.wait(on_data=output.append, timeout=30))
    waiter.start()
    handle.send_input('printf "%s-%s\\n" "$GREETING" "$(tput cols)"\n')
    _until(lambda: b"hello-80" in b"".join(output), "the terminal never answered")
    handle.send_input("exit 3\n")
    waiter.join(timeout=30)
    assert handle.exit_code == 3
    handle.disconnect()


def test_a_terminal_is_listed_resized_reattached_and_killed(sandbox: Sandbox) -> None:
    key = f"pty-{uuid.uuid4().hex[:8]}"
    first = sandbox.process.create_pty_session(id=key, cwd="/tmp")
    first.disconnect()
    assert key in [s.id for s in sandbox.process.list_pty_sessions()]
    info = sandbox.process.get_pty_session_info(key)
    assert (info.cwd, info.cols, info.rows, info.active) == ("/tmp", 80, 24, True)
    resized = sandbox.process.resize_pty_session(key, PtySize(rows=30, cols=100))
    assert (resized.cols, resized.rows) == (100, 30)
    output: list[bytes] = []
    again = sandbox.process.connect_pty_session(key)
    waiter = threading.Thread(target=lambda: again.wait(on_data=output.append, timeout=30))
    waiter.start()
    again.send_input("echo size $(tput cols)x$(tput lines) in $(pwd)\n")
    _until(lambda: b"size 100x30 in /tmp" in b"".join(output), "no answer after reattaching")
    sandbox.process.kill_pty_session(key)
    waiter.join(timeout=30)
    assert again.exit_code is not None
    assert again.exit_code != 0
    assert key not in [s.id for s in sandbox.process.list_pty_sessions()]


@pytest.mark.anyio
async def test_async_pty_session(async_client: AsyncDaytona, sandbox: Sandbox) -> None:
    twin = await async_client.get(sandbox.id)
    output: list[bytes] = []
    handle = await twin.process.create_pty_session(
        id=f"pty-{uuid.uuid4().hex[:8]}", on_data=output.append)
    await handle.send_input("echo from-async; exit\n")
    result = await handle.wait()
    assert result.exit_code == 0
    assert b"from-async" in b"".join(output)
