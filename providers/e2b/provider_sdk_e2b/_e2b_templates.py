"""E2B template builds (``templates.build``), through the ``e2b`` SDK's ``AsyncTemplate``.

A spec's Dockerfile becomes ``AsyncTemplate.from_dockerfile`` with the spec's context as
the file context (so ``COPY`` uploads what it names, honouring ``.dockerignore``), named
``<name>-<first 12 hex digits of the content hash>``: an unchanged spec names a template
that exists (:meth:`E2BTemplates.find`), and is not rebuilt. The build is started in
the background and its status polled here, so the failing step (E2B reports its index)
can be named with the Dockerfile instruction and line it came from. What the SDK's
conversion cannot do is declared in :data:`TEMPLATE_SUPPORT` and refused before any
request.

This module owns the build flow only; errors the SDK raises outside a build go through
the provider's one translation, which it hands this builder (``translate``).
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import re
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import anyio
import attrs
from e2b import AsyncTemplate, ConnectionConfig
from e2b import exceptions as e2bx
from e2b.api import encode_path_param, handle_api_exception
from e2b.api.client.api.templates import delete_templates_template_id, get_templates
from e2b.api.client_async import get_api_client
from e2b.template.logger import LogEntry
from e2b.template.readycmd import wait_for_timeout
from e2b.template.types import TemplateBuildStatus
from e2b_dockerfile_utils import DockerfileSyntaxError

from provider_sdk import errors
from provider_sdk.dockerfile import TemplateSupport
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.retry import Attempts, Backoff
from provider_sdk.templates import parsed

if TYPE_CHECKING:
    from e2b.api.client.models import Template as E2BTemplate

__all__ = ["TEMPLATE_SUPPORT", "E2BTemplates", "build", "delete", "find", "list_all"]

TEMPLATE_SUPPORT = TemplateSupport(
    multi_stage=False,
    heredocs=True,
    run_flags=False,
    unsupported={
        "SHELL": "E2B's builder runs every RUN step with its own shell",
        "HEALTHCHECK": "E2B has no health checks; give the spec a ready_cmd",
        "ONBUILD": "E2B's builder has no ONBUILD triggers",
        "STOPSIGNAL": "E2B's builder ignores STOPSIGNAL",
    },
)
"""What ``Template.from_dockerfile`` converts: one stage; ``RUN`` and ``COPY``
here-documents; no ``RUN --mount``/``--network`` (the SDK drops them, which changes what
the step does); not ``SHELL``, ``HEALTHCHECK``, ``ONBUILD``, ``STOPSIGNAL``. ``EXPOSE``,
``VOLUME`` and ``LABEL`` have no effect on E2B; ``ADD`` copies (an archive is not
unpacked, a URL is refused)."""

_POLL = Backoff(initial=0.2, factor=1, cap=0.2)
"""The pause between status polls, as the SDK's own ``build`` waits."""
_TAIL = 20
_SUFFIX = re.compile(r"^(.*)-([0-9a-f]{12})$")


def alias_for(spec: TemplateSpec, digest: str) -> str:
    """The E2B name a spec with that content hash is built under."""
    return f"{spec.name.replace('.', '-')}-{digest[:12]}"


@attrs.frozen
class E2BTemplates:
    """E2B's template builder (a :class:`~provider_sdk.templates.TemplateBuilder`), with
    what it needs of its provider.

    Args:
        provider: the provider's name, for errors and templates.
        params: the SDK's connection options (``ApiParams``).
        translate: the provider's one error translation, for templates.
    """

    provider: str
    params: Callable[[], dict[str, Any]]
    translate: Callable[[], AbstractContextManager[None]]

    def config(self) -> ConnectionConfig:
        """The SDK's connection configuration."""
        return ConnectionConfig(**self.params())

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        return await find(self, spec, digest)

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Callable[[str], None] | None) -> Template:
        return await build(self, spec, digest, force=force, on_progress=on_progress)

    async def list(self) -> builtins.list[Template]:
        return await list_all(self)

    async def delete(self, template_id: str) -> None:
        await delete(self, template_id)


