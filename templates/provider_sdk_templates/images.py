"""Images for template builders that start from an OCI image: build one from a
:class:`~provider_sdk.models.TemplateSpec` with Docker Engine (networking off, nothing
pulled), add E2B's envd to it, and push it to a registry.

The build itself is the Docker provider's (``DockerProvider.build_template``): the
same checks, cache and errors. This module adds what a registry-fed backend (Cube)
needs on top, and never talks to a sandbox backend.
"""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
from provider_sdk_docker import DockerProvider, Engine

from provider_sdk import errors
from provider_sdk.models import Template, TemplateSpec
from provider_sdk.secret import Secret
from provider_sdk.settings import Settings

__all__ = ["ENVD_PATH", "ImageBuilder", "Registry"]

ENVD_PATH = "/usr/bin/envd"
"""Where E2B's envd lives in an image, and where it is added (as Cube's injection does)."""
_HOST_PORT = re.compile(r"^(?:(https?)://)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::(\d{1,5}))?/?$")
_LOOPBACK = ("127.", "localhost", "[::1]")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?.*@", re.DOTALL)
_EXPECTED = "HOST[:PORT], optionally with http:// or https://"
SETTINGS = {"registry": "PSDK_REGISTRY", "registry_username": "PSDK_REGISTRY_USERNAME",
            "registry_password": "PSDK_REGISTRY_PASSWORD"}
"""The variables :meth:`Registry.from_settings` reads."""

Progress = Callable[[str], None]


@attrs.frozen(kw_only=True)
class Registry:
    """An OCI registry that templates are pushed to (and a cluster pulls from).

    ``address`` is ``HOST[:PORT]``, optionally with ``http://`` or ``https://``;
    without one, loopback registries are plain HTTP (as Docker treats them) and others
    HTTPS. The password never appears in a repr or an error.
    """

    host: str
    """``HOST[:PORT]`` as image references spell it."""
    scheme: str = "https"
    username: str | None = None
    password: Secret | None = attrs.field(default=None, repr=False)

    @classmethod
    def parse(cls, address: str, *, username: str | None = None,
              password: str | Secret | None = None) -> Registry:
        """A registry from ``HOST[:PORT]`` (or a URL of one); ``ConfigError`` if
        malformed (credentials written into the address are not shown)."""
        found = _split(address)
        if found is None:
            raise errors.ConfigError(f"registry: expected {_EXPECTED}, got "
                                     f"{_masked(address)!r}")
        scheme, host = found
        secret = password if isinstance(password, Secret) or password is None \
            else Secret(password)
        return cls(host=host, scheme=scheme, username=username or None, password=secret)

    @classmethod
    def from_settings(cls, address: str | None = None, *,
                      provider: str | None = None) -> Registry | None:
        """The registry named by ``address`` or ``PSDK_REGISTRY``, with
        ``PSDK_REGISTRY_USERNAME`` and ``PSDK_REGISTRY_PASSWORD``; ``None`` if neither
        names one.

        Read by :class:`~provider_sdk.settings.Settings` for ``provider`` (the name its
        errors carry).

        Raises:
            ConfigError: the address is not ``HOST[:PORT]``; the message names the
                setting and its variable, never the password.
        """
        settings = Settings(provider or "", SETTINGS)
        address = settings.text("registry", address)
        if address is None:
            return None
        found = _split(address)
        if found is None:
            raise settings.refuse("registry", _EXPECTED, _masked(address))
        scheme, host = found
        return cls(host=host, scheme=scheme,
                   username=settings.text("registry_username", None),
                   password=settings.secret("registry_password", None, required=False))

    @property
    def plain_http(self) -> bool:
        """Whether the registry speaks plain HTTP."""
        return self.scheme == "http"

    def auth(self) -> dict[str, str] | None:
        """Credentials as Docker Engine and registry APIs take them."""
        if self.username is None:
            return None
        return {"username": self.username,
                "password": self.password.reveal() if self.password else ""}


def _split(address: str) -> tuple[str, str] | None:
    """``(scheme, HOST[:PORT])`` of a registry's address, or ``None`` if malformed."""
    match = _HOST_PORT.match(address.strip())
    if match is None or (match.group(3) and not 0 < int(match.group(3)) < 65536):
        return None
    host = match.group(2) + (f":{match.group(3)}" if match.group(3) else "")
    return match.group(1) or ("http" if host.startswith(_LOOPBACK) else "https"), host


def _masked(address: str) -> str:
    """An address as an error may show it: credentials written into it hidden."""
    return _USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", address.strip())


