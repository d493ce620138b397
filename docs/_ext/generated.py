"""mkdocs hooks: the parts of the site that are data in the code, generated from it
each time the site builds, so they cannot drift from it.

- ``<!-- psdk:capability-matrix -->`` becomes the capability matrix: one row per
  :class:`~provider_sdk.capabilities.Capability` (its meaning taken from the member's
  docstring), one column per installed provider (what its class declares).
- ``<!-- psdk:layers -->`` becomes the tree's layers: for each package, what it may
  import of the others and its modules by floor, read from the imports
  (:mod:`import_graph`). An import loop fails the build: its modules stand on no floor.
- ``<!-- psdk:command NAME... -->`` in ``cli.md`` becomes each named command's usage and
  options, read from the ``psdk`` argparse parser. A command the parser has and no marker
  names gets a section of its own at the end; a marker naming a command the parser does
  not have fails the build.

Prose stays in the Markdown; everything that lists commands, options or capabilities
comes from here. It only reads the code.
"""

from __future__ import annotations

import argparse
import ast
import collections
import inspect
import itertools
import os
import re
import sys
from typing import Any

from mkdocs.exceptions import PluginError

_MATRIX = "<!-- psdk:capability-matrix -->"
_LAYERS = "<!-- psdk:layers -->"
_COMMAND = re.compile(r"^<!-- psdk:command (?P<names>[\w ]+) -->$", re.MULTILINE)
_ROLE = re.compile(r":(?:class|meth|func|data|attr|mod|exc|obj):`~?(?:[\w.]+\.)?(?P<name>\w+)`")
_USAGE_WIDTH = "88"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace this page's markers with what the code says."""
    if _MATRIX in markdown:
        markdown = markdown.replace(_MATRIX, capability_matrix())
    if _LAYERS in markdown:
        markdown = markdown.replace(_LAYERS, layers())
    if page.file.src_uri == "cli.md":
        markdown = cli_reference(markdown)
    elif _COMMAND.search(markdown):
        raise PluginError(f"{page.file.src_uri}: psdk:command markers belong in cli.md")
    return markdown


# ------------------------------------------------------------------ capabilities


def capability_matrix() -> str:
    """A Markdown table: every capability, what it means, and which providers declare it
    (the local provider first, then the installed plugins by name)."""
    from provider_sdk import registry
    from provider_sdk.capabilities import Capability

    names = sorted(registry.available(), key=lambda n: (n != "local", n))
    declared = {name: registry.load(name).capabilities for name in names}
    meaning = _member_docs(Capability)
    rows = ["| capability | what it means | " + " | ".join(f"`{n}`" for n in names) + " |",
            "|---|---|" + "---|" * len(names)]
    for capability in Capability:
        marks = " | ".join("yes" if capability in declared[n] else "no" for n in names)
        rows.append(f"| `{capability.value}` | {meaning[capability.name]} | {marks} |")
    return "\n".join(rows)


# ------------------------------------------------------------------ layers


def layers() -> str:
    """For each package of the tree: what it may import of the others, and its own
    modules by floor (a subpackage as one), the ground floor first."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import import_graph

    imports = import_graph.graph()
    if loops := import_graph.cycles(imports):
        raise PluginError(f"modules import each other in a loop: {loops}")
    parts = []
    for package, folder in import_graph.PACKAGES.items():
        allowed = ", ".join(f"`{p}`" for p in sorted(import_graph.ALLOWED[package]))
        where = folder.relative_to(import_graph.ROOT)
        rows = [f"**`{package}`** (`{where}/`), may import: {allowed or 'no other package'}",
                "", "| floor | modules |", "|---|---|"]
        for number, floor in enumerate(import_graph.floors(
                import_graph.folded(imports, package)), start=1):
            rows.append(f"| {number} | " + ", ".join(
                f"`{name}/`" if (folder / name).is_dir() else f"`{name}`" for name in floor)
                + " |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _member_docs(cls: type) -> dict[str, str]:
    """The docstrings under a class's attributes (``X = ...`` then a string), as one
    line of Markdown each."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.Assign) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.targets[0].id] = _markdown(after.value.value)  # type: ignore[attr-defined]
    return docs


def _markdown(text: str) -> str:
    """reST inline markup on one line, as Markdown fit for a table cell."""
    text = _ROLE.sub(lambda m: f"``{m['name']}``", " ".join(text.split()))
    return text.replace("``", "`").replace("|", "\\|")


# ------------------------------------------------------------------------ the CLI


def cli_reference(markdown: str) -> str:
    """``cli.md`` with each command's usage and options from the parser, and a section
    for every command that has none."""
    commands = _commands(_psdk_parser())
    documented: set[str] = set()

    def render(match: re.Match[str]) -> str:
        names = match["names"].split()
        unknown = [n for n in names if n not in commands]
        if unknown:
            raise PluginError(f"cli.md documents {', '.join(unknown)}, which psdk does not "
                              f"have (it has {', '.join(commands)})")
        documented.update(names)
        return "\n\n".join(_command(f"psdk {n}", commands[n]) for n in names)

    markdown = _COMMAND.sub(render, markdown)
    for name, parser in commands.items():
        if name not in documented:
            markdown += (f"\n\n## psdk {name}\n\n{_sentence(parser.description)}\n\n"
                         + _command(f"psdk {name}", parser))
    return markdown


def _psdk_parser() -> argparse.ArgumentParser:
    from provider_sdk.cli.parser import build_parser

    def not_run(*args: object) -> int:
        raise AssertionError("the documentation never runs a command")

    handlers: dict[str, Any] = collections.defaultdict(lambda: not_run)
    return build_parser(handlers)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands, in the order it declares them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command(title: str, parser: argparse.ArgumentParser) -> str:
    """Usage and an options table; for a command with actions (``template build``),
    the same for each action."""
    actions = _commands(parser)
    if actions:
        return "\n\n".join(
            f"**`{title} {name}`**: {_sentence(sub.description or _help(parser, name))}\n\n"
            + _command(f"{title} {name}", sub) for name, sub in actions.items())
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _USAGE_WIDTH  # argparse wraps usage at the terminal's width
    try:
        usage = parser.format_usage().rstrip()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    prefix = "usage: "  # continuation lines are indented past it: take it off them all
    usage = "\n".join(line.removeprefix(prefix) if line.startswith(prefix)
                      else line[len(prefix):] for line in usage.splitlines())
    rows = [_option_row(a) for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    table = ("| option | meaning |\n|---|---|\n" + "\n".join(rows)) if rows else ""
    return f"```text\n{usage}\n```" + (f"\n\n{table}" if table else "")


def _option_row(action: argparse.Action) -> str:
    metavar = action.metavar if isinstance(action.metavar, str) else None
    if action.option_strings:
        takes = "" if action.nargs == 0 else f" {metavar or action.dest.upper()}"
        name = ", ".join(f"{o}{takes}" for o in action.option_strings)
    else:
        name = metavar or action.dest
    meaning = _markdown(action.help or "")
    if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0 \
            and "default" not in meaning:
        meaning += f" (default: `{action.default}`)"
    return f"| `{name}` | {meaning} |"


def _help(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _sentence(text: str | None) -> str:
    text = (text or "").strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "." if text else ""
