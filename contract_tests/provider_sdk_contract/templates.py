"""Contract: building templates from Dockerfiles (``templates.build``)."""

from __future__ import annotations

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import TemplateBuildError, TemplateNotFound
from provider_sdk.models import TemplateSpec
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import new_marker


class TemplateContract(ContractBase):
    """Templates: a Dockerfile becomes a template that sandboxes start from; unchanged
    specs are not rebuilt; failures name their step."""

    def _spec(self, factory: Factory, body: str) -> TemplateSpec:
        if self.template_base is None:
            pytest.skip("the provider's test class sets no template_base to build FROM")
        name = f"psdk-contract-{factory.run_id}-{new_marker('t')[-6:]}".lower()
        return TemplateSpec(name=name, dockerfile=f"FROM {self.template_base}\n{body}")

    @requires(Capability.TEMPLATES_BUILD)
    async def test_built_template_runs_what_its_dockerfile_did(self, factory: Factory) -> None:
        """A file a ``RUN`` step wrote is there in a sandbox made from the template."""
        marker = new_marker("built")
        progress: list[str] = []
        spec = self._spec(factory, f"RUN echo {marker} > /psdk-marker\n")
        template = await factory.template(spec, on_progress=progress.append)
        assert template.content_hash
        assert progress, "no progress was reported"
        sandbox = await factory.sandbox(template=template.id)
        assert (await sandbox.files.read_text("/psdk-marker")) == f"{marker}\n"
        listed = await factory.provider.list_templates()
        assert template.id in [t.id for t in listed]

    @requires(Capability.TEMPLATES_BUILD)
    async def test_unchanged_spec_is_not_rebuilt(self, factory: Factory) -> None:
        """Building the same spec twice gives the same template, without a second build;
        a changed spec gives another."""
        spec = self._spec(factory, f"RUN echo {new_marker('cache')} > /psdk-cache\n")
        first = await factory.template(spec)
        progress: list[str] = []
        again = await factory.template(spec, on_progress=progress.append)
        assert (again.id, again.content_hash) == (first.id, first.content_hash)
        assert progress == [], "an unchanged spec was built again"
        changed = await factory.template(
            TemplateSpec(name=spec.name, dockerfile=spec.dockerfile + "RUN true\n"))
        assert changed.content_hash != first.content_hash

    @requires(Capability.TEMPLATES_BUILD)
    async def test_failing_step_raises_template_build_error(self, factory: Factory) -> None:
        """A ``RUN`` that fails raises TemplateBuildError naming the step, with the log."""
        spec = self._spec(factory, "RUN echo psdk-before-failure && echo psdk-on-stderr >&2"
                                   " && exit 3\n")
        with pytest.raises(TemplateBuildError) as caught:
            await factory.template(spec)
        assert "RUN" in caught.value.step
        assert "psdk-before-failure" in caught.value.log_tail
        # Plain text, whatever colours the builder's log had (Docker Engine's classic
        # builder colours a step's stderr).
        assert "\x1b" not in str(caught.value) + caught.value.step + caught.value.log_tail

    @requires(Capability.TEMPLATES_BUILD)
    async def test_a_template_answers_to_its_name(self, factory: Factory) -> None:
        """``SandboxSpec(template=<name>)`` starts from the newest build of that name,
        and ``list_templates`` shows each build under the name its spec gave."""
        spec = self._spec(factory, "RUN echo first > /psdk-which\n")
        first = await factory.template(spec)
        second = await factory.template(
            TemplateSpec(name=spec.name, dockerfile=f"FROM {self.template_base}\n"
                                                    "RUN echo second > /psdk-which\n"))
        assert second.id != first.id
        named = {t.id for t in await factory.provider.list_templates() if t.name == spec.name}
        assert {first.id, second.id} <= named
        sandbox = await factory.sandbox(template=spec.name)
        assert (await sandbox.files.read_text("/psdk-which")) == "second\n"
        by_id = await factory.sandbox(template=first.id)
        assert (await by_id.files.read_text("/psdk-which")) == "first\n"

    @requires(Capability.TEMPLATES_BUILD)
    async def test_a_template_is_deleted_by_its_name(self, factory: Factory) -> None:
        """``delete_template(<name>)`` deletes every build of that name; once none is
        left, it is TemplateNotFound."""
        spec = self._spec(factory, f"RUN echo {new_marker('named')} > /psdk-named\n")
        first = await factory.template(spec)
        second = await factory.template(
            TemplateSpec(name=spec.name, dockerfile=spec.dockerfile + "RUN true\n"))
        await factory.provider.delete_template(spec.name)
        listed = await factory.provider.list_templates()
        assert spec.name not in [t.name for t in listed]
        assert not {first.id, second.id} & {t.id for t in listed}
        with pytest.raises(TemplateNotFound):
            await factory.provider.delete_template(spec.name)

    @requires(Capability.TEMPLATES_BUILD)
    async def test_deleted_template_is_gone(self, factory: Factory) -> None:
        """After ``delete_template`` it is not listed, and deleting again is TemplateNotFound."""
        template = await factory.provider.build_template(
            self._spec(factory, f"RUN echo {new_marker('gone')} > /psdk-gone\n"))
        await factory.provider.delete_template(template.id)
        assert template.id not in [t.id for t in await factory.provider.list_templates()]
        with pytest.raises(TemplateNotFound):
            await factory.provider.delete_template(template.id)
