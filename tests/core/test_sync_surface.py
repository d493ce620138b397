"""The sync facade offers every public call of the async API, with the same parameters:
a method added to ``SandboxProvider``, ``Sandbox``, ``Files``, ``Process``, ``Shell`` or
``WarmPool`` without its blocking twin fails here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from provider_sdk import sync
from provider_sdk.code import SandboxCode
from provider_sdk.manager import WarmPool
from provider_sdk.manager.sync import SyncWarmPool
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Files, Process, Sandbox, Shell
from provider_sdk.terminal import Terminal, Terminals

# Async methods whose blocking twin has another name or shape, and why.
RENAMED = {
    (Sandbox, "__aenter__"): "__enter__",
    (Sandbox, "__aexit__"): "__exit__",
    (SandboxProvider, "__aenter__"): "__enter__",
    (SandboxProvider, "__aexit__"): "__exit__",
    (SandboxProvider, "aclose"): "close",
    (Shell, "aclose"): "close",
    (Shell, "__aenter__"): "__enter__",
    (Shell, "__aexit__"): "__exit__",
    (Terminal, "__aenter__"): "__enter__",
    (Terminal, "__aexit__"): "__exit__",
    (WarmPool, "__aenter__"): "__enter__",
    (WarmPool, "__aexit__"): "__exit__",
}
# Public members that are the provider's own business, not the caller's.
NOT_FOR_CALLERS = {
    (SandboxProvider, "require"),  # checked by each sync call through the async one
    (SandboxProvider, "template_support"),
    (SandboxProvider, "read_limit"),
    (SandboxProvider, "output_limit"),
}

PAIRS = [(SandboxProvider, sync.SyncProvider), (Sandbox, sync.SyncSandbox),
         (Files, sync.SyncFiles), (Process, sync.SyncProcess), (Shell, sync.SyncShell),
         (SandboxCode, sync.SyncCode), (Terminals, sync.SyncTerminals),
         (Terminal, sync.SyncTerminal), (WarmPool, SyncWarmPool)]


def _public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in inspect.getmembers(cls)
            if not name.startswith("_") or name in ("__aenter__", "__aexit__")}


def _parameters(func: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    signature = inspect.signature(func)
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()
            if p.name != "self"]


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS,
                         ids=[a.__name__ for a, _ in PAIRS])
def test_every_async_method_has_a_blocking_twin(async_cls: type, sync_cls: type) -> None:
    missing, different = [], []
    for name, member in _public(async_cls).items():
        if (async_cls, name) in NOT_FOR_CALLERS or not callable(member):
            continue
        twin_name = RENAMED.get((async_cls, name), name)
        twin = getattr(sync_cls, twin_name, None)
        if twin is None:
            missing.append(name)
            continue
        if not inspect.iscoroutinefunction(member) or (async_cls, name) in RENAMED:
            continue
        if _parameters(member) != _parameters(twin):
            different.append(f"{name}: {inspect.signature(member)} vs "
                             f"{inspect.signature(twin)}")
    assert not missing, f"{sync_cls.__name__} lacks {missing}"
    assert not different, "; ".join(different)
