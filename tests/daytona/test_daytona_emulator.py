"""The Daytona emulator itself: loopback only, a clear 401, the admin endpoint, and the
``psdk`` commands that start it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from daytona_emulator_fixtures import admin, running

from provider_sdk import emulators
from provider_sdk.errors import ConfigError


def _get(path: str, key: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    request = urllib.request.Request(f"{running().url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_it_serves_on_loopback_only() -> None:
    assert running().url.startswith("http://127.0.0.1:")
    assert running().settings["DAYTONA_API_URL"] == f"{running().url}/api"


@pytest.mark.parametrize("key", [None, "wrong"], ids=["missing", "wrong"])
def test_a_request_without_the_key_is_a_clear_401(key: str | None) -> None:
    status, body = _get("/api/sandbox", key)
    assert status == 401
    assert "DAYTONA_API_KEY" in body["message"]
    assert running().api_key.reveal() not in json.dumps(body)


def test_the_key_opens_the_api() -> None:
    status, body = _get("/api/sandbox", running().api_key.reveal())
    assert status == 200
    assert set(body) == {"items", "nextCursor"}


def test_an_unknown_route_is_a_json_404() -> None:
    status, body = _get("/api/no-such-route", running().api_key.reveal())
    assert (status, body["statusCode"]) == (404, 404)
    assert "/api/no-such-route" in body["message"]


def test_the_admin_endpoint_sets_and_reports_faults() -> None:
    before = admin()["served"]["latency"]
    try:
        report = admin({"latency": 0.01})
        assert report["set"]["latency"] == 0.01
        assert {"latency", "rate_limit_429", "transition_502", "toolbox_502_after_start",
                "start_delay", "minute_seconds", "transition_502_after"} == set(report["known"])
        _get("/api/sandbox", running().api_key.reveal())
        assert admin()["served"]["latency"] - before >= 1
    finally:
        admin({"latency": 0})


def test_the_admin_endpoint_refuses_an_unknown_fault() -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        admin({"no_such_fault": 1})
    assert caught.value.code == 400
    assert "known:" in json.loads(caught.value.read())["message"]


@pytest.mark.anyio
async def test_it_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="DAYTONA_API_KEY"):
        async with emulators.run("daytona", emulators.EmulatorOptions()):
            pass


@pytest.mark.anyio
async def test_an_unknown_fault_at_start_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown fault"):
        async with emulators.run("daytona", emulators.EmulatorOptions(
                api_key="k", faults={"nope": "1"})):
            pass


def test_psdk_contract_runs_the_suite_through_the_emulator(tmp_path: Any) -> None:
    """``psdk contract --provider daytona --emulator`` starts the emulator and runs the
    suite (a slice of it here) through the real SDK."""
    env = {**os.environ, "PSDK_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "provider_sdk.cli", "contract", "--provider", "daytona",
         "--emulator", "--", "-q", "-p", "no:cacheprovider", "-k",
         "test_exec_returns_exit_code_and_stdout or test_shell_cd_carries_over"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
