"""Who may work on an owner's sandbox: the claim across processes, the lock within one.

The manager creates, repairs, pauses or releases an owner's sandbox only while it holds
the owner's claim in the binding store (:func:`owner_claim` names it), so managers in
other processes and replicas wait for the binding instead of making their own, and the
reaper spares the sandboxes of a claimed owner. Within one process, :class:`_OwnerLock`
lets one task at a time acquire or release a given owner.

An owner is checked once, by :func:`check_owner`, wherever one enters: the manager's
methods, the stores' and the reaper's reading of labels. While a command runs through a
manager's handle, the owner's *use lease* (:func:`use_claim`) is held, so that no
replica's idle sweep pauses the sandbox under it.

This module names claims, checks owners and holds the in-process lock; it must not talk
to a store or a provider.
"""

from __future__ import annotations

import unicodedata

import anyio

from provider_sdk.errors import InvalidInput

__all__ = ["MAX_OWNER", "USE_TOKEN", "check_owner", "owner_claim", "use_claim"]

MAX_OWNER = 256
"""Longest owner, in characters: it is a label's value, a store's key and a claim's name
(PostgreSQL indexes at most about 2700 bytes of a key; 256 characters are at most 1 KiB)."""

USE_TOKEN = "in-use"
"""The token of every use lease: whoever uses a sandbox renews the same lease."""


def check_owner(owner: object) -> str:
    """``owner`` if it is one; :class:`~provider_sdk.errors.InvalidInput` otherwise.

    An owner is a string of 1 to :data:`MAX_OWNER` characters that UTF-8 can encode (no
    lone surrogate) and that holds no control character and no line or paragraph
    separator (it is shown in labels, logs and terminals).
    """
    if not isinstance(owner, str) or not owner:
        raise InvalidInput(f"owner must be a non-empty string, got {_shown(owner)}")
    if len(owner) > MAX_OWNER:
        raise InvalidInput(f"owner: {len(owner)} characters, at most {MAX_OWNER} allowed")
    if not owner.isprintable() and any(
            unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in owner):
        raise InvalidInput(f"owner must hold no control character, line separator or "
                           f"lone surrogate, got {_shown(owner)}")
    return owner


def check_fence(fence: object) -> tuple[str, str] | None:
    """``fence`` if it is ``None`` or a ``(claim name, token)`` pair of non-empty strings;
    :class:`~provider_sdk.errors.InvalidInput` otherwise (before a store reads it)."""
    if fence is None:
        return None
    if (not isinstance(fence, tuple) or len(fence) != 2
            or not all(isinstance(part, str) and part for part in fence)):
        raise InvalidInput(f"fence must be a (claim name, token) pair of non-empty strings, "
                           f"got {_shown(fence)}")
    return fence[0], fence[1]


def _shown(value: object) -> str:
    text = ascii(value)
    return text if len(text) <= 60 else text[:60] + "..."


def owner_claim(owner: str) -> str:
    """The name of the claim a manager holds while it creates, repairs, pauses or
    releases ``owner``'s sandbox (the reaper takes it too, before it kills one)."""
    return f"owner:{owner}"


def use_claim(owner: str) -> str:
    """The name of ``owner``'s use lease: held (by :data:`USE_TOKEN`) while the owner's
    sandbox is used, and for ``idle_pause`` after; an idle sweep pauses only a sandbox
    whose lease has run out, by the store's clock."""
    return f"use:{owner}"


class _OwnerLock:
    """Holds ``owner``'s key in ``locks`` while inside. Uncontended it neither yields
    to the event loop nor makes an event (a store hit stays as cheap as its work);
    a task that has to wait puts an event there for the holder to set."""

    __slots__ = ("locks", "owner")

    def __init__(self, locks: dict[str, anyio.Event | None], owner: str) -> None:
        self.locks = locks
        self.owner = owner

    async def __aenter__(self) -> None:
        while self.owner in self.locks:
            waiting = self.locks[self.owner]
            if waiting is None:
                waiting = self.locks[self.owner] = anyio.Event()
            await waiting.wait()
        self.locks[self.owner] = None

    async def __aexit__(self, *exc_info: object) -> None:
        waiting = self.locks.pop(self.owner)
        if waiting is not None:
            waiting.set()
