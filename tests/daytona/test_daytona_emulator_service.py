"""The Daytona emulator as a service under attack: the toolbox needs the key, bodies are
bounded after decompression (413, with the emulator's peak memory bounded, run as
``psdk emulate`` in a process of its own), and the output it answers with whole is
bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from daytona import CreateSandboxFromSnapshotParams, Daytona, SessionExecuteRequest
from daytona_emulator_fixtures import running
from engines import require_bwrap
from provider_sdk_emulators.daytona import _sessions, _toolbox
from provider_sdk_emulators.kit import bodies

KEY = "daytona-file-key-0123456789"
PEAK_LIMIT = 256 << 20  # the emulator peaks well under 100 MiB here


def _request(url: str, *, key: str | None, data: bytes | None = None,
             headers: dict[str, str] | None = None, method: str = "GET") -> int:
    auth = {"Authorization": f"Bearer {key}"} if key is not None else {}
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={**auth, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # 127.0.0.1 only
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as error:
        error.read()
        return int(error.code)


@pytest.mark.parametrize("key", [None, "wrong"], ids=["missing", "wrong"])
def test_the_toolbox_refuses_a_request_without_the_key(sync_client: Daytona,
                                                       key: str | None) -> None:
    sandbox = sync_client.create(CreateSandboxFromSnapshotParams())
    try:
        toolbox = f"{running().url}/toolbox/{sandbox.id}"
        assert _request(f"{toolbox}/files?path=/", key=key) == 401
        assert _request(f"{toolbox}/process/execute", key=key, method="POST",
                        data=b'{"command": "id"}',
                        headers={"Content-Type": "application/json"}) == 401
        assert _request(f"{toolbox}/files?path=/", key=running().api_key.reveal()) == 200
    finally:
        sync_client.delete(sandbox)


def test_execute_and_session_logs_answer_a_bounded_output(
        sync_client: Daytona, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 1 << 20
    monkeypatch.setattr(_toolbox, "OUTPUT_LIMIT", limit)
    monkeypatch.setattr(_sessions, "LOG_LIMIT", limit)
    flood = "head -c 3000000 /dev/zero | tr '\\0' a"
    sandbox = sync_client.create(CreateSandboxFromSnapshotParams())
    try:
        result = sandbox.process.exec(flood)
        assert result.exit_code == 0
        assert result.result == "a" * limit
        sandbox.process.create_session("s")
        ran = sandbox.process.execute_session_command(
            "s", SessionExecuteRequest(command=flood))
        assert ran.exit_code == 0
        assert len(ran.stdout or "") == limit
        assert ran.cmd_id is not None
        logs = sandbox.process.get_session_command_logs("s", ran.cmd_id)
        assert logs.stdout == "a" * limit
    finally:
        sync_client.delete(sandbox)


# --------------------------------------------------------- a process of its own

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """``psdk emulate daytona --api-key-file``: its URL and process id."""
    require_bwrap()
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAYTONA_")}
    with (tmp_path / "log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "provider_sdk.cli", "emulate", "daytona", "--port",
             str(port), "--api-key-file", str(key_file)],
            env={**env, "PSDK_HOME": str(tmp_path / "home")}, stdout=log,
            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _probe(url) != 200:
            assert process.poll() is None, (tmp_path / "log").read_text()
            assert time.monotonic() < deadline, "the emulator did not start"
            time.sleep(0.1)
        yield url, process.pid
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert KEY not in (tmp_path / "log").read_text()


def _probe(url: str) -> int:
    try:
        return _request(f"{url}/api/sandbox", key=KEY)
    except OSError:
        return 0


def _peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _gzip_of(prefix: bytes, zeros: int, suffix: bytes = b"") -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return (packer.compress(prefix) + b"".join(packer.compress(block)
                                               for _ in range(zeros >> 20))
            + packer.compress(suffix) + packer.flush())


def test_a_gzip_bomb_is_refused_with_memory_bounded(service: tuple[str, int]) -> None:
    url, pid = service
    assert KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    bomb = _gzip_of(b'{"name": "', 1 << 30, b'"}')  # 1 GiB of JSON, about 1 MiB sent
    status = _request(f"{url}/api/sandbox", key=KEY, data=bomb, method="POST", headers={
        "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert status == 413
    assert _peak(pid) < PEAK_LIMIT, _peak(pid)
    assert _probe(url) == 200  # still serving


def test_a_compressed_bulk_upload_is_refused_past_the_inflate_limit(
        sync_client: Daytona, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bodies, "INFLATE_LIMIT", 1 << 20)  # (the kit reads it)
    boundary = "psdk-boundary"
    body = _gzip_of(f"--{boundary}\r\nContent-Disposition: form-data; name=\"files[0].path\""
                    f"\r\n\r\n/tmp/inflated\r\n--{boundary}\r\nContent-Disposition: form-data;"
                    f" name=\"files[0].file\"; filename=\"x\"\r\n\r\n".encode(), 4 << 20,
                    f"\r\n--{boundary}--\r\n".encode())
    sandbox = sync_client.create(CreateSandboxFromSnapshotParams())
    try:
        status = _request(f"{running().url}/toolbox/{sandbox.id}/files/bulk-upload",
                          key=running().api_key.reveal(), data=body, method="POST",
                          headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                   "Content-Encoding": "gzip"})
        assert status == 413
        assert "inflated" not in [f.name for f in sandbox.fs.list_files("/tmp")]
    finally:
        sync_client.delete(sandbox)
