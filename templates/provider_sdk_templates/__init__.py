"""Dockerfile-to-template builds for provider-sdk.

Each provider builds templates behind the neutral ``templates.build`` capability
(:meth:`~provider_sdk.provider.SandboxProvider.build_template`); this distribution holds
what several of them share to do it from an OCI image: :class:`~.images.ImageBuilder`
(Docker Engine builds, envd, pushes to a :class:`~.images.Registry`), the export of an
image's filesystem (:mod:`.rootfs`), and the reference templates of the catalog
(:mod:`.catalog`).
"""

from provider_sdk_templates.images import ENVD_PATH, ImageBuilder, Registry

__all__ = ["ENVD_PATH", "ImageBuilder", "Registry"]
