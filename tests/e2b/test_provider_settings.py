"""Settings of the E2B and Cube providers: each missing or malformed one is a
ConfigError naming it, and the API key never shows in reprs or errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from provider_emulators import emulator, provider_options

from provider_sdk import open_provider
from provider_sdk.emulators import RunningEmulator
from provider_sdk.errors import AuthenticationError, ConfigError

pytestmark = pytest.mark.anyio

_SETTINGS = ("E2B_API_KEY", "E2B_API_URL", "E2B_DOMAIN", "E2B_SANDBOX_URL", "CUBE_API_KEY",
             "CUBE_API_URL", "CUBE_SANDBOX_DOMAIN", "CUBE_TEMPLATE_ID", "CUBE_PROXY_NODE_IP",
             "CUBE_PROXY_PORT_HTTP", "PSDK_E2B_READY_TIMEOUT", "PSDK_CUBE_READY_TIMEOUT")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _SETTINGS:
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(("name", "setting"), [("e2b", "E2B_API_KEY"),
                                               ("cube", "CUBE_API_KEY")])
def test_a_missing_api_key_is_a_config_error_naming_it(name: str, setting: str) -> None:
    with pytest.raises(ConfigError, match=setting):
        open_provider(name)


def test_cube_needs_its_api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBE_API_KEY", "some-key")
    with pytest.raises(ConfigError, match="CUBE_API_URL"):
        open_provider("cube")


@pytest.mark.parametrize(("name", "setting"), [("e2b", "PSDK_E2B_READY_TIMEOUT"),
                                               ("cube", "PSDK_CUBE_READY_TIMEOUT")])
def test_a_malformed_ready_timeout_is_a_config_error_naming_it(
        monkeypatch: pytest.MonkeyPatch, name: str, setting: str) -> None:
    monkeypatch.setenv(setting, "soon")
    with pytest.raises(ConfigError, match=setting):
        open_provider(name, api_key="k", api_url="http://127.0.0.1:9")


async def test_cube_without_a_template_names_cube_template_id() -> None:
    """Cube has no default template: a create naming none says which setting to set,
    before any request is sent."""
    async with open_provider("cube", api_key="k", api_url="http://127.0.0.1:9") as provider:
        with pytest.raises(ConfigError, match="CUBE_TEMPLATE_ID"):
            await provider.create()


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every documented setting is read; the key is kept as a masked Secret."""
    monkeypatch.setenv("CUBE_API_KEY", "cube-secret-value")
    monkeypatch.setenv("CUBE_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("CUBE_SANDBOX_DOMAIN", "cube.test")
    monkeypatch.setenv("CUBE_TEMPLATE_ID", "tpl-x")
    monkeypatch.setenv("CUBE_PROXY_NODE_IP", "127.0.0.1")
    monkeypatch.setenv("CUBE_PROXY_PORT_HTTP", "8080")
    provider = open_provider("cube")
    params = provider._session.params()  # type: ignore[attr-defined]
    assert (params["api_url"], params["domain"], params["sandbox_url"]) == (
        "http://127.0.0.1:9", "cube.test", "http://127.0.0.1:8080")
    assert provider._session.options.template == "tpl-x"  # type: ignore[attr-defined]
    assert "cube-secret-value" not in repr(provider)
    assert "cube-secret-value" not in repr(vars(provider))


@pytest.fixture(scope="module", params=["e2b", "cube"])
def running(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    home: Path = tmp_path_factory.mktemp(f"{request.param}-settings")
    with emulator(request.param, home) as em:
        yield em


async def test_a_wrong_key_is_an_authentication_error_that_hides_it(
        running: RunningEmulator) -> None:
    wrong = "psdk-wrong-key-0123456789"
    async with open_provider(running.name,
                             **provider_options(running, api_key=wrong)) as provider:
        with pytest.raises(AuthenticationError) as caught:
            await provider.create()
    assert wrong not in str(caught.value)
    assert wrong not in repr(caught.value)
    assert running.api_key.reveal() not in str(caught.value)


@pytest.mark.parametrize(("name", "var", "raw", "words"), [
    ("e2b", "PSDK_E2B_READY_TIMEOUT", "0", "ready_timeout (PSDK_E2B_READY_TIMEOUT) must be a "
                                           "positive finite number of seconds, got '0'"),
    ("e2b", "E2B_API_URL", "api.e2b.test", "api_url (E2B_API_URL) must be a http/https URL"),
    ("cube", "CUBE_PROXY_PORT_HTTP", "eighty", "proxy_port (CUBE_PROXY_PORT_HTTP) must be an "
                                               "integer of at least 1, got 'eighty'"),
    ("cube", "CUBE_API_URL", "ftp://127.0.0.1", "api_url (CUBE_API_URL) must be a http/https"),
])
def test_a_malformed_setting_names_the_provider_the_option_and_what_was_expected(
        monkeypatch: pytest.MonkeyPatch, name: str, var: str, raw: str, words: str) -> None:
    monkeypatch.setenv("CUBE_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv(var, raw)
    with pytest.raises(ConfigError) as caught:
        open_provider(name, api_key="k")
    assert caught.value.provider == name
    assert f"the setting {words}" in caught.value.message


@pytest.mark.parametrize(("option", "value", "words"), [
    ("retries", -1, "retries must be an integer of at least 0, got -1"),
    ("max_timeout", 0, "max_timeout must be an integer of at least 1, got 0"),
    ("request_timeout", float("inf"), "request_timeout must be a positive finite number"),
])
def test_a_malformed_option_names_it(option: str, value: object, words: str) -> None:
    from provider_sdk_e2b import E2BProvider

    with pytest.raises(ConfigError, match=words) as caught:
        E2BProvider(api_key="k", **{option: value})  # type: ignore[arg-type]
    assert caught.value.provider == "e2b"


@pytest.mark.parametrize("name", ["e2b", "cube"])
def test_a_malformed_api_key_never_shows_its_value(name: str) -> None:
    from provider_sdk_e2b import CubeProvider, E2BProvider

    cls = E2BProvider if name == "e2b" else CubeProvider
    with pytest.raises(ConfigError,
                       match=r"the setting api_key must be a string, got a value") as caught:
        cls(api_key=b"sk-bytes-secret", api_url="http://127.0.0.1:9")  # type: ignore[arg-type]
    assert "sk-bytes-secret" not in str(caught.value)
