"""The unmodified ``cubesandbox`` SDK works against the emulator's Cube flavor, which
keeps CubeSandbox's quirks; the ``e2b`` SDK's create fails there as on a released Cube."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from cubesandbox import (  # type: ignore[import-untyped]
    ApiError,
    Sandbox,
    SandboxNotFoundError,
)
from e2b import Sandbox as E2BSandbox
from e2b.exceptions import SandboxException

from provider_sdk.emulators import RunningEmulator


@pytest.fixture
def sandbox(cube_emulator: RunningEmulator) -> Iterator[Sandbox]:
    sandbox = Sandbox.create(metadata={"suite": "cube"}, envs={"FOO": "from-create"})
    yield sandbox
    with contextlib.suppress(SandboxNotFoundError):  # a test killed it
        sandbox.kill()


def _api(running: RunningEmulator) -> httpx.Client:
    return httpx.Client(base_url=running.url, headers={"X-API-Key": running.api_key.reveal()})


def test_commands_run_with_env_and_exit_codes(sandbox: Sandbox) -> None:
    ok = sandbox.commands.run("echo $FOO $BAR", envs={"BAR": "from-run"})
    assert (ok.stdout, ok.exit_code) == ("from-create from-run\n", 0)
    failed = sandbox.commands.run("echo no >&2; exit 4")
    assert (failed.stderr, failed.exit_code) == ("no\n", 4)  # Cube's SDK does not raise


def test_files_move_list_and_remove(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/box/a.txt", "hello")
    assert sandbox.files.read("/tmp/box/a.txt") == "hello"
    assert sandbox.files.make_dir("/tmp/box/sub")["type"] == "FILE_TYPE_DIRECTORY"
    moved = sandbox.files.rename("/tmp/box/a.txt", "/tmp/box/sub/b.txt")
    assert moved["path"] == "/tmp/box/sub/b.txt"
    assert [e["name"] for e in sandbox.files.list("/tmp/box/sub")] == ["b.txt"]
    assert sandbox.files.exists("/tmp/box/a.txt") is False
    sandbox.files.remove("/tmp/box")
    assert sandbox.files.exists("/tmp/box/sub/b.txt") is False


def test_binary_files_stay_binary_on_the_wire(cube_emulator: RunningEmulator,
                                              sandbox: Sandbox) -> None:
    data = bytes(range(256))
    sandbox.files.write("/tmp/blob", data)
    host = f"49983-{sandbox.sandbox_id}.{cube_emulator.settings['CUBE_SANDBOX_DOMAIN']}"
    key = {"X-API-Key": cube_emulator.api_key.reveal()}
    answer = httpx.get(f"{cube_emulator.url}/files", params={"path": "/tmp/blob"},
                       headers={"Host": host, **key})
    assert answer.status_code == 200
    assert answer.content == data
    by_path = httpx.get(f"{cube_emulator.url}/sandbox/{sandbox.sandbox_id}/49983/files",
                        params={"path": "/tmp/blob"}, headers=key)  # CubeProxy's path routing
    assert by_path.content == data


def test_info_has_both_spellings_and_no_end_for_a_never_expiring_sandbox(
        sandbox: Sandbox) -> None:
    info = sandbox.get_info()
    assert "endAt" not in info
    assert info.end_at is None
    assert info["sandboxID"] == info["sandbox_id"] == sandbox.sandbox_id
    assert info["cpuMilli"] == info["cpu_milli"] == 2000


def test_pause_shows_pausing_before_paused_then_connect_resumes(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/kept", "kept")
    sandbox.pause(wait=False)
    assert sandbox.get_info()["state"] == "pausing"
    with pytest.raises(ApiError, match="already pausing"):
        sandbox.pause(wait=False)
    resumed = Sandbox.connect(sandbox.sandbox_id)  # waits out the pause, then resumes
    assert resumed.get_info()["state"] == "running"
    assert resumed.files.read("/tmp/kept") == "kept"


def test_pause_waits_for_paused(sandbox: Sandbox) -> None:
    sandbox.pause(interval=0.05)
    assert sandbox.get_info()["state"] == "paused"


def test_timeout_is_an_idle_window(cube_emulator: RunningEmulator, sandbox: Sandbox) -> None:
    sandbox.set_timeout(60)
    first = sandbox.get_info()["endAt"]
    sandbox.commands.run("true")  # activity slides the window
    assert sandbox.get_info()["endAt"] > first


def test_kill_of_an_unknown_sandbox_raises(sandbox: Sandbox) -> None:
    sandbox.kill()
    with pytest.raises(SandboxNotFoundError):
        sandbox.kill()


def test_snapshot_then_rollback_in_place(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/version", "1")
    snapshot = sandbox.create_snapshot("v1")
    sandbox.files.write("/tmp/version", "2")
    result = sandbox.rollback(snapshot.snapshot_id)
    assert result["sandboxID"] == sandbox.sandbox_id
    assert sandbox.files.read("/tmp/version") == "1"
    snapshots, _token = Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id)
    assert [s.snapshot_id for s in snapshots] == [snapshot.snapshot_id]


def test_read_only_volume_mount(cube_emulator: RunningEmulator) -> None:
    with _api(cube_emulator) as api:
        volume = api.post("/volumes", json={"name": "shared"}).json()
        writer = Sandbox.create(volume_mounts={"/data": volume["volumeID"]})
        reader = api.post("/sandboxes", json={
            "templateID": "tpl-base",
            "volumeMounts": [{"name": volume["volumeID"], "path": "/data", "readOnly": True}],
        }).json()
        reader_box = Sandbox.connect(reader["sandboxID"])
        try:
            writer.files.write("/data/shared.txt", "from writer")
            assert reader_box.files.read("/data/shared.txt") == "from writer"
            denied = reader_box.commands.run("echo x > /data/other.txt")
            assert denied.exit_code != 0
            assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 409
        finally:
            writer.kill()
            reader_box.kill()
        assert api.delete(f"/volumes/{volume['volumeID']}").status_code == 204


def test_network_policy_update(cube_emulator: RunningEmulator, sandbox: Sandbox) -> None:
    sandbox.update_network({"allow_out": ["127.0.0.0/8"], "deny_out": ["0.0.0.0/0"]})
    with _api(cube_emulator) as api:
        refused = api.put(f"/sandboxes/{sandbox.sandbox_id}/network",
                          json={"allowOut": ["example.invalid"]})
        assert refused.status_code == 400  # a host name needs all other traffic denied


def test_e2b_sdk_create_fails_with_405_as_on_released_cube(
        cube_emulator: RunningEmulator) -> None:
    with pytest.raises(SandboxException, match="405"):
        E2BSandbox.create(template="tpl-base", api_url=cube_emulator.url,
                          api_key=cube_emulator.api_key.reveal())
    with _api(cube_emulator) as api:
        assert api.post("/v2/sandboxes", json={"templateID": "tpl-base"}).status_code == 405
        created = api.post("/sandboxes", json={"templateID": "tpl-base"})
        assert created.status_code == 201
        assert api.delete(f"/sandboxes/{created.json()['sandboxID']}").status_code == 204


def test_cube_statuses_for_resume_delete_and_the_data_plane(
        cube_emulator: RunningEmulator, sandbox: Sandbox) -> None:
    host = f"49983-{sandbox.sandbox_id}.{cube_emulator.settings['CUBE_SANDBOX_DOMAIN']}"
    with _api(cube_emulator) as api:
        path = f"/sandboxes/{sandbox.sandbox_id}"
        assert api.post(f"{path}/resume", json={}).status_code == 409  # running
        assert api.post(f"{path}/connect", json={"timeout": 0}).status_code == 400
        assert api.post(f"{path}/pause").status_code == 204
        busy = api.delete(path)  # still pausing
        assert (busy.status_code, busy.headers["retry-after"]) == (503, "2")
        resumed = api.post(f"{path}/resume", json={})  # waits out the pause
        assert resumed.status_code == 201
        assert api.delete(path).status_code == 204
        gone = httpx.get(f"{cube_emulator.url}/health", headers={"Host": host})
        assert gone.status_code == 410  # CubeProxy: killed, do not retry
        assert api.get("/v2/sandboxes/x/connect").status_code == 404


def test_watch_dir_streams_changes(sandbox: Sandbox) -> None:
    sandbox.files.make_dir("/tmp/watched")
    watcher = sandbox.files.watch_dir("/tmp/watched")
    pool = ThreadPoolExecutor(1)
    try:
        sandbox.files.write("/tmp/watched/new.txt", "x")
        event = pool.submit(next, iter(watcher)).result(timeout=15)  # bounded wait
    finally:
        watcher.close()
        pool.shutdown(wait=False)
    assert (event.name, event.type) == ("new.txt", "EVENT_TYPE_CREATE")


def test_run_code_keeps_state_between_executions(sandbox: Sandbox) -> None:
    first = sandbox.run_code("x = 41\nprint('hello')\nx + 1")
    assert (first.text, first.logs.stdout, first.error) == ("42", ["hello\n"], None)
    second = sandbox.run_code("import os\nprint(os.environ['V'])\nx * 2", envs={"V": "v"})
    assert (second.text, second.logs.stdout) == ("82", ["v\n"])
    assert second.execution_count == 2
    failed = sandbox.run_code("1 / 0")
    assert failed.error is not None
    assert failed.error.name == "ZeroDivisionError"


def test_run_code_starts_a_fresh_interpreter_after_one_dies(sandbox: Sandbox) -> None:
    sandbox.run_code("x = 1")
    died = sandbox.run_code("import os; os._exit(1)")
    assert died.error is not None
    assert died.error.name == "KernelDied"
    fresh = sandbox.run_code("'x' in globals()")
    assert fresh.text == "False"


def test_a_feature_left_out_answers_as_cubes_unknown_route_naming_it(
        cube_emulator: RunningEmulator, sandbox: Sandbox) -> None:
    # CubeAPI's router answers a route it lacks with an empty 404; a route left out
    # here answers the same, with the feature named in the body.
    with _api(cube_emulator) as api:
        unknown = api.get("/no/such/route")
        assert (unknown.status_code, unknown.content) == (404, b"")
        logs = api.get(f"/sandboxes/{sandbox.sandbox_id}/logs")
        assert (logs.status_code, logs.text) == (
            404, "sandbox logs: not served by this emulator")
