"""The unmodified ``daytona`` SDK runs code in the emulator's sandboxes as Daytona's
daemon runs it: ``process.code_run`` (one program) and the stateful code interpreter
(contexts, streamed output), sync and async."""

from __future__ import annotations

import json

import pytest
from daytona import (
    AsyncDaytona,
    CodeRunParams,
    Daytona,
    DaytonaConnectionError,
    DaytonaNotFoundError,
    DaytonaTimeoutError,
    Sandbox,
)
from daytona_toolbox_api_client.exceptions import ApiException

# ---------------------------------------------------------------------- code_run

def test_code_run_answers_the_merged_output_and_exit_code(sandbox: Sandbox) -> None:
    result = sandbox.process.code_run(
        'import sys\nprint("out")\nsys.stderr.write("err\\n")\nsys.exit(4)')
    assert result.exit_code == 4
    assert result.result == "out\nerr\n"
    assert result.artifacts is not None
    assert result.artifacts.stdout == "out\nerr\n"
    assert result.artifacts.charts == []


def test_code_run_takes_argv_split_by_the_shell_and_env(sandbox: Sandbox) -> None:
    """The daemon joins ``argv`` with spaces after the runtime's command: the shell
    splits it again."""
    result = sandbox.process.code_run(
        'import os, sys\nprint(sys.argv[1:], os.environ["GREETING"])',
        CodeRunParams(argv=["one", "two three"], env={"GREETING": "hi"}))
    assert (result.exit_code, result.result) == (0, "['one', 'two', 'three'] hi\n")


def test_code_run_a_syntax_error_is_a_failed_run(sandbox: Sandbox) -> None:
    result = sandbox.process.code_run("def incomplete(")
    assert result.exit_code == 1
    assert "SyntaxError" in result.result


def test_code_run_artifact_lines_become_charts(sandbox: Sandbox) -> None:
    """Lines carrying the daemon's artifact marker leave the output; a chart in one
    becomes ``artifacts.charts``."""
    code = ('import json\nprint("before")\n'
            'print("dtn_artifact_k39fd2:" + json.dumps({"type": "chart", "value": '
            '{"type": "line", "title": "T", "elements": []}}))\nprint("after")')
    result = sandbox.process.code_run(code)
    assert result.result == "before\nafter\n"
    assert result.artifacts is not None
    [chart] = result.artifacts.charts
    assert chart.title == "T"


def test_code_run_timeout_answers_as_the_daemon(sandbox: Sandbox) -> None:
    """(``code_run`` does not translate errors: the SDK raises the toolbox client's.)"""
    with pytest.raises(ApiException) as caught:
        sandbox.process.code_run("import time\ntime.sleep(30)", timeout=1)
    assert caught.value.status == 408
    assert json.loads(caught.value.body)["code"] == "REQUEST_TIMEOUT"


def test_code_run_refuses_a_bad_environment_name(sandbox: Sandbox) -> None:
    with pytest.raises(ApiException) as caught:
        sandbox.process.code_run("print(1)", CodeRunParams(env={"A-B": "x"}))
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        "invalid environment variable name: 'A-B'")


@pytest.mark.anyio
async def test_async_code_run(async_client: AsyncDaytona, sandbox: Sandbox) -> None:
    twin = await async_client.get(sandbox.id)
    result = await twin.process.code_run('print(6 * 7)')
    assert (result.exit_code, result.result) == (0, "42\n")


# ------------------------------------------------------------- the code interpreter

def test_run_code_streams_stdout_and_stderr_to_callbacks(sandbox: Sandbox) -> None:
    seen: list[tuple[str, str]] = []
    result = sandbox.code_interpreter.run_code(
        'import sys\nprint("one")\nsys.stderr.write("two\\n")\nprint("three")',
        on_stdout=lambda m: seen.append(("out", m.output)),
        on_stderr=lambda m: seen.append(("err", m.output)))
    assert seen == [("out", "one\n"), ("err", "two\n"), ("out", "three\n")]
    assert (result.stdout, result.stderr, result.error) == ("one\nthree\n", "two\n", None)


def test_run_code_keeps_state_in_the_default_context(sandbox: Sandbox) -> None:
    sandbox.code_interpreter.run_code("import math\nkept = math.sqrt(49)")
    assert sandbox.code_interpreter.run_code("print(kept)").stdout == "7.0\n"


def test_an_error_reports_its_name_value_and_the_code_frames(sandbox: Sandbox) -> None:
    errors: list[str] = []
    result = sandbox.code_interpreter.run_code(
        "def f():\n    raise ValueError('boom')\nf()", on_error=lambda e: errors.append(e.name))
    assert result.error is not None
    assert (result.error.name, result.error.value) == ("ValueError", "boom")
    assert result.error.traceback == (
        'Traceback (most recent call last):\n  File "<stdin>", line 3\n'
        '  File "<stdin>", line 2\nValueError: boom\n')
    assert errors == ["ValueError"]


