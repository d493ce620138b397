"""An image's filesystem, exported from Docker Engine into a directory.

For template builders that run sandboxes on a plain directory tree (the local
provider): :class:`DockerRootfs` is the :class:`~provider_sdk.templates.RootfsSource`
this distribution registers (entry-point group ``provider_sdk.rootfs``, name
``docker``): it builds a spec with the Docker provider, then :func:`export_image`
creates a container from the image with networking off,
never starts it, streams the Engine's ``export`` archive through :func:`extract`, and
removes the container. :func:`extract` trusts nothing in the archive: no entry lands
outside the target directory (no ``..``, no absolute names, no writing through a
symlink an earlier entry made), symlinks and modes are kept as they are, device nodes
are skipped, and owners are kept only when running as root.

This module never builds an image and never talks to a sandbox backend.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import anyio
import docker
import docker.errors
import requests.exceptions
from provider_sdk_docker import DockerProvider

from provider_sdk import errors
from provider_sdk.models import TemplateSpec
from provider_sdk.templates import ImageConfig, Progress

__all__ = ["DockerRootfs", "ImageConfig", "export_image", "extract"]

DEFAULT_HOST = "unix:///var/run/docker.sock"
_COPY_CHUNK = 1 << 20


class DockerRootfs:
    """Root filesystems built with Docker Engine (a
    :class:`~provider_sdk.templates.RootfsSource`).

    The spec is built into an image by the Docker provider (the same checks, cache and
    errors); an image made for this export alone is removed afterwards.

    Args:
        docker: the Docker provider that builds (default: one from ``DOCKER_HOST``,
            made on first use and closed by :meth:`aclose`).
    """

    def __init__(self, docker: DockerProvider | None = None) -> None:
        self._docker = docker
        self._owned = docker is None

    async def export(self, spec: TemplateSpec, digest: str, dest: Path, *, force: bool,
                     on_progress: Progress | None, provider: str) -> ImageConfig:
        """Build ``spec`` into an image and extract its filesystem into ``dest``; errors
        are ``provider``'s, as the caller asked that one."""
        with errors.on_behalf_of(provider):
            if self._docker is None:
                self._docker = DockerProvider()
            docker = self._docker
            before = {(t.name, t.content_hash) for t in await docker.list_templates()}
            image = await docker.build_template(spec, force=force, on_progress=on_progress)
            try:
                if on_progress is not None:
                    on_progress(f"exporting the filesystem of {image.id}")
                return await anyio.to_thread.run_sync(
                    lambda: export_image(image.id, dest, provider=provider))
            finally:
                if (spec.name, digest) not in before:  # made for this export: not kept
                    with anyio.CancelScope(shield=True), \
                            contextlib.suppress(errors.SandboxError):
                        await docker.delete_template(image.id)

    async def aclose(self) -> None:
        """Close the Docker provider this source made."""
        if self._owned and self._docker is not None:
            await self._docker.aclose()
            self._docker = None


def export_image(image: str, dest: Path, *, base_url: str | None = None,
                 provider: str | None = None) -> ImageConfig:
    """Extract ``image``'s filesystem into ``dest`` (created; it should be empty) and
    return the image's configuration. Blocking: call it from a worker thread.

    Raises:
        TemplateNotFound: the image is not in the Engine.
        Unavailable: the Engine cannot be reached.
        TemplateBuildError: step ``export``, for anything else that fails.
    """
    url = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_HOST
    where: dict[str, Any] = {"provider": provider}
    try:
        client = docker.APIClient(base_url=url, version="auto", timeout=600)
    except docker.errors.DockerException as exc:
        raise errors.Unavailable(f"cannot reach the Docker Engine at {url}: {exc}",
                                 **where) from exc
    try:
        config = (client.inspect_image(image).get("Config") or {})
        # The container is never started: it only makes the image's files exportable.
        container = client.create_container(
            image, command=["/nonexistent"], network_disabled=True,
            host_config=client.create_host_config(network_mode="none"))
        try:
            extract(_Chunks(client.export(container["Id"])), dest)
        finally:
            client.remove_container(container["Id"], force=True)
    except docker.errors.ImageNotFound as exc:
        raise errors.TemplateNotFound(f"no image {image!r} in the Docker Engine",
                                      **where) from exc
    except requests.exceptions.ConnectionError as exc:
        raise errors.Unavailable(f"cannot reach the Docker Engine at {url} "
                                 f"({type(exc).__name__})", **where) from exc
    except docker.errors.DockerException as exc:
        raise errors.TemplateBuildError(f"exporting the filesystem of {image!r} failed: {exc}",
                                        step="export", log_tail=str(exc), **where) from exc
    finally:
        client.close()
    return _to_config(config, image)


