"""The claim's and the use lease's names, and the in-process lock of one owner
(``_claims``; owners themselves are checked in ``test_owners.py``): one task at a time per
owner, other owners never wait, a waiter goes on once the holder leaves, and an
uncontended acquire makes no event and leaves nothing behind."""

from __future__ import annotations

import anyio
import pytest

from provider_sdk.errors import InvalidInput
from provider_sdk.manager._claims import (
    USE_TOKEN,
    _OwnerLock,
    check_fence,
    check_owner,
    owner_claim,
    use_claim,
)

pytestmark = pytest.mark.anyio


def test_the_claim_is_named_for_its_owner() -> None:
    assert owner_claim("alice") == "owner:alice"
    assert owner_claim("bob") != owner_claim("alice")


def test_the_use_lease_is_named_for_its_owner_apart_from_its_claim() -> None:
    """The lease and the claim of one owner are two names, so holding one never holds
    or frees the other; every user renews the one lease with the same token."""
    assert use_claim("alice") == "use:alice"
    assert use_claim("alice") != owner_claim("alice")
    assert use_claim("bob") != use_claim("alice")
    assert USE_TOKEN == "in-use"


async def test_uncontended_the_lock_leaves_nothing_behind() -> None:
    locks: dict[str, anyio.Event | None] = {}
    async with _OwnerLock(locks, "alice"):
        assert locks == {"alice": None}  # held, and no event made for nobody
    assert locks == {}


async def test_one_task_at_a_time_holds_an_owner() -> None:
    locks: dict[str, anyio.Event | None] = {}
    inside: list[str] = []
    most = 0

    async def work(name: str) -> None:
        nonlocal most
        async with _OwnerLock(locks, "alice"):
            inside.append(name)
            most = max(most, len(inside))
            await anyio.sleep(0.01)
            inside.remove(name)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(work, f"task-{n}")
    assert most == 1
    assert locks == {}


async def test_a_waiter_goes_on_once_the_holder_leaves() -> None:
    locks: dict[str, anyio.Event | None] = {}
    order: list[str] = []
    release = anyio.Event()

    async def holder() -> None:
        async with _OwnerLock(locks, "alice"):
            order.append("holder in")
            await release.wait()
            order.append("holder out")

    async def waiter() -> None:
        async with _OwnerLock(locks, "alice"):
            order.append("waiter in")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.sleep(0.01)
            tg.start_soon(waiter)
            await anyio.sleep(0.01)
            assert isinstance(locks["alice"], anyio.Event)  # the waiter's, for the holder
            assert order == ["holder in"]
            release.set()
    assert order == ["holder in", "holder out", "waiter in"]
    assert locks == {}


async def test_other_owners_never_wait() -> None:
    locks: dict[str, anyio.Event | None] = {}
    with anyio.fail_after(10):
        async with _OwnerLock(locks, "alice"), _OwnerLock(locks, "bob"):
            assert set(locks) == {"alice", "bob"}
    assert locks == {}


async def test_the_lock_is_let_go_when_its_block_fails() -> None:
    locks: dict[str, anyio.Event | None] = {}
    with pytest.raises(LookupError):
        async with _OwnerLock(locks, "alice"):
            raise LookupError("the work failed")
    assert locks == {}
    with anyio.fail_after(10):
        async with _OwnerLock(locks, "alice"):
            pass


@pytest.mark.parametrize(("size", "taken"), [(1, True), (256, True), (257, False)])
def test_an_owner_is_at_most_256_characters(size: int, taken: bool) -> None:
    if taken:
        assert check_owner("x" * size) == "x" * size
    else:
        with pytest.raises(InvalidInput, match="257 characters, at most 256"):
            check_owner("x" * size)


def test_a_bad_owner_is_shown_in_at_most_60_characters() -> None:
    """The error shows the owner as ``ascii()`` does, cut after 60 characters."""
    for size in range(50, 60):
        owner = "\x00" + "a" * size
        shown = ascii(owner)
        with pytest.raises(InvalidInput) as refused:
            check_owner(owner)
        expected = shown if len(shown) <= 60 else shown[:60] + "..."
        assert str(refused.value).endswith(expected), (size, str(refused.value))


@pytest.mark.parametrize("owner", ["a\u00a0b", "a\u200bb", "\u00e9l\u00e8ve", "a b"])
def test_an_owner_may_hold_what_prints_oddly_but_breaks_no_line(owner: str) -> None:
    """Only control characters, line and paragraph separators and lone surrogates are
    refused: a no-break or zero-width space is an owner's own business."""
    assert check_owner(owner) == owner


def test_a_fence_is_a_claim_name_and_its_token() -> None:
    assert check_fence(None) is None
    assert check_fence(("owner:alice", "t")) == ("owner:alice", "t")
    assert check_fence(("a", "b")) == ("a", "b")  # one character each is enough


@pytest.mark.parametrize("fence", [("owner:alice",), ("owner:alice", "t", "x"), (),
                                   ("owner:alice", ""), ("", "t"), ("", ""),
                                   ["owner:alice", "t"], ("owner:alice", 7), (7, "t"),
                                   "owner:alice", "ot"])
def test_anything_else_is_refused_and_shown(fence: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_fence(fence)
    assert str(refused.value) == ("fence must be a (claim name, token) pair of non-empty "
                                  f"strings, got {fence!a}")
