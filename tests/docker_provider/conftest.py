"""The Docker provider's tests need a Docker Engine with the base image (see
``tests/engines.py``)."""

from __future__ import annotations

import pytest
from engines import require_docker


@pytest.fixture(autouse=True)
def docker_engine() -> None:
    """Skip (fail under CI) when there is no usable Docker Engine."""
    require_docker()
