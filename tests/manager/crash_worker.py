"""A separate process for the crash tests: a manager that starts acquiring an owner on
the local provider over a SQLite file, says ``creating`` once its sandbox is made (its
claim held, nothing bound), and hangs there until it is killed.

Usage: ``python crash_worker.py HOME DB OWNER``.
"""

from __future__ import annotations

import sys

import anyio

from provider_sdk.local import LocalProvider
from provider_sdk.manager import SandboxManager, SQLiteStore
from provider_sdk.models import SandboxInfo, SandboxSpec


class _HangAfterCreate(LocalProvider):
    async def _create(self, spec: SandboxSpec) -> SandboxInfo:
        await super()._create(spec)
        print("creating", flush=True)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def main(home: str, db: str, owner: str) -> None:
    async with SQLiteStore(db) as store:
        await SandboxManager(_HangAfterCreate(home=home), store).acquire(owner)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