async def find(api: E2BTemplates, spec: TemplateSpec, digest: str) -> Template | None:
    """The ready template built from a spec with content hash ``digest``, if any."""
    alias = alias_for(spec, digest)
    with api.translate():
        exists = await AsyncTemplate.exists(alias, **api.params())
        found = await _find(api, alias) if exists else None
    if found is None or found.build_status.value != "ready":
        return None
    return _to_template(api, found, name=spec.name, digest=digest)


async def build(api: E2BTemplates, spec: TemplateSpec, digest: str, *, force: bool,
                on_progress: Callable[[str], None] | None) -> Template:
    """Build ``spec`` (content hash ``digest``) on E2B; ``force`` skips E2B's layer cache."""
    alias = alias_for(spec, digest)
    params = api.params()
    log: list[str] = []

    def progress(entry: LogEntry) -> None:
        text = entry.message.rstrip()
        if text:
            log.append(text)
            if on_progress is not None:
                on_progress(text)

    with tempfile.TemporaryDirectory(prefix="psdk-e2b-context-") as empty:
        template, steps = await anyio.to_thread.run_sync(_convert, spec, spec.context or empty)
        try:
            with api.translate():
                info = await AsyncTemplate.build_in_background(
                    template, alias, cpu_count=_cpus(spec.cpu), memory_mb=spec.memory_mb,
                    skip_cache=force, on_build_logs=progress, **params)
                status = await _wait(api, info, progress)
        except e2bx.BuildException as exc:  # also FileUploadException
            raise errors.TemplateBuildError(
                f"building {spec.name!r} failed: {exc}", step="upload",
                log_tail="\n".join(log[-_TAIL:]), provider=api.provider) from exc
    if status.status != TemplateBuildStatus.READY:
        reason = status.reason
        step = _step_name(spec, steps, reason.step if reason else None)
        message = reason.message if reason else "the build failed"
        raise errors.TemplateBuildError(
            f"building {spec.name!r} failed at {step}: {message.strip()}", step=step,
            log_tail="\n".join(log[-_TAIL:]), provider=api.provider)
    return Template(id=info.template_id, name=spec.name, provider=api.provider,
                    content_hash=digest, created_at=dt.datetime.now(dt.timezone.utc),
                    extra={"alias": alias, "build_id": info.build_id})


def _convert(spec: TemplateSpec, context: str) -> tuple[Any, list[dict[str, Any]]]:
    """The SDK's template for ``spec`` and its steps as sent (file IO: a thread's job)."""
    try:
        builder = AsyncTemplate(file_context_path=context).from_dockerfile(spec.dockerfile)
    except DockerfileSyntaxError as exc:
        raise errors.TemplateBuildError(f"E2B cannot convert the Dockerfile: {exc}",
                                        step="parse") from exc
    except (e2bx.TemplateException, ValueError) as exc:
        raise errors.TemplateBuildError(f"E2B cannot convert the Dockerfile: {exc}",
                                        step="check") from exc
    template: Any = builder
    if spec.start_cmd is not None:
        template = builder.set_start_cmd(spec.start_cmd,
                                         spec.ready_cmd or wait_for_timeout(20_000))
    elif spec.ready_cmd is not None:
        template = builder.set_ready_cmd(spec.ready_cmd)
    try:
        steps = json.loads(AsyncTemplate.to_json(template)).get("steps") or []
    except (e2bx.TemplateException, ValueError) as exc:
        # A COPY whose sources are missing from the context (the SDK hashes them here).
        raise errors.TemplateBuildError(f"E2B cannot read the build context: {exc}",
                                        step="COPY") from exc
    return template, steps


