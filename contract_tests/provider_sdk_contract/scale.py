"""Contract: many sandboxes at once."""

from __future__ import annotations

import anyio

from provider_sdk.models import ExecResult
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory


class ScaleContract(ContractBase):
    """Concurrency across sandboxes."""

    async def test_twenty_sandboxes_created_concurrently_are_distinct_and_run(
            self, factory: Factory) -> None:
        """Twenty concurrent creates give twenty distinct sandboxes that each run a command."""
        made: dict[int, tuple[Sandbox, ExecResult]] = {}

        async def make(i: int) -> None:
            sandbox = await factory.sandbox(metadata={"psdk-index": str(i)})
            made[i] = (sandbox, await sandbox.exec(["echo", str(i)]))

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(make, i)
        assert len({sandbox.id for sandbox, _ in made.values()}) == 20
        for i, (sandbox, result) in made.items():
            assert (result.exit_code, result.stdout) == (0, f"{i}\n")
            assert sandbox.metadata["psdk-index"] == str(i)
