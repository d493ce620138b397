"""The labels and names that mark what the Docker provider made on an Engine."""

from __future__ import annotations

import datetime as dt

LABEL = "psdk.sandbox"
LABEL_METADATA = "psdk.metadata"
LABEL_META = "psdk.meta."
LABEL_TEMPLATE = "psdk.template"
LABEL_CREATED = "psdk.created"
LABEL_DISK = "psdk.disk_mb"
LABEL_SNAPSHOT = "psdk.snapshot"
LABEL_SNAPSHOT_SOURCE = "psdk.snapshot.source"
LABEL_VOLUME = "psdk.volume"
LABEL_TEMPLATE_HASH = "psdk.template.hash"
LABEL_TEMPLATE_NAME = "psdk.template.name"
SNAPSHOT_REPOSITORY = "psdk-snapshot"
TEMPLATE_PREFIX = "psdk-template-"


def container_name(sandbox_id: str) -> str:
    """The container a sandbox is."""
    return f"psdk-{sandbox_id}"


def now() -> dt.datetime:
    """The current time, in UTC (what the ``created`` labels hold)."""
    return dt.datetime.now(dt.timezone.utc)
