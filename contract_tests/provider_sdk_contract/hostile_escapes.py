"""Contract, hostile section: a command cannot outlive its timeout, its cancellation or
its kill.

Two tiers. Every provider ends, with a command's timeout, a child that left the
command's tree one way: a new session, a double fork's orphan, ``nohup``, closed stdio;
and with a timeout, a cancellation or ``Process.kill()`` alike (from this provider
instance or another), a double fork's orphan in a session of its own, which neither a
parent link nor a session leads back to. A provider with no pid namespace per command
finds that orphan by a mark in its environment
(:func:`provider_sdk.scripts.kill_command_argv`): the first tier is best effort there,
since code inside can clear its own environment before it leaves.
``exec.contained`` promises the rest: a child that cleared its environment or took
every way out at once, another user's daemon, a command that stops or kills what
contains it, a detached child holding the command's output, and the same after a
cancellation or ``Process.kill()``.

Each escape starts a marked child that leaves the command's tree one way (a new
session, a double fork, ``nohup``, a cleared environment, closed stdio, another user),
waits until the child runs, and then sleeps past the timeout. The test then asks a
later exec whether any process with the marker in its command line is still alive.
The child's ``argv[0]`` carries the marker, so a cleared environment does not hide it.
"""

from __future__ import annotations

import contextlib
import time

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CommandTimeout
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Process, Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import eventually, new_marker, none_marked

__all__ = ["ESCAPES", "escape_script"]

TIMEOUT = 1.5
"""The timeout every escape runs under."""
GRACE = 30.0
"""Seconds past the timeout within which the call must have returned: generous, since
these machines are noisy; a call held by a survivor never returns at all."""
GONE_WITHIN = 10.0
"""Seconds after the call returns within which every marked process must be gone."""

# The child: says it runs (a file named for the marker), then sleeps under the marker.
_CHILD = 'touch "/tmp/$0.up"; exec -a "$0" sleep 300'

ESCAPES: dict[str, str] = {
    "setsid": 'setsid /bin/bash -c "$child" "$m" &',
    "double_fork": '( /bin/bash -c "$child" "$m" & )',
    "nohup": 'nohup /bin/bash -c "$child" "$m" &',
    "cleared_env": 'env -i /bin/bash -c "$child" "$m" &',
    "closed_stdio": '/bin/bash -c "$child" "$m" <&- >&- 2>&- &',
    "new_session_orphan": '( setsid /bin/bash -c "$child" "$m" & )',
    "all_at_once": '( setsid nohup env -i /bin/bash -c "$child" "$m" <&- >&- 2>&- & )',
}
"""Ways out of a command's process tree, as a line of bash that starts ``$child``."""


def escape_script(escape: str) -> str:
    """A bash script (``$1``: the marker) that starts a child by ``ESCAPES[escape]``,
    prints ``escaped`` once the child runs, then sleeps under the marker itself."""
    return (f"m=$1; child='{_CHILD}'\n{ESCAPES[escape]}\n"
            'while [ ! -e "/tmp/$m.up" ]; do sleep 0.05; done\n'
            'echo escaped\nexec -a "$m" sleep 300\n')


def escape_argv(escape: str, marker: str) -> list[str]:
    """The argv that runs :func:`escape_script` with ``marker``."""
    return ["/bin/bash", "-c", escape_script(escape), "psdk-escape", marker]


async def _started(sandbox: Sandbox, marker: str) -> None:
    async def up() -> bool:
        return await sandbox.files.exists(f"/tmp/{marker}.up")

    await eventually(up, what="the escaped child running", timeout=30)


async def _all_gone(sandbox: Sandbox, marker: str, after: str) -> None:
    async def gone() -> bool:
        return await none_marked(sandbox, marker)

    await eventually(gone, what=f"no process marked {marker} alive {after}",
                     timeout=GONE_WITHIN)


