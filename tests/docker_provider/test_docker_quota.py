"""The Docker provider on an Engine whose storage has quotas (the btrfs driver, which
``.ci/run`` starts beside the main Engine): the quota is found and declared, every
sandbox gets one by default, and a write past it fails typed through the files API and
with ENOSPC inside, leaving the sandbox usable.

Creating a container on btrfs with quotas takes seconds to tens of seconds, so the
module's own test makes one sandbox and asks everything of it; the contract suite's
limits section runs here too, since only here does ``limits.disk`` hold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from engines import require_quota_docker
from provider_sdk_contract.hostile_limits import HostileLimitContract
from provider_sdk_docker import DEFAULT_TEMPLATE, DockerProvider

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

DISK_MB = 64
"""The provider's default quota here: small, so a test can fill it."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def provider() -> AsyncIterator[DockerProvider]:
    provider = DockerProvider(base_url=require_quota_docker(), pids_limit=128,
                              disk_mb=DISK_MB)
    yield provider
    await provider.aclose()


async def test_storage_quotas_are_found_and_declared(provider: DockerProvider) -> None:
    """The btrfs driver is found to have quotas, so ``limits.disk`` is declared."""
    assert provider.disk_quota
    assert provider.supports(Capability.LIMITS_DISK)


async def _fill(sandbox: Sandbox) -> None:
    with pytest.raises(errors.QuotaExceeded):
        await sandbox.files.write("/tmp/big", bytes((DISK_MB + 32) << 20))
    assert not await sandbox.files.exists("/tmp/big"), "the failed write left a file"
    filled = await sandbox.exec(f"head -c {DISK_MB + 32}M /dev/zero > /tmp/fill",
                                timeout=120)
    assert filled.exit_code != 0, filled
    assert any(m in filled.stderr for m in ("No space left", "Disk quota exceeded")), filled


async def test_the_default_quota_holds_and_the_sandbox_answers_after(
        provider: DockerProvider) -> None:
    """A sandbox made without ``Resources`` has the default quota, reported by
    ``info()``; a write past it is ``QuotaExceeded`` through the files API (no partial
    file stays) and ENOSPC inside; removing the file frees the room again."""
    async with provider.create() as sandbox:
        assert (await sandbox.refresh()).resources.disk_mb == DISK_MB
        await _fill(sandbox)
        await sandbox.files.remove("/tmp/fill")
        await sandbox.files.write("/tmp/small", b"x" * (8 << 20))
        assert (await sandbox.files.stat("/tmp/small")).size == 8 << 20
        again = await sandbox.exec(["echo", "still here"])
        assert again.stdout == "still here\n"


class TestDockerQuotaLimits(HostileLimitContract):
    """The contract suite's limits section (disk fill and default quota included) on the
    Engine with storage quotas."""

    provider_name = "docker"
    template_base = DEFAULT_TEMPLATE

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        return {"base_url": require_quota_docker()}
