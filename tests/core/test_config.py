"""Configuration: which provider (keyword, PSDK_PROVIDER, psdk.toml, local), its options
(file table under keywords), unknown options named, secrets masked."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_provider import MemoryProvider, Store

from provider_sdk import config, open_provider
from provider_sdk.config import Secret, env_setting, provider_name
from provider_sdk.errors import ConfigError, ProviderNotFound


def _write_config(path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    path.write_text(text)
    monkeypatch.setenv("PSDK_CONFIG", str(path))
    return path


def test_default_provider_is_local() -> None:
    assert provider_name() == "local"


def test_psdk_provider_picks_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "cube")
    assert provider_name() == "cube"


def test_config_file_from_psdk_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "custom.toml", 'provider = "daytona"\n', monkeypatch)
    assert provider_name() == "daytona"


def test_config_file_in_the_working_directory(clean_config: Path) -> None:
    (clean_config / "psdk.toml").write_text('provider = "docker"\n')
    assert config.config_path() == Path("psdk.toml")
    assert provider_name() == "docker"


def test_config_file_in_xdg_config_home(clean_config: Path) -> None:
    user = clean_config / "xdg" / "psdk" / "psdk.toml"
    user.parent.mkdir(parents=True)
    user.write_text('provider = "e2b"\n')
    assert provider_name() == "e2b"


def test_no_config_file_anywhere_is_none() -> None:
    assert config.config_path() is None


def test_environment_wins_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", 'provider = "daytona"\n', monkeypatch)
    monkeypatch.setenv("PSDK_PROVIDER", "cube")
    assert provider_name() == "cube"


def test_keyword_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "cube")
    assert provider_name("docker") == "docker"


def test_psdk_config_naming_a_missing_file_is_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(ConfigError, match="PSDK_CONFIG"):
        provider_name()


def test_malformed_config_file_is_config_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_config(tmp_path / "broken.toml", "provider = \n", monkeypatch)
    with pytest.raises(ConfigError, match=str(path)):
        provider_name()


def test_non_string_provider_in_file_is_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", "provider = 3\n", monkeypatch)
    with pytest.raises(ConfigError, match="provider must be a string"):
        provider_name()


def test_open_provider_uses_the_configured_name(memory: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_PROVIDER", "memory")
    assert isinstance(open_provider(), MemoryProvider)


def test_open_provider_unknown_name_lists_installed(memory: Store) -> None:
    with pytest.raises(ProviderNotFound, match="memory"):
        open_provider("nope")


def test_file_table_gives_options(memory: Store, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", '[providers.memory]\nlabel = "from-file"\n', monkeypatch)
    provider = open_provider("memory")
    assert isinstance(provider, MemoryProvider)
    assert provider.label == "from-file"


def test_keyword_options_win_over_the_file_table(memory: Store, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml",
                  '[providers.memory]\nlabel = "from-file"\ntoken = "t"\n', monkeypatch)
    provider = open_provider("memory", label="from-keyword")
    assert isinstance(provider, MemoryProvider)
    assert (provider.label, provider.token) == ("from-keyword", "t")


def test_another_providers_table_is_ignored(memory: Store, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", '[providers.cube]\napi_url = "x"\n', monkeypatch)
    provider = open_provider("memory")
    assert isinstance(provider, MemoryProvider)
    assert provider.label == "default"


def test_unknown_keyword_option_is_config_error_naming_it(memory: Store) -> None:
    with pytest.raises(ConfigError, match="'colour'") as caught:
        open_provider("memory", colour="blue")
    assert "label" in str(caught.value)  # the valid options are listed
    assert caught.value.provider == "memory"


def test_unknown_option_in_the_file_is_config_error_naming_it(
        memory: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", '[providers.memory]\nhome_dir = "/x"\n', monkeypatch)
    with pytest.raises(ConfigError, match="'home_dir'"):
        open_provider("memory")


def test_provider_table_that_is_not_a_table_is_config_error(
        memory: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", '[providers]\nmemory = "x"\n', monkeypatch)
    with pytest.raises(ConfigError, match=r"\[providers.memory\]"):
        open_provider("memory")


def test_providers_key_that_is_not_a_table_is_config_error(
        memory: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "c.toml", "providers = 1\n", monkeypatch)
    with pytest.raises(ConfigError, match=r"\[providers\]"):
        open_provider("memory")


# ------------------------------------------------------------------- settings


def test_env_setting_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_TEST_URL", "http://127.0.0.1:1")
    assert env_setting("PSDK_TEST_URL") == "http://127.0.0.1:1"


def test_env_setting_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PSDK_TEST_URL", raising=False)
    assert env_setting("PSDK_TEST_URL", default="d") == "d"
    assert env_setting("PSDK_TEST_URL") is None


@pytest.mark.parametrize("value", [None, ""])
def test_missing_required_setting_is_config_error_naming_it(
        monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("PSDK_TEST_KEY", raising=False)
    else:
        monkeypatch.setenv("PSDK_TEST_KEY", value)
    with pytest.raises(ConfigError, match="PSDK_TEST_KEY") as caught:
        env_setting("PSDK_TEST_KEY", required=True, provider="e2b")
    assert caught.value.provider == "e2b"


def test_secret_setting_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSDK_TEST_KEY", "sk-live-1234")
    value = env_setting("PSDK_TEST_KEY", secret=True)
    assert isinstance(value, Secret)
    assert value.reveal() == "sk-live-1234"
    for shown in (repr(value), str(value), f"{value}", f"{value!s}", f"{value:>20}",
                  "%s" % (value,), repr({"key": value}), str([value])):  # noqa: UP031
        assert "sk-live" not in shown


@given(st.text(min_size=1))
def test_secret_never_shows_its_value(text: str) -> None:
    secret = Secret(text)
    assert secret.reveal() == text
    assert str(secret) == "***"
    assert repr(secret) == "Secret('***')"
    assert f"{secret}" == "***"
    assert secret == text  # still usable as the string it holds
