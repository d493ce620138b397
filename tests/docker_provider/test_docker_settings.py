"""The Docker provider's settings: each malformed one is a ConfigError that names the
option, its variable and what was expected."""

from __future__ import annotations

import pytest
from provider_sdk_docker import DockerProvider
from provider_sdk_docker.provider import SETTINGS

from provider_sdk.errors import ConfigError


@pytest.mark.parametrize(("option", "raw", "expected"), [
    ("pids_limit", "ten", "an integer of at least 1"),
    ("memory_mb", "2G", "an integer of at least 1"),
    ("disk_mb", "0", "an integer of at least 1"),
    ("cpus", "inf", "a positive finite number"),
    ("base_url", "ssh://127.0.0.1", "a unix/http+unix/tcp/http URL"),
])
def test_a_malformed_variable_names_the_option_and_what_was_expected(
        monkeypatch: pytest.MonkeyPatch, option: str, raw: str, expected: str) -> None:
    monkeypatch.setenv(SETTINGS[option], raw)
    with pytest.raises(ConfigError) as caught:
        DockerProvider()
    assert caught.value.provider == "docker"
    assert f"the setting {option} ({SETTINGS[option]}) must be {expected}, got {raw!r}" \
        in caught.value.message


@pytest.mark.parametrize(("option", "value"), [("pids_limit", 0), ("cpus", "2"),
                                               ("host_control", "false")])
def test_a_malformed_option_names_it(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"the setting {option}") as caught:
        DockerProvider(**{option: value})  # type: ignore[arg-type]
    assert caught.value.provider == "docker"
