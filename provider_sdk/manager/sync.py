"""The blocking twin of :class:`~provider_sdk.manager.SandboxManager`, for scripts and
notebooks. It runs the async manager in the loop of a
:class:`~provider_sdk.sync.SyncProvider`, like the rest of the sync facade::

    from provider_sdk.sync import open_provider
    from provider_sdk.manager import SQLiteStore
    from provider_sdk.manager.sync import SyncSandboxManager

    with open_provider() as provider, \\
            SyncSandboxManager(provider, SQLiteStore("bindings.sqlite3")) as manager:
        sandbox = manager.acquire("alice")
        print(sandbox.exec("echo hello").stdout)

A :class:`SyncWarmPool` runs a :class:`~provider_sdk.manager.WarmPool` the same way, on
its own or as the manager's ``pool``::

    with open_provider() as provider, \
            SyncWarmPool(provider, size=2, store=store) as pool, \
            SyncSandboxManager(provider, store, pool=pool) as manager:
        sandbox = manager.acquire("alice")

This module must not hold logic of its own beyond moving calls between threads.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from provider_sdk.manager.handle import ManagedSandbox
from provider_sdk.manager.manager import SandboxManager
from provider_sdk.manager.pool import ClaimedSandbox, WarmPool
from provider_sdk.manager.store import Binding, BindingStore
from provider_sdk.models import SandboxSpec, Snapshot
from provider_sdk.sync import SyncProvider, SyncSandbox

__all__ = ["SyncClaimedSandbox", "SyncManagedSandbox", "SyncSandboxManager", "SyncWarmPool"]


class _HeldOpen:
    """An async context manager held open in a sync provider's loop until :meth:`close`
    (or the end of a ``with`` block)."""

    def __init__(self, provider: SyncProvider, target: Any) -> None:
        self._run = provider._portal
        self._held = self._run.hold(target)
        self._held.__enter__()
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Leave the async context manager. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._held.__exit__(None, None, None)


class SyncSandboxManager(_HeldOpen):
    """A blocking :class:`~provider_sdk.manager.SandboxManager`.

    Takes the same arguments, with a :class:`~provider_sdk.sync.SyncProvider` in place
    of the async provider (and a :class:`SyncWarmPool` as ``pool``). Its background
    work runs in the provider's loop until :meth:`close` (or the end of its ``with``
    block).
    """

    def __init__(self, provider: SyncProvider, store: BindingStore | None = None,
                 **options: Any) -> None:
        self.provider = provider
        """The provider the sandboxes run on."""
        if isinstance(options.get("pool"), SyncWarmPool):
            options["pool"] = options["pool"].pool
        self.manager = SandboxManager(provider.async_provider, store, **options)
        """The async manager underneath (use it only from async code in the loop)."""
        super().__init__(provider, self.manager)

    def __repr__(self) -> str:
        return f"<SyncSandboxManager provider={self.provider.name!r}>"

    def close(self) -> None:
        """Stop the background work. Sandboxes keep running. Safe to call twice."""
        super().close()

    def acquire(self, owner: str, *, timeout: float | None = None) -> SyncManagedSandbox:
        """The owner's sandbox, within ``timeout`` (default ``acquire_timeout``); see
        :meth:`SandboxManager.acquire <provider_sdk.manager.SandboxManager.acquire>`."""
        return SyncManagedSandbox(self.provider, self._run.call(
            self.manager.acquire, owner, timeout=timeout))

    def release(self, owner: str) -> None:
        """Drop the owner's binding and kill its sandboxes."""
        self._run.call(self.manager.release, owner)

    def binding(self, owner: str) -> Binding | None:
        """The owner's binding as the store has it, or ``None``."""
        return self._run.call(self.manager.binding, owner)

    def snapshot(self, owner: str) -> Snapshot:
        """Snapshot the owner's sandbox now and record it."""
        return self._run.call(self.manager.snapshot, owner)

    def forget(self, owner: str) -> None:
        """Drop the owner's cached handle."""
        self.manager.forget(owner)

    def pause_idle(self) -> builtins.list[str]:
        """One round of the idle policy; the owners paused."""
        return self._run.call(self.manager.pause_idle)

    def snapshot_due(self) -> builtins.list[str]:
        """One round of the snapshot policy; the owners snapshotted."""
        return self._run.call(self.manager.snapshot_due)


