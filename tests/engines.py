"""Whether what a test needs from this machine is here: bubblewrap for the local
provider (:func:`require_bwrap`), a Docker Engine with the Docker provider and its base
image (:func:`require_docker`), a second Engine whose storage has quotas
(:func:`require_quota_docker`). Without it a test skips, saying why; under CI
(``CI=true``), which sets all of it up, it fails instead (:func:`missing`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

__all__ = ["docker_problem", "missing", "require_bwrap", "require_docker", "require_quota_docker",
           "require_registry"]


@functools.cache
def docker_problem(base_url: str | None = None) -> str | None:
    """Why the Docker-backed tests cannot run on the Engine at ``base_url`` (default:
    ``DOCKER_HOST``, else the local socket), or ``None`` if they can."""
    try:
        import docker
        import docker.errors
        import requests.exceptions
        from provider_sdk_docker import DEFAULT_TEMPLATE
    except ImportError as exc:
        return f"the Docker provider is not installed ({exc.name})"
    template = os.environ.get("PSDK_DOCKER_TEMPLATE") or DEFAULT_TEMPLATE
    try:
        client = docker.APIClient(base_url=base_url or os.environ.get("DOCKER_HOST")
                                  or "unix:///var/run/docker.sock", version="auto", timeout=10)
        client.inspect_image(template)
    except docker.errors.ImageNotFound:
        return f"the base image {template} is missing (providers/docker/build-base-image)"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return f"no Docker Engine reachable ({type(exc).__name__})"
    return None


def missing(reason: str) -> None:
    """Skip the calling test for what this machine lacks; fail it under CI, which has it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


def require_bwrap() -> None:
    """Skip the calling test (fail it under CI) without bubblewrap."""
    if shutil.which("bwrap") is None:
        missing("bubblewrap (bwrap) is not installed: the local provider needs it")


@functools.cache
def bubblewrap_problem() -> str | None:
    """Why the local provider cannot isolate sandboxes here, or ``None`` if it can."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: the local provider needs it"
    # Only /usr is bound: a bind of / would take every mount under it, and another
    # test's sandbox root unmounted meanwhile fails the probe.
    probe = subprocess.run([bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr",
                            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                            "--symlink", "usr/lib64", "/lib64", "/bin/true"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        return ("bubblewrap cannot create namespaces here: "
                f"{probe.stderr.decode(errors='replace').strip()}")
    return None


def require_namespaces() -> None:
    """Skip the calling test (fail it under CI) where :func:`bubblewrap_problem` says
    why the local provider cannot isolate sandboxes."""
    problem = bubblewrap_problem()
    if problem is not None:
        missing(problem)


def require_docker() -> None:
    """Skip the calling test (fail it under CI) when :func:`docker_problem` says why."""
    problem = docker_problem()
    if problem is not None:
        missing(f"no usable Docker Engine: {problem}")


def require_quota_docker() -> str:
    """The address of the Docker Engine whose storage has quotas (the btrfs driver) that
    ``.ci/run`` starts beside the main one: ``PSDK_TEST_DOCKER_QUOTA_HOST``. Skips (fails
    under CI) when it is unset or unusable."""
    address = os.environ.get("PSDK_TEST_DOCKER_QUOTA_HOST")
    if not address:
        missing("no Docker Engine with storage quotas: set PSDK_TEST_DOCKER_QUOTA_HOST "
                "(.ci/run starts one on the btrfs driver)")
    assert address is not None
    problem = docker_problem(address)
    if problem is not None:
        missing(f"the Docker Engine with storage quotas is not usable: {problem}")
    return address


def require_registry() -> tuple[str, str, str]:
    """The test registry (``HOST:PORT``, user, password) that ``.ci/run`` starts on
    127.0.0.1 with basic auth: ``PSDK_TEST_REGISTRY``, ``PSDK_TEST_REGISTRY_USERNAME``,
    ``PSDK_TEST_REGISTRY_PASSWORD``. Skips (fails under CI) when unset."""
    address = os.environ.get("PSDK_TEST_REGISTRY")
    if not address:
        missing("no test registry: set PSDK_TEST_REGISTRY (HOST:PORT on 127.0.0.1), "
                "PSDK_TEST_REGISTRY_USERNAME and PSDK_TEST_REGISTRY_PASSWORD")
    assert address is not None
    return (address, os.environ.get("PSDK_TEST_REGISTRY_USERNAME", ""),
            os.environ.get("PSDK_TEST_REGISTRY_PASSWORD", ""))
