"""The Docker provider's tests need a Docker Engine with the base image.

Without one they skip, saying why; under CI (``CI=true``) a missing engine or image is a
failure, not a skip.
"""

from __future__ import annotations

import functools
import os

import docker
import docker.errors
import pytest
import requests.exceptions
from provider_sdk_docker import DEFAULT_TEMPLATE


@functools.cache
def engine_problem() -> str | None:
    """Why the Docker tests cannot run here, or ``None`` if they can."""
    template = os.environ.get("PSDK_DOCKER_TEMPLATE") or DEFAULT_TEMPLATE
    try:
        client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST")
                                  or "unix:///var/run/docker.sock", version="auto", timeout=10)
        client.inspect_image(template)
    except docker.errors.ImageNotFound:
        return f"the base image {template} is missing (.ci/run builds it)"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return f"no Docker Engine reachable ({type(exc).__name__})"
    return None


@pytest.fixture(autouse=True)
def docker_engine() -> None:
    """Skip (fail under CI) when there is no usable Docker Engine."""
    problem = engine_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a Docker Engine: {problem}")
    pytest.skip(problem)
