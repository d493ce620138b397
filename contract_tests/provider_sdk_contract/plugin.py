"""The contract suite's pytest plugin: capability skips, strict known failures, sweeping.

Load it from a top-level ``conftest.py``: ``pytest_plugins = ["provider_sdk_contract.plugin"]``.
It is not registered as a ``pytest11`` entry point, so installing the suite changes no
other test run.

At collection, for every test of a :class:`~provider_sdk_contract.ProviderContract`
subclass, it

- skips, with a reason naming them, tests whose ``requires`` capabilities the provider
  does not declare (and ``lacks`` tests for capabilities it does declare), without
  creating a provider;
- marks the tests named in ``known_failures`` ``xfail(strict=True)``, so a fix shows up
  as a failure until its entry is removed;
- refuses, as a usage error, a ``known_failures`` key that names no test, a missing
  ``provider_name``, or a provider that is not installed.

At the end of the session it kills every sandbox still tagged with the run's id, and
deletes the run's volumes, whatever the tests managed to clean up themselves.
"""

from __future__ import annotations

import functools
import inspect
import secrets
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import pytest

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.errors import ProviderNotFound, SandboxError
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import LACKS, REQUIRES, capability_skip
from provider_sdk_contract.run import ContractRun

__all__ = ["ContractRun", "psdk_contract_run"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--contract-sections", metavar="NAMES", default=None,
        help="run only these sections of the contract, by their classes' names less "
             "'Contract', lowercase, comma-separated (lifecycle,pause); other tests of a "
             "contract class are deselected")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{REQUIRES}(*capabilities): skip unless the provider declares them all")
    config.addinivalue_line(
        "markers", f"{LACKS}(capability): skip if the provider declares the capability")


@pytest.fixture(scope="session")
def psdk_contract_run() -> Iterator[ContractRun]:
    """The session's run id; sandboxes tagged with it are killed when the session ends."""
    run = ContractRun(secrets.token_hex(6))
    yield run
    try:
        leftovers = run.sweep()
    except SandboxError as exc:
        warnings.warn(f"contract sweep failed: {exc}", stacklevel=1)
        return
    if leftovers:
        warnings.warn(f"contract run {run.id} left {len(leftovers)} behind, now removed: "
                      f"{', '.join(leftovers)}", stacklevel=1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sections = config.getoption("--contract-sections", None)
    if sections:
        _keep_sections(config, items, {s.strip().lower() for s in sections.split(",")})
    capabilities: dict[type[ContractBase], frozenset[Capability]] = {}
    for item in items:
        cls = getattr(item, "cls", None)
        if not (isinstance(cls, type) and issubclass(cls, ContractBase)):
            continue
        if cls not in capabilities:
            capabilities[cls] = _check_contract_class(cls)
        _apply_marks(item, cls, capabilities[cls])


def _keep_sections(config: pytest.Config, items: list[pytest.Item], wanted: set[str]) -> None:
    """Deselect the contract tests outside the ``wanted`` sections (a section is the
    class that defines the test: ``PauseContract`` is ``pause``)."""
    kept, dropped = [], []
    for item in items:
        cls = getattr(item, "cls", None)
        func = getattr(item, "function", None)
        if not (isinstance(cls, type) and issubclass(cls, ContractBase)) or func is None:
            kept.append(item)
            continue
        section = func.__qualname__.split(".")[0].removesuffix("Contract").lower()
        (kept if section in wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _check_contract_class(cls: type[ContractBase]) -> frozenset[Capability]:
    """Validate a contract class's settings; return its provider's capabilities."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    name = getattr(cls, "provider_name", None)
    if not isinstance(name, str) or not name:
        raise pytest.UsageError(f"{where}: set provider_name to the provider's registry name")
    known = cls.known_failures
    if not isinstance(known, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in known.items()):
        raise pytest.UsageError(
            f"{where}.known_failures must map test names to non-empty reasons")
    tests = {attr for attr in dir(cls) if attr.startswith("test") and callable(getattr(cls, attr))}
    stale = sorted(set(known) - tests)
    if stale:
        raise pytest.UsageError(
            f"{where}.known_failures names no test of the contract: {', '.join(stale)} "
            "(remove the entry, or fix its name)")
    try:
        return registry.load(name).capabilities
    except ProviderNotFound as exc:
        raise pytest.UsageError(f"{where}: {exc}") from exc


def _apply_marks(item: pytest.Item, cls: type[ContractBase],
                 declared: frozenset[Capability]) -> None:
    reason = capability_skip(item, cls.provider_name, declared)
    if reason is not None:
        item.add_marker(pytest.mark.skip(reason=reason))
    test_name = getattr(item, "originalname", item.name)
    if test_name in cls.known_failures:
        item.add_marker(pytest.mark.xfail(reason=cls.known_failures[test_name], strict=True))
    _add_deadline(item, cls.test_timeout)


def _add_deadline(item: pytest.Item, seconds: float) -> None:
    """Fail, instead of hanging, a test still running after ``seconds``.

    The test's coroutine runs in a cancel scope: a provider call that never returns is
    cancelled and reported. Property tests are left alone (each example is small).
    """
    func = getattr(item, "obj", None)
    if not inspect.iscoroutinefunction(func) or hasattr(func, "hypothesis"):
        return

    @functools.wraps(func)
    async def with_deadline(*args: Any, **kwargs: Any) -> None:
        with anyio.move_on_after(seconds):
            await func(*args, **kwargs)
            return
        pytest.fail(f"still running after {seconds:g} s (the class's test_timeout)",
                    pytrace=False)

    item.obj = with_deadline  # type: ignore[attr-defined]
