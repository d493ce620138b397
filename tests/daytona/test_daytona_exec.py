"""The exec wrapper the Daytona provider sends: run under the shells Daytona's daemon may
pick (bash, and a POSIX sh), on a real sandbox, and through the provider on the
emulator, where the files it leaves are removed in batches."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from daytona_emulator_fixtures import provider_options
from local_fixtures import home
from provider_sdk_daytona import _exec as wrapper
from provider_sdk_daytona.provider import DaytonaProvider

from provider_sdk.local import LocalProvider
from provider_sdk.provider import Command
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

__all__ = ["home"]  # the local provider's state directory, for ``sandbox``

BINARY = "printf '\\377\\376\\000abc\\200\\n'; printf '\\300\\000\\351' >&2"


@pytest.fixture
async def sandbox(home: Path) -> AsyncIterator[Sandbox]:
    """A plain local sandbox to run wrapper scripts in, as the daemon would."""
    async with LocalProvider(home=home) as provider, provider.create() as sandbox:
        yield sandbox


async def _run(sandbox: Sandbox, shell: str, command: Command,
               remove: tuple[str, ...] = ()) -> tuple[wrapper.Run, wrapper.Report | None]:
    """Wrap ``command``, run the wrapper with ``shell -c``, parse what it printed."""
    run = wrapper.wrap(command, cwd="/tmp", env={"GREETING": "hi there"}, remove=remove)
    # The daemon answers text: bytes that are not UTF-8 arrive replaced, as here.
    printed = await sandbox.exec([shell, "-c", run.script])
    return run, wrapper.parse(run, printed.stdout)


async def _soon(probe: Callable[[], Awaitable[object]], expected: object) -> None:
    """Wait up to 10 s for ``probe()`` to give ``expected``."""
    for _ in range(200):
        if (seen := await probe()) == expected:
            return
        await anyio.sleep(0.05)
    pytest.fail(f"still {seen!r} after 10 s, not {expected!r}")


async def _count(items: Awaitable[list[str]]) -> int:
    return len(await items)


async def _left(sandbox: Sandbox, run: wrapper.Run) -> list[str]:
    return [p for p in run.paths if await sandbox.files.exists(p)]


async def test_bash_returns_text_as_it_is_and_leaves_its_files(sandbox: Sandbox) -> None:
    command = Command(argv=("/bin/bash", "-c", 'echo "$GREETING from $PWD"; echo é >&2; exit 3'))
    run, report = await _run(sandbox, "bash", command)
    assert report == wrapper.Report(exit_code=3, stdout=b"hi there from /tmp\n",
                                    stderr="é\n".encode(), left_files=True)
    assert await _left(sandbox, run) == [run.prefix + ".pid", run.stdout_path, run.stderr_path]


async def test_bash_runs_a_string_command_without_a_second_bash(sandbox: Sandbox) -> None:
    # Evaluated in the wrapper's subshell: one level down, not a fresh bash at level 0.
    _, report = await _run(sandbox, "bash", Command(argv=("/bin/bash", "-c",
                                                          "echo $BASH_SUBSHELL")))
    assert report is not None
    assert report.stdout == b"1\n"


@pytest.mark.parametrize("script", [BINARY, "printf 'a\\0b'", "printf '\\357\\277\\275'"],
                         ids=["not-utf8", "nul", "a-real-replacement-character"])
async def test_bash_sends_output_it_cannot_prove_exact_to_the_files(sandbox: Sandbox,
                                                                    script: str) -> None:
    run, report = await _run(sandbox, "bash", Command(argv=("/bin/bash", "-c", script)))
    assert report is not None
    assert (report.stdout, report.stderr) == (None, None)
    assert run.stdout_path in await _left(sandbox, run)


async def test_bash_sends_output_over_the_limit_to_the_files(
        sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wrapper, "INLINE_LIMIT", 10)
    _, small = await _run(sandbox, "bash", Command(argv=("printf", "%010d", "7")))
    _, large = await _run(sandbox, "bash", Command(argv=("printf", "%011d", "7")))
    assert small is not None
    assert small.stdout == b"0000000007"
    assert large is not None
    assert large.stdout is None


async def test_a_posix_shell_gets_base64_and_removes_its_files(sandbox: Sandbox) -> None:
    run, report = await _run(sandbox, "sh", Command(argv=("sh", "-c", BINARY)))
    assert report == wrapper.Report(exit_code=0, stdout=b"\xff\xfe\x00abc\x80\n",
                                    stderr=b"\xc0\x00\xe9")
    assert await _left(sandbox, run) == []


async def test_a_posix_shell_sends_output_over_the_limit_to_the_files(
        sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wrapper, "INLINE_LIMIT", 10)
    run, report = await _run(sandbox, "sh", Command(argv=("printf", "%011d", "7")))
    assert report is not None
    assert report.stdout is None
    assert await sandbox.files.read(run.stdout_path) == b"00000000007"


@pytest.mark.parametrize("shell", ["bash", "sh"])
async def test_the_wrapper_removes_the_files_it_is_handed(sandbox: Sandbox,
                                                          shell: str) -> None:
    earlier, _ = await _run(sandbox, "bash", Command(argv=("true",)))
    await _run(sandbox, shell, Command(argv=("true",)), remove=earlier.paths)
    await _soon(lambda: _left(sandbox, earlier), [])  # the removal runs in the background


# ------------------------------------------------------------- through the provider

@pytest.fixture
async def provider() -> AsyncIterator[DaytonaProvider]:
    async with DaytonaProvider(**provider_options()) as provider:
        yield provider


async def _litter(sandbox: Sandbox) -> list[str]:
    """The wrapper files in the sandbox (listed without a command, which would add some)."""
    return [f.path for f in await sandbox.files.list("/tmp")
            if f.path.startswith(wrapper.ROOT)]


async def test_the_files_of_finished_commands_go_in_batches(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        for _ in range(wrapper.Litter.BATCH):
            assert (await sandbox.exec("echo kept")).stdout == "kept\n"
        assert len(await _litter(sandbox)) == 3 * wrapper.Litter.BATCH  # pid, out, err
        await sandbox.exec("true")  # the batch is full: this wrapper removes it
        await _soon(lambda: _count(_litter(sandbox)), 3)  # in the background


async def test_closing_the_provider_removes_what_is_left() -> None:
    async with DaytonaProvider(**provider_options()) as first:
        sandbox = await first.create()
        await sandbox.exec("echo left behind")
        assert await _litter(sandbox)
    async with DaytonaProvider(**provider_options()) as second:
        again = await second.connect(sandbox.id)
        try:
            assert await _litter(again) == []
        finally:
            await again.kill()


async def test_a_background_writer_cannot_touch_later_output(
        provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.exec("(for i in 1 2 3 4 5; do echo stray; sleep 0.1; done) &")
        for _ in range(5):
            assert (await sandbox.exec("echo mine")).stdout == "mine\n"
            await anyio.sleep(0.1)
