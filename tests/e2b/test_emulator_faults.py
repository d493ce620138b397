"""Fault injection, the admin endpoint, and the checks on credentials."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import RateLimitException
from provider_sdk_emulators.e2b import run_in_thread

from provider_sdk.emulators import EmulatorOptions, RunningEmulator
from provider_sdk.errors import ConfigError

EmulatorFactory = Callable[..., RunningEmulator]  # the conftest fixture's type


def _admin(running: RunningEmulator, faults: dict[str, float] | None = None) -> dict[str, Any]:
    headers = {"X-API-Key": running.api_key.reveal()}
    url = f"{running.url}/_emulator/faults"
    answer = httpx.post(url, json=faults, headers=headers) if faults is not None else \
        httpx.get(url, headers=headers)
    assert answer.status_code == 200, answer.text
    report: dict[str, Any] = answer.json()
    return report


def _health(running: RunningEmulator, sandbox_id: str) -> int:
    return httpx.get(f"{running.url}/health",
                     headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
                     ).status_code


def test_504s_follow_each_resume_and_are_reported(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory("e2b", faults={"resume_504": "2"})
    sandbox = Sandbox.create()
    try:
        assert _health(running, sandbox.sandbox_id) == 204  # create is not a resume
        sandbox.pause()
        Sandbox.connect(sandbox.sandbox_id)  # the control plane says running...
        assert [_health(running, sandbox.sandbox_id) for _ in range(3)] == [504, 504, 204]
        sandbox.pause()
        Sandbox.connect(sandbox.sandbox_id)  # ...and the next resume re-arms the fault
        assert _health(running, sandbox.sandbox_id) == 504
        report = _admin(running)
        assert report["set"]["resume_504"] == 2
        assert report["served"]["resume_504"] == 3
    finally:
        sandbox.kill()


def test_faults_are_set_through_the_admin_endpoint(e2b_emulator: RunningEmulator) -> None:
    sandbox = Sandbox.create()
    try:
        assert _admin(e2b_emulator, {"resume_504": 1})["set"]["resume_504"] == 1
        sandbox.pause()
        Sandbox.connect(sandbox.sandbox_id)
        assert _health(e2b_emulator, sandbox.sandbox_id) == 504
        assert _health(e2b_emulator, sandbox.sandbox_id) == 204
    finally:
        sandbox.kill()
    refused = httpx.post(f"{e2b_emulator.url}/_emulator/faults", json={"nope": 1},
                         headers={"X-API-Key": e2b_emulator.api_key.reveal()})
    assert refused.status_code == 400
    assert "unknown fault 'nope'" in refused.json()["message"]


def test_429s_on_create_carry_retry_after(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory("e2b", faults={"create_429": "1", "retry_after": "7"})
    with httpx.Client(base_url=running.url,
                      headers={"X-API-Key": running.api_key.reveal()}) as api:
        limited = api.post("/v2/sandboxes", json={"templateID": "base"})
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "7"
        created = api.post("/v2/sandboxes", json={"templateID": "base"})
        assert created.status_code == 201
        api.delete(f"/sandboxes/{created.json()['sandboxID']}")
    assert _admin(running)["served"]["create_429"] == 1


def test_the_sdk_gives_up_after_its_retries(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory("e2b", faults={"create_429": "10", "retry_after": "0"})
    with pytest.raises(RateLimitException):
        Sandbox.create()
    assert _admin(running)["served"]["create_429"] == 4  # the first try and 3 retries


def test_latency_is_added_to_every_request(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory("e2b", faults={"latency": "0.01"})
    assert httpx.get(f"{running.url}/health").status_code == 200
    assert _admin(running)["served"]["latency"] >= 1


def test_unknown_fault_at_start_is_a_config_error(emulator_factory: EmulatorFactory) -> None:
    with pytest.raises(ConfigError, match="unknown fault 'slow'"):
        emulator_factory("e2b", faults={"slow": "1"})


def test_keys_and_tokens_are_checked(e2b_emulator: RunningEmulator) -> None:
    anonymous = httpx.get(f"{e2b_emulator.url}/v2/sandboxes")
    assert anonymous.status_code == 401
    assert "X-API-Key" in anonymous.json()["message"]
    assert httpx.get(f"{e2b_emulator.url}/_emulator/faults").status_code == 401
    sandbox = Sandbox.create()
    try:
        no_token = httpx.post(f"{e2b_emulator.url}/process.Process/List", json={},
                              headers={"E2b-Sandbox-Id": sandbox.sandbox_id})
        assert no_token.status_code == 401
        assert no_token.json()["code"] == "unauthenticated"
    finally:
        sandbox.kill()


def test_a_missing_api_key_names_the_setting(local_backend: object,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBE_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="CUBE_API_KEY"), \
            run_in_thread("cube", EmulatorOptions()):
        pass
    monkeypatch.setenv("E2B_API_KEY", "from-the-environment")
    with run_in_thread("e2b", EmulatorOptions()) as running:
        assert running.api_key.reveal() == "from-the-environment"
        assert "from-the-environment" not in repr(running)
