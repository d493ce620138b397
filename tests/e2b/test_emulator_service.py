"""The E2B and Cube emulator as a service: every port of a sandbox is guarded as the
vendor guards it (on E2B the sandbox's access token opens envd and the code interpreter on
port 49999; on Cube, whose envd has no token, the API key does), the vendors' SDKs keep
working unmodified, and broken or oversized uploads and kernel floods are refused without
losing data."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
from e2b import Sandbox

from provider_sdk.emulators import RunningEmulator

SECRET = "s3cr3t-value-of-the-sandbox"


def _execute(running: RunningEmulator, sandbox_id: str, headers: dict[str, str],
             code: str = "import os; print(os.environ.get('SECRET'))") -> httpx.Response:
    return httpx.post(f"{running.url}/execute", json={"code": code},
                      headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49999",
                               **headers}, timeout=60)


@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["missing", "wrong"])
def test_the_e2b_interpreter_refuses_code_without_the_access_token(
        e2b_emulator: RunningEmulator, token: str | None) -> None:
    with Sandbox.create(envs={"SECRET": SECRET}) as sandbox:
        headers = {"X-Access-Token": token} if token else {}
        refused = _execute(e2b_emulator, sandbox.sandbox_id, headers)
        assert refused.status_code == 401
        assert SECRET not in refused.text
        # Nor does the API key open it: the data plane is the sandbox's own.
        keyed = _execute(e2b_emulator, sandbox.sandbox_id,
                         {**headers, "X-API-Key": e2b_emulator.api_key.reveal()})
        assert keyed.status_code == 401


def test_the_e2b_interpreter_runs_code_with_the_token_the_sdk_sends(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create(envs={"SECRET": SECRET}) as sandbox:
        # What e2b-code-interpreter's run_code sends: the envd access token.
        answer = _execute(e2b_emulator, sandbox.sandbox_id,
                          {"X-Access-Token": str(sandbox._envd_access_token)})
        assert answer.status_code == 200
        events = [json.loads(line) for line in answer.text.splitlines()]
        assert {"type": "stdout", "text": SECRET + "\n"} in events


@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["missing", "wrong"])
def test_e2b_envd_refuses_rpcs_and_files_without_the_access_token(
        e2b_emulator: RunningEmulator, token: str | None) -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/private", "private")
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id,
                   **({"X-Access-Token": token} if token else {})}
        rpc = httpx.post(f"{e2b_emulator.url}/process.Process/List", json={},
                         headers=headers)
        assert rpc.status_code == 401
        read = httpx.get(f"{e2b_emulator.url}/files", params={"path": "/tmp/private"},
                         headers=headers)
        assert read.status_code == 401
        assert "private" not in read.text
        write = httpx.post(f"{e2b_emulator.url}/files", params={"path": "/tmp/private"},
                           content=b"overwritten", headers={
                               **headers, "Content-Type": "application/octet-stream"})
        assert write.status_code == 401
        assert sandbox.files.read("/tmp/private") == "private"  # the SDK's own calls work
        assert sandbox.commands.run("echo ok").stdout == "ok\n"


def _cube_data_plane(running: RunningEmulator, sandbox_id: str, port: int) -> str:
    return f"{running.url}/sandbox/{sandbox_id}/{port}"


@pytest.mark.parametrize("key", [None, "wrong-key"], ids=["missing", "wrong"])
def test_cube_data_plane_refuses_requests_without_the_api_key(
        cube_emulator: RunningEmulator, key: str | None) -> None:
    from cubesandbox import Sandbox as CubeSandbox  # type: ignore[import-untyped]

    sandbox = CubeSandbox.create(envs={"SECRET": SECRET})
    try:
        headers = {"X-API-Key": key} if key else {}
        code = httpx.post(f"{_cube_data_plane(cube_emulator, sandbox.sandbox_id, 49999)}"
                          "/execute", json={"code": "import os; os.environ['SECRET']"},
                          headers=headers, timeout=60)
        assert code.status_code == 401
        assert SECRET not in code.text
        envd = _cube_data_plane(cube_emulator, sandbox.sandbox_id, 49983)
        rpc = httpx.post(f"{envd}/process.Process/List", json={}, headers=headers)
        assert rpc.status_code == 401
        assert httpx.get(f"{envd}/files", params={"path": "/etc/hostname"},
                         headers=headers).status_code == 401
        assert httpx.get(f"{envd}/health").status_code == 204  # probes need no key
        # The cubesandbox SDK sends the key it was given (CUBE_API_KEY) on the data plane.
        assert sandbox.run_code("import os\nos.environ['SECRET']").text == repr(SECRET)
        assert sandbox.commands.run("echo ok").stdout == "ok\n"
    finally:
        sandbox.kill()


def test_a_corrupt_gzip_upload_is_refused_and_leaves_the_file_as_it_was(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/kept", "kept")
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id,
                   "X-Access-Token": str(sandbox._envd_access_token),
                   "Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}
        body = gzip.compress(b"new content " * 100_000)
        corrupt = httpx.post(f"{e2b_emulator.url}/files", params={"path": "/tmp/kept"},
                             content=body[: len(body) // 2], headers=headers)
        assert corrupt.status_code == 400
        assert sandbox.files.read("/tmp/kept") == "kept"


def test_an_unknown_content_encoding_is_a_clear_400(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        answer = httpx.post(f"{e2b_emulator.url}/files", params={"path": "/tmp/x"},
                            content=b"data", headers={
                                "E2b-Sandbox-Id": sandbox.sandbox_id,
                                "X-Access-Token": str(sandbox._envd_access_token),
                                "Content-Type": "application/octet-stream",
                                "Content-Encoding": "compress"})
        assert answer.status_code == 400
        assert "Content-Encoding" in answer.json()["message"]


def test_write_files_streams_several_multipart_parts(e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        big = bytes(range(256)) * 8192  # 2 MiB, across many chunks of the body
        sandbox.files.write_files([{"path": "/tmp/m/a.bin", "data": big},
                                   {"path": "/tmp/m/b.txt", "data": "b"}])
        assert bytes(sandbox.files.read("/tmp/m/a.bin", format="bytes")) == big
        assert sandbox.files.read("/tmp/m/b.txt") == "b"


def test_a_kernel_flooding_its_own_stdout_is_ended_not_held(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        headers = {"X-Access-Token": str(sandbox._envd_access_token)}
        # 20 MiB with no newline, straight to the kernel's stdout, past its streams.
        flood = _execute(e2b_emulator, sandbox.sandbox_id, headers,
                         "import os\nfor _ in range(20): os.write(1, b'x' * (1 << 20))")
        assert flood.status_code == 200
        events = [json.loads(line) for line in flood.text.splitlines()]
        assert events[-1]["name"] == "KernelOutputTooLarge"
        # A long line printed normally arrives whole, in pieces.
        printed = _execute(e2b_emulator, sandbox.sandbox_id, headers,
                           "print('y' * 200000, end='')")
        texts = [json.loads(line) for line in printed.text.splitlines()]
        stdout = [e["text"] for e in texts if e["type"] == "stdout"]
        assert "".join(stdout) == "y" * 200000
        assert len(stdout) > 1


def test_a_truncated_multipart_upload_is_a_400_and_leaves_the_file(
        e2b_emulator: RunningEmulator) -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/tmp/kept", "kept")
        request = httpx.Request("POST", f"{e2b_emulator.url}/files", files=[
            ("file", ("/tmp/kept", b"new " * 100_000, "application/octet-stream"))])
        body = request.read()
        answer = httpx.post(f"{e2b_emulator.url}/files", content=body[: len(body) // 2],
                            headers={"E2b-Sandbox-Id": sandbox.sandbox_id,
                                     "X-Access-Token": str(sandbox._envd_access_token),
                                     "Content-Type": request.headers["content-type"]})
        assert answer.status_code == 400
        assert sandbox.files.read("/tmp/kept") == "kept"


@pytest.mark.parametrize("name", ["e2b", "daytona"])
@pytest.mark.anyio
async def test_a_port_in_use_is_a_config_error_naming_it(local_backend: object,
                                                         name: str) -> None:
    """Starting an emulator on a taken port says which port, not only the OS's words."""
    import socket

    from provider_sdk import emulators
    from provider_sdk.errors import ConfigError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"port {port} on 127\.0\.0\.1 is already in use"):
            async with emulators.run(name, emulators.EmulatorOptions(port=port, api_key="k")):
                pass
