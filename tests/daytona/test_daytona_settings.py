"""The Daytona provider's settings: each missing or malformed one is a ConfigError that
names the option, its variable and what was expected, never showing the API key."""

from __future__ import annotations

from typing import Any

import pytest

from provider_sdk import open_provider
from provider_sdk.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DAYTONA_API_KEY", "DAYTONA_API_URL", "DAYTONA_TARGET"):
        monkeypatch.delenv(var, raising=False)


def _refused(**options: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        open_provider("daytona", **options)
    assert caught.value.provider == "daytona"
    return caught.value


def test_a_missing_api_key_names_its_option_and_variable() -> None:
    assert "the setting api_key (DAYTONA_API_KEY) is required" in _refused().message


def test_an_api_url_that_is_not_http_says_what_it_must_be(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "dtn-secret-key")
    monkeypatch.setenv("DAYTONA_API_URL", "127.0.0.1:3000/api")
    error = _refused()
    assert "the setting api_url (DAYTONA_API_URL) must be a http/https URL ending in /api, " \
           "got '127.0.0.1:3000/api'" in error.message
    assert "dtn-secret-key" not in str(error)


@pytest.mark.parametrize(("option", "value"), [("request_timeout", 0),
                                               ("create_timeout", -5.0),
                                               ("unavailable_window", 2.0**31)])
def test_a_timeout_out_of_range_names_it(option: str, value: float) -> None:
    error = _refused(api_key="k", **{option: value})
    assert f"open_provider('daytona') keyword {option} must be a positive finite number " \
           "of seconds of at most" in error.message
