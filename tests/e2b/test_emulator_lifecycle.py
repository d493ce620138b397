"""Timeouts, auto-pause and auto-resume, snapshots, fork, metrics and routing on the
E2B flavor, through the unmodified ``e2b`` SDK (and a raw client where the SDK hides
the wire)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest
from e2b import Sandbox, SandboxState
from e2b.exceptions import SandboxNotFoundException, TimeoutException

from provider_sdk.emulators import RunningEmulator


def _eventually(check: Callable[[], bool], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition did not become true in time"
        time.sleep(0.05)


def _gone(sandbox_id: str) -> bool:
    try:
        Sandbox.get_info(sandbox_id)
    except SandboxNotFoundException:
        return True
    return False


def test_a_sandbox_is_killed_at_its_deadline(e2b_emulator: RunningEmulator) -> None:
    sandbox = Sandbox.create(timeout=1)
    _eventually(lambda: _gone(sandbox.sandbox_id))


def test_set_timeout_can_shorten_the_deadline(e2b_emulator: RunningEmulator) -> None:
    sandbox = Sandbox.create(timeout=300)
    sandbox.set_timeout(1)
    _eventually(lambda: _gone(sandbox.sandbox_id))


def test_auto_pause_then_auto_resume_on_the_next_request(
        e2b_emulator: RunningEmulator) -> None:
    sandbox = Sandbox.create(timeout=1, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        sandbox.files.write("/tmp/kept", "kept")
        _eventually(lambda: Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED)
        assert sandbox.files.read("/tmp/kept") == "kept"  # this request resumed it
        assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.RUNNING
    finally:
        sandbox.kill()


def test_a_paused_sandbox_without_auto_resume_is_not_found_on_the_data_plane(
        e2b_emulator: RunningEmulator) -> None:
    sandbox = Sandbox.create()
    try:
        sandbox.pause()
        answer = httpx.get(f"{e2b_emulator.url}/health",
                           headers={"E2b-Sandbox-Id": sandbox.sandbox_id})
        assert answer.status_code == 502
        assert answer.json()["message"] == "The sandbox was not found"
    finally:
        sandbox.kill()


def test_command_timeout_kills_the_process(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        with pytest.raises(TimeoutException):
            sandbox.commands.run("sleep 60", timeout=1)
        _eventually(lambda: not sandbox.commands.list())


def test_snapshots_create_list_restore_and_delete(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/v", "1")
        snapshot = sandbox.create_snapshot(name="nightly")
        listed = Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id).next_items()
        assert [s.snapshot_id for s in listed] == [snapshot.snapshot_id]
        for template in (snapshot.snapshot_id, "nightly"):
            with Sandbox.create(template=template) as restored:
                assert restored.files.read("/tmp/v") == "1"
        assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
        assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False


def test_fork_copies_the_filesystem(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create(metadata={"origin": "yes"}) as sandbox:
        sandbox.files.write("/tmp/v", "forked")
        forks = sandbox.fork(count=2)
        try:
            assert len(forks) == 2
            for child in forks:
                assert isinstance(child, Sandbox)
                assert child.sandbox_id != sandbox.sandbox_id
                assert child.files.read("/tmp/v") == "forked"
        finally:
            for child in forks:
                if isinstance(child, Sandbox):
                    child.kill()


def test_metrics_report_memory(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        metrics = sandbox.get_metrics()
        assert len(metrics) == 1
        assert metrics[0].mem_used > 0
        assert metrics[0].mem_total >= metrics[0].mem_used


def test_data_plane_routes_by_host_header(e2b_emulator: RunningEmulator) -> None:
    domain = e2b_emulator.settings["E2B_DOMAIN"]
    with Sandbox.create() as sandbox:
        envd = httpx.get(f"{e2b_emulator.url}/health",
                         headers={"Host": f"49983-{sandbox.sandbox_id}.{domain}"})
        assert envd.status_code == 204
        closed = httpx.get(f"{e2b_emulator.url}/",
                           headers={"Host": f"8080-{sandbox.sandbox_id}.{domain}"})
        assert closed.status_code == 502  # nothing listens on 8080 in the sandbox


def test_v1_create_route_is_served_too(e2b_emulator: RunningEmulator) -> None:
    with httpx.Client(base_url=e2b_emulator.url,
                      headers={"X-API-Key": e2b_emulator.api_key.reveal()}) as api:
        created = api.post("/sandboxes", json={"templateID": "base", "timeout": 30})
        assert created.status_code == 201
        sandbox_id = created.json()["sandboxID"]
        resumed = api.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 30})
        assert resumed.status_code == 200  # running: nothing to resume
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        unknown = api.post("/sandboxes", json={"templateID": "no-such-template"})
        assert unknown.status_code == 404


def test_a_pause_without_memory_keeps_files_and_ends_processes(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/kept", "kept")
        handle = sandbox.commands.run("sleep 600", background=True)
        assert sandbox.pause(keep_memory=False) is True
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert resumed.files.read("/tmp/kept") == "kept"
        assert handle.pid not in [p.pid for p in resumed.commands.list()]
        assert resumed.commands.run("echo alive").stdout == "alive\n"


def test_a_create_repeated_with_its_idempotency_key_returns_the_same_sandbox(
        e2b_emulator: RunningEmulator) -> None:
    first = Sandbox.create(idempotency_key="job-42")
    try:
        again = Sandbox.create(idempotency_key="job-42")
        assert again.sandbox_id == first.sandbox_id
        other = Sandbox.create(idempotency_key="job-43")
        assert other.sandbox_id != first.sandbox_id
        other.kill()
    finally:
        first.kill()


def test_connect_with_reboot_keeps_files_and_ends_processes(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/kept", "kept")
        handle = sandbox.commands.run("sleep 600", background=True)
        sandbox.pause()
        rebooted = Sandbox.connect(sandbox.sandbox_id, on_resume="reboot")
        assert rebooted.files.read("/tmp/kept") == "kept"
        assert handle.pid not in [p.pid for p in rebooted.commands.list()]


def test_the_code_interpreter_answers_on_port_49999(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49999",
                   "X-Access-Token": str(sandbox._envd_access_token)}
        answer = httpx.post(f"{e2b_emulator.url}/execute", json={"code": "6 * 7"},
                            headers=headers)
        assert answer.status_code == 200
        events = [json.loads(line) for line in answer.text.splitlines()]
        assert {"type": "result", "text": "42", "is_main_result": True} in events
        other = httpx.post(f"{e2b_emulator.url}/execute", json={"code": "1", "language": "r"},
                           headers=headers)
        assert other.status_code == 400
