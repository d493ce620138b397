"""The registry: lazy entry points, helpful errors, in-process registration, and class
validation against the capability rules."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from memory_provider import MemoryProvider

from provider_sdk import registry
from provider_sdk.capabilities import HOOKS, IMPLIES, Capability
from provider_sdk.distributions import install_hint
from provider_sdk.errors import ConfigError, ProviderNotFound
from provider_sdk.provider import SandboxProvider


@pytest.fixture
def entry_points(monkeypatch: pytest.MonkeyPatch) -> dict[str, Callable[[], object]]:
    """Replace the installed entry points with a dict the test fills."""
    fake: dict[str, Callable[[], object]] = {}
    monkeypatch.setattr(registry, "_entry_points", lambda: dict(fake))
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.setattr(registry, "_registered", {})
    return fake


@pytest.fixture
def plugin_module() -> Iterator[types.ModuleType]:
    """An importable module ``psdk_test_plugin`` holding MemoryProvider as ``Provider``."""
    module = types.ModuleType("psdk_test_plugin")
    module.Provider = MemoryProvider  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_entry_points_are_not_imported_until_loaded(
        entry_points: dict[str, Callable[[], object]]) -> None:
    calls: list[str] = []

    def loader() -> object:
        calls.append("loaded")
        return MemoryProvider

    entry_points["memory"] = loader
    assert registry.available() == ["memory"]
    assert calls == []
    assert registry.load("memory") is MemoryProvider
    assert calls == ["loaded"]


def test_a_loaded_class_is_cached(entry_points: dict[str, Callable[[], object]]) -> None:
    calls: list[int] = []
    entry_points["memory"] = lambda: calls.append(1) or MemoryProvider
    registry.load("memory")
    registry.load("memory")
    assert calls == [1]


def test_installed_provider_from_the_real_entry_points_is_listed() -> None:
    assert "local" in registry.available()


def test_unknown_name_lists_installed(entry_points: dict[str, Callable[[], object]]) -> None:
    entry_points["alpha"] = lambda: MemoryProvider
    entry_points["beta"] = lambda: MemoryProvider
    with pytest.raises(ProviderNotFound, match="installed: alpha, beta") as caught:
        registry.load("gamma")
    assert caught.value.installed == ("alpha", "beta")


def test_unknown_well_known_name_says_what_to_install(
        entry_points: dict[str, Callable[[], object]]) -> None:
    with pytest.raises(ProviderNotFound,
                       match=re.escape(install_hint("sandbox-provider-sdk-e2b"))):
        registry.load("cube")


def test_no_providers_at_all_says_none(entry_points: dict[str, Callable[[], object]]) -> None:
    with pytest.raises(ProviderNotFound, match="installed: none"):
        registry.load("x")


def test_import_failure_names_the_distribution_to_reinstall(
        entry_points: dict[str, Callable[[], object]]) -> None:
    def broken() -> object:
        raise ModuleNotFoundError("No module named 'docker'")

    entry_points["docker"] = broken
    with pytest.raises(ProviderNotFound, match="reinstall sandbox-provider-sdk-docker: "
                       + re.escape(install_hint("sandbox-provider-sdk-docker"))) as caught:
        registry.load("docker")
    assert "No module named 'docker'" in str(caught.value)
    assert isinstance(caught.value.__cause__, ImportError)


def test_entry_point_naming_a_missing_class_is_provider_not_found(
        entry_points: dict[str, Callable[[], object]]) -> None:
    def missing() -> object:
        raise AttributeError("module 'x' has no attribute 'Provider'")

    entry_points["x"] = missing
    with pytest.raises(ProviderNotFound, match="failed to import"):
        registry.load("x")


def test_register_class_wins_over_entry_point(
        entry_points: dict[str, Callable[[], object]]) -> None:
    class Other(MemoryProvider):
        pass

    entry_points["memory"] = lambda: MemoryProvider
    registry.register("memory", Other)
    assert registry.load("memory") is Other


def test_register_by_path_is_lazy(entry_points: dict[str, Callable[[], object]],
                                  plugin_module: types.ModuleType) -> None:
    registry.register("lazy", "psdk_test_plugin:Provider")
    plugin_module.Provider = type("Later", (MemoryProvider,), {})  # type: ignore[attr-defined]
    assert registry.load("lazy") is plugin_module.Provider


def test_register_by_path_to_missing_module_is_provider_not_found(
        entry_points: dict[str, Callable[[], object]]) -> None:
    registry.register("ghost", "psdk_no_such_module:Provider")
    with pytest.raises(ProviderNotFound, match="ghost"):
        registry.load("ghost")


def test_unregister_forgets_the_registration(
        entry_points: dict[str, Callable[[], object]]) -> None:
    registry.register("memory", MemoryProvider)
    registry.load("memory")
    registry.unregister("memory")
    assert "memory" not in registry.available()
    with pytest.raises(ProviderNotFound):
        registry.load("memory")


def test_re_registering_replaces_a_loaded_class(
        entry_points: dict[str, Callable[[], object]]) -> None:
    class Second(MemoryProvider):
        pass

    registry.register("memory", MemoryProvider)
    registry.load("memory")
    registry.register("memory", Second)
    assert registry.load("memory") is Second


# ---------------------------------------------------------------- validation


async def _hook(*args: Any, **kwargs: Any) -> Any:
    return None


# What a provider overrides that writes the base's hooks itself, as providers did before
# roles: every required hook, and the hooks of the memory provider's capabilities, which
# it declares. The registry checks such a class hook by hook.
_Hooked: type[SandboxProvider] = type("Hooked", (SandboxProvider,), {
    "name": "hooked", "capabilities": MemoryProvider.capabilities,
    **{hook: _hook for hook in ("_create", "_info", "_list", "_kill", "_exec", "_read_file",
                                "_write_file", "_list_dir", "_stat", "_mkdir", "_remove",
                                "_rename")},
    **{hook: _hook for c in MemoryProvider.capabilities for hook in HOOKS.get(c, ())}})


def _subclass(**attrs: Any) -> type[SandboxProvider]:
    return type("Custom", (_Hooked,), attrs)


def test_register_validates_the_class_at_once() -> None:
    with pytest.raises(ConfigError, match="is not a SandboxProvider subclass"):
        registry.register("bad", int)  # type: ignore[arg-type]


def test_loaded_object_that_is_not_a_provider_is_refused(
        entry_points: dict[str, Callable[[], object]]) -> None:
    entry_points["bad"] = lambda: object()
    with pytest.raises(ConfigError, match="not a SandboxProvider subclass"):
        registry.load("bad")


def test_name_must_be_a_string() -> None:
    with pytest.raises(ConfigError, match="name must be a string"):
        registry.check_provider_class(_subclass(name=None), "x")


def test_capabilities_must_be_a_frozenset_of_members() -> None:
    with pytest.raises(ConfigError, match="frozenset of Capability"):
        registry.check_provider_class(_subclass(capabilities={"pause"}), "x")
    with pytest.raises(ConfigError, match="frozenset of Capability"):
        registry.check_provider_class(_subclass(capabilities=frozenset({"pause"})), "x")


def test_undeclared_capability_with_its_hook_implemented_is_refused() -> None:
    cls = _subclass(capabilities=_Hooked.capabilities - {Capability.METRICS})
    with pytest.raises(ConfigError, match=r"implements, without declaring .*_metrics\(\)"):
        registry.check_provider_class(cls, "x")


def test_undeclared_capability_with_no_hook_is_accepted() -> None:
    class Lean(_Hooked):
        capabilities = _Hooked.capabilities - {Capability.METRICS}
        _metrics = SandboxProvider._metrics  # the base class's hook, which raises

    assert registry.check_provider_class(Lean, "x") is Lean


def test_declared_capability_without_its_hooks_is_refused() -> None:
    cls = _subclass(capabilities=_Hooked.capabilities | {Capability.NETWORK_POLICY,
                                                         Capability.NETWORK_UPDATE})
    with pytest.raises(ConfigError, match=r"declared but does not implement _update_network"):
        registry.check_provider_class(cls, "x")


@pytest.mark.parametrize("cap", sorted(HOOKS, key=str), ids=str)
def test_each_hook_backed_capability_needs_every_hook(cap: Capability) -> None:
    needed = {c for c in IMPLIES.get(cap, ())} | {cap}
    hooks = {h: _hook for c in needed for h in HOOKS.get(c, ())}
    full = type("Full", (_Hooked,), {"capabilities": _Hooked.capabilities | needed, **hooks})
    registry.check_provider_class(full, "x")
    for missing in HOOKS[cap]:
        partial = type("Partial", (full,), {missing: getattr(SandboxProvider, missing)})
        with pytest.raises(ConfigError, match=f"does not implement {missing}"):
            registry.check_provider_class(partial, "x")


@pytest.mark.parametrize(("cap", "needs"), sorted(IMPLIES.items(), key=lambda i: str(i[0])),
                         ids=lambda v: str(v) if isinstance(v, Capability) else "")
def test_implied_capability_must_be_declared(cap: Capability,
                                             needs: frozenset[Capability]) -> None:
    # Without what ``cap`` needs, and without every other capability that needs it (the
    # hook-based provider declares the memory provider's ``volumes.shared`` and
    # ``volumes.read_only``), so that ``cap`` is the one refused.
    others = {c for c, n in IMPLIES.items() if c != cap and n & needs}
    declared = ((_Hooked.capabilities | {cap}) - needs) - others
    assert cap in declared
    assert not needs & declared
    hooks = {h: _hook for c in declared for h in HOOKS.get(c, ())}
    cls = type("Implies", (_Hooked,), {"capabilities": frozenset(declared), **hooks})
    # Drop the hooks of removed capabilities the hook-based provider implements.
    for c in needs:
        for h in HOOKS.get(c, ()):
            setattr(cls, h, getattr(SandboxProvider, h))
    with pytest.raises(ConfigError, match=f"{cap} needs"):
        registry.check_provider_class(cls, "x")


def test_memory_provider_itself_is_valid() -> None:
    assert registry.check_provider_class(MemoryProvider, "memory") is MemoryProvider


def test_the_hook_based_provider_is_valid() -> None:
    assert registry.check_provider_class(_Hooked, "hooked") is _Hooked


def test_a_provider_made_of_roles_may_override_hooks_to_watch_its_calls() -> None:
    """A subclass of a provider made of roles (its roles make the calls: it overrides no
    hook) that overrides the hooks of create, info and exec to watch them, ``super()``
    passing them on, is not checked hook by hook: the hooks of the capabilities it
    declares are the base's, which pass them to its roles."""
    of_roles = type("OfRoles", (SandboxProvider,), {
        "name": "roles", "capabilities": frozenset({Capability.PAUSE, Capability.METRICS})})
    watching = type("Watching", (of_roles,),
                    {hook: _hook for hook in ("_create", "_info", "_exec")})
    assert registry.check_provider_class(watching, "watching") is watching



