"""The E2B emulator as a service under attack, run as ``psdk emulate`` in a process of its
own: a gzip bomb is refused (413) before it inflates, a large multipart upload streams to
the sandbox, and the emulator's peak memory (``VmHWM``) stays bounded through both. The
API key comes from a file or the environment and shows neither in ``ps`` nor in logs."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from engines import require_namespaces
from provider_sdk_emulators.e2b._process_entry import STALL_VAR

KEY = "file-key-0123456789abcdef"
# Generous: the emulator peaks near 60 MiB here; holding a body whole cost it GiBs.
PEAK_LIMIT = 256 << 20


class Emulator:
    """A ``psdk emulate`` process and what it printed."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def peak_rss(self) -> int:
        """The process's peak resident memory, in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/PID/status")

    def reset_peak(self) -> None:
        """Start the peak over, so that each test measures what it did itself."""
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def sandbox(self) -> tuple[str, dict[str, str]]:
        """A new sandbox's id, and the headers that reach its envd."""
        made = httpx.post(f"{self.url}/sandboxes", json={"templateID": "base"},
                          headers={"X-API-Key": KEY}, timeout=60)
        assert made.status_code == 201, made.text
        body = made.json()
        return body["sandboxID"], {"E2b-Sandbox-Id": body["sandboxID"],
                                   "X-Access-Token": body["envdAccessToken"]}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(tmp: Path, args: list[str], env: dict[str, str]) -> Emulator:
    require_namespaces()
    port = _free_port()
    log = tmp / "emulator.log"
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("E2B_", "CUBE_", "PSDK_EMULATOR"))}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "provider_sdk.cli", "-v", "emulate", "e2b", "--port",
             str(port), *args],
            env={**clean, "PSDK_HOME": str(tmp / "home"), **env}, stdout=out,
            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/health", timeout=2)
            return Emulator(process, url, log)
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the emulator did not start: {log.read_text()}")
            time.sleep(0.1)


def _stop(emulator: Emulator) -> None:
    if emulator.process.poll() is None:
        emulator.process.send_signal(signal.SIGINT)
        try:
            emulator.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            emulator.process.kill()
            emulator.process.wait()


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """``psdk emulate e2b --api-key-file``, for the whole module."""
    tmp = tmp_path_factory.mktemp("e2b-service")
    key_file = tmp / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    # A reader that takes nothing is cut off after 3 s, not the default minute.
    running = _start(tmp, ["--api-key-file", str(key_file)], {STALL_VAR: "3"})
    yield running
    _stop(running)


