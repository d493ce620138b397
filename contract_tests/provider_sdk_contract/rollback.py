"""Contract: rolling a sandbox back in place (``snapshot.rollback``)."""

from __future__ import annotations

import secrets

from provider_sdk.capabilities import Capability
from provider_sdk.models import SandboxState
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

__all__ = ["RollbackContract"]

_KEPT = "psdk-rollback/kept.bin"
_LATER = "psdk-rollback/later.txt"


class RollbackContract(ContractBase):
    """Rollback: the same sandbox, with the snapshot's files, as often as asked."""

    @requires(Capability.SNAPSHOT_ROLLBACK)
    async def test_rollback_restores_the_snapshots_files_in_place(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """Files changed and made after the snapshot are as they were at the snapshot;
        the sandbox keeps its id and answers commands at once."""
        data = secrets.token_bytes(4096)
        await sandbox.files.write(_KEPT, data)
        snap = await factory.snapshot(sandbox)
        await sandbox.files.write(_KEPT, b"changed after the snapshot")
        await sandbox.files.write(_LATER, b"made after the snapshot")

        info = await sandbox.rollback(snap)
        assert (info.id, info.state) == (sandbox.id, SandboxState.RUNNING)
        assert await sandbox.files.read(_KEPT) == data
        assert not await sandbox.files.exists(_LATER)
        result = await sandbox.exec(["cat", _LATER])
        assert result.exit_code != 0, f"{_LATER} is still there: {result.stdout!r}"

    @requires(Capability.SNAPSHOT_ROLLBACK)
    async def test_rollback_twice_to_one_snapshot(self, sandbox: Sandbox,
                                                  factory: Factory) -> None:
        """A snapshot rolled back to stays usable: a second rollback undoes what was
        written after the first."""
        await sandbox.files.write(_KEPT, b"at the snapshot")
        snap = await factory.snapshot(sandbox)
        await sandbox.files.write(_KEPT, b"first change")
        await sandbox.rollback(snap.id)
        assert await sandbox.files.read(_KEPT) == b"at the snapshot"
        await sandbox.files.write(_KEPT, b"second change")
        await sandbox.rollback(snap)
        assert await sandbox.files.read(_KEPT) == b"at the snapshot"
