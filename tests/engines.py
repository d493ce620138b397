"""Whether the Docker Engine the tests need is here: the Docker provider installed, an
engine answering, and the base image built. Tests that need it call
:func:`require_docker`: without it they skip, saying why; under CI (``CI=true``), which
sets all of it up, they fail instead.
"""

from __future__ import annotations

import functools
import os

import pytest

__all__ = ["docker_problem", "require_docker"]


@functools.cache
def docker_problem() -> str | None:
    """Why the Docker-backed tests cannot run here, or ``None`` if they can."""
    try:
        import docker
        import docker.errors
        import requests.exceptions
        from provider_sdk_docker import DEFAULT_TEMPLATE
    except ImportError as exc:
        return f"the Docker provider is not installed ({exc.name})"
    template = os.environ.get("PSDK_DOCKER_TEMPLATE") or DEFAULT_TEMPLATE
    try:
        client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                                  or "unix:///var/run/docker.sock", version="auto", timeout=10)
        client.inspect_image(template)
    except docker.errors.ImageNotFound:
        return f"the base image {template} is missing (providers/docker/build-base-image)"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return f"no Docker Engine reachable ({type(exc).__name__})"
    return None


def require_docker() -> None:
    """Skip the calling test (fail it under CI) when :func:`docker_problem` says why."""
    problem = docker_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a Docker Engine: {problem}")
    pytest.skip(problem)