def _bomb(size: int) -> bytes:
    """A gzip body of ``size`` zero bytes (about a thousandth of that on the wire)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()


def test_a_gzip_bomb_is_refused_before_it_inflates(emulator: Emulator) -> None:
    bomb = _bomb(1 << 30)  # 1 GiB inflated, about 1 MiB sent
    assert len(bomb) < 2 << 20
    sandbox_id, headers = emulator.sandbox()
    emulator.reset_peak()
    upload = httpx.post(f"{emulator.url}/files", params={"path": "/tmp/bomb"}, content=bomb,
                        headers={**headers, "Content-Type": "application/octet-stream",
                                 "Content-Encoding": "gzip"}, timeout=120)
    assert upload.status_code == 413
    assert "decompressed" in upload.json()["message"]
    # Nothing of it landed: the write is dropped whole.
    assert httpx.get(f"{emulator.url}/files", params={"path": "/tmp/bomb"},
                     headers=headers).status_code == 404
    control = httpx.post(f"{emulator.url}/sandboxes", content=bomb, timeout=120,
                         headers={"X-API-Key": KEY, "Content-Type": "application/json",
                                  "Content-Encoding": "gzip"})
    assert control.status_code == 413
    interpreter = httpx.post(f"{emulator.url}/execute", content=bomb, timeout=120,
                             headers={**headers, "E2b-Sandbox-Port": "49999",
                                      "Content-Type": "application/json",
                                      "Content-Encoding": "gzip"})
    assert interpreter.status_code == 413
    assert emulator.peak_rss() < PEAK_LIMIT, emulator.peak_rss()
    # The emulator still serves.
    assert httpx.get(f"{emulator.url}/sandboxes/{sandbox_id}",
                     headers={"X-API-Key": KEY}).status_code == 200


def test_a_large_multipart_upload_streams_and_arrives_intact(emulator: Emulator) -> None:
    size = 320 << 20
    boundary = "psdk-test-boundary"
    digest = hashlib.sha256()

    def body() -> Iterator[bytes]:
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
               "filename=\"/tmp/big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
               ).encode()
        block = hashlib.sha512(b"seed").digest() * 16384  # 1 MiB, not compressible away
        for index in range(size >> 20):
            chunk = index.to_bytes(4, "big") + block[4:]
            digest.update(chunk)
            yield chunk
        yield f"\r\n--{boundary}--\r\n".encode()

    _sandbox_id, headers = emulator.sandbox()
    emulator.reset_peak()
    upload = httpx.post(f"{emulator.url}/files", params={"path": "/tmp/big.bin"},
                        content=body(), timeout=600, headers={
                            **headers,
                            "Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert upload.status_code == 200, upload.text
    assert upload.json()[0]["path"] == "/tmp/big.bin"
    assert emulator.peak_rss() < PEAK_LIMIT, emulator.peak_rss()
    back = hashlib.sha256()
    received = 0
    with httpx.stream("GET", f"{emulator.url}/files", params={"path": "/tmp/big.bin"},
                      headers=headers, timeout=600) as answer:
        assert answer.status_code == 200
        for chunk in answer.iter_bytes():
            back.update(chunk)
            received += len(chunk)
    assert received == size
    assert back.hexdigest() == digest.hexdigest()


def test_the_key_from_a_file_is_neither_in_argv_nor_in_the_log(emulator: Emulator) -> None:
    assert httpx.get(f"{emulator.url}/v2/sandboxes", headers={"X-API-Key": KEY}
                     ).status_code == 200
    assert httpx.get(f"{emulator.url}/v2/sandboxes", headers={"X-API-Key": "nope"}
                     ).status_code == 401
    argv = Path(f"/proc/{emulator.process.pid}/cmdline").read_bytes()
    assert b"--api-key-file" in argv
    assert KEY.encode() not in argv
    assert KEY not in emulator.log.read_text()


def test_the_key_from_the_environment(tmp_path: Path) -> None:
    running = _start(tmp_path, [], {"PSDK_EMULATOR_API_KEY": KEY})
    try:
        assert httpx.get(f"{running.url}/v2/sandboxes", headers={"X-API-Key": KEY}
                         ).status_code == 200
        assert httpx.get(f"{running.url}/v2/sandboxes").status_code == 401
        assert KEY.encode() not in Path(f"/proc/{running.process.pid}/cmdline").read_bytes()
    finally:
        _stop(running)
    assert KEY not in running.log.read_text()


def test_an_unreadable_key_file_is_a_one_line_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "provider_sdk.cli", "emulate", "e2b", "--api-key-file",
         str(tmp_path / "missing")], capture_output=True, text=True, timeout=60,
        check=False, env={**os.environ, "PSDK_HOME": str(tmp_path / "home")})
    assert done.returncode == 1
    assert "--api-key-file" in done.stderr
    assert "missing" in done.stderr
    assert "Traceback" not in done.stderr


def _envelope(message: dict[str, object]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def test_a_client_that_stops_reading_is_cut_off_not_buffered_for(
        emulator: Emulator) -> None:
    _sandbox_id, headers = emulator.sandbox()
    emulator.reset_peak()
    rpc = {**headers, "Content-Type": "application/connect+json"}
    # 640 MiB at a pace the emulator keeps up with (so it is not dropped upstream).
    writer = ("import sys, time\nfor _ in range(640):\n"
              "    sys.stdout.buffer.write(bytes(1 << 20)); sys.stdout.flush(); time.sleep(0.005)")
    start = _envelope({"process": {"cmd": "python3", "args": ["-c", writer]}})
    with httpx.stream("POST", f"{emulator.url}/process.Process/Start", content=start,
                      headers=rpc, timeout=300) as answer:
        assert answer.status_code == 200
        # Read nothing while the process writes; wait for it to end.
        deadline = time.monotonic() + 240
        while True:
            listed = httpx.post(f"{emulator.url}/process.Process/List", json={},
                                headers=headers, timeout=30).json()
            if not listed.get("processes"):
                break
            assert time.monotonic() < deadline, "the process did not end"
            time.sleep(0.5)
        assert emulator.peak_rss() < PEAK_LIMIT, emulator.peak_rss()
        body = answer.read()
    frames = []
    while body:
        flags, size = struct.unpack(">BI", body[:5])
        frames.append((flags, json.loads(body[5:5 + size])))
        body = body[5 + size:]
    assert frames[-1][0] == 2  # the end-stream frame
    assert frames[-1][1]["error"]["code"] == "resource_exhausted"
