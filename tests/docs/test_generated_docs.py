"""The site's generated parts follow the code: the capability matrix is what each
installed provider declares, and the CLI reference has every command the parser has,
with its options, and fails on a command the parser does not have."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from provider_sdk import registry
from provider_sdk.capabilities import Capability

pytest.importorskip("mkdocs")
from mkdocs.exceptions import PluginError

DOCS = Path(__file__).resolve().parents[2] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
import generated  # noqa: E402


def _page(name: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=name))


def test_the_matrix_has_a_row_per_capability_and_a_column_per_provider() -> None:
    lines = generated.capability_matrix().splitlines()
    header = [c.strip(" `") for c in lines[0].strip("|").split("|")]
    assert header[2:] == sorted(registry.available(), key=lambda n: (n != "local", n))
    rows = {line.split("|")[1].strip(" `"): [c.strip() for c in line.strip("|").split("|")]
            for line in lines[2:]}
    assert list(rows) == [c.value for c in Capability]
    for column, name in enumerate(header[2:], start=2):
        declared = registry.load(name).capabilities
        for capability in Capability:
            expected = "yes" if capability in declared else "no"
            assert rows[capability.value][column] == expected, (name, capability)
    assert "`build_template()` turns a `TemplateSpec`" in "\n".join(lines)


def test_concepts_page_gets_the_matrix() -> None:
    text = (DOCS / "concepts.md").read_text()
    out = generated.on_page_markdown(text, _page("concepts.md"), None, None)
    assert "<!-- psdk:" not in out
    assert "| `templates.build` |" in out


def test_cli_reference_documents_every_command_with_its_options() -> None:
    out = generated.on_page_markdown((DOCS / "cli.md").read_text(), _page("cli.md"), None,
                                     None)
    assert "<!-- psdk:" not in out
    for name in generated._commands(generated._psdk_parser()):
        assert f"psdk {name} [-h]" in out or f"psdk {name} " in out, name
    assert "| `--owner-key K` |" in out
    assert "psdk template build [-h]" in out


def test_a_command_without_a_section_gets_one() -> None:
    out = generated.cli_reference("# CLI reference\n")
    assert "\n## psdk reap\n" in out
    assert "| `--dry-run` | list what would be killed |" in out


def test_a_section_for_a_command_psdk_lacks_fails_the_build() -> None:
    with pytest.raises(PluginError, match="frobnicate"):
        generated.cli_reference("## psdk frobnicate\n\n<!-- psdk:command frobnicate -->\n")


def test_the_layers_show_every_package_and_module_on_its_floor() -> None:
    import import_graph

    text = generated.on_page_markdown("<!-- psdk:layers -->", _page("architecture.md"),
                                      None, None)
    for package in import_graph.PACKAGES:
        assert f"**`{package}`**" in text
    rows = [line for line in text.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == len(import_graph.PACKAGES)
    # Leaves stand on the ground floor, the handles above the hooks they call.
    core = text.split("**`provider_sdk_docker`**")[0]
    floor = {name: int(line.split("|")[1])
             for line in core.splitlines() if line.startswith("| ") and line[2].isdigit()
             for name in line.split("|")[2].replace("`", "").replace(" ", "").split(",")}
    assert floor["results"] == 1
    assert floor["_hooks"] < floor["files"] < floor["sandbox"] < floor["provider"]


def test_the_layers_refuse_an_import_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import import_graph

    monkeypatch.setattr(import_graph, "graph", lambda: {"a": frozenset({"b"}),
                                                         "b": frozenset({"a"})})
    with pytest.raises(PluginError, match="loop"):
        generated.layers()
