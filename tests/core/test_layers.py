"""The tree's imports hold to the rules docs/architecture.md draws: no module imports one
that imports it back (type-only imports included), packages import only what they may,
and none reaches into another's private modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))
import import_graph

GRAPH = import_graph.graph()


def test_the_tree_is_read() -> None:
    assert {"provider_sdk.provider", "provider_sdk_e2b.cube",
            "provider_sdk_contract.plugin"} <= GRAPH.keys()
    assert "provider_sdk.errors" in GRAPH["provider_sdk.provider"]
    # A type-only import counts: the registry names providers only for type checking.
    assert "provider_sdk.provider" in GRAPH["provider_sdk.registry"]


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert import_graph.cycles(GRAPH) == []


def test_every_module_stands_on_a_floor() -> None:
    for package in import_graph.PACKAGES:
        folded = import_graph.folded(GRAPH, package)
        placed = {name for floor in import_graph.floors(folded) for name in floor}
        assert placed == folded.keys(), package


def test_packages_import_only_what_they_may() -> None:
    assert import_graph.crossings(GRAPH) == []


def test_no_package_reaches_into_anothers_private_modules() -> None:
    assert import_graph.private_reaches(GRAPH) == []


@pytest.mark.parametrize(("graph", "loops"), [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_loops_are_found(graph: dict[str, set[str]], loops: list[list[str]]) -> None:
    assert sorted(import_graph.cycles(graph)) == loops


def test_floors_stack_and_leave_loops_out() -> None:
    assert import_graph.floors({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == [
        ["b"], ["a"], ["c"]]
    assert import_graph.floors({"a": {"b"}, "b": {"a"}, "c": set()}) == [["c"]]


def test_rules_are_seen_broken() -> None:
    imports = {"provider_sdk.models": frozenset({"provider_sdk_docker._engine"}),
               "provider_sdk_docker._engine": frozenset()}
    assert import_graph.crossings(imports) == [
        "provider_sdk.models -> provider_sdk_docker._engine"]
    assert import_graph.private_reaches(imports) == [
        "provider_sdk.models -> provider_sdk_docker._engine"]
