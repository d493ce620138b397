"""Value types validate themselves: a bad field is InvalidInput naming it; env values
never show in a repr."""

from __future__ import annotations

import re
import types
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from provider_sdk.errors import InvalidInput
from provider_sdk.models import (
    ExecResult,
    ExposedPort,
    FileInfo,
    FileType,
    Lifecycle,
    Metrics,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
    Volume,
    VolumeMount,
    broken_reason,
)

env_names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z")
no_nul = st.text(max_size=30).filter(lambda s: "\0" not in s)


@pytest.mark.parametrize(("fields", "named"), [
    ({"cwd": "relative/dir"}, "cwd"),
    ({"cwd": "/bad\0dir"}, "cwd"),
    ({"env": {"1BAD": "x"}}, "env"),
    ({"env": {"A-B": "x"}}, "env"),
    ({"env": {"": "x"}}, "env"),
    ({"env": {"OK\n": "x"}}, "env"),  # "$" in a pattern would take the trailing newline
    ({"env": {"\nOK": "x"}}, "env"),
    ({"env": {"A=B": "x"}}, "env"),
    ({"env": {"OK": "nul\0"}}, "env"),
    ({"env": {"OK": 1}}, "env"),
    ({"env": "A=1"}, "env"),
    ({"metadata": {"k": 2}}, "metadata"),
    ({"metadata": {"": "v"}}, "metadata"),
    ({"metadata": ["k", "v"]}, "metadata"),
    ({"volumes": ["not a mount"]}, "volumes"),
    ({"volumes": [VolumeMount(volume="a", path="/m"), VolumeMount(volume="b", path="/m")]},
     "volumes"),
])
def test_bad_spec_field_is_invalid_input_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(named)):
        SandboxSpec(**fields)


@pytest.mark.parametrize(("cls", "fields", "named"), [
    (Resources, {"cpu": 0}, "cpu"),
    (Resources, {"memory_mb": -1}, "memory_mb"),
    (Resources, {"disk_mb": 0}, "disk_mb"),
    (Resources, {"cpu": "2"}, "cpu"),
    (Lifecycle, {"idle_timeout": 0}, "idle_timeout"),
    (Lifecycle, {"on_idle": "stop"}, "on_idle"),
    (VolumeMount, {"volume": "v", "path": "data"}, "path"),
    (VolumeMount, {"volume": "v", "path": 5}, "path"),
    (NetworkPolicy, {"allow_out": "10.0.0.0/8"}, "allow_out"),
    (NetworkPolicy, {"deny_out": "example.com"}, "deny_out"),
    (TemplateSpec, {"name": "Has Caps"}, "name"),
    (TemplateSpec, {"name": "ok\n"}, "name"),
    (TemplateSpec, {"name": ""}, "name"),
    (TemplateSpec, {"name": "-leading"}, "name"),
    (TemplateSpec, {"name": "x" * 129}, "name"),
    (TemplateSpec, {"name": "ok", "cpu": -1}, "cpu"),
])
def test_bad_field_is_invalid_input_naming_it(cls: type, fields: dict[str, Any],
                                              named: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(named)):
        cls(**fields)


def test_invalid_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="cwd"):
        SandboxSpec(cwd="x")


@pytest.mark.slow
@given(env=st.dictionaries(env_names, no_nul, max_size=5))
def test_valid_env_is_kept_exactly(env: dict[str, str]) -> None:
    assert dict(SandboxSpec(env=env).env) == env


@given(name=st.text(max_size=10).filter(lambda s: not re.fullmatch(r"[A-Za-z_]\w*", s,
                                                                    re.ASCII)))
def test_env_name_that_is_not_an_identifier_is_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="env"):
        SandboxSpec(env={name: "v"})


@given(env=st.dictionaries(env_names, st.text(min_size=4, alphabet="abcdef0123456789")
                           .map(lambda s: f"secret-{s}"), min_size=1, max_size=4))
def test_spec_repr_shows_env_names_but_never_values(env: dict[str, str]) -> None:
    text = repr(SandboxSpec(env=env))
    for name, value in env.items():
        assert repr(name) in text
        assert value not in text


# What a label may hold (provider_sdk.labels): no control character or line separator,
# and no "=" in a key.
label_text = st.text(alphabet=st.characters(
    blacklist_categories=("Cc", "Zl", "Zp", "Cs")), max_size=40)


@given(metadata=st.dictionaries(label_text.filter(lambda k: k and "=" not in k), label_text,
                                max_size=5))
def test_valid_metadata_is_kept_exactly(metadata: dict[str, str]) -> None:
    assert dict(SandboxSpec(metadata=metadata).metadata) == metadata


def test_spec_mappings_are_read_only() -> None:
    spec = SandboxSpec(env={"A": "1"}, metadata={"k": "v"}, extensions={"x.y": 1})
    for mapping in (spec.env, spec.metadata, spec.extensions):
        assert isinstance(mapping, types.MappingProxyType)
    with pytest.raises(TypeError):
        spec.env["B"] = "2"  # type: ignore[index]


def test_spec_is_frozen_and_keyword_only() -> None:
    spec = SandboxSpec()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.template = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        SandboxSpec("template")  # type: ignore[misc]


def test_default_spec_is_safe() -> None:
    spec = SandboxSpec()
    assert spec.network == NetworkPolicy(allow_internet=False)
    assert spec.lifecycle.idle_timeout is None
    assert spec.volumes == ()


def test_any_number_of_mounts_at_distinct_paths_is_taken() -> None:
    mounts = [VolumeMount(volume=f"v{n}", path=f"/m/{n}") for n in range(300)]
    assert SandboxSpec(volumes=mounts).volumes == tuple(mounts)


