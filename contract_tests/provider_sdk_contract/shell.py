"""Contract: persistent shell sessions (``shell.persistent``)."""

from __future__ import annotations

import anyio

from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import new_marker


class ShellContract(ContractBase):
    """Persistent shells: ``cd`` and ``export`` carry over; failures do not end the session."""

    @requires(Capability.SHELL_PERSISTENT)
    async def test_shell_cd_carries_over(self, sandbox: Sandbox) -> None:
        """A ``cd`` in one run is the working directory of the next."""
        await sandbox.files.mkdir("/tmp/psdk shell dir")
        with anyio.fail_after(60):
            async with await sandbox.shell() as shell:
                assert (await shell.run("cd '/tmp/psdk shell dir'")).exit_code == 0
                result = await shell.run("pwd")
        assert result.stdout == "/tmp/psdk shell dir\n"

    @requires(Capability.SHELL_PERSISTENT)
    async def test_shell_export_carries_over(self, sandbox: Sandbox) -> None:
        """An ``export`` in one run is in the environment of the next, and of its children."""
        with anyio.fail_after(60):
            async with await sandbox.shell() as shell:
                await shell.run("export PSDK_SHELL_VAR='a b \"c\"'")
                result = await shell.run("sh -c 'printf %s \"$PSDK_SHELL_VAR\"'")
        assert result.stdout == 'a b "c"'

    @requires(Capability.SHELL_PERSISTENT)
    async def test_shell_starts_with_given_cwd_and_env(self, sandbox: Sandbox) -> None:
        """``shell(cwd=, env=)`` starts the session there, with those variables."""
        with anyio.fail_after(60):
            async with await sandbox.shell(cwd="/tmp", env={"PSDK_START": "s v"}) as shell:
                result = await shell.run('printf "%s|%s" "$PWD" "$PSDK_START"')
        assert result.stdout == "/tmp|s v"

    @requires(Capability.SHELL_PERSISTENT)
    async def test_shell_two_phase_install_then_run_keeps_the_environment(
            self, sandbox: Sandbox) -> None:
        """Phase one installs a tool on a new PATH entry and exports a setting; phase two
        runs the tool by name and it sees the setting."""
        tool = new_marker("tool")
        bindir = f"/tmp/{tool}-bin"
        install = (f"mkdir -p {bindir} && "
                   f"printf '#!/bin/sh\\necho \"tool:$PSDK_TOOL_MODE\"\\n' > {bindir}/{tool} && "
                   f"chmod +x {bindir}/{tool} && "
                   f'export PATH="{bindir}:$PATH" PSDK_TOOL_MODE=installed')
        with anyio.fail_after(60):
            async with await sandbox.shell() as shell:
                setup = await shell.run(install)
                assert setup.exit_code == 0, setup.stderr
                result = await shell.run(tool)
        assert (result.exit_code, result.stdout) == (0, "tool:installed\n")

    @requires(Capability.SHELL_PERSISTENT)
    async def test_shell_failing_command_keeps_the_session(self, sandbox: Sandbox) -> None:
        """A failing command returns its exit code; the session keeps its state."""
        with anyio.fail_after(60):
            async with await sandbox.shell() as shell:
                await shell.run("cd /tmp && export PSDK_KEPT=yes")
                failed = await shell.run("false")
                missing = await shell.run("psdk-no-such-command-anywhere")
                result = await shell.run('printf "%s|%s" "$PWD" "$PSDK_KEPT"')
        assert failed.exit_code == 1
        assert missing.exit_code == 127
        assert result.stdout == "/tmp|yes"

    @requires(Capability.SHELL_PERSISTENT)
    async def test_shell_exit_keeps_the_session(self, sandbox: Sandbox) -> None:
        """A command that calls ``exit 3`` returns 3; the next run still has the state."""
        with anyio.fail_after(60):
            async with await sandbox.shell() as shell:
                await shell.run("export PSDK_KEPT=after-exit")
                exited = await shell.run("exit 3")
                result = await shell.run('printf %s "$PSDK_KEPT"')
        assert exited.exit_code == 3
        assert result.stdout == "after-exit"

    @requires(Capability.SHELL_PERSISTENT)
    async def test_two_shells_do_not_share_state(self, sandbox: Sandbox) -> None:
        """Each session has its own directory and variables."""
        place = f"/tmp/{new_marker('first')}"
        await sandbox.files.mkdir(place)
        with anyio.fail_after(60):
            async with await sandbox.shell() as first, await sandbox.shell() as second:
                await first.run(f"cd {place} && export PSDK_WHO=first")
                result = await second.run('printf "%s|%s" "$PWD" "${PSDK_WHO-unset}"')
        where, _, who = result.stdout.partition("|")
        assert (where != place, who) == (True, "unset")
