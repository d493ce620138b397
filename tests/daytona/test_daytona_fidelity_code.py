"""The unmodified ``daytona`` SDK runs code in the emulator's sandboxes as Daytona's
daemon runs it: ``process.code_run`` (one program, sync and async)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from daytona import (
    AsyncDaytona,
    CodeRunParams,
    Daytona,
    Sandbox,
)
from daytona_emulator_fixtures import sdk_config
from daytona_toolbox_api_client.exceptions import ApiException


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """One sandbox of the default snapshot (language python) for the module."""
    client = Daytona(sdk_config())
    made = client.create()
    yield made
    client.delete(made)


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