def test_network_lists_accept_any_iterable_as_a_tuple() -> None:
    policy = NetworkPolicy(allow_out=["127.0.0.1/32", "localhost"])
    assert policy.allow_out == ("127.0.0.1/32", "localhost")


def test_exec_result_decodes_invalid_utf8_with_replacement() -> None:
    result = ExecResult(exit_code=0, stdout_bytes=b"ok\xff", stderr_bytes=b"")
    assert result.stdout == "ok\ufffd"
    assert result.ok
    assert not ExecResult(exit_code=3).ok


@pytest.mark.parametrize(("path", "name"), [("/a/b.txt", "b.txt"), ("/a/dir/", "dir"),
                                             ("/", "/")])
def test_file_info_name_is_the_last_component(path: str, name: str) -> None:
    assert FileInfo(path=path, type=FileType.FILE).name == name


def test_snapshot_captures_is_a_frozenset() -> None:
    snapshot = Snapshot(id="s", provider="p", captures=["filesystem"])
    assert snapshot.captures == frozenset({"filesystem"})


def test_enums_print_as_their_value_and_include_unknown() -> None:
    assert str(SandboxState.RUNNING) == "running"
    assert SandboxState("unknown") is SandboxState.UNKNOWN
    assert str(FileType.DIRECTORY) == "directory"


def test_a_key_that_is_no_string_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="env"):
        SandboxSpec(env={1: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize("cls", [Resources, Lifecycle, TemplateSpec])
@pytest.mark.parametrize("value", [True, False])
def test_a_bool_is_no_number(cls: type, value: bool) -> None:
    field = {Resources: "cpu", Lifecycle: "idle_timeout", TemplateSpec: "memory_mb"}[cls]
    name = {"name": "ok"} if cls is TemplateSpec else {}
    with pytest.raises(InvalidInput, match=field):
        cls(**name, **{field: value})


def test_a_fraction_of_a_cpu_or_a_second_is_taken() -> None:
    assert Resources(cpu=0.5, memory_mb=1, disk_mb=1).cpu == 0.5
    assert Lifecycle(idle_timeout=0.5).idle_timeout == 0.5


def test_a_template_name_takes_up_to_128_characters() -> None:
    assert TemplateSpec(name="x" * 128).name == "x" * 128


def test_the_value_types_keep_what_they_are_given() -> None:
    spec = SandboxSpec(extensions={"e2b.option": 1})
    assert dict(spec.extensions) == {"e2b.option": 1}
    info = SandboxInfo(id="i", provider="p", state=SandboxState.RUNNING,
                       metadata={"k": "v"}, extra={"vendor": 2})
    assert (dict(info.metadata), dict(info.extra)) == ({"k": "v"}, {"vendor": 2})


@pytest.mark.parametrize(("cls", "fields"), [
    (SandboxInfo, {"id": "i", "provider": "p", "state": SandboxState.RUNNING}),
    (Volume, {"id": "i", "name": "n", "provider": "p"}),
    (Snapshot, {"id": "i", "provider": "p"}),
    (Template, {"id": "i", "name": "n", "provider": "p"}),
])
def test_two_readings_are_equal_whatever_the_vendor_leftovers(
        cls: type, fields: dict[str, Any]) -> None:
    assert cls(**fields, extra={"polled_at": 1}) == cls(**fields, extra={"polled_at": 2})
    assert cls(**fields) != cls(**{**fields, "id": "other"})


def test_defaults_leave_everything_off() -> None:
    assert Lifecycle() == Lifecycle(idle_timeout=None, on_idle="kill", auto_resume=False)
    assert not VolumeMount(volume="v", path="/m").read_only
    entry = FileInfo(path="/f", type=FileType.FILE)
    assert (entry.size, entry.mode) == (0, 0)


@pytest.mark.parametrize(("cls", "args"), [
    (Resources, (1.0,)),
    (Lifecycle, (10.0,)),
    (NetworkPolicy, (True,)),
    (VolumeMount, ("v", "/m")),
    (SandboxInfo, ("i", "p", SandboxState.RUNNING)),
    (FileInfo, ("/f", FileType.FILE)),
    (Volume, ("i", "n", "p")),
    (Snapshot, ("i", "p")),
    (ExposedPort, (80, "http://h/?t=x", "http://h/", "x")),
    (Metrics, (1.0,)),
    (TemplateSpec, ("name",)),
    (Template, ("i", "n", "p")),
])
def test_value_types_take_keywords_only(cls: type, args: tuple[Any, ...]) -> None:
    """Many fields are of the same type: a value in the wrong place is refused."""
    with pytest.raises(TypeError):
        cls(*args)


def test_an_exposed_port_never_shows_its_token() -> None:
    port = ExposedPort(port=80, url="http://127.0.0.1:9/?psdk_token=tok-123",
                       base_url="http://127.0.0.1:9/", token="tok-123",
                       token_header="X-Psdk-Token")
    assert "tok-123" not in repr(port)
    assert "http://127.0.0.1:9/" in repr(port)
    assert port.token.reveal() == "tok-123"


@pytest.mark.parametrize(("state", "extra", "reason"), [
    (SandboxState.ERROR, {"broken": "state file\n  cut short"}, "state file cut short"),
    (SandboxState.ERROR, {}, None),
    (SandboxState.ERROR, {"broken": ""}, None),
    (SandboxState.RUNNING, {"broken": "stale"}, None),
])
def test_a_broken_record_gives_its_reason_on_one_line(
        state: SandboxState, extra: dict[str, str], reason: str | None) -> None:
    info = SandboxInfo(id="i", provider="p", state=state, extra=extra)
    assert broken_reason(info) == reason
