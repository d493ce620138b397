"""Configuration: which provider (keyword, PSDK_PROVIDER, psdk.toml, local), its options
(file table under keywords), unknown options named, secrets masked."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_provider import MemoryProvider, Store

from provider_sdk import config, open_provider, registry
from provider_sdk.config import (
    Secret,
    bool_setting,
    env_setting,
    float_setting,
    int_setting,
    provider_name,
)
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
    assert "key=" + secret == "key=***"
    assert secret + "!" == "***!"
    assert json.dumps({"key": secret}) == '{"key": "***"}'
    assert pickle.loads(pickle.dumps(secret)).reveal() == text
    assert secret == text  # compared as the string it holds
    assert secret == Secret(text)
    assert secret != text + "x"
    assert hash(secret) == hash(text)
    assert bool(secret) is bool(text)


@pytest.mark.parametrize("var", ["PSDK_TEST_N"])
@pytest.mark.parametrize("raw", ["1.5", "ten", "0", "-3", "1e3", "inf"])
def test_int_setting_refuses_what_is_not_a_whole_number(
        monkeypatch: pytest.MonkeyPatch, var: str, raw: str) -> None:
    monkeypatch.setenv(var, raw)
    with pytest.raises(ConfigError, match=rf"the setting {var} must be an integer") as caught:
        int_setting(var, 7, provider="docker")
    assert caught.value.provider == "docker"


def test_int_setting_reads_the_variable_or_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PSDK_TEST_N", raising=False)
    assert int_setting("PSDK_TEST_N", 7) == 7
    assert int_setting("PSDK_TEST_N") is None
    monkeypatch.setenv("PSDK_TEST_N", " 42 ")
    assert int_setting("PSDK_TEST_N", 7) == 42
    monkeypatch.setenv("PSDK_TEST_N", "0")
    assert int_setting("PSDK_TEST_N", 7, minimum=0) == 0


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "soon", "0", "-1"])
def test_float_setting_refuses_what_is_not_a_positive_finite_number(
        monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("PSDK_TEST_TIMEOUT", raw)
    with pytest.raises(ConfigError, match=r"the setting PSDK_TEST_TIMEOUT must be a positive "
                                          r"finite number"):
        float_setting("PSDK_TEST_TIMEOUT", 60.0)


def test_float_setting_reads_the_variable_or_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PSDK_TEST_TIMEOUT", raising=False)
    assert float_setting("PSDK_TEST_TIMEOUT", 60.0) == 60.0
    monkeypatch.setenv("PSDK_TEST_TIMEOUT", "1.5")
    assert float_setting("PSDK_TEST_TIMEOUT", 60.0) == 1.5
    monkeypatch.setenv("PSDK_TEST_TIMEOUT", "-2")
    assert float_setting("PSDK_TEST_TIMEOUT", positive=False) == -2.0


@pytest.mark.parametrize("raw", ["yes", "no", "on", "off", "2", "tru"])
def test_bool_setting_refuses_what_is_not_true_or_false(monkeypatch: pytest.MonkeyPatch,
                                                       raw: str) -> None:
    monkeypatch.setenv("PSDK_TEST_FLAG", raw)
    with pytest.raises(ConfigError, match=r"the setting PSDK_TEST_FLAG must be true or false"):
        bool_setting("PSDK_TEST_FLAG", False)


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("TRUE", True), ("1", True),
                                            ("false", False), ("False", False), ("0", False),
                                            ("", None)])
def test_bool_setting_reads_true_and_false(monkeypatch: pytest.MonkeyPatch, raw: str,
                                           value: bool | None) -> None:
    monkeypatch.setenv("PSDK_TEST_FLAG", raw)
    assert bool_setting("PSDK_TEST_FLAG") is value


# ------------------------------------------------------------------ typed options


class Typed(MemoryProvider):
    """A provider with one option of each type the config file can hold."""

    def __init__(self, *, flag: bool = False, count: int = 1, seconds: float = 1.0,
                 name: str = "n", home: str | os.PathLike[str] | None = None,
                 api_key: Secret | None = None, maybe: int | None = None) -> None:
        super().__init__()
        self.options = {"flag": flag, "count": count, "seconds": seconds, "name": name,
                        "home": home, "api_key": api_key, "maybe": maybe}


@pytest.fixture
def typed(memory: Store) -> Iterator[None]:
    registry.register("typed", Typed)
    try:
        yield
    finally:
        registry.unregister("typed")


def _opened(**options: object) -> dict[str, object]:
    provider = open_provider("typed", **options)
    assert isinstance(provider, Typed)
    return provider.options


@pytest.mark.parametrize(("line", "expected"), [
    ('flag = "false"', "flag: expected a boolean (true or false), got the string 'false'"),
    ('flag = "yes"', "flag: expected a boolean (true or false), got the string 'yes'"),
    ("flag = 0", "flag: expected a boolean (true or false), got the integer 0"),
    ('count = "3"', "count: expected an integer, got the string '3'"),
    ("count = 1.5", "count: expected an integer, got the number 1.5"),
    ("count = true", "count: expected an integer, got the boolean true"),
    ('seconds = "2"', "seconds: expected a number, got the string '2'"),
    ("seconds = inf", "seconds: expected a finite number, got the number inf"),
    ("seconds = nan", "seconds: expected a finite number, got the number nan"),
    ("name = 3", "name: expected a string, got the integer 3"),
    ("name = [1]", "name: expected a string, got an array"),
    ("home = {a = 1}", "home: expected a string or a path or nothing (None), got a table"),
    ("maybe = 2.5", "maybe: expected an integer or nothing (None), got the number 2.5"),
])
def test_a_mistyped_option_in_the_file_names_key_provider_and_file(
        typed: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str,
        expected: str) -> None:
    path = _write_config(tmp_path / "psdk.toml", f"[providers.typed]\n{line}\n", monkeypatch)
    with pytest.raises(ConfigError) as caught:
        open_provider("typed")
    assert caught.value.message == f"{path}: [providers.typed] {expected}"
    assert caught.value.provider == "typed"


def test_the_local_providers_unisolated_must_be_a_boolean(
        clean_config: Path) -> None:
    (clean_config / "psdk.toml").write_text('[providers.local]\nunisolated = "false"\n')
    with pytest.raises(ConfigError) as caught:
        open_provider("local")
    assert caught.value.message == ("psdk.toml: [providers.local] unisolated: expected a "
                                    "boolean (true or false), got the string 'false'")


@pytest.mark.parametrize(("options", "expected"), [
    ({"flag": "yes"}, "flag: expected a boolean (true or false), got the string 'yes'"),
    ({"count": 2.0}, "count: expected an integer, got the number 2.0"),
    ({"count": False}, "count: expected an integer, got the boolean false"),
    ({"seconds": float("inf")}, "seconds: expected a finite number, got the number inf"),
    ({"name": None}, "name: expected a string, got None"),
])
def test_a_mistyped_keyword_option_names_the_keyword(typed: None, options: dict[str, object],
                                                     expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_provider("typed", **options)
    assert caught.value.message == f"open_provider('typed') keyword {expected}"


def test_a_mistyped_secret_option_does_not_show_its_value(typed: None) -> None:
    with pytest.raises(ConfigError, match="api_key: expected a string or nothing") as caught:
        open_provider("typed", api_key=123456789)
    assert "123456789" not in str(caught.value)


def test_well_typed_options_arrive_as_their_types(typed: None, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "psdk.toml",
                  '[providers.typed]\nflag = true\ncount = 3\nseconds = 2\nname = "x"\n'
                  'home = "/tmp/h"\napi_key = "sk-1"\n', monkeypatch)
    options = _opened(maybe=None)
    assert options == {"flag": True, "count": 3, "seconds": 2.0, "name": "x",
                       "home": "/tmp/h", "api_key": "sk-1", "maybe": None}
    assert isinstance(options["seconds"], float)
    assert isinstance(options["api_key"], Secret)
    assert _opened(home=tmp_path)["home"] == tmp_path


def test_an_unknown_top_level_key_names_it_and_the_file(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_config(tmp_path / "psdk.toml", 'provider = "local"\nprovders = {}\n',
                         monkeypatch)
    with pytest.raises(ConfigError) as caught:
        provider_name()
    assert caught.value.message == (f"{path}: unknown key 'provders'; the known keys are: "
                                    "provider, providers")


def test_the_environment_does_not_hide_a_broken_file_from_open_provider(
        memory: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(tmp_path / "psdk.toml", "colour = 1\n", monkeypatch)
    monkeypatch.setenv("PSDK_PROVIDER", "memory")
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        open_provider()


def test_a_bad_value_in_the_file_is_blamed_on_the_file_not_on_a_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "e2b" not in registry.available():
        pytest.skip("the e2b provider's plugin is not installed")
    path = _write_config(tmp_path / "psdk.toml", '[providers.e2b]\napi_key = "k"\n'
                         "ready_timeout = -5\n", monkeypatch)
    monkeypatch.delenv("PSDK_E2B_READY_TIMEOUT", raising=False)
    with pytest.raises(ConfigError) as caught:
        open_provider("e2b")
    assert caught.value.message == (f"{path}: [providers.e2b] ready_timeout must be a "
                                    "positive finite number of seconds, got -5.0")
    assert "PSDK_E2B_READY_TIMEOUT" not in str(caught.value)


def test_a_bad_value_in_the_environment_still_names_its_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if "e2b" not in registry.available():
        pytest.skip("the e2b provider's plugin is not installed")
    monkeypatch.setenv("PSDK_E2B_READY_TIMEOUT", "-5")
    with pytest.raises(ConfigError, match=r"ready_timeout \(PSDK_E2B_READY_TIMEOUT\) must be"):
        open_provider("e2b", api_key="k")


@pytest.mark.parametrize("text", ['provider = "local"\n\n[provider.local]\nhome = "/x"\n',
                                  '# the local one\n\n[provider.local]\nhome = "/x"\n'])
def test_a_singular_provider_table_is_named_with_the_file_line_and_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = _write_config(tmp_path / "psdk.toml", text, monkeypatch)
    with pytest.raises(ConfigError) as caught:
        open_provider()
    assert caught.value.message.startswith(
        f"{path}, line 3: [provider.local] should be [providers.local]: ")


def test_a_broken_file_is_named_with_the_parsers_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_config(tmp_path / "psdk.toml", 'provider = \n', monkeypatch)
    with pytest.raises(ConfigError, match=f"cannot read config file {path}: Invalid value"):
        provider_name()
