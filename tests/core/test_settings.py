"""``provider_sdk.settings.Settings``: an option as given, else its variable, else the
default; every malformed or missing setting is a ConfigError that names the provider,
the option and its variable and what was expected, and never shows a secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provider_sdk import open_provider
from provider_sdk.errors import ConfigError
from provider_sdk.secret import Secret
from provider_sdk.settings import Settings

VARS = {"key": "PSDK_T_KEY", "url": "PSDK_T_URL", "n": "PSDK_T_N", "t": "PSDK_T_T",
        "on": "PSDK_T_ON", "dir": "PSDK_T_DIR", "name": "PSDK_T_NAME"}


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    for var in VARS.values():
        monkeypatch.delenv(var, raising=False)
    return Settings("acme", VARS)


def _refused(call: Any, *words: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        call()
    assert caught.value.provider == "acme"
    for word in words:
        assert word in caught.value.message, caught.value.message
    return caught.value


def test_given_wins_over_the_variable_which_wins_over_the_default(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.text("name", None, default="d") == "d"
    monkeypatch.setenv("PSDK_T_NAME", "from-env")
    assert settings.text("name", None, default="d") == "from-env"
    assert settings.text("name", "given", default="d") == "given"
    monkeypatch.setenv("PSDK_T_N", " 12 ")
    assert settings.integer("n", None, default=3) == 12
    assert settings.integer("n", 5, default=3) == 5
    monkeypatch.setenv("PSDK_T_T", "2.5")
    assert settings.number("t", None, default=1.0) == 2.5
    assert settings.number("t", 4, default=1.0) == 4.0
    monkeypatch.setenv("PSDK_T_ON", "TRUE")
    assert settings.switch("on", None, default=False) is True
    monkeypatch.setenv("PSDK_T_DIR", "/srv/x")
    assert settings.path("dir", None) == Path("/srv/x")
    assert settings.path("dir", "/given") == Path("/given")
    monkeypatch.setenv("PSDK_T_NAME", "")  # empty: unset
    assert settings.text("name", None, default="d") == "d"


@pytest.mark.parametrize(("reader", "raw", "expected"), [
    ("integer", "ten", "an integer of at least 1"),
    ("integer", "1.5", "an integer of at least 1"),
    ("integer", "0", "an integer of at least 1"),
    ("number", "soon", "a positive finite number"),
    ("number", "inf", "a positive finite number"),
    ("number", "-2", "a positive finite number"),
    ("switch", "yes", "true or false"),
])
def test_a_malformed_variable_names_the_option_its_variable_and_what_was_expected(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, reader: str, raw: str,
        expected: str) -> None:
    option = {"integer": "n", "number": "t", "switch": "on"}[reader]
    monkeypatch.setenv(VARS[option], raw)
    error = _refused(lambda: getattr(settings, reader)(option, None, default=1),
                     f"the setting {option} ({VARS[option]}) must be {expected}", repr(raw))
    assert str(error).startswith("[acme] ")


@pytest.mark.parametrize(("reader", "given", "expected"), [
    ("integer", "12", "an integer"), ("integer", True, "an integer"),
    ("integer", -1, "an integer of at least 1"), ("number", "60", "a positive finite number"),
    ("number", 0, "a positive finite number"), ("number", float("nan"), "a positive finite"),
    ("switch", "false", "true or false"), ("text", 5, "a string"), ("path", 5, "a path"),
])
def test_a_given_value_of_the_wrong_type_is_refused_not_converted(
        settings: Settings, reader: str, given: object, expected: str) -> None:
    kwargs: dict[str, Any] = {} if reader in ("text", "path") else {"default": 1}
    _refused(lambda: getattr(settings, reader)("x", given, **kwargs),
             "the setting x must be", expected)


def test_a_number_has_its_maximum(settings: Settings) -> None:
    assert settings.number("t", 10, default=1.0, maximum=10) == 10
    _refused(lambda: settings.number("t", 11, default=1.0, maximum=10, unit=" of seconds"),
             "a positive finite number of seconds of at most 10", "got 11")


def test_a_missing_required_setting_says_how_to_give_it(settings: Settings) -> None:
    _refused(lambda: settings.secret("key", None),
             "the setting key (PSDK_T_KEY) is required: pass key or set PSDK_T_KEY")
    _refused(lambda: settings.text("plain", None, required=True),
             "the setting plain is required: pass plain")
    assert settings.secret("key", None, required=False) is None


def test_a_secret_is_held_masked_and_never_shown(settings: Settings,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_T_KEY", "sk-live-123")
    key = settings.secret("key", None)
    assert isinstance(key, Secret)
    assert key.reveal() == "sk-live-123"
    error = _refused(lambda: settings.secret("key", 12345), "must be a string, got a value")
    assert "12345" not in str(error)


def test_a_url_has_its_scheme(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_T_URL", "ftp://127.0.0.1/api")
    _refused(lambda: settings.url("url", None, hint=" ending in /api"),
             "the setting url (PSDK_T_URL) must be a http/https URL ending in /api",
             "'ftp://127.0.0.1/api'")
    assert settings.url("url", "https://127.0.0.1/api") == "https://127.0.0.1/api"
    assert settings.url("url", "unix:///x", schemes=("unix",)) == "unix:///x"



def test_a_check_of_the_callers_own_refuses_in_the_same_words(settings: Settings) -> None:
    def refuse(option: str, value: object, *, secret: bool = False) -> None:
        raise settings.refuse(option, "an existing file", value, secret=secret)

    _refused(lambda: refuse("dir", "/nowhere"),
             "the setting dir (PSDK_T_DIR) must be an existing file, got '/nowhere'")
    error = _refused(lambda: refuse("key", "sk-live-123", secret=True),
                     "the setting key (PSDK_T_KEY) must be an existing file, got a value")
    assert "sk-live-123" not in f"{error} {error!r}"


# -------------------------------------------------------------- local provider

@pytest.mark.parametrize(("options", "words"), [
    ({"unisolated": "false"}, ("unisolated", "true or false")),
    ({"home": 5}, ("home", "a path")),
])
def test_the_local_providers_settings_are_checked(options: dict[str, Any],
                                                  words: tuple[str, ...]) -> None:
    from provider_sdk.local import LocalProvider

    with pytest.raises(ConfigError) as caught:
        LocalProvider(**options)
    assert caught.value.provider == "local"
    for word in words:
        assert word in caught.value.message


def test_the_local_provider_reads_its_home_setting(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_HOME", str(tmp_path / "from-env"))
    assert open_provider("local").home == tmp_path / "from-env"  # type: ignore[attr-defined]