class HostileEscapeContract(ContractBase):
    """Containment: timeouts, cancellation and kills end every process a command started
    (a single way out everywhere, found by a mark in the environment where nothing
    better is at hand; the rest with ``exec.contained``)."""

    async def _times_out_and_leaves_nothing(self, sandbox: Sandbox, escape: str,
                                            user: str | None = None) -> None:
        marker = new_marker(f"esc-{escape.replace('_', '-')}")
        began = time.monotonic()
        with anyio.fail_after(TIMEOUT + GRACE), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(escape_argv(escape, marker), user=user, timeout=TIMEOUT)
        took = time.monotonic() - began
        assert "escaped" in caught.value.result.stdout, (
            f"the child never ran before the timeout (after {took:.1f} s): "
            f"{caught.value.result.stderr!r}")
        await _all_gone(sandbox, marker, f"after a {TIMEOUT:g} s timeout ({escape})")

    async def _cancel_leaves_nothing(self, sandbox: Sandbox, escape: str, kind: str) -> None:
        marker = new_marker(kind)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: sandbox.exec(escape_argv(escape, marker)))
                await _started(sandbox, marker)
                tg.cancel_scope.cancel()
        await _all_gone(sandbox, marker, f"after the exec was cancelled ({escape})")

    async def _kill_leaves_nothing(self, sandbox: Sandbox, process: Process, marker: str,
                                   *, killer: Process | None = None) -> None:
        """``Process.kill()`` (of ``killer``, another handle of the process, if given)
        ends every marked process, and ``process.wait()`` then returns."""
        await _started(sandbox, marker)
        with anyio.fail_after(GRACE):
            await (killer or process).kill()
        await _all_gone(sandbox, marker, "after Process.kill()")
        with anyio.fail_after(GRACE):
            result = await process.wait()
        assert result.exit_code != 0

    async def test_hostile_timeout_kills_a_setsid_child(self, sandbox: Sandbox) -> None:
        """A child in a new session (``setsid``) dies with its command's timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "setsid")

    async def test_hostile_timeout_kills_a_double_forked_child(self, sandbox: Sandbox) -> None:
        """A child reparented by a double fork dies with its command's timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "double_fork")

    async def test_hostile_timeout_kills_a_nohup_child(self, sandbox: Sandbox) -> None:
        """A child under ``nohup`` dies with its command's timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "nohup")

    @requires(Capability.EXEC_CONTAINED)
    async def test_hostile_timeout_kills_a_child_with_a_cleared_environment(
            self, sandbox: Sandbox) -> None:
        """A child started with ``env -i`` (no variable to find it by) dies with the timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "cleared_env")

    async def test_hostile_timeout_kills_a_child_with_closed_stdio(
            self, sandbox: Sandbox) -> None:
        """A child that closed stdin, stdout and stderr dies with its command's timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "closed_stdio")

    async def test_hostile_timeout_kills_an_orphan_in_a_new_session(
            self, sandbox: Sandbox) -> None:
        """A double fork's orphan in a session of its own (no parent, no session to find
        it by) dies with its command's timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "new_session_orphan")

    async def test_hostile_cancelled_exec_kills_an_orphan_in_a_new_session(
            self, sandbox: Sandbox) -> None:
        """Cancelling an exec whose command left an orphan in a new session ends it."""
        await self._cancel_leaves_nothing(sandbox, "new_session_orphan", "esc-cancel-orphan")

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_hostile_process_kill_kills_an_orphan_in_a_new_session(
            self, sandbox: Sandbox) -> None:
        """``Process.kill()`` of a background process that left an orphan in a new
        session ends both; ``wait()`` then returns."""
        marker = new_marker("esc-bg-orphan")
        process = await sandbox.start(escape_argv("new_session_orphan", marker))
        await self._kill_leaves_nothing(sandbox, process, marker)

    @requires(Capability.PROCESS_BACKGROUND)
    async def test_hostile_kill_through_a_second_provider_kills_an_orphan_in_a_new_session(
            self, sandbox: Sandbox, second_provider: SandboxProvider) -> None:
        """Another provider instance, which did not start the process and holds nothing
        of it but its pid, kills it and the orphan it left in a session of its own; the
        starter's ``wait()`` then returns."""
        marker = new_marker("esc-other-orphan")
        process = await sandbox.start(escape_argv("new_session_orphan", marker))
        theirs = (await second_provider.connect(sandbox.id)).process(process.pid)
        await self._kill_leaves_nothing(sandbox, process, marker, killer=theirs)

    @requires(Capability.EXEC_CONTAINED)
    async def test_hostile_timeout_kills_a_fully_detached_daemon(
            self, sandbox: Sandbox) -> None:
        """A child that does every escape at once (setsid, double fork, nohup, ``env -i``,
        closed stdio) dies with its command's timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "all_at_once")

    @requires(Capability.EXEC_CONTAINED, Capability.EXEC_USER)
    async def test_hostile_timeout_kills_a_daemon_of_another_user(
            self, sandbox: Sandbox) -> None:
        """A detached daemon of another user (``exec(user=...)``) dies with the timeout."""
        await self._times_out_and_leaves_nothing(sandbox, "all_at_once", user=self.other_user)

    @requires(Capability.EXEC_CONTAINED)
    async def test_hostile_command_cannot_stop_or_kill_what_contains_it(
            self, sandbox: Sandbox) -> None:
        """A command that stops, then kills, every process it may signal (``kill -STOP
        -1``, ``kill -KILL -1``: the provider's agent and supervisors, where they share
        its user) leaves the sandbox serving: the next exec answers, and a timeout still
        ends a detached daemon."""
        with anyio.fail_after(10 + GRACE), contextlib.suppress(CommandTimeout):
            await sandbox.exec(["/bin/bash", "-c", "kill -STOP -1; kill -KILL -1; true"],
                               timeout=10)
        with anyio.fail_after(GRACE):
            result = await sandbox.exec(["echo", "still here"])
        assert (result.exit_code, result.stdout) == (0, "still here\n")
        await self._times_out_and_leaves_nothing(sandbox, "all_at_once")

    @requires(Capability.EXEC_CONTAINED)
    async def test_hostile_detached_child_holding_stdout_does_not_hold_the_call(
            self, sandbox: Sandbox) -> None:
        """A detached child that keeps the command's stdout open neither holds the call
        past the timeout's grace nor outlives it."""
        marker = new_marker("holder")
        script = ('( setsid /bin/bash -c \'exec -a "$0" sleep 300\' "$1" & ); echo started; '
                  'exec -a "$1" sleep 300')
        with anyio.fail_after(TIMEOUT + GRACE), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["/bin/bash", "-c", script, "psdk-holder", marker],
                               timeout=TIMEOUT)
        assert "started" in caught.value.result.stdout
        await _all_gone(sandbox, marker, "after the timeout")

    @requires(Capability.EXEC_CONTAINED)
    async def test_hostile_cancelled_exec_kills_a_detached_daemon(
            self, sandbox: Sandbox) -> None:
        """Cancelling an exec (``move_on_after``) whose command daemonized a child leaves
        nothing alive."""
        await self._cancel_leaves_nothing(sandbox, "all_at_once", "esc-cancel")

    @requires(Capability.EXEC_CONTAINED)
    async def test_hostile_move_on_after_returns_and_kills_a_detached_daemon(
            self, sandbox: Sandbox) -> None:
        """``move_on_after`` around an exec whose child daemonized returns within a grace
        of its deadline and leaves nothing alive."""
        marker = new_marker("esc-move-on")
        with anyio.fail_after(5 + GRACE):
            with anyio.move_on_after(5) as scope:
                await sandbox.exec(escape_argv("all_at_once", marker))
            assert scope.cancelled_caught
        assert await sandbox.files.exists(f"/tmp/{marker}.up"), "the child never ran"
        await _all_gone(sandbox, marker, "after move_on_after")

    @requires(Capability.EXEC_CONTAINED, Capability.PROCESS_BACKGROUND)
    async def test_hostile_process_kill_kills_a_detached_daemon(self, sandbox: Sandbox) -> None:
        """``Process.kill()`` of a background process whose child daemonized ends both;
        ``wait()`` then returns."""
        marker = new_marker("esc-bg")
        process = await sandbox.start(escape_argv("all_at_once", marker))
        await self._kill_leaves_nothing(sandbox, process, marker)

    @requires(Capability.EXEC_CONTAINED, Capability.PROCESS_BACKGROUND, Capability.EXEC_USER)
    async def test_hostile_process_kill_kills_a_daemon_of_another_user(
            self, sandbox: Sandbox) -> None:
        """``Process.kill()`` of another user's background process ends its daemon too."""
        marker = new_marker("esc-bg-user")
        process = await sandbox.start(escape_argv("all_at_once", marker), user=self.other_user)
        await self._kill_leaves_nothing(sandbox, process, marker)
