"""A per-user agent workspace: business code that runs unchanged on every provider.

Nothing here names a backend. The one config field that picks it is ``PSDK_PROVIDER``
(or ``provider = "..."`` in ``psdk.toml``); each provider reads its own settings
(``DAYTONA_API_KEY``, ``E2B_API_KEY``, ``CUBE_API_URL`` ...). What it does, for one user:

1. finds the user's sandbox by metadata, or creates one tagged with the user;
2. installs a tool in one phase and runs it by name in the next (the ``PATH`` and the
   setting exported while installing must still be there: a persistent shell);
3. writes an input file, runs a command on it, reads the result file back;
4. snapshots the workspace, kills it, and restores a new sandbox from the snapshot (on
   providers that declare ``snapshot.filesystem``).

Run it: ``PSDK_PROVIDER=daytona python examples/agent_workspace.py --user alice``. It
prints one JSON object describing what happened.
"""

from __future__ import annotations

import argparse
import json
import shlex

import anyio
import attrs

from provider_sdk import Capability, SandboxProvider, open_provider
from provider_sdk.models import SandboxState
from provider_sdk.sandbox import Sandbox

OWNER = "example.owner"
"""The metadata key that ties a sandbox to its user."""

# Phase one: put a tool on a new PATH entry and export a setting it reads.
INSTALL = (
    "mkdir -p tools/bin && "
    "printf '#!/bin/sh\\necho \"$GREETING, $1\"\\n' > tools/bin/greet && "
    "chmod +x tools/bin/greet && "
    'export PATH="$PWD/tools/bin:$PATH" GREETING=Hello'
)


@attrs.frozen(kw_only=True)
class Outcome:
    """What one run did, for one user."""

    provider: str
    user: str
    reused: bool
    """An existing sandbox of the user's was found and reused."""
    greeting: str
    """What the tool installed in phase one printed in phase two."""
    words: int
    """Words counted in the input file, read back from the result file."""
    restored_words: int | None
    """The result file as read in the sandbox restored from the snapshot (``None``
    where the provider has no filesystem snapshots)."""


async def workspace_for(provider: SandboxProvider, user: str) -> tuple[Sandbox, bool]:
    """The user's sandbox: an existing one (resumed if paused), else a new one."""
    for info in await provider.list(metadata={OWNER: user}):
        if info.state in (SandboxState.RUNNING, SandboxState.PAUSED):
            return await provider.connect(info.id), True
    return await provider.create(metadata={OWNER: user}, env={"APP_USER": user}), False


async def install_then_run(sandbox: Sandbox, user: str) -> str:
    """Install the tool in one phase; run it by name in the next."""
    async with await sandbox.shell() as shell:
        installed = await shell.run(INSTALL)
        if not installed.ok:
            raise RuntimeError(f"install failed ({installed.exit_code}): {installed.stderr}")
        ran = await shell.run(f"greet {shlex.quote(user)}")
    if not ran.ok:
        raise RuntimeError(f"the tool failed ({ran.exit_code}): {ran.stderr}")
    return ran.stdout.strip()


async def count_words(sandbox: Sandbox, text: str) -> int:
    """Write ``text`` to a file, count its words with a command, read the count back."""
    await sandbox.files.write("workspace/input.txt", text)
    done = await sandbox.exec("wc -w < workspace/input.txt > workspace/count.txt")
    if not done.ok:
        raise RuntimeError(f"counting failed: {done.stderr}")
    return int((await sandbox.files.read_text("workspace/count.txt")).strip())


async def snapshot_and_restore(provider: SandboxProvider, sandbox: Sandbox,
                               user: str) -> int:
    """Snapshot the workspace, kill it, restore it; the count as the copy sees it."""
    snapshot = await sandbox.snapshot()
    await sandbox.kill()
    try:
        async with provider.create(snapshot=snapshot.id, metadata={OWNER: user}) as restored:
            return int((await restored.files.read_text("workspace/count.txt")).strip())
    finally:
        await provider.delete_snapshot(snapshot.id)


async def run(provider: SandboxProvider, user: str, text: str) -> Outcome:
    """The whole workflow for one user, on whatever provider was configured."""
    sandbox, reused = await workspace_for(provider, user)
    try:
        greeting = await install_then_run(sandbox, user)
        words = await count_words(sandbox, text)
        restored = None
        if provider.supports(Capability.SNAPSHOT_FILESYSTEM):
            restored = await snapshot_and_restore(provider, sandbox, user)
    finally:
        await sandbox.kill()
    return Outcome(provider=provider.name, user=user, reused=reused, greeting=greeting,
                   words=words, restored_words=restored)


async def main(user: str, text: str) -> None:
    async with open_provider() as provider:  # PSDK_PROVIDER picks the backend
        outcome = await run(provider, user, text)
    print(json.dumps(attrs.asdict(outcome)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default="alice")
    parser.add_argument("--text", default="the quick brown fox jumps over the lazy dog")
    args = parser.parse_args()
    anyio.run(main, args.user, args.text)