# ------------------------------------------- capabilities declared as data


def _declaring(module: types.ModuleType, declared: frozenset[Capability],
               entry_points: dict[str, Callable[[], object]]) -> None:
    from importlib.metadata import EntryPoint

    module.PROVIDER_CAPABILITIES = {"Provider": declared}  # type: ignore[attr-defined]
    point = EntryPoint(name="memory", value=f"{module.__name__}:Provider",
                       group=registry.GROUP)
    entry_points["memory"] = point.load


def test_declared_capabilities_are_read_without_loading_the_class(
        entry_points: dict[str, Callable[[], object]],
        plugin_module: types.ModuleType) -> None:
    declared = frozenset({Capability.PAUSE})
    _declaring(plugin_module, declared, entry_points)
    assert registry.declared_capabilities("memory") == declared
    assert registry._loaded == {}


def test_a_declaration_the_class_does_not_match_is_refused_at_load(
        entry_points: dict[str, Callable[[], object]],
        plugin_module: types.ModuleType) -> None:
    _declaring(plugin_module, frozenset({Capability.PAUSE}), entry_points)
    with pytest.raises(ConfigError, match="PROVIDER_CAPABILITIES"):
        registry.load("memory")


def test_a_matching_declaration_loads(entry_points: dict[str, Callable[[], object]],
                                      plugin_module: types.ModuleType) -> None:
    _declaring(plugin_module, MemoryProvider.capabilities, entry_points)
    assert registry.load("memory") is MemoryProvider
    assert registry.declared_capabilities("memory") == MemoryProvider.capabilities


def test_without_a_declaration_the_class_is_asked(
        entry_points: dict[str, Callable[[], object]]) -> None:
    entry_points["memory"] = lambda: MemoryProvider
    assert registry.declared_capabilities("memory") == MemoryProvider.capabilities


@pytest.mark.parametrize("name", ["local", "docker", "e2b", "cube", "daytona"])
def test_each_installed_provider_declares_what_its_class_declares(name: str) -> None:
    if name not in registry.available():
        pytest.skip(f"{name} is not installed")
    assert registry.declared_capabilities(name) == registry.load(name).capabilities
