"""What a :class:`~provider_sdk.manager.pool.WarmPool` writes on its members and in the
store: the labels a member carries, the names of the pool's claims, the fingerprint of
the spec a member was made for, and :class:`ClaimedSandbox`, the handle a claim returns.

The pool, the manager's lookup and the reaper read these; this module must not talk to
a store or a provider.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from provider_sdk.manager._env_handle import EnvSandbox
from provider_sdk.models import SandboxInfo, SandboxSpec, SandboxState

__all__ = ["EXPIRES_LABEL", "POOL_LABEL", "SPEC_LABEL", "TAKEN_LABEL",
           "ClaimedSandbox", "LIVE", "MADE_TOKEN", "OWN_LABELS", "alive_claim", "created_time",
           "expiry", "fingerprint", "made_claim", "refill_claim", "taken_claim"]

POOL_LABEL = "psdk.pool"
"""The label each member carries, holding its pool's name."""
SPEC_LABEL = "psdk.pool.spec"
"""The label holding the fingerprint of the spec (and template build) a member was made
for; a pool drains members whose fingerprint is not its own."""
EXPIRES_LABEL = "psdk.pool.expires"
"""The label holding the Unix time after which a member is too old to hand out."""
TAKEN_LABEL = "psdk.pool.taken"
"""The label (the Unix time) a member gets as it is handed out, where labels change after
create: no pool, reaper or drain takes it then, whatever its store remembers."""
OWN_LABELS = (POOL_LABEL, SPEC_LABEL, EXPIRES_LABEL, TAKEN_LABEL)

LIVE = frozenset({SandboxState.STARTING, SandboxState.RUNNING, SandboxState.PAUSING,
                   SandboxState.PAUSED})


def taken_claim(sandbox_id: str) -> str:
    """The claim that hands out (or kills) the pool member ``sandbox_id``."""
    return f"pool-taken:{sandbox_id}"


def made_claim(sandbox_id: str) -> str:
    """The claim that records, in the store of the pool that made it, that the member
    ``sandbox_id`` was made through that store (held by :data:`MADE_TOKEN`).

    Where labels cannot change after create, a member is free only for a store that
    holds this claim and not its :func:`taken_claim`: any other store cannot know
    whether it was handed out."""
    return f"pool-made:{sandbox_id}"


MADE_TOKEN = "made"
"""The token of every :func:`made_claim`, so that any pool or reaper can release it."""


def refill_claim(name: str) -> str:
    """The claim a pool holds while it makes members for the pool ``name``."""
    return f"pool-refill:{name}"


def alive_claim(name: str) -> str:
    """The claim that says some process runs the pool ``name``."""
    return f"pool-alive:{name}"


class ClaimedSandbox(EnvSandbox):
    """A sandbox handed out by a :class:`WarmPool`, with the environment the claim gave
    it (``env``) applied under every command's own ``env``. It is the caller's:
    ``async with`` kills it, as for any sandbox the caller made."""


def fingerprint(spec: SandboxSpec, template: Any = None) -> str:
    """A short digest of everything in ``spec`` (values of its environment included,
    which the digest does not reveal) and of ``template``."""
    text = json.dumps([_plain(spec), template], sort_keys=True, default=repr,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        return {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def expiry(info: SandboxInfo) -> float:
    """When ``info``'s member is too old to hand out (at once if its label is garbled)."""
    try:
        return float(info.metadata.get(EXPIRES_LABEL, "inf"))
    except ValueError:
        return 0.0


def created_time(info: SandboxInfo) -> float:
    """When ``info``'s member was made, for handing out the oldest first."""
    return info.created_at.timestamp() if info.created_at is not None else float("inf")
