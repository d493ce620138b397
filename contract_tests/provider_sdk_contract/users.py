"""Contract: running commands as another user (``exec.user``)."""

from __future__ import annotations

from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires


class UserContract(ContractBase):
    """Users: ``exec(user=...)`` runs the command as that user."""

    @requires(Capability.EXEC_USER)
    async def test_exec_as_root_runs_as_uid_zero(self, sandbox: Sandbox) -> None:
        """``user="root"`` gives uid 0."""
        result = await sandbox.exec(["id", "-u"], user="root")
        assert (result.exit_code, result.stdout) == (0, "0\n")

    @requires(Capability.EXEC_USER)
    async def test_exec_as_another_user_runs_as_that_user(self, sandbox: Sandbox) -> None:
        """A non-root user runs the command under its own name, and cannot write as root."""
        result = await sandbox.exec(["id", "-un"], user=self.other_user)
        assert (result.exit_code, result.stdout) == (0, f"{self.other_user}\n")
        denied = await sandbox.exec(["sh", "-c", "echo x > /psdk-root-only"],
                                    user=self.other_user)
        assert denied.exit_code != 0
