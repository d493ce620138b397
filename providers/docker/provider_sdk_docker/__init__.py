"""The Docker Engine provider: sandboxes as hardened containers (entry point ``docker``)."""

from provider_sdk_docker.provider import DEFAULT_TEMPLATE, DockerProvider

__all__ = ["DEFAULT_TEMPLATE", "DockerProvider"]
