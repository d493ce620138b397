"""Fixtures for tests that run on the local provider (imported by their conftests): a
fresh state directory per test, and a provider whose sandboxes are all killed after it.

Without bubblewrap these tests skip, except under CI (``CI=true``), where a missing
bubblewrap is a failure: CI installs it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from engines import require_bwrap

from provider_sdk.local import BrokenRecordWarning, LocalProvider


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The local provider's state directory for this test (bubblewrap required)."""
    require_bwrap()
    return tmp_path / "psdk-home"


@pytest.fixture
async def provider(home: Path) -> AsyncIterator[LocalProvider]:
    """A local provider in ``home``; every sandbox it has is killed afterwards."""
    async with provider_in(home) as made:
        yield made


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """``path`` as a tmpfs of ``size`` (e.g. ``"48m"``) for the block; root only (skips
    otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "psdk-test",
                    str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.asynccontextmanager
async def provider_in(home: Path) -> AsyncIterator[LocalProvider]:
    """A local provider in ``home`` whose sandboxes are all killed afterwards."""
    provider = LocalProvider(home=home)
    try:
        yield provider
    finally:
        with warnings.catch_warnings():  # a test may have broken a record on purpose
            warnings.simplefilter("ignore", BrokenRecordWarning)
            infos = await provider.list()
        for info in infos:
            await provider.kill(info.id)
        await provider.aclose()
