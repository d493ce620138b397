"""Contract, hostile section: limits hold without being asked for (``limits.pids``,
``limits.memory``, ``limits.disk``) and the kernel surface is narrowed
(``seal.syscalls``).

Every flood here is bounded twice: by the limit under test, and by the command itself
(a fork bomb stops at a depth, an allocation at a size), so a provider that declares a
limit it does not have fails the test without taking the host down.
"""

from __future__ import annotations

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CommandTimeout
from provider_sdk.models import Resources
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import eventually, new_marker, none_marked

# Every process forks two more (to a depth of 12: 8191 at most), then sleeps under
# the marker, so the live count only grows until forks fail.
_FORK_BOMB = ('b() { if [ "$2" -lt 12 ]; then b "$1" $(($2 + 1)) & b "$1" $(($2 + 1)) & fi; '
              'exec -a "$1" sleep 300; }; b "$1" 0')
# tail keeps an unterminated line whole: the 512 MiB of zeros end up in its memory.
_ALLOCATE = "head -c 512M /dev/zero | tail -n 1 > /dev/null"
_FILL_DISK = 'head -c 128M /dev/zero > "$1"'


class HostileLimitContract(ContractBase):
    """Limits: a fork bomb, a memory flood and a disk fill stop at the sandbox's limits."""

    @requires(Capability.LIMITS_PIDS, Capability.EXEC_CONTAINED)
    async def test_hostile_fork_bomb_stops_at_the_pids_limit_and_dies_with_its_timeout(
            self, factory: Factory) -> None:
        """A fork bomb hits the pids limit (forks fail), its timeout still returns and
        kills every process of it, and a sandbox made right after works."""
        sandbox = await factory.sandbox()
        marker = new_marker("bomb")
        # The timeout leaves a loaded machine (tests run side by side) the time to fork
        # up to the limit; a bomb reaches it in well under a second on an idle one.
        with anyio.fail_after(15 + 60), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["/bin/bash", "-c", _FORK_BOMB, "psdk-bomb", marker], timeout=15)
        stderr = caught.value.result.stderr
        assert "fork" in stderr or "Resource temporarily unavailable" in stderr, (
            f"no fork failed: the bomb never reached a pids limit ({stderr[:300]!r})")

        async def gone() -> bool:
            return await none_marked(sandbox, marker)

        await eventually(gone, what=f"no process of the fork bomb {marker} alive", timeout=30)
        after = await factory.sandbox()
        with anyio.fail_after(60):
            result = await after.exec(["echo", "still here"])
        assert (result.exit_code, result.stdout) == (0, "still here\n")

    @requires(Capability.LIMITS_MEMORY)
    async def test_hostile_memory_flood_is_killed_and_reported_as_oom(
            self, factory: Factory) -> None:
        """Allocating 512 MiB under ``Resources(memory_mb=128)`` kills the command with
        ``oom_killed`` set; the sandbox still answers."""
        sandbox = await factory.sandbox(resources=Resources(memory_mb=128))
        with anyio.fail_after(120):
            result = await sandbox.exec(["/bin/bash", "-c", _ALLOCATE], timeout=100)
        assert result.exit_code != 0
        assert result.oom_killed, f"exit {result.exit_code}, not reported as an OOM kill"
        with anyio.fail_after(60):
            again = await sandbox.exec(["echo", "alive"])
        assert again.stdout == "alive\n"

    @requires(Capability.LIMITS_MEMORY)
    async def test_hostile_memory_limit_is_set_by_default(self, factory: Factory) -> None:
        """A sandbox created without resources has a memory limit, reported by ``info()``."""
        sandbox = await factory.sandbox()
        info = await sandbox.refresh()
        assert info.resources.memory_mb is not None, "info() reports no memory limit"
        assert info.resources.memory_mb > 0

    @requires(Capability.LIMITS_MEMORY)
    async def test_hostile_memory_limit_asked_for_is_reported(self, factory: Factory) -> None:
        """``Resources(memory_mb=128)`` is what ``info()`` reports."""
        sandbox = await factory.sandbox(resources=Resources(memory_mb=128))
        assert (await sandbox.refresh()).resources.memory_mb == 128

    @requires(Capability.LIMITS_DISK)
    async def test_hostile_disk_fill_fails_inside_with_enospc(self, factory: Factory) -> None:
        """Writing 128 MiB under ``Resources(disk_mb=64)`` fails inside with "No space left
        on device" (or, where a quota enforces it, "Disk quota exceeded"); the sandbox
        still answers and can remove the file."""
        sandbox = await factory.sandbox(resources=Resources(disk_mb=64))
        name = new_marker("fill")
        with anyio.fail_after(180):
            result = await sandbox.exec(["/bin/bash", "-c", _FILL_DISK, "psdk-fill", name],
                                        timeout=150)
        assert result.exit_code != 0, "128 MiB fit in a 64 MiB quota"
        assert any(message in result.stderr for message in (
            "No space left on device", "Disk quota exceeded")), result.stderr
        with anyio.fail_after(60):
            await sandbox.files.remove(name)
            again = await sandbox.exec(["echo", "alive"])
        assert again.stdout == "alive\n"

    @requires(Capability.LIMITS_DISK)
    async def test_hostile_disk_quota_is_set_by_default(self, factory: Factory) -> None:
        """A sandbox created without resources has a disk quota, reported by ``info()``."""
        sandbox = await factory.sandbox()
        info = await sandbox.refresh()
        assert info.resources.disk_mb is not None, "info() reports no disk limit"
        assert info.resources.disk_mb > 0

    # ------------------------------------------------------------------ syscalls

    @requires(Capability.SEAL_SYSCALLS)
    async def test_hostile_nested_user_namespace_with_root_mapping_is_refused(
            self, sandbox: Sandbox) -> None:
        """``unshare -Ur true`` (a nested user namespace, mapped to root) fails."""
        result = await sandbox.exec(["unshare", "-Ur", "true"])
        assert result.exit_code != 0, "a nested user namespace was allowed"

    @requires(Capability.SEAL_SYSCALLS)
    async def test_hostile_nested_user_namespace_is_refused(self, sandbox: Sandbox) -> None:
        """``unshare -U true`` (a nested user namespace, unmapped) fails."""
        result = await sandbox.exec(["unshare", "-U", "true"])
        assert result.exit_code != 0, "a nested user namespace was allowed"

    @requires(Capability.SEAL_SYSCALLS)
    async def test_hostile_commands_run_under_a_seccomp_filter(self, sandbox: Sandbox) -> None:
        """A command's ``/proc/self/status`` says it runs under a seccomp filter (mode 2)."""
        result = await sandbox.exec(["grep", "^Seccomp:", "/proc/self/status"])
        assert result.stdout.split() == ["Seccomp:", "2"], result.stdout
