"""The templates layer: the content-hash cache kept once, in ``build_template``; one
builder shape for every provider; plain-data specs; a core that imports no plugin."""

from __future__ import annotations

import ast
import builtins
import datetime as dt
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest
from memory_provider import NAME, MemoryControl, MemoryProvider, Store

import provider_sdk
from provider_sdk.capabilities import Capability
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.errors import TemplateBuildError
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.provider import SandboxProvider
from provider_sdk.registry import check_provider_class
from provider_sdk.templates import Progress, TemplateBuilder, content_hash

pytestmark = pytest.mark.anyio

PLUGINS = ("provider_sdk_docker", "provider_sdk_templates", "provider_sdk_e2b",
           "provider_sdk_daytona")


@attrs.define
class CountingBuilder:
    """A builder that keeps what it built by content hash and counts every call."""

    provider: str
    built: dict[str, Template] = attrs.field(factory=dict)
    calls: builtins.list[tuple[str, Any]] = attrs.field(factory=builtins.list)

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        self.calls.append(("find", digest))
        return self.built.get(digest)

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Progress | None) -> Template:
        self.calls.append(("build", (digest, force)))
        if on_progress is not None:
            on_progress("building")
        made = Template(id=f"{spec.name}-{len(self.calls)}", name=spec.name,
                        provider=self.provider, content_hash=digest)
        self.built[digest] = made
        return made

    async def list(self) -> builtins.list[Template]:
        return builtins.list(self.built.values())

    async def delete(self, template_id: str) -> None:
        self.built = {k: v for k, v in self.built.items() if v.id != template_id}


class BuildingControl(MemoryControl):
    """The memory provider's control plane with a template builder."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.builder = CountingBuilder(provider=NAME)

    def template_builder(self) -> CountingBuilder:
        return self.builder


class BuildingProvider(MemoryProvider):
    """The memory provider with a template builder."""

    capabilities = MemoryProvider.capabilities | {Capability.TEMPLATES_BUILD}
    template_support = TemplateSupport(unsupported={"SHELL": "no SHELL here"})
    control_role = BuildingControl
    control: BuildingControl

    def __init__(self) -> None:
        super().__init__()
        self.builder = self.control.builder


def spec(text: str = "FROM scratch\n") -> TemplateSpec:
    return TemplateSpec(name="cached", dockerfile=text)


async def test_a_built_hash_is_returned_without_calling_the_builders_build() -> None:
    """The base hashes the spec once and asks find; build runs only for a new hash."""
    provider = BuildingProvider()
    digest = content_hash(spec())
    progress: list[str] = []
    first = await provider.build_template(spec(), on_progress=progress.append)
    assert provider.builder.calls == [("find", digest), ("build", (digest, False))]
    assert first.content_hash == digest
    assert progress == ["building"]
    provider.builder.calls.clear()
    progress.clear()
    again = await provider.build_template(spec(), on_progress=progress.append)
    assert again == first
    assert provider.builder.calls == [("find", digest)]  # no build, no progress
    assert progress == []


async def test_force_builds_without_asking_find() -> None:
    provider = BuildingProvider()
    first = await provider.build_template(spec())
    provider.builder.calls.clear()
    forced = await provider.build_template(spec(), force=True)
    assert provider.builder.calls == [("build", (first.content_hash, True))]
    assert forced.id != first.id


async def test_a_changed_spec_is_built_again() -> None:
    provider = BuildingProvider()
    await provider.build_template(spec())
    provider.builder.calls.clear()
    changed = spec("FROM scratch\nENV A=1\n")
    await provider.build_template(changed)
    assert [c[0] for c in provider.builder.calls] == ["find", "build"]
    assert provider.builder.calls[0][1] == content_hash(changed)


async def test_a_refused_spec_reaches_no_builder_call() -> None:
    provider = BuildingProvider()
    with pytest.raises(TemplateBuildError) as caught:
        await provider.build_template(spec("FROM scratch\nSHELL [\"/bin/bash\"]\n"))
    assert caught.value.step == "check"
    assert provider.builder.calls == []


async def test_list_and_delete_go_through_the_builder() -> None:
    provider = BuildingProvider()
    made = await provider.build_template(spec())
    assert await provider.list_templates() == [made]
    await provider.delete_template(made.id)
    assert await provider.list_templates() == []


async def _hook(*args: Any, **kwargs: Any) -> Any:
    return None


def test_the_registry_checks_the_one_template_hook() -> None:
    """Of a provider made of roles, and of one that overrides the base's hooks itself,
    as before roles."""
    assert check_provider_class(BuildingProvider, "building") is BuildingProvider

    def template_builder(self: SandboxProvider) -> CountingBuilder:
        return CountingBuilder(provider=self.name)

    building = type("Building", (SandboxProvider,), {
        "name": "building",
        "capabilities": frozenset({Capability.TEMPLATES, Capability.TEMPLATES_BUILD}),
        "_template_builder": template_builder,
        **{hook: _hook for hook in ("_create", "_info", "_list", "_kill", "_exec")}})
    undeclared = type("Undeclared", (building,),
                      {"capabilities": frozenset({Capability.TEMPLATES})})
    assert check_provider_class(building, "building") is building
    with pytest.raises(Exception, match="_template_builder"):
        check_provider_class(undeclared, "undeclared")


def _builders() -> list[type]:
    from provider_sdk_daytona._templates import DaytonaTemplates
    from provider_sdk_docker._templates import DockerTemplates
    from provider_sdk_e2b._cube_templates import CubeTemplates
    from provider_sdk_e2b._e2b_templates import E2BTemplates

    from provider_sdk.local._template_builds import LocalTemplates
    return [LocalTemplates, DockerTemplates, E2BTemplates, CubeTemplates, DaytonaTemplates]


@pytest.mark.parametrize("builder", _builders(), ids=lambda c: c.__name__)
def test_every_providers_builder_has_the_one_shape(builder: type) -> None:
    """find, build, list and delete, with the protocol's parameters, all coroutines."""
    for method in ("find", "build", "list", "delete"):
        ours = getattr(builder, method)
        theirs = getattr(TemplateBuilder, method)
        assert inspect.iscoroutinefunction(ours), f"{builder.__name__}.{method}"
        assert [(p.name, p.kind) for p in inspect.signature(ours).parameters.values()] \
            == [(p.name, p.kind) for p in inspect.signature(theirs).parameters.values()]