async def _wait(api: E2BTemplates, info: Any,
                progress: Callable[[LogEntry], None]) -> Any:
    """Poll the build until it ends and its log is drained; the final status."""
    offset = 0
    final = None
    polls = Attempts(_POLL)
    async for _ in polls:
        status = await AsyncTemplate.get_build_status(info, logs_offset=offset,
                                                      **api.params())
        offset += len(status.log_entries)
        for entry in status.log_entries:
            progress(entry)
        if status.status in (TemplateBuildStatus.READY, TemplateBuildStatus.ERROR):
            final = final or status
            if not status.log_entries:
                return final
            polls.reset()  # drain the rest of the log at once
        elif status.log_entries:
            polls.reset()
    raise AssertionError("unreachable: the build is polled without limit")


def _step_name(spec: TemplateSpec, steps: list[dict[str, Any]], step: str | None) -> str:
    """The instruction a failed E2B step comes from: ``RUN exit 3 (line 2)``.

    E2B names a step by its 1-based index among the steps sent, or ``base`` (the
    ``FROM`` image) or ``finalize`` (the start and ready commands)."""
    if step == "finalize":
        return "start_cmd"
    if step is None or not step.isdigit() or not 0 < int(step) <= len(steps):
        first = parsed(spec).stages()
        return f"FROM (line {first[0].line})" if first else "FROM"
    sent = steps[int(step) - 1]
    kind, args = str(sent.get("type")), [str(a) for a in sent.get("args") or ()]
    text = f"{kind} {' '.join(args[:2]) if kind == 'COPY' else args[0] if args else ''}"
    for instruction in parsed(spec).instructions:
        same = instruction.body == args[0] if kind == "RUN" and args else \
            kind == "COPY" and bool(args) and args[0] in instruction.args[:-1]
        if instruction.keyword in (kind, "ADD" if kind == "COPY" else kind) and same:
            return f"{text.strip()} (line {instruction.line})"
    return text.strip()


def _cpus(cpu: float | None) -> int | None:
    return None if cpu is None else max(1, -int(-cpu // 1))


async def _find(api: E2BTemplates, alias: str) -> E2BTemplate | None:
    for template in await _templates(api):
        names = [*template.names, *template.aliases]
        if alias in names or any(n.endswith("/" + alias) for n in names):
            return template
    return None


async def _templates(api: E2BTemplates) -> list[E2BTemplate]:
    response = await get_templates.asyncio_detailed(client=get_api_client(api.config()))
    if response.status_code >= 300 or not isinstance(response.parsed, list):
        raise handle_api_exception(response)
    return response.parsed


def _to_template(api: E2BTemplates, data: E2BTemplate, *, name: str | None = None,
                 digest: str | None = None) -> Template:
    alias = next(iter([*data.names, *data.aliases]), "").rpartition("/")[2]
    match = _SUFFIX.match(alias)
    return Template(
        id=data.template_id, name=name or (match.group(1) if match else alias),
        provider=api.provider, content_hash=digest, created_at=data.created_at,
        extra={"alias": alias, "build_id": data.build_id,
               "build_status": data.build_status.value,
               **({"hash_prefix": match.group(2)} if match else {})})


async def list_all(api: E2BTemplates) -> list[Template]:
    """Every template of the team (E2B's ``GET /templates``)."""
    with api.translate():
        found = await _templates(api)
    return sorted((_to_template(api, t) for t in found), key=lambda t: t.id)


async def delete(api: E2BTemplates, template_id: str) -> None:
    """Delete a template by id (or name); ``TemplateNotFound`` if there is none."""
    with api.translate():
        response = await delete_templates_template_id.asyncio_detailed(
            encode_path_param(template_id), client=get_api_client(api.config()))
        if response.status_code == 404:
            raise errors.TemplateNotFound(f"no template {template_id!r}",
                                          provider=api.provider)
        if response.status_code >= 300:
            raise handle_api_exception(response)
