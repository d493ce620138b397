"""``psdk expose ID PORT``: a real ``psdk`` process prints a URL that reaches a server in
a local sandbox, warns when nothing listens on the port, and Ctrl-C or SIGTERM unexposes
it, says so in one line and ends with status 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider_sdk.sync import SyncSandbox, open_provider

pytestmark = pytest.mark.slow


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[SyncSandbox, dict[str, str]]]:
    """A local sandbox whose python3 http.server on port 8123 serves ``/hello.txt``,
    and the environment that points psdk at its home."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSDK_PROVIDER", "PSDK_CONFIG", "PSDK_HOME")}
    env.update(PSDK_HOME=str(home), PSDK_PROVIDER="local")
    with open_provider("local", home=str(home)) as provider:
        sandbox = provider.create()
        try:
            sandbox.files.write("/tmp/www/hello.txt", "hello from the sandbox\n")
            sandbox.start(["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1",
                           "--directory", "/tmp/www"])
            deadline = time.monotonic() + 30
            probe = "import socket; socket.create_connection(('127.0.0.1', 8123))"
            while not sandbox.exec(["python3", "-c", probe]).ok:
                assert time.monotonic() < deadline, "the server never listened"
                time.sleep(0.05)
            yield sandbox, env
        finally:
            sandbox.kill()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_expose_prints_a_url_that_works_until_stopped(
        served: tuple[SyncSandbox, dict[str, str]], sig: signal.Signals) -> None:
    sandbox, env = served
    proc = subprocess.Popen([sys.executable, "-m", "provider_sdk.cli", "expose", sandbox.id,
                             "8123", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or lines[-1] != "}\n":
            line = proc.stdout.readline()
            assert line, proc.communicate()
            lines.append(line)
        shown = json.loads("".join(lines))
        assert shown["port"] == 8123
        assert shown["url"].endswith(f"?psdk_token={shown['token']}")
        base = shown["url"].split("?")[0]
        assert _get(f"{base}hello.txt?psdk_token={shown['token']}") == (
            200, b"hello from the sandbox\n")
        assert _get(f"{base}hello.txt")[0] == 401
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert err.splitlines()[-1] == f"stopped serving port 8123 of {sandbox.id}", err
    assert "warning" not in err  # something listens on the port
    assert shown["token"] not in err
    with pytest.raises(urllib.error.URLError):
        _get(shown["url"])


def test_expose_warns_when_nothing_listens_on_the_port(
        served: tuple[SyncSandbox, dict[str, str]]) -> None:
    sandbox, env = served
    proc = subprocess.Popen([sys.executable, "-m", "provider_sdk.cli", "expose", sandbox.id,
                             "8124"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, text=True)
    stream = proc.stderr
    assert stream is not None
    lines: list[str] = []  # read as they come: a missing warning fails, never hangs
    reader = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")),
                              daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any("warning" in line for line in lines):
            assert time.monotonic() < deadline, f"no warning in {lines!r}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines[0].startswith(f"port 8124 of {sandbox.id} is served on "), lines
    assert lines[1] == (f"psdk: warning: nothing in {sandbox.id} listens on port 8124 yet; "
                        "requests get 502 until something does\n"), lines
    assert proc.returncode == 0, lines