class ImageBuilder:
    """Builds, extends and pushes images with one Docker Engine.

    Args:
        docker: the Docker provider whose Engine builds (default: one from
            ``DOCKER_HOST``).
    """

    def __init__(self, docker: DockerProvider | None = None) -> None:
        self._docker = docker or DockerProvider()
        self._engine: Engine = self._docker.engine

    async def build(self, spec: TemplateSpec, *, force: bool = False,
                    on_progress: Progress | None = None) -> Template:
        """Build ``spec`` into an image (cached by content hash, as the Docker provider
        does); the template's ``id`` is the image's tag."""
        return await self._docker.build_template(spec, force=force, on_progress=on_progress)

    async def has_file(self, image: str, path: str) -> bool:
        """Whether ``image`` holds a regular, executable file at ``path`` (read from a
        container that is created, never started, and removed)."""
        container = await self._engine.api("create_container", image, command=["true"],
                                           network_disabled=True, kind="image", what=image,
                                           host_config=self._engine.client.create_host_config(
                                               network_mode="none"))
        try:
            stream, _ = await self._engine.api("get_archive", container["Id"], path)
            data = await anyio.to_thread.run_sync(lambda: b"".join(stream))
        except errors.NotFound:
            return False
        finally:
            await self._engine.api("remove_container", container["Id"], force=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            return member is not None and member.isfile() and bool(member.mode & 0o111)

    async def add_envd(self, image: str, envd: Path, *, tag: str,
                       on_progress: Progress | None = None) -> str:
        """A new image ``tag``: ``image`` with ``envd`` at :data:`ENVD_PATH`, started as
        its entrypoint, as Cube's envd injection makes it."""
        try:
            data = await anyio.to_thread.run_sync(envd.read_bytes)
        except OSError as exc:
            raise errors.TemplateBuildError(f"cannot read the envd binary {str(envd)!r}: {exc}",
                                            step="envd") from exc
        dockerfile = (f"FROM {image}\nCOPY envd {ENVD_PATH}\n"
                      f'ENTRYPOINT ["{ENVD_PATH}"]\n').encode()
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for name, body, mode in (("Dockerfile", dockerfile, 0o644), ("envd", data, 0o755)):
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(body), mode
                tar.addfile(info, io.BytesIO(body))
        context.seek(0)
        lines = await self._engine.api("build", fileobj=context, custom_context=True, tag=tag,
                                       rm=True, forcerm=True, network_mode="none", pull=False,
                                       decode=True, kind="image", what=image)
        await self._drain(lines, step="envd", on_progress=on_progress)
        return tag

    async def push(self, image: str, registry: Registry, repository: str, tag: str, *,
                   on_progress: Progress | None = None) -> str:
        """Tag ``image`` as ``registry/repository:tag`` and push it; returns that
        reference. Errors are ``TemplateBuildError`` with step ``push``."""
        reference = f"{registry.host}/{repository}"
        await self._engine.api("tag", image, reference, tag, kind="image", what=image)
        try:
            lines = await self._engine.api("push", reference, tag=tag, stream=True, decode=True,
                                           auth_config=registry.auth(), kind="image",
                                           what=reference)
            await self._drain(lines, step="push", on_progress=on_progress,
                              secret=registry.password)
        except errors.Unavailable as exc:
            raise errors.TemplateBuildError(
                f"cannot reach the registry {registry.host}: {exc.message}",
                step="push") from exc
        except errors.SandboxError as exc:
            if isinstance(exc, errors.TemplateBuildError):
                raise
            raise errors.TemplateBuildError(
                f"pushing to {registry.host} failed: {_scrub(exc.message, registry.password)}",
                step="push") from exc
        return f"{reference}:{tag}"

    async def forget(self, *tags: str) -> None:
        """Remove these tags from the Engine, an image going with its last tag: what a
        build made here, once the registry holds it. A tag already gone is no error."""
        for tag in tags:
            with contextlib.suppress(errors.SandboxError):
                await self._engine.api("remove_image", tag, kind="image", what=tag)

    async def _drain(self, lines: object, *, step: str, on_progress: Progress | None,
                     secret: Secret | None = None) -> None:
        log: list[str] = []
        while (item := await self._engine.call(next, lines, None)) is not None:
            text = str(item.get("stream") or item.get("status") or "").rstrip()
            if text:
                if item.get("progress") is None or not log or log[-1] != text:
                    log.append(text)
                if on_progress is not None:
                    on_progress(_with_bytes(item, text))
            if "error" in item:
                message = _scrub(str(item["error"]).strip(), secret)
                raise errors.TemplateBuildError(message, step=step,
                                                log_tail="\n".join([*log[-20:], message]))

    async def aclose(self) -> None:
        """Close the Engine client."""
        await self._docker.aclose()


def _with_bytes(item: dict[str, Any], text: str) -> str:
    """``text``, or for an Engine progress item that counts bytes, the layer, the text
    and the count: ``abc123: Pushing 1024/4096 bytes``."""
    detail = item.get("progressDetail")
    current = detail.get("current") if isinstance(detail, dict) else None
    total = detail.get("total") if isinstance(detail, dict) else None
    if not (isinstance(current, int) and isinstance(total, int) and total > 0):
        return text
    layer = item.get("id")
    return f"{layer + ': ' if isinstance(layer, str) else ''}{text} {current}/{total} bytes"


def _scrub(text: str, secret: Secret | None) -> str:
    if secret is None or not secret.reveal():
        return text
    return text.replace(secret.reveal(), "***")
