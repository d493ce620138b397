"""The settings read outside a provider's constructor (the template builds' registry
and envd, the emulators' keys and Docker Engine) go through the same parser as every
provider's, ``provider_sdk.settings.Settings``: a bad value is the same ``ConfigError``,
naming the setting and its variable, and a secret's value is never in it."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from provider_sdk_e2b._cube_templates import CubeTemplates
from provider_sdk_templates import Registry

from provider_sdk import emulators
from provider_sdk.errors import ConfigError
from provider_sdk.models import TemplateSpec
from provider_sdk.secret import Secret

pytestmark = pytest.mark.anyio

REGISTRY_VARS = ("PSDK_REGISTRY", "PSDK_REGISTRY_USERNAME", "PSDK_REGISTRY_PASSWORD")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def password(monkeypatch: pytest.MonkeyPatch) -> str:
    """A registry password in the environment, which no message may show."""
    for var in REGISTRY_VARS:
        monkeypatch.delenv(var, raising=False)
    value = f"psdk-password-{secrets.token_hex(8)}"
    monkeypatch.setenv("PSDK_REGISTRY_USERNAME", "builder")
    monkeypatch.setenv("PSDK_REGISTRY_PASSWORD", value)
    return value


def _shown(error: BaseException) -> str:
    return f"{error} {error!r} {error.args!r}"


@pytest.mark.parametrize("address", ["not a registry!", "127.0.0.1:99999", "ftp://host"])
def test_a_bad_registry_names_its_variable_and_never_the_password(
        monkeypatch: pytest.MonkeyPatch, password: str, address: str) -> None:
    monkeypatch.setenv("PSDK_REGISTRY", address)
    with pytest.raises(ConfigError) as caught:
        Registry.from_settings(provider="cube")
    assert caught.value.provider == "cube"
    assert caught.value.message.startswith("the setting registry (PSDK_REGISTRY) must be "
                                           "HOST[:PORT]")
    assert f"got {address!r}" in caught.value.message
    assert password not in _shown(caught.value)


def test_credentials_written_into_the_registry_address_are_not_shown(
        monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    for written in (password, f"{password}@x/y"):
        monkeypatch.setenv("PSDK_REGISTRY", f"https://builder:{written}@registry.test:5000")
        with pytest.raises(ConfigError, match=r"PSDK_REGISTRY.*'https://\*\*\*@registry") \
                as caught:
            Registry.from_settings(provider="cube")
        assert password not in _shown(caught.value)
    with pytest.raises(ConfigError) as parsed:
        Registry.parse(f"builder:{password}@registry.test")
    assert password not in _shown(parsed.value)


def test_a_good_registry_is_read_with_its_credentials(
        monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    monkeypatch.setenv("PSDK_REGISTRY", "127.0.0.1:5000")
    registry = Registry.from_settings(provider="cube")
    assert registry is not None
    assert (registry.host, registry.scheme, registry.username) == \
        ("127.0.0.1:5000", "http", "builder")
    assert isinstance(registry.password, Secret)
    assert registry.auth() == {"username": "builder", "password": password}
    assert password not in repr(registry)
    given = Registry.from_settings("https://registry.test", provider="cube")
    assert given is not None
    assert (given.host, given.scheme) == ("registry.test", "https")
    monkeypatch.delenv("PSDK_REGISTRY")
    assert Registry.from_settings(provider="cube") is None


async def _refused_call(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("nothing is asked of Cube before the settings are checked")


@pytest.mark.parametrize("where", ["missing", "directory"])
async def test_an_envd_that_is_not_a_file_is_refused_before_anything_is_built(
        monkeypatch: pytest.MonkeyPatch, password: str, tmp_path: Path, where: str) -> None:
    monkeypatch.setenv("PSDK_REGISTRY", "127.0.0.1:5000")
    envd = tmp_path / "envd"
    if where == "directory":
        envd.mkdir()
    monkeypatch.setenv("PSDK_CUBE_ENVD", str(envd))
    builder = CubeTemplates(call=_refused_call, provider="cube")
    spec = TemplateSpec(name="psdk-envd", dockerfile="FROM psdk-base:bookworm-2\n")
    with pytest.raises(ConfigError) as caught:
        await builder.build(spec, "0" * 64, force=False, on_progress=None)
    assert caught.value.provider == "cube"
    assert caught.value.message == (f"the setting envd (PSDK_CUBE_ENVD) must be an envd "
                                    f"binary (a file), got {str(envd)!r}")
    assert password not in _shown(caught.value)


@pytest.mark.parametrize(("name", "variable"), [("e2b", "E2B_API_KEY"),
                                                ("cube", "CUBE_API_KEY"),
                                                ("daytona", "DAYTONA_API_KEY")])
async def test_an_emulator_without_its_key_names_the_variable(
        monkeypatch: pytest.MonkeyPatch, name: str, variable: str) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ConfigError) as caught:
        async with emulators.run(name, emulators.EmulatorOptions()):
            pass
    assert caught.value.provider == name
    assert caught.value.message == (f"the setting api_key ({variable}) is required: pass "
                                    f"api_key or set {variable} in the environment")


def test_the_emulators_docker_engine_is_read_as_the_docker_provider_reads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from provider_sdk_emulators.e2b._templates_cube import _Engine

    monkeypatch.setenv("DOCKER_HOST", "ftp://127.0.0.1:2375")
    with pytest.raises(ConfigError) as caught:
        _Engine()
    assert caught.value.provider == "docker"
    assert caught.value.message == ("the setting base_url (DOCKER_HOST) must be a "
                                    "unix/http+unix/tcp/http URL, got 'ftp://127.0.0.1:2375'")


def test_the_base_template_of_e2b_builds_is_the_docker_providers_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from provider_sdk_docker import DEFAULT_TEMPLATE
    from provider_sdk_emulators.e2b._templates_e2b import _base_image

    monkeypatch.setenv("PSDK_DOCKER_TEMPLATE", "psdk-other-base:1")
    assert _base_image() == "psdk-other-base:1"
    monkeypatch.setenv("PSDK_DOCKER_TEMPLATE", "")  # empty counts as unset
    assert _base_image() == DEFAULT_TEMPLATE
