"""Cube's template builder: a Dockerfile becomes a Cube template.

CubeSandbox builds no Dockerfiles: a template is made from an OCI image that carries
E2B's envd, pulled from a registry the cluster reads. So the steps are:

1. ``build``: the image, with Docker Engine, networking off, nothing pulled
   (:class:`provider_sdk_templates.ImageBuilder`; cached by content hash);
2. ``envd``: when the image lacks ``/usr/bin/envd``, it is added from the configured
   binary as Cube's own envd injection does (a layer, and envd as the entrypoint);
3. ``push``: to the configured registry, with its credentials, tagged with the content
   hash (``psdk/<alias>:<hash>``);
4. ``cube``: ``POST /templates`` from that image (the registry's credentials go with
   it, so the cluster can pull), then the build job is polled until ``READY`` or
   ``FAILED``, each phase and progress reported;
5. ``alias``: the template's name points at the new template (moved from an older one).

:meth:`CubeTemplates.find` is what ``build_template`` asks first: a spec whose image is
already a ready template in Cube (same content hash) is not rebuilt. Each step's
failure is a ``TemplateBuildError`` carrying that step's name and the log tail.
Registry credentials never appear in messages.
"""

from __future__ import annotations

import builtins
import datetime as dt
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from provider_sdk import errors
from provider_sdk.distributions import install_hint
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.retry import Attempts, Backoff
from provider_sdk.settings import Settings

if TYPE_CHECKING:
    from provider_sdk_templates import Registry

__all__ = ["CubeTemplates"]

ENVD_PORT = 49983
_ALIAS = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_REPOSITORY = "psdk"
_POLL = Backoff(initial=0.25, factor=1, cap=0.25)
SETTINGS = {"envd": "PSDK_CUBE_ENVD"}
"""The builder's own setting's variable (the registry's are ``Registry.from_settings``')."""

Call = Callable[..., Awaitable[Any]]
Progress = Callable[[str], None]


def alias_for(name: str) -> str:
    """A template name as a Cube alias: ``^[a-z0-9][a-z0-9-]{0,63}$``, never ``tpl-``."""
    alias = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:64].rstrip("-") or "template"
    if alias.startswith(("tpl-", "snap-")):
        alias = ("t-" + alias)[:64]
    assert _ALIAS.match(alias)
    return alias


