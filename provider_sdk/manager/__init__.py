"""One resident sandbox per owner: :class:`SandboxManager` and its binding stores.

An owner is whatever the application binds on: a user id gives each user one
persistent "digital space"; a session id gives each session its own. ::

    from provider_sdk import open_provider
    from provider_sdk.manager import SandboxManager, SQLiteStore

    async with open_provider() as provider, \\
            SandboxManager(provider, SQLiteStore("bindings.sqlite3")) as manager:
        sandbox = await manager.acquire("alice")
        await sandbox.exec("echo hello")

Stores: :class:`MemoryStore` (one process), :class:`SQLiteStore` (the embedded
default: processes on one machine), :class:`RedisStore` and :class:`PostgresStore`
(several application replicas; optional extras ``redis`` and ``postgres``, whose drivers
are imported only when such a store connects). Managers tag the sandboxes they make with
the label :data:`OWNER_LABEL`, and touch no other. :func:`reap` kills tagged sandboxes
that no binding holds (``psdk reap``). A :class:`WarmPool` keeps sandboxes ready for
new owners (or for anyone, on its own). The blocking twin is in
:mod:`provider_sdk.manager.sync`.
"""

from provider_sdk.manager._claims import MAX_OWNER, check_owner
from provider_sdk.manager.handle import ManagedSandbox
from provider_sdk.manager.manager import OWNER_LABEL, SandboxManager, SnapshotPolicy, owner_claim
from provider_sdk.manager.pool import POOL_LABEL, ClaimedSandbox, WarmPool
from provider_sdk.manager.postgres_store import PostgresStore
from provider_sdk.manager.reaper import reap
from provider_sdk.manager.redis_store import RedisStore
from provider_sdk.manager.sqlite_store import SQLiteStore
from provider_sdk.manager.store import Binding, BindingStore, MemoryStore, default_store_path
from provider_sdk.manager.stores import open_store

__all__ = [
    "MAX_OWNER",
    "OWNER_LABEL",
    "POOL_LABEL",
    "Binding",
    "BindingStore",
    "ClaimedSandbox",
    "ManagedSandbox",
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "SQLiteStore",
    "SandboxManager",
    "SnapshotPolicy",
    "WarmPool",
    "check_owner",
    "default_store_path",
    "open_store",
    "owner_claim",
    "reap",
]