def _to_config(config: Mapping[str, Any], image: str) -> ImageConfig:
    env = {}
    for item in config.get("Env") or ():
        name, _, value = str(item).partition("=")
        if name:
            env[name] = value
    return ImageConfig(env=env, workdir=config.get("WorkingDir") or None,
                       user=config.get("User") or None, image=image)


class _Chunks:
    """A read-only file over an iterator of byte chunks (the export stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def extract(archive: IO[bytes] | _Chunks, dest: Path) -> None:
    """Extract a tar stream (read once, in order) into ``dest``, safely.

    Raises ``TemplateBuildError`` (step ``export``) for an entry that would land outside
    ``dest`` or write through a symlink.
    """
    dest.mkdir(parents=True, exist_ok=True)
    as_root = os.geteuid() == 0
    directories: list[tuple[Path, tarfile.TarInfo]] = []
    with tarfile.open(fileobj=archive, mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            relative = _relative(member.name)
            if relative is None:  # the archive's root: dest itself
                directories.append((dest, member))
                continue
            target = _parents(dest, relative) / relative[-1]
            if member.ischr() or member.isblk():
                continue  # device nodes come from /dev inside a sandbox, never an image
            _clear(target, directory=member.isdir())
            if member.isdir():
                target.mkdir(mode=0o700, exist_ok=True)
                directories.append((target, member))
                continue
            if member.isreg():
                source = tar.extractfile(member)
                assert source is not None
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out, _COPY_CHUNK)
            elif member.issym():
                os.symlink(member.linkname, target)
            elif member.islnk():
                linked = _relative(member.linkname)
                if linked is None:
                    raise _unsafe(member.name, "hard link to the archive's root")
                source_path = _parents(dest, linked, create=False) / linked[-1]
                if stat.S_ISDIR(os.lstat(source_path).st_mode):
                    raise _unsafe(member.name, "hard link to a directory")
                os.link(source_path, target, follow_symlinks=False)
                continue  # a hard link shares its target's owner, mode and times
            elif member.isfifo():
                os.mkfifo(target, 0o600)
            else:
                continue
            _apply(target, member, as_root)
    # Directories last, deepest first: a read-only directory would refuse its entries.
    for target, member in reversed(directories):
        _apply(target, member, as_root)


def _relative(name: str) -> list[str] | None:
    """An entry's path as components under the target; ``None`` for the root itself."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _unsafe(name, "it climbs out with '..'")
    return parts or None


def _parents(dest: Path, parts: list[str], *, create: bool = True) -> Path:
    """The directory that holds ``parts``' last component; every component before it
    must be a real directory (never a symlink) under ``dest``."""
    path = dest
    for part in parts[:-1]:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            if not create:
                raise _unsafe("/".join(parts), "it names a missing entry") from None
            path.mkdir(mode=0o755)
            continue
        if not stat.S_ISDIR(mode):
            raise _unsafe("/".join(parts), f"{part!r} is not a directory (a symlink?)")
    return path


def _clear(target: Path, *, directory: bool) -> None:
    """Make room for an entry: an archive may replace what an earlier entry made."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        if not directory:
            shutil.rmtree(target)
    else:
        target.unlink()


def _apply(target: Path, member: tarfile.TarInfo, as_root: bool) -> None:
    """Owner (as root only), mode and modification time of an extracted entry."""
    if as_root:
        os.lchown(target, member.uid, member.gid)
    if not member.issym():  # a symlink's mode means nothing on Linux
        os.chmod(target, member.mode & 0o7777)
    os.utime(target, (member.mtime, member.mtime), follow_symlinks=False)


def _unsafe(name: str, why: str) -> errors.TemplateBuildError:
    return errors.TemplateBuildError(f"the image's archive has an unsafe entry {name!r}: {why}",
                                     step="export")