def _fresh_modules(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    script = textwrap.dedent(code) + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    return set(done.stdout.split())


def test_the_core_imports_no_plugin() -> None:
    """provider_sdk and every one of its modules import, and not one plugin comes in."""
    loaded = _fresh_modules("""
        import importlib, pkgutil
        import provider_sdk
        for found in pkgutil.walk_packages(provider_sdk.__path__, "provider_sdk."):
            if not found.name.endswith(".__main__"):  # that one runs the CLI
                importlib.import_module(found.name)
    """)
    assert "provider_sdk.local._template_builds" in loaded  # the walk reached the bottom
    assert "provider_sdk.cli.template" in loaded
    plugins = sorted(m for m in loaded if m.split(".")[0] in PLUGINS)
    assert plugins == []


def test_no_core_module_names_a_plugin_in_an_import() -> None:
    """Not even inside a function, where importing the module would not show it."""
    root = Path(provider_sdk.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(root)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] in PLUGINS]
    assert len(list(root.rglob("*.py"))) > 50
    assert found == []


def test_models_import_neither_the_dockerfile_parser_nor_the_build_context() -> None:
    loaded = _fresh_modules("import provider_sdk.models")
    assert "provider_sdk.models" in loaded
    assert {"provider_sdk.dockerfile", "provider_sdk.buildcontext",
            "provider_sdk.templates"} & loaded == set()


async def test_a_template_name_means_its_newest_build_and_an_id_that_build() -> None:
    """``SandboxSpec.template``: an id of a build is that build (even where it is also
    another's name), a name the newest build of it, anything else goes on as it is."""
    provider = BuildingProvider()
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for template_id, name, minutes in [("agent-b", "agent", 0), ("agent-a", "agent", 5),
                                       ("agent-c", "agent", 2), ("agent", "renamed", 1),
                                       ("other-1", "other", 9)]:
        provider.builder.built[template_id] = Template(
            id=template_id, name=name, provider=NAME,
            created_at=start + dt.timedelta(minutes=minutes))
    for asked, meant in [("agent", "agent"), ("renamed", "agent"), ("other", "other-1"),
                         ("agent-c", "agent-c"), ("python:3.12", "python:3.12")]:
        async with provider.create(template=asked) as sandbox:
            assert sandbox.info.template == meant, asked
    del provider.builder.built["agent"]
    async with provider.create(template="agent") as sandbox:
        assert sandbox.info.template == "agent-a"  # the newest, whatever its id


async def test_deleting_a_template_by_name_deletes_each_build_of_it_only() -> None:
    provider = BuildingProvider()
    for template_id, name in [("agent-1", "agent"), ("agent-2", "agent"),
                              ("agent-2x", "agent-2"), ("tool-1", "tool")]:
        provider.builder.built[template_id] = Template(id=template_id, name=name,
                                                       provider=NAME)
    await provider.delete_template("agent")
    assert sorted(provider.builder.built) == ["agent-2x", "tool-1"]
    await provider.delete_template("agent-2x")  # an id: that build alone
    assert sorted(provider.builder.built) == ["tool-1"]
