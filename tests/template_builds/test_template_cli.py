"""``psdk template build|ls|rm``, on the Docker provider."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from engines import require_docker
from provider_sdk_docker import DEFAULT_TEMPLATE
from psdk_fixtures import Psdk


@pytest.fixture
def project(clean_config: Path) -> Path:
    require_docker()
    folder = clean_config / f"cli-{secrets.token_hex(4)}"
    folder.mkdir()
    # Each project's own layers: a build cache layer shared with a test on another
    # worker would go when that test removes its template, midway through this build.
    (folder / "hello.txt").write_text(f"hello from the context {secrets.token_hex(6)}\n")
    (folder / "Dockerfile").write_text(
        f"FROM {DEFAULT_TEMPLATE}\nCOPY hello.txt /opt/hello.txt\n"
        f"RUN echo {secrets.token_hex(6)} > /opt/marker\n")
    return folder


def test_build_prints_plain_progress_lines_then_the_template(project: Path,
                                                             psdk: Psdk) -> None:
    built = psdk("template", "build", str(project), "--provider", "docker", "--json")
    assert built.code == 0, built.err
    template = json.loads(built.out)
    assert template["name"] == project.name
    progress = built.err.splitlines()
    assert any(line.startswith(f"{project.name}: Step ") for line in progress)
    try:
        again = psdk("template", "build", str(project), "--provider", "docker", "--json")
        assert again.code == 0
        assert json.loads(again.out)["id"] == template["id"]
        assert again.err == (f"template {template['id']} on docker is up to date "
                             "(unchanged)\n"), "an unchanged Dockerfile was built again"
        forced = psdk("template", "build", str(project), "--provider", "docker", "--force")
        assert forced.code == 0
        assert forced.out == f"{template['id']}\n"  # the id alone
        assert "Step " in forced.err
        listed = psdk("template", "ls", "--provider", "docker")
        assert template["id"] in listed.out
    finally:
        removed = psdk("template", "rm", template["id"], "--provider", "docker")
    assert removed.code == 0, removed.err
    assert template["id"] not in psdk("template", "ls", "--provider", "docker").out
    gone = psdk("template", "rm", template["id"], "--provider", "docker")
    assert gone.code == 1
    assert "no template" in gone.err


def test_a_broken_dockerfile_is_one_error_line_naming_it(project: Path, psdk: Psdk) -> None:
    (project / "Dockerfile").write_text(f"FROM {DEFAULT_TEMPLATE}\nRUNN true\n")
    result = psdk("template", "build", str(project), "--provider", "docker")
    assert result.code == 1
    assert result.err.strip() == (
        "psdk: error: parse: line 2: unknown instruction 'RUNN'")


def test_what_the_builder_cannot_do_is_listed_before_building(project: Path,
                                                              psdk: Psdk) -> None:
    (project / "Dockerfile").write_text(
        f"FROM {DEFAULT_TEMPLATE}\nRUN --mount=type=cache,target=/c true\nRUN <<EOF\ntrue\nEOF\n")
    result = psdk("template", "build", str(project), "--provider", "docker")
    assert result.code == 1
    lines = result.err.splitlines()
    assert lines[0].startswith(f"{project / 'Dockerfile'}: line 2: RUN: flags")
    assert lines[1].startswith(f"{project / 'Dockerfile'}: line 3: RUN: here-documents")
    assert "cannot build" in lines[2]
    assert "(2 problems)" in lines[2]
    assert "Step" not in result.err


def test_registry_is_an_option_only_where_images_are_pushed(project: Path, psdk: Psdk) -> None:
    result = psdk("template", "build", str(project), "--provider", "docker",
                  "--registry", "127.0.0.1:5000")
    assert result.code == 1
    assert "has no option 'registry'" in result.err


def test_a_provider_without_templates_says_so(project: Path, psdk: Psdk) -> None:
    from memory_provider import MemoryProvider

    from provider_sdk import registry

    registry.register("memory", MemoryProvider)
    try:
        result = psdk("template", "ls", "--provider", "memory")
    finally:
        registry.unregister("memory")
    assert result.code == 1
    assert "does not support 'templates.build'" in result.err
