"""Mutation operators for this code base, beside cosmic-ray's core ones (``run.py``
registers them as the operator provider ``psdk``).

The core operators change arithmetic, comparisons, booleans and numbers. The slips that
break this code's promises are often elsewhere: a parse from the wrong end of a string
(``index`` for ``rindex``), a check that is not called, a pattern anchored with ``^``
and ``$``. Each operator here makes one such slip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cosmic_ray.operators.operator import Example, Operator
from parso.python.tree import Keyword, Name, PythonNode, String

__all__ = ["OPERATORS"]

Position = tuple[tuple[int, int], tuple[int, int]]

# A method and the one a slip calls instead.
_SWAPS = {
    "index": "rindex", "rindex": "index", "find": "rfind", "rfind": "find",
    "partition": "rpartition", "rpartition": "partition", "split": "rsplit",
    "rsplit": "split", "startswith": "endswith", "endswith": "startswith",
    "lstrip": "rstrip", "rstrip": "lstrip", "removeprefix": "removesuffix",
    "removesuffix": "removeprefix", "fullmatch": "match",
}


def _is_method_name(node: Any) -> bool:
    """Whether ``node`` is the name in ``x.name(...)``."""
    trailer = node.parent
    if not (isinstance(node, Name) and trailer is not None and trailer.type == "trailer"
            and trailer.children[0] == "."):
        return False
    following = trailer.get_next_sibling()
    return following is not None and following.type == "trailer" and \
        following.children[0] == "("


class SwapMethod(Operator):
    """``s.index(x)`` becomes ``s.rindex(x)``, ``find`` ``rfind``, ``fullmatch``
    ``match``, and so on: the same call from the other end, or looser."""

    def mutation_positions(self, node: Any) -> Iterator[Position]:
        if _is_method_name(node) and node.value in _SWAPS:
            yield (node.start_pos, node.end_pos)

    def mutate(self, node: Any, index: int) -> Any:
        node.value = _SWAPS[node.value]
        return node

    @classmethod
    def examples(cls) -> tuple[Example, ...]:
        return (Example("s.index(')')", "s.rindex(')')"),)


class SkipCall(Operator):
    """A statement that is a bare call (``check_path(p)``, ``await self._check(x)``) is
    not made: ``None`` takes its place. A check that nothing notices missing is a hole."""

    def mutation_positions(self, node: Any) -> Iterator[Position]:
        if isinstance(node, PythonNode) and node.type == "atom_expr" and \
                node.parent is not None and node.parent.type == "simple_stmt" and \
                node.children[-1].type == "trailer" and node.children[-1].children[0] == "(":
            yield (node.start_pos, node.end_pos)

    def mutate(self, node: Any, index: int) -> Any:
        return Keyword("None", node.start_pos, prefix=node.get_first_leaf().prefix)

    @classmethod
    def examples(cls) -> tuple[Example, ...]:
        return (Example("check(x)\n", "None\n"),)


class LooseAnchors(Operator):
    """A pattern anchored with ``\\A`` and ``\\Z`` is anchored with ``^`` and ``$``
    instead, which lets a trailing newline through."""

    def mutation_positions(self, node: Any) -> Iterator[Position]:
        if isinstance(node, String) and "\\Z" in node.value:
            yield (node.start_pos, node.end_pos)

    def mutate(self, node: Any, index: int) -> Any:
        node.value = node.value.replace("\\A", "^").replace("\\Z", "$")
        return node

    @classmethod
    def examples(cls) -> tuple[Example, ...]:
        return (Example('re.compile(r"\\Ax\\Z")', 're.compile(r"^x$")'),)


OPERATORS: dict[str, type[Operator]] = {
    "SwapMethod": SwapMethod, "SkipCall": SkipCall, "LooseAnchors": LooseAnchors,
}