class SyncManagedSandbox(SyncSandbox):
    """A blocking :class:`~provider_sdk.manager.ManagedSandbox`."""

    def __init__(self, provider: SyncProvider, sandbox: ManagedSandbox) -> None:
        super().__init__(provider, sandbox)
        self._managed = sandbox

    @property
    def owner(self) -> str:
        """The owner it is bound to."""
        return self._managed.owner

    @property
    def env(self) -> Mapping[str, str]:
        """The owner's environment: defaults for every command."""
        return self._managed.env

    def set_env(self, env: Mapping[str, str] | None = None, /, **more: str) -> None:
        """Add variables to the owner's environment, kept in the binding store."""
        self._run.call(self._managed.set_env, env, **more)

    def unset_env(self, *names: str) -> None:
        """Remove variables from the owner's environment."""
        self._run.call(self._managed.unset_env, *names)


class SyncWarmPool(_HeldOpen):
    """A blocking :class:`~provider_sdk.manager.WarmPool`.

    Takes the same arguments, with a :class:`~provider_sdk.sync.SyncProvider` in place
    of the async provider. It fills itself in the provider's loop from creation until
    :meth:`close` (or the end of its ``with`` block); free members stay for the next
    run.
    """

    def __init__(self, provider: SyncProvider, spec: SandboxSpec | None = None,
                 **options: Any) -> None:
        self.provider = provider
        """The provider that runs the members."""
        self.pool = WarmPool(provider.async_provider, spec, **options)
        """The async pool underneath (use it only from async code in the loop)."""
        super().__init__(provider, self.pool)

    def __repr__(self) -> str:
        return f"<SyncWarmPool {self.pool.name!r} provider={self.provider.name!r}>"

    def close(self) -> None:
        """Stop filling the pool; free members stay. Safe to call twice."""
        super().close()

    @property
    def running(self) -> bool:
        """Whether the pool's background task runs."""
        return self.pool.running

    @property
    def free(self) -> int:
        """How many free members this process knows of now."""
        return self.pool.free

    def wait_filled(self, timeout: float | None = None) -> None:
        """Wait until this process knows of ``size`` free members."""
        self._run.call(self.pool.wait_filled, timeout)

    def claim(self, *, metadata: Mapping[str, str] | None = None,
              env: Mapping[str, str] | None = None) -> SyncClaimedSandbox:
        """A sandbox for the caller, labelled with ``metadata`` and running commands
        with ``env``; see :meth:`WarmPool.claim <provider_sdk.manager.WarmPool.claim>`."""
        return SyncClaimedSandbox(self.provider, self._run.call(
            self.pool.claim, metadata=metadata, env=env))

    def take(self, *, metadata: Mapping[str, str] | None = None) -> SyncSandbox | None:
        """A free member, or ``None`` when there is none at hand."""
        taken = self._run.call(self.pool.take, metadata=metadata)
        return SyncSandbox(self.provider, taken) if taken is not None else None

    def set_spec(self, spec: SandboxSpec) -> None:
        """Make members for ``spec`` from now on; the next round drains the others."""
        self._run.call(self.pool.set_spec, spec)

    def drain(self) -> int:
        """Kill every free member of the pool; returns how many."""
        return self._run.call(self.pool.drain)

    def check(self) -> None:
        """One round of the pool's background task, now."""
        self._run.call(self.pool.check)


class SyncClaimedSandbox(SyncSandbox):
    """A blocking :class:`~provider_sdk.manager.pool.ClaimedSandbox`."""

    def __init__(self, provider: SyncProvider, sandbox: ClaimedSandbox) -> None:
        super().__init__(provider, sandbox)
        self._claimed = sandbox

    @property
    def env(self) -> Mapping[str, str]:
        """The environment the claim gave (a copy)."""
        return self._claimed.env
