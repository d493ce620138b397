"""Labels are checked once, in the core, for every provider: a bad key or value is
InvalidInput naming the key and carrying the provider; a provider's internal labels are
refused in what callers pass and never shown in ``SandboxInfo.metadata``."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_provider import STORE, MemoryProvider, Store

from provider_sdk import open_provider, registry
from provider_sdk.errors import InvalidInput
from provider_sdk.labels import MAX_KEY, MAX_LABELS, MAX_VALUE, check_labels
from provider_sdk.models import SandboxInfo, SandboxSpec

pytestmark = pytest.mark.anyio

_BAD = [
    ({"a=b": "x"}, "'a=b'", "'='"),
    ({"a\nb": "x"}, "'a\\nb'", "control character in its key"),
    ({"ok": "line\rbreak"}, "'ok'", "control character in its value"),
    ({"ok": "sep\u2028arated"}, "'ok'", "control character in its value"),
    ({"": "x"}, "''", "empty key"),
    ({"k" * (MAX_KEY + 1): "x"}, "'kkkk", f"at most {MAX_KEY}"),
    ({"big": "v" * (MAX_VALUE + 1)}, "'big'", f"at most {MAX_VALUE}"),
]


@pytest.mark.parametrize(("labels", "named", "why"), _BAD)
def test_a_bad_label_is_invalid_input_naming_its_key(labels: dict[str, str], named: str,
                                                     why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_labels(labels)
    assert named in str(caught.value)
    assert why in str(caught.value)


def test_an_error_quotes_a_long_key_shortened() -> None:
    with pytest.raises(InvalidInput) as caught:
        check_labels({"k" * 100_000: "v"})
    assert len(str(caught.value)) < 200


def test_too_many_labels_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=f"at most {MAX_LABELS}"):
        SandboxSpec(metadata={f"k{i}": "v" for i in range(MAX_LABELS + 1)})


def test_labels_at_the_limits_are_kept_exactly() -> None:
    labels = {"k" * MAX_KEY: "v" * MAX_VALUE, "ünïcode.key/x": "tab-free value", "e": ""}
    assert dict(SandboxSpec(metadata=labels).metadata) == labels


@pytest.mark.parametrize(("labels", "named", "why"), _BAD)
async def test_create_refuses_a_bad_label_with_the_provider_in_the_prefix(
        memory: Store, labels: dict[str, str], named: str, why: str) -> None:
    async with open_provider("memory") as provider:
        with pytest.raises(InvalidInput) as caught:
            await provider.create(metadata=labels)
        assert caught.value.provider == "memory"
        assert str(caught.value).startswith("[memory] metadata: label ")
        assert not STORE.boxes


async def test_list_refuses_a_bad_label_filter(memory: Store) -> None:
    async with open_provider("memory") as provider:
        with pytest.raises(InvalidInput, match=r"^\[memory\] metadata: label 'a=b'"):
            await provider.list(metadata={"a=b": "c"})


class _Bookkeeping(MemoryProvider):
    """The memory provider, keeping a label of its own on every sandbox."""

    name = "bookkeeping"
    internal_labels = frozenset({"bk.state"})

    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        tagged = SandboxSpec(metadata={**spec.metadata, "bk.state": '{"idle":3600}'})
        return await super()._create(tagged)


@pytest.fixture
def bookkeeping(memory: Store) -> Iterator[Store]:
    registry.register("bookkeeping", _Bookkeeping)
    yield memory
    registry.unregister("bookkeeping")


async def test_internal_labels_are_hidden_everywhere_info_is_given(bookkeeping: Store) -> None:
    async with open_provider("bookkeeping") as provider:
        sandbox = await provider.create(metadata={"owner": "alice"})
        assert "bk.state" in STORE.boxes[sandbox.id].info.metadata  # the backend keeps it
        seen = [sandbox.info, await provider.get_info(sandbox.id),
                (await provider.connect(sandbox.id)).info,
                *(await provider.list()), await sandbox.refresh(), await sandbox.pause(),
                await sandbox.resume()]
        assert all(dict(info.metadata) == {"owner": "alice"} for info in seen)


async def test_internal_labels_are_refused_in_create_and_list(bookkeeping: Store) -> None:
    async with open_provider("bookkeeping") as provider:
        with pytest.raises(InvalidInput, match=r"'bk\.state' is reserved by the bookkeeping"):
            await provider.create(metadata={"bk.state": "{}"})
        with pytest.raises(InvalidInput, match=r"'bk\.state' is reserved"):
            await provider.list(metadata={"bk.state": "{}"})


@given(text=st.text(max_size=40))
def test_a_label_is_refused_exactly_when_it_holds_a_control_character(text: str) -> None:
    """The rule is Unicode's categories Cc, Zl and Zp, whatever shortcut the check takes
    (printable text has none of them): any other character passes, one of them fails."""
    key = "k" + text.replace("=", "")
    refused = any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)
    for labels in ({key: "v"}, {"k": text}):
        if refused:
            with pytest.raises(InvalidInput, match="control character"):
                check_labels(labels)
        else:
            check_labels(labels)
