"""Contract: the code interpreter (``code.interpreter``): stateful Python contexts."""

from __future__ import annotations

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CodeTimeout, ContextNotFound, InvalidInput
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import new_marker

_MiB = 1 << 20
_WITHIN = 120.0
"""Seconds any one test may take: a context starts in well under a second."""


class CodeInterpreterContract(ContractBase):
    """Contexts keep their state and are independent; a run returns the last
    expression's text, its two streams apart and the exception it raised; a timeout
    interrupts the code and keeps the context; output is streamed, and what is kept is
    bounded as exec's is."""

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_state_carries_over_between_runs(self, sandbox: Sandbox) -> None:
        """A name, an import and a function defined in one run are there in the next."""
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context(language="python")
            first = await sandbox.code.run("import math\nx = 41\ndef twice(v):\n"
                                           "    return 2 * v", context=ctx)
            result = await sandbox.code.run("x + 1, twice(math.floor(2.5))", context=ctx)
        assert (first.error, first.text) == (None, None)
        assert (result.error, result.text) == (None, "(42, 4)")
        assert result.execution_count == first.execution_count + 1

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_text_is_the_last_expression_as_a_notebook_shows_it(
            self, sandbox: Sandbox) -> None:
        """``text`` is the ``repr`` of the last expression's value; ``None`` after a
        statement, or for a value of ``None``."""
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            shown = await sandbox.code.run("word = 'psdk'\n{'k': [1, 2]}, word * 2",
                                           context=ctx)
            statement = await sandbox.code.run("y = 1", context=ctx)
            none = await sandbox.code.run("print('printed')", context=ctx)
        assert shown.text == "({'k': [1, 2]}, 'psdkpsdk')"
        assert statement.text is None
        assert (none.text, none.stdout) == (None, "printed\n")

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_stdout_and_stderr_are_kept_apart(self, sandbox: Sandbox) -> None:
        """What the code, and a process it starts, write to stdout and stderr comes
        back on each stream, in order."""
        code = ("import subprocess, sys\n"
                "print('out 1')\n"
                "print('err 1', file=sys.stderr)\n"
                "subprocess.run(['sh', '-c', 'echo out 2; echo err 2 >&2'], check=True)\n"
                "sys.stdout.write('out 3\\n')")
        with anyio.fail_after(_WITHIN):
            result = await sandbox.code.run(code)
        assert result.error is None, result.error
        assert (result.stdout, result.stderr) == ("out 1\nout 2\nout 3\n", "err 1\nerr 2\n")

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_error_carries_name_value_and_traceback(
            self, sandbox: Sandbox) -> None:
        """An uncaught exception is the result's ``error`` (name, value, a traceback of
        the code's own frames with their lines), the output before it is kept, and the
        context goes on."""
        code = ("print('before')\n"
                "def fail(what):\n"
                "    raise ValueError(f'bad {what}')\n"
                "fail('input')")
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            result = await sandbox.code.run(code, context=ctx)
            after = await sandbox.code.run("fail.__name__", context=ctx)
        assert result.error is not None
        assert (result.error.name, result.error.value) == ("ValueError", "bad input")
        assert result.error.traceback.startswith("Traceback (most recent call last):")
        assert "raise ValueError(f'bad {what}')" in result.error.traceback
        assert result.error.traceback.rstrip().endswith("ValueError: bad input")
        assert (result.stdout, result.text, result.ok) == ("before\n", None, False)
        assert (after.error, after.text) == (None, "'fail'")

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_syntax_error_is_a_result(self, sandbox: Sandbox) -> None:
        """Code that does not parse is a ``SyntaxError`` result; nothing of it ran."""
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            result = await sandbox.code.run("ran = True\ndef broken(:", context=ctx)
            check = await sandbox.code.run("'ran' in globals()", context=ctx)
        assert result.error is not None
        assert result.error.name == "SyntaxError"
        assert check.text == "False"

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_timeout_interrupts_and_keeps_the_context(
            self, sandbox: Sandbox) -> None:
        """A run past its timeout is interrupted: ``CodeTimeout`` carries what it
        printed, the context is kept, and the next run sees the names defined before."""
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            await sandbox.code.run("kept = 'still here'", context=ctx)
            started = anyio.current_time()
            with pytest.raises(CodeTimeout) as caught:
                await sandbox.code.run("import time\nprint('before', flush=True)\n"
                                       "time.sleep(600)", context=ctx, timeout=2)
            took = anyio.current_time() - started
            after = await sandbox.code.run("kept", context=ctx)
        assert took < 30, f"the interrupt took {took:.1f} s"
        assert caught.value.context_kept
        assert caught.value.result.stdout == "before\n"
        assert caught.value.result.error is not None
        assert caught.value.result.error.name == "KeyboardInterrupt"
        assert (after.error, after.text) == (None, "'still here'")

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_run_left_by_its_caller_is_interrupted_and_keeps_the_context(
            self, sandbox: Sandbox) -> None:
        """A run whose caller stops waiting (a cancel scope) is interrupted: code that
        stops keeps its context, and the next run sees the names defined before."""
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            await sandbox.code.run("kept = 'still here'", context=ctx)
            with anyio.move_on_after(1):
                await sandbox.code.run("import time\ntime.sleep(600)", context=ctx)
            with anyio.fail_after(30):
                after = await sandbox.code.run("kept", context=ctx)
        assert (after.error, after.text) == (None, "'still here'")

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_that_ignores_the_interrupt_loses_only_its_context(
            self, sandbox: Sandbox) -> None:
        """Code that swallows the interrupt is ended soon after its timeout:
        ``CodeTimeout`` says the context is gone, a run in it is ``ContextNotFound``,
        and another context is untouched."""
        stubborn = ("import time\nprint('stubborn', flush=True)\n"
                    "while True:\n"
                    "    try:\n"
                    "        time.sleep(0.05)\n"
                    "    except KeyboardInterrupt:\n"
                    "        pass")
        with anyio.fail_after(_WITHIN):
            other = await sandbox.code.create_context()
            await sandbox.code.run("mine = 'other'", context=other)
            ctx = await sandbox.code.create_context()
            started = anyio.current_time()
            with pytest.raises(CodeTimeout) as caught:
                await sandbox.code.run(stubborn, context=ctx, timeout=1)
            took = anyio.current_time() - started
            with pytest.raises(ContextNotFound):
                await sandbox.code.run("1", context=ctx)
            kept = await sandbox.code.run("mine", context=other)
        assert took < 30, f"the stubborn code was ended after {took:.1f} s"
        assert not caught.value.context_kept
        assert caught.value.result.stdout == "stubborn\n"
        assert kept.text == "'other'"

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_that_ends_its_interpreter_ends_its_context(
            self, sandbox: Sandbox) -> None:
        """``os._exit`` in a run is that run's ``ContextEnded`` error; the context is
        gone, and the default context starts afresh. (What the code wrote just before
        may be lost: the kernel forwards output from a thread, which the exit stops.)"""
        with anyio.fail_after(_WITHIN):
            await sandbox.code.run("before_exit = 1")
            result = await sandbox.code.run("import os\nprint('last words', flush=True)\n"
                                            "os._exit(3)")
            fresh = await sandbox.code.run("'before_exit' in globals()")
        assert result.error is not None
        assert result.error.name == "ContextEnded"
        assert (fresh.error, fresh.text) == (None, "False")

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_contexts_are_independent(self, sandbox: Sandbox) -> None:
        """A name defined in one context is in no other, the default one included."""
        with anyio.fail_after(_WITHIN):
            first = await sandbox.code.create_context()
            second = await sandbox.code.create_context()
            await sandbox.code.run("only_first = 1", context=first)
            await sandbox.code.run("only_default = 1")
            in_second = await sandbox.code.run(
                "'only_first' in globals(), 'only_default' in globals()", context=second)
            in_default = await sandbox.code.run("'only_first' in globals()")
            in_first = await sandbox.code.run("only_first, 'only_default' in globals()",
                                              context=first)
        assert in_second.text == "(False, False)"
        assert in_default.text == "False"
        assert in_first.text == "(1, False)"

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_run_without_context_keeps_the_default_context(
            self, sandbox: Sandbox) -> None:
        """Runs without a context share one default context."""
        with anyio.fail_after(_WITHIN):
            await sandbox.code.run("default_value = 3")
            result = await sandbox.code.run("default_value * 2")
        assert result.text == "6"

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_context_starts_in_its_cwd_with_its_env(
            self, sandbox: Sandbox) -> None:
        """A context runs in the ``cwd`` and with the ``env`` it was made with; a run's
        ``env`` holds for that run only."""
        place = f"/tmp/{new_marker('code-cwd')}"
        await sandbox.files.mkdir(place)
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context(cwd=place, env={"PSDK_CODE": "a b"})
            started = await sandbox.code.run(
                "import os\nos.getcwd(), os.environ['PSDK_CODE']", context=ctx)
            during = await sandbox.code.run("os.environ.get('PSDK_RUN')", context=ctx,
                                            env={"PSDK_RUN": "one run"})
            after = await sandbox.code.run("os.environ.get('PSDK_RUN')", context=ctx)
        assert started.text == repr((place, "a b"))
        assert (during.text, after.text) == ("'one run'", None)

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_output_streams_to_callbacks_while_it_runs(
            self, sandbox: Sandbox) -> None:
        """``on_stdout``/``on_stderr`` receive output while the code runs: the code
        waits for a file the test writes only once the first line has reached it."""
        gate = f"/tmp/{new_marker('code-gate')}"
        out: list[str] = []
        err: list[str] = []
        first_seen = anyio.Event()

        async def on_stdout(text: str) -> None:
            out.append(text)
            if "first" in "".join(out):
                first_seen.set()

        code = ("import os, sys, time\n"
                "print('first', flush=True)\n"
                "print('warning', file=sys.stderr, flush=True)\n"
                f"deadline = time.monotonic() + 60\n"
                f"while not os.path.exists({gate!r}) and time.monotonic() < deadline:\n"
                "    time.sleep(0.05)\n"
                f"print('second' if os.path.exists({gate!r}) else 'gave up')")

        async def open_gate() -> None:
            await first_seen.wait()
            await sandbox.files.write(gate, b"open")

        with anyio.fail_after(_WITHIN):
            async with anyio.create_task_group() as tg:
                tg.start_soon(open_gate)
                result = await sandbox.code.run(code, on_stdout=on_stdout,
                                                on_stderr=err.append)
        assert "".join(out) == result.stdout == "first\nsecond\n"
        assert "".join(err) == result.stderr == "warning\n"

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_large_output_is_kept_up_to_the_output_limit(
            self, sandbox: Sandbox) -> None:
        """Output past ``output_limit`` is counted, not kept, on each stream and in the
        text; callbacks still see all of it."""
        seen = 0

        def count(text: str) -> None:
            nonlocal seen
            seen += len(text.encode())

        code = ("import sys\n"
                "sys.stdout.write('o' * (8 << 20))\n"
                "sys.stderr.write('e' * (3 << 20))\n"
                "'t' * (2 << 20)")
        with anyio.fail_after(_WITHIN):
            result = await sandbox.code.run(code, output_limit=_MiB, on_stdout=count)
        assert (len(result.stdout), result.stdout_truncated) == (_MiB, 7 * _MiB)
        assert (len(result.stderr), result.stderr_truncated) == (_MiB, 2 * _MiB)
        assert result.text is not None
        assert len(result.text) == _MiB
        assert result.text_truncated == 2 * _MiB + 2 - _MiB  # the repr's quotes
        assert seen == 8 * _MiB
        assert result.truncated

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_that_floods_the_interpreter_s_own_channel_ends_its_context(
            self, sandbox: Sandbox) -> None:
        """Code that writes an endless line where the interpreter talks to the caller
        (its frames' descriptor, found in /proc) ends its context, promptly, and the
        caller holds none of it; the default context starts afresh."""
        flood = ("import os\n"
                 "for fd in map(int, os.listdir('/proc/self/fd')):\n"
                 "    if fd > 2:\n"
                 "        try:\n"
                 "            os.write(fd, b'x' * (4 << 20))\n"
                 "        except OSError:\n"
                 "            pass")
        with anyio.fail_after(_WITHIN):
            result = await sandbox.code.run(flood)
            fresh = await sandbox.code.run("1 + 1")
        assert result.error is not None
        assert result.error.name == "ContextEnded"
        assert fresh.text == "2"

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_closed_context_raises_context_not_found(
            self, sandbox: Sandbox) -> None:
        """A run in a closed context is ``ContextNotFound``; closing twice is fine."""
        with anyio.fail_after(_WITHIN):
            ctx = await sandbox.code.create_context()
            await sandbox.code.run("x = 1", context=ctx)
            await sandbox.code.close_context(ctx)
            await sandbox.code.close_context(ctx)
            with pytest.raises(ContextNotFound) as caught:
                await sandbox.code.run("x", context=ctx)
        assert caught.value.provider == sandbox.provider.name

    @requires(Capability.CODE_INTERPRETER)
    async def test_code_unknown_language_is_invalid_input(self, sandbox: Sandbox) -> None:
        """A language no context runs is ``InvalidInput`` naming it, before anything
        starts."""
        with pytest.raises(InvalidInput, match="cobol"):
            await sandbox.code.create_context(language="cobol")
