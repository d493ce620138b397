"""A contract session's run: its id, the tag and volume prefix that carry it, and the
sweep of whatever the tests left behind at the end of the session.

The plugin makes one per session (the ``psdk_contract_run`` fixture); the base's
fixtures tag what they create with it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Mapping
from typing import Any

import anyio

from provider_sdk import open_provider
from provider_sdk.capabilities import Capability
from provider_sdk.errors import NotFound
from provider_sdk.models import SandboxState

__all__ = ["TAG_KEY", "ContractRun", "volume_prefix"]

TAG_KEY = "psdk-contract"
"""Metadata key tagging every sandbox the suite creates with the session's run id."""


def volume_prefix(run_id: str) -> str:
    """The name prefix of every volume a run creates."""
    return f"psdk-contract-{run_id}-"


class ContractRun:
    """One test session's run id, and the providers whose leftovers to sweep at the end."""

    def __init__(self, run_id: str) -> None:
        self.id = run_id
        self._targets: list[tuple[str, dict[str, Any]]] = []

    def watch(self, provider_name: str, options: Mapping[str, Any]) -> None:
        """Sweep this provider (opened with these options) at the end of the session."""
        target = (provider_name, dict(options))
        if target not in self._targets:
            self._targets.append(target)

    def sweep(self) -> list[str]:
        """Kill the run's leftover sandboxes and volumes; return what was found."""
        if not self._targets:
            return []
        # A fresh event loop in a worker thread: the test runner's loop may still exist.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(anyio.run, self._sweep_all).result()

    async def _sweep_all(self) -> list[str]:
        found: list[str] = []
        for name, options in self._targets:
            found += await self._sweep_one(name, options)
        return found

    async def _sweep_one(self, name: str, options: dict[str, Any]) -> list[str]:
        found: list[str] = []
        async with open_provider(name, **options) as provider:
            for info in await provider.list(metadata={TAG_KEY: self.id}):
                if info.state == SandboxState.KILLED:
                    continue
                found.append(f"sandbox {info.id}")
                with contextlib.suppress(NotFound):
                    await provider.kill(info.id)
            if provider.supports(Capability.VOLUMES):
                for volume in await provider.list_volumes():
                    if volume.name.startswith(volume_prefix(self.id)):
                        found.append(f"volume {volume.name}")
                        with contextlib.suppress(NotFound):
                            await provider.delete_volume(volume.name)
        return found
