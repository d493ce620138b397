"""The reference templates: each parses and is checked against every builder here; the
one that builds offline (``minimal``) is built and used."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from engines import require_docker
from provider_sdk_docker import DockerProvider
from provider_sdk_templates import catalog

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.errors import TemplateNotFound
from provider_sdk.models import SandboxSpec
from provider_sdk.templates import content_hash, problems

# What each builder refuses in the catalog, by design (documented on the templates page).
EXPECTED = {
    ("browser", "cube"): ["start_cmd", "ready_cmd"],
    ("browser", "daytona"): ["COPY", "start_cmd", "ready_cmd"],
}


def test_the_catalog_has_the_reference_templates() -> None:
    names = [entry.name for entry in catalog.entries()]
    assert names == ["browser", "minimal", "python"]
    assert [e.name for e in catalog.entries() if not e.network] == ["minimal"]
    assert catalog.entry("browser").start_cmd == "start-desktop"


@pytest.mark.parametrize("name", ["browser", "minimal", "python"])
# The installed plugins' builders: not the providers tests register while collected.
@pytest.mark.parametrize("provider", sorted(ep.name for ep in entry_points(group=registry.GROUP)))
def test_each_template_is_checked_against_each_builder(name: str, provider: str) -> None:
    cls = registry.load(provider)
    if Capability.TEMPLATES_BUILD not in cls.capabilities:
        pytest.skip(f"{provider} builds no templates")
    spec = catalog.spec(name)
    assert content_hash(spec) == content_hash(catalog.spec(name))
    found = [p.what for p in problems(spec, cls.template_support)]
    assert found == EXPECTED.get((name, provider), [])


def test_an_unknown_catalog_name_lists_the_known_ones() -> None:
    with pytest.raises(TemplateNotFound, match="browser, minimal, python"):
        catalog.entry("nope")


@pytest.mark.anyio
async def test_minimal_builds_offline_and_runs_as_user() -> None:
    require_docker()
    async with DockerProvider() as docker:
        template = await docker.build_template(catalog.spec("minimal", name="psdk-test-minimal"))
        try:
            async with await docker.create(SandboxSpec(template=template.id)) as sandbox:
                who = await sandbox.exec("id -un; id -u; pwd; echo $LANG")
                assert who.stdout.split() == ["user", "1000", "/home/user", "C.UTF-8"]
        finally:
            await docker.delete_template(template.id)
