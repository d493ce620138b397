"""Who may work on an owner's sandbox: the claim across processes, the lock within one.

The manager creates, repairs, pauses or releases an owner's sandbox only while it holds
the owner's claim in the binding store (:func:`owner_claim` names it), so managers in
other processes and replicas wait for the binding instead of making their own, and the
reaper spares the sandboxes of a claimed owner. Within one process, :class:`_OwnerLock`
lets one task at a time acquire or release a given owner.

This module names claims and holds the in-process lock; it must not talk to a store or
a provider.
"""

from __future__ import annotations

import anyio

__all__ = ["owner_claim"]


def owner_claim(owner: str) -> str:
    """The name of the claim a manager holds while it creates or repairs ``owner``'s
    sandbox (the reaper leaves sandboxes of a claimed owner alone)."""
    return f"owner:{owner}"


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
