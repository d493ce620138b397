"""Contract, hostile section: code in the code interpreter that attacks what carries its
results.

An interpreter's results travel from the sandbox to the host on some channel the code
can find (a descriptor of its own process, another process's descriptors under
``/proc``). Code may write anything there: malformed frames, frames for other runs, a
line nested past any parser's depth. Whatever it writes, a run ends in a result or a
typed error of this SDK, and no run of another context, or of another sandbox, is
answered by what it wrote. Code its caller stopped waiting for holds no later run, and
a sandbox whose ``python3`` never starts delays no other sandbox's runs.
"""

from __future__ import annotations

import contextlib

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import ContextNotFound, SandboxError
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires

_WITHIN = 120.0
"""Seconds any one test may take: a context starts in well under a second."""
_PROMPT = 30.0
"""Seconds within which another sandbox's run must be answered while one stalls."""
_BIN = "/tmp/psdk-hostile-bin"
"""Where the stalling ``python3`` lives: first on its sandbox's ``PATH``."""

# Writes ``lines`` to each descriptor of each process in ``pids`` it can open for
# writing (its own descriptors, or another's through /proc), past 0, 1 and 2 of its own.
# Each line goes whole (a descriptor that takes nothing for 5 s is left).
_WRITE_EVERYWHERE = """
import os, select
def write_whole(fd, line):
    while line:
        if not select.select([], [fd], [], 5)[1]:
            raise OSError('stalled')
        try:
            line = line[os.write(fd, line):]
        except BlockingIOError:
            pass
def write_everywhere(pids, lines):
    reached = 0
    for pid in pids:
        where = '/proc/%s/fd' % pid
        try:
            fds = os.listdir(where)
        except OSError:
            continue
        for name in fds:
            if pid == 'self' and int(name) <= 2:
                continue
            try:
                fd = os.open(os.path.join(where, name),
                             os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                for line in lines:
                    write_whole(fd, line)
                reached += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return reached
"""


def _frames(kinds: list[str], forged: str) -> str:
    """Python for the lines of frames of each kind, for runs 0 to 40, with ``forged``
    as the frame's fields beside them."""
    return (f"[(json.dumps(dict(t=kind, e=e, **{forged})) + '\\n').encode() "
            f"for e in range(41) for kind in {kinds!r}]")


class HostileCodeContract(ContractBase):
    """Frames forged by the code are never another run's result, malformed ones never
    break the call, and a sandbox that stalls its interpreter's start stalls only
    itself."""

    @requires(Capability.CODE_INTERPRETER)
    async def test_hostile_code_malformed_frames_end_in_a_result(
            self, sandbox: Sandbox) -> None:
        """Frame-like lines of every kind with fields of the wrong types, and a line of
        JSON nested 100,000 deep, written to every descriptor the code has: the run
        returns its own result, and the context runs on."""
        code = (_WRITE_EVERYWHERE + "import json\n"
                "lines = " + _frames(["stdout", "text", "error", "done"],
                                     "dict(x=[1], count='many', name={}, value=[], "
                                     "traceback=None)") + "\n"
                "lines.append(b'[' * 100000 + b'\\n')\n"
                "reached = write_everywhere(['self'], lines)\n"
                "print('written')\n"
                "reached > 0")
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            await sandbox.code.run("kept = 'still here'", context=ctx)
            try:
                result = await sandbox.code.run(code, context=ctx)
            except SandboxError:
                raise
            except BaseException as exc:
                raise AssertionError(f"the run raised {exc!r}, no result or typed "
                                     "error") from exc
            after = await sandbox.code.run("kept", context=ctx)
        assert (result.error, result.text) == (None, "True"), result
        assert result.stdout.endswith("written\n")
        assert (after.error, after.text) == (None, "'still here'")

    @requires(Capability.CODE_INTERPRETER)
    async def test_hostile_code_cannot_answer_another_context_run(
            self, sandbox: Sandbox) -> None:
        """Code in one context writes complete, well-formed results for every run
        number to every descriptor of every process it can reach, the other context's
        interpreter included: the other context's next run still returns its own
        result."""
        forger = (_WRITE_EVERYWHERE + "import json, os\n"
                  "lines = " + _frames(["stdout", "text", "done"],
                                       "dict(x='forged', count=99)") + "\n"
                  "pids = [p for p in os.listdir('/proc') if p.isdigit() "
                  "and int(p) != os.getpid()]\n"
                  "write_everywhere(pids, lines)")
        with anyio.fail_after(_WITHIN):
            victim = await sandbox.code.create_context()
            await sandbox.code.run("import time", context=victim)
            attacker = await sandbox.code.create_context()
            attack = await sandbox.code.run(forger, context=attacker)
            result = await sandbox.code.run("time.sleep(1)\nprint('own')\n6 * 7",
                                            context=victim)
        assert attack.error is None, attack.error
        assert (result.error, result.text, result.stdout) == (None, "42", "own\n"), result

    @requires(Capability.CODE_INTERPRETER)
    async def test_hostile_code_left_by_its_caller_holds_no_later_run(
            self, sandbox: Sandbox) -> None:
        """Code that swallows the interrupt, in a run its caller stopped waiting for (a
        cancel scope), does not go on holding its context: the caller has control back
        soon, and the context's next run answers at once (the context is gone)."""
        stubborn = ("import time\n"
                    "while True:\n"
                    "    try:\n"
                    "        time.sleep(0.05)\n"
                    "    except KeyboardInterrupt:\n"
                    "        pass")
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            started = anyio.current_time()
            with anyio.move_on_after(1):
                await sandbox.code.run(stubborn, context=ctx)
            left = anyio.current_time() - started
            with anyio.fail_after(_PROMPT), pytest.raises(ContextNotFound):
                await sandbox.code.run("1", context=ctx)
        assert left < _PROMPT, f"the caller had control back after {left:.1f} s"

    @requires(Capability.CODE_INTERPRETER)
    async def test_hostile_code_stalled_interpreter_delays_no_other_sandbox(
            self, factory: Factory) -> None:
        """A sandbox whose ``python3`` never answers holds its own first run, not a
        first run in another sandbox."""
        stalled = await factory.sandbox(
            env={"PATH": f"{_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                         "/sbin:/bin"})
        await stalled.files.write(f"{_BIN}/python3", "#!/bin/sh\nexec sleep 3600\n")
        chmod = await stalled.exec(["chmod", "755", f"{_BIN}/python3"])
        assert chmod.ok, chmod.stderr
        other = await factory.sandbox()
        with anyio.fail_after(_WITHIN):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run_quietly, stalled)
                await anyio.sleep(1)  # the stalled sandbox's start is under way
                with anyio.fail_after(_PROMPT):
                    result = await other.code.run("6 * 7")
                tg.cancel_scope.cancel()
        assert result.text == "42"

    @staticmethod
    async def _run_quietly(sandbox: Sandbox) -> None:
        with contextlib.suppress(SandboxError):
            await sandbox.code.run("1")