@attrs.define
class CubeTemplates:
    """Builds, lists and deletes Cube templates for one :class:`CubeProvider` (a
    :class:`~provider_sdk.templates.TemplateBuilder`).

    Args:
        call: the provider's raw control-plane request function.
        provider: the provider's name, for errors.
        registry: where images are pushed (``HOST:PORT``); default ``PSDK_REGISTRY``.
        envd: an envd binary to add to images that lack one; default ``PSDK_CUBE_ENVD``.
        timeout: seconds a Cube build may take.
    """

    call: Call
    provider: str
    registry: str | None = None
    envd: str | None = None
    timeout: float = 900.0

    def _registry(self) -> Registry:
        try:
            from provider_sdk_templates import Registry
        except ImportError:
            raise errors.ConfigError(
                "building Cube templates needs Docker Engine and the distribution "
                "sandbox-provider-sdk-templates: "
                + install_hint("sandbox-provider-sdk-templates"),
                provider=self.provider) from None
        registry = Registry.from_settings(self.registry, provider=self.provider)
        if registry is None:
            raise errors.ConfigError(
                "building Cube templates pushes an image to a registry the cluster reads: "
                "set PSDK_REGISTRY (HOST:PORT), with PSDK_REGISTRY_USERNAME and "
                "PSDK_REGISTRY_PASSWORD if it needs them", provider=self.provider)
        return registry

    async def find(self, spec: TemplateSpec, digest: str) -> Template | None:
        """The ready template made from this spec's image, its alias pointed at it."""
        registry = self._registry()  # ConfigError: what building here needs
        alias = alias_for(spec.name)
        reference = f"{registry.host}/{_REPOSITORY}/{alias}:{digest}"
        existing = await self._find(reference)
        if existing is None or _status(existing) != "ready":
            return None
        return await self._finish(existing, spec, alias, digest, reference)

    async def build(self, spec: TemplateSpec, digest: str, *, force: bool,
                    on_progress: Progress | None) -> Template:
        """Build ``spec`` into a ready Cube template (see the module docstring)."""
        registry = self._registry()
        envd = self._envd_setting()
        from provider_sdk_templates import ENVD_PATH, ImageBuilder

        alias = alias_for(spec.name)
        repository = f"{_REPOSITORY}/{alias}"
        reference = f"{registry.host}/{repository}:{digest}"
        builder = ImageBuilder()
        made: list[str] = []
        try:
            image = (await builder.build(spec, force=force, on_progress=on_progress)).id
            made.append(image)
            if not await builder.has_file(image, ENVD_PATH):
                image = await builder.add_envd(image, self._envd_binary(envd, ENVD_PATH),
                                               tag=f"{image}-envd", on_progress=on_progress)
                made.append(image)
            made.append(reference)
            await builder.push(image, registry, repository, digest, on_progress=on_progress)
        finally:
            # The Engine here is only the build's tool: the template lives in the
            # registry, and a failed build leaves nothing either.
            with anyio.CancelScope(shield=True):
                await builder.forget(*reversed(made))
                await builder.aclose()
        template_id = await self._create(spec, registry, reference, on_progress)
        detail = await self.call("GET", f"/templates/{template_id}")
        return await self._finish(detail, spec, alias, digest, reference)

    def _envd_setting(self) -> Path | None:
        """The envd binary to add to images that lack one, if one is configured;
        ``ConfigError`` (before anything is built) if that is not a file."""
        settings = Settings(self.provider, SETTINGS)
        envd = settings.path("envd", self.envd)
        if envd is not None and not envd.is_file():
            raise settings.refuse("envd", "an envd binary (a file)", str(envd))
        return envd

    def _envd_binary(self, envd: Path | None, where: str) -> Path:
        if envd is None:
            raise errors.TemplateBuildError(
                f"the image has no envd at {where}, which Cube needs to reach a sandbox: "
                "build FROM an image that carries it, or set PSDK_CUBE_ENVD to an envd "
                "binary to add (as Cube's --envd-path)", step="envd", provider=self.provider)
        return envd

    async def _create(self, spec: TemplateSpec, registry: Registry, reference: str,
                      on_progress: Progress | None) -> str:
        body: dict[str, Any] = {
            "image": f"http://{reference}" if registry.plain_http else reference,
            "exposedPorts": [ENVD_PORT], "probePort": ENVD_PORT, "probePath": "/health",
        }
        if spec.cpu is not None:
            body["cpu"] = round(spec.cpu * 1000)  # millicores
        if spec.memory_mb is not None:
            body["memory"] = spec.memory_mb
        auth = registry.auth()
        if auth is not None:
            body["registryUsername"], body["registryPassword"] = auth["username"], auth["password"]
        try:
            job = await self.call("POST", "/templates", json=body)
        except errors.SandboxError as exc:
            raise errors.TemplateBuildError(f"Cube refused the template: {exc.message}",
                                            step="cube", provider=self.provider) from exc
        template_id, job_id = _pick(job, "templateID"), _pick(job, "jobID", "buildID")
        shown = None
        with anyio.move_on_after(self.timeout) as scope:
            async for _ in Attempts(_POLL):
                status = await self.call(
                    "GET", f"/templates/{template_id}/builds/{job_id}/status")
                state = str(_pick(status, "status") or "").lower()
                line = f"cube: {state} {_pick(status, 'progress') or 0}% " \
                       f"{_pick(status, 'message') or ''}".rstrip()
                if on_progress is not None and line != shown:
                    on_progress(line)
                shown = line
                if state in ("ready", "failed", "error"):
                    break
        if scope.cancelled_caught:
            raise errors.TemplateBuildError(
                f"template {template_id} was not ready after {self.timeout:g} s",
                step="cube", provider=self.provider)
        if state != "ready":
            detail = await self.call("GET", f"/templates/{template_id}")
            logs = await self._logs(template_id, job_id)
            reason = _pick(detail, "lastError", "last_error") or _pick(status, "message") \
                or "the build failed"
            raise errors.TemplateBuildError(
                f"Cube could not make template {template_id} from {reference}: {reason}",
                step="cube", log_tail="\n".join([*logs[-20:], str(reason)]),
                provider=self.provider)
        return str(template_id)

    async def _logs(self, template_id: str, job_id: str) -> list[str]:
        try:
            data = await self.call("GET", f"/templates/{template_id}/builds/{job_id}/logs")
        except errors.SandboxError:
            return []
        logs = data.get("logs") if isinstance(data, Mapping) else data
        return [str(line) for line in logs or []]

    async def _finish(self, detail: Mapping[str, Any], spec: TemplateSpec, alias: str,
                      digest: str, reference: str) -> Template:
        """Point the alias at this template (taking it from an older one)."""
        template_id = str(_pick(detail, "templateID", "template_id"))
        if alias not in (_pick(detail, "aliases") or []):
            try:
                held = await self.call("GET", f"/templates/aliases/{alias}")
            except errors.NotFound:
                held = None
            if held is not None and _pick(held, "templateID") != template_id:
                await self.call("PUT", f"/templates/{_pick(held, 'templateID')}/alias",
                                json={"alias": ""})
            try:
                detail = await self.call("PUT", f"/templates/{template_id}/alias",
                                         json={"alias": alias})
            except errors.SandboxError as exc:
                raise errors.TemplateBuildError(
                    f"template {template_id} is ready, but the alias {alias!r} could not be "
                    f"set: {exc.message}", step="alias", provider=self.provider) from exc
        return self.to_template(detail, name=spec.name, digest=digest, image=reference)

    async def _find(self, reference: str) -> Mapping[str, Any] | None:
        """The newest template made from exactly this image reference."""
        found = [t for t in await self.call("GET", "/templates") or []
                 if str(_pick(t, "imageInfo", "image_info") or "").removeprefix("http://")
                 .removeprefix("https://") == reference]
        found.sort(key=lambda t: str(_pick(t, "createdAt", "created_at") or ""))
        return found[-1] if found else None

    async def list(self) -> builtins.list[Template]:
        """Ready templates made from images (not snapshots)."""
        return [self.to_template(t) for t in await self.call("GET", "/templates") or []
                if _status(t) == "ready"]

    async def delete(self, template_id: str) -> None:
        """Delete a template (``TemplateNotFound`` if unknown)."""
        await self.call("DELETE", f"/templates/{urllib.parse.quote(template_id, safe='')}")

    def to_template(self, data: Mapping[str, Any], *, name: str | None = None,
                    digest: str | None = None, image: str | None = None) -> Template:
        """One Cube template as a neutral :class:`~provider_sdk.models.Template`."""
        aliases = list(_pick(data, "aliases") or [])
        image = image or str(_pick(data, "imageInfo", "image_info") or "")
        tag = image.rpartition(":")[2]
        created = _pick(data, "createdAt", "created_at")
        return Template(
            id=str(_pick(data, "templateID", "template_id")),
            name=name or (aliases[0] if aliases else ""), provider=self.provider,
            content_hash=digest or (tag if re.fullmatch(r"[0-9a-f]{64}", tag) else None),
            created_at=dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
            if isinstance(created, str) and created else None,
            extra={"alias": aliases[0] if aliases else None, "aliases": aliases,
                   "image": image or None, "status": _pick(data, "status")})


def _status(data: Mapping[str, Any]) -> str:
    return str(_pick(data, "status") or "").lower()


def _pick(data: Any, *keys: str) -> Any:
    if not isinstance(data, Mapping):
        return None
    for key in keys:
        if data.get(key) is not None:
            return data[key]
    return None