def test_contexts_are_isolated_listed_and_deleted(sandbox: Sandbox) -> None:
    interpreter = sandbox.code_interpreter
    ctx = interpreter.create_context(cwd="/tmp")
    assert (ctx.language, ctx.cwd, ctx.active) == ("python", "/tmp", True)
    interpreter.run_code("isolated = 99", context=ctx)
    assert interpreter.run_code("import os\nprint(isolated, os.getcwd())",
                                context=ctx).stdout == "99 /tmp\n"
    missing = interpreter.run_code("print(isolated)")
    assert missing.error is not None
    assert missing.error.name == "NameError"
    assert ctx.id in [c.id for c in interpreter.list_contexts()]
    assert "default" not in [c.id for c in interpreter.list_contexts()]
    interpreter.delete_context(ctx)
    assert ctx.id not in [c.id for c in interpreter.list_contexts()]
    with pytest.raises(DaytonaNotFoundError, match="not found"):
        interpreter.delete_context(ctx)


def test_envs_apply_to_one_execution_only(sandbox: Sandbox) -> None:
    interpreter = sandbox.code_interpreter
    code = 'import os\nprint(os.environ.get("ONLY_NOW", "unset"))'
    assert interpreter.run_code(code, envs={"ONLY_NOW": "set"}).stdout == "set\n"
    assert interpreter.run_code(code).stdout == "unset\n"


def test_a_timeout_interrupts_the_code_and_keeps_the_context(sandbox: Sandbox) -> None:
    interpreter = sandbox.code_interpreter
    ctx = interpreter.create_context()
    try:
        interpreter.run_code("before = 1", context=ctx)
        with pytest.raises(DaytonaTimeoutError, match="timed out"):
            interpreter.run_code("import time\ntime.sleep(30)", context=ctx, timeout=1)
        assert interpreter.run_code("print(before)", context=ctx).stdout == "1\n"
    finally:
        interpreter.delete_context(ctx)


def test_code_that_ignores_the_interrupt_ends_its_context_s_worker(sandbox: Sandbox) -> None:
    # It outlives the interrupt: after the grace the worker is ended, and the context's
    # next execution runs in a new one, without the old state.
    interpreter = sandbox.code_interpreter
    ctx = interpreter.create_context()
    try:
        interpreter.run_code("before = 1", context=ctx)
        stubborn = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "while True:\n    time.sleep(0.05)")
        with pytest.raises(DaytonaTimeoutError, match="timed out"):
            interpreter.run_code(stubborn, context=ctx, timeout=1)
        after = interpreter.run_code("print('before' in globals())", context=ctx)
        assert after.stdout == "False\n"
    finally:
        interpreter.delete_context(ctx)


def test_running_in_an_unknown_context_is_refused(sandbox: Sandbox) -> None:
    interpreter = sandbox.code_interpreter
    ctx = interpreter.create_context()
    interpreter.delete_context(ctx)
    with pytest.raises(DaytonaConnectionError, match=f"context not found: {ctx.id}"):
        interpreter.run_code("print(1)", context=ctx)


@pytest.mark.anyio
async def test_async_code_interpreter(async_client: AsyncDaytona, sandbox: Sandbox) -> None:
    twin = await async_client.get(sandbox.id)
    ctx = await twin.code_interpreter.create_context()
    chunks: list[str] = []
    await twin.code_interpreter.run_code("total = 40", context=ctx)
    result = await twin.code_interpreter.run_code(
        "print(total + 2)", context=ctx, on_stdout=lambda m: chunks.append(m.output))
    assert (result.stdout, chunks) == ("42\n", ["42\n"])
    assert ctx.id in [c.id for c in await twin.code_interpreter.list_contexts()]
    await twin.code_interpreter.delete_context(ctx)


def test_a_stop_ends_the_interpreter_contexts(sync_client: Daytona) -> None:
    """Daytona's stop ends every process, the interpreter's workers too: after a start
    the default context is new and empty, and made contexts are gone."""
    sandbox = sync_client.create()
    try:
        sandbox.code_interpreter.run_code("kept = 1")
        made = sandbox.code_interpreter.create_context()
        sandbox.stop()
        sandbox.start()
        after = sandbox.code_interpreter.run_code("print(kept)")
        assert after.error is not None
        assert after.error.name == "NameError"
        assert made.id not in [c.id for c in sandbox.code_interpreter.list_contexts()]
    finally:
        sync_client.delete(sandbox)
