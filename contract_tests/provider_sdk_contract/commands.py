"""Contract: running commands with ``sandbox.exec``."""

from __future__ import annotations

import hashlib
import posixpath
import secrets

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CommandTimeout, InvalidInput
from provider_sdk.models import ExecResult
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import MARK_VAR, eventually, marked_processes, new_marker

_MiB = 1 << 20

# Forks two marked sleepers (argv[0] and environment carry the marker), says so, waits.
_TREE = ('(exec -a "$1" sleep 300) & (exec -a "$1" sleep 300) & echo started; '
         'echo started-err >&2; wait')


def _environ(data: bytes) -> dict[str, str]:
    """Parse the NUL-separated contents of ``/proc/<pid>/environ``."""
    pairs = (item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}


def _pattern(line: bytes, size: int) -> bytes:
    """What ``yes <line> | head -c <size>`` prints."""
    unit = line + b"\n"
    return (unit * (size // len(unit) + 1))[:size]


class ExecContract(ContractBase):
    """Exec: results, streams, bytes, argv, env, cwd, stdin, size, timeouts, cancellation."""

    async def test_exec_returns_exit_code_and_stdout(self, sandbox: Sandbox) -> None:
        """A successful command gives exit code 0 and its standard output."""
        result = await sandbox.exec(["echo", "hello"])
        assert isinstance(result, ExecResult)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "hello\n", "")
        assert result.ok

    async def test_exec_nonzero_exit_is_a_result(self, sandbox: Sandbox) -> None:
        """A failing command returns its exit code; it does not raise."""
        result = await sandbox.exec(["sh", "-c", "echo before; exit 3"])
        assert (result.exit_code, result.stdout) == (3, "before\n")
        assert not result.ok

    async def test_exec_killed_by_signal_reports_minus_signal(self, sandbox: Sandbox) -> None:
        """A command killed by signal N reports exit code -N."""
        result = await sandbox.exec(["sh", "-c", "kill -9 $$"])
        assert result.exit_code == -9

    async def test_exec_string_runs_in_bash(self, sandbox: Sandbox) -> None:
        """A string command runs in bash (bash syntax works)."""
        result = await sandbox.exec('[[ -n "$BASH_VERSION" ]] && echo "$(( 6 * 7 ))" | tr 4 x')
        assert (result.exit_code, result.stdout) == (0, "x2\n")

    async def test_exec_keeps_stdout_and_stderr_apart(self, sandbox: Sandbox) -> None:
        """Standard output and standard error arrive separately, never mixed."""
        result = await sandbox.exec(["sh", "-c", "echo out1; echo err1 >&2; echo out2; "
                                     "echo err2 >&2"])
        assert result.stdout == "out1\nout2\n"
        assert result.stderr == "err1\nerr2\n"

    async def test_exec_round_trips_utf8_output(self, sandbox: Sandbox) -> None:
        """UTF-8 text printed by a command comes back as the same text."""
        text = "héllo wörld ✓ 日本語 🙂 Ωμέγα"
        result = await sandbox.exec(["printf", "%s", text])
        assert result.stdout == text
        assert result.stdout_bytes == text.encode()

    async def test_exec_keeps_invalid_utf8_bytes_exact(self, sandbox: Sandbox) -> None:
        """Bytes that are not UTF-8 (and NULs) reach ``stdout_bytes``/``stderr_bytes`` exactly."""
        result = await sandbox.exec(["sh", "-c", r"printf '\377\376\000abc\200\n'; "
                                     r"printf '\300\000\351' >&2"])
        assert result.stdout_bytes == b"\xff\xfe\x00abc\x80\n"
        assert result.stderr_bytes == b"\xc0\x00\xe9"

    async def test_exec_argv_reaches_the_program_unmangled(self, sandbox: Sandbox) -> None:
        """Arguments with quotes, spaces, globs and shell syntax arrive byte for byte."""
        args = ["a b", "it's", 'say "hi"', "$HOME", "`id`", "$(id)", "\\n", "*", "", "--",
                "-n", " lead", "trail ", "tab\there", "new\nline", "ünïcødé", ";", "&&", "|"]
        # The shell prints its own argv from /proc: exactly what it was given.
        result = await sandbox.exec(["sh", "-c", "cat /proc/$$/cmdline", "psdk-argv", *args])
        assert result.exit_code == 0, result.stderr
        received = result.stdout_bytes.split(b"\0")
        assert received[-1] == b""
        start = received.index(b"psdk-argv") + 1
        assert [a.decode() for a in received[start:-1]] == args

    async def test_exec_env_reaches_the_process_as_given(self, sandbox: Sandbox) -> None:
        """Variables given to a call reach the process with their exact values."""
        env = {"PSDK_PLAIN": "value", "PSDK_TRICKY": "sp ace 'q' \"dq\" $HOME `x` \\ ✓",
               "PSDK_EMPTY": ""}
        result = await sandbox.exec(["cat", "/proc/self/environ"], env=env)
        seen = _environ(result.stdout_bytes)
        assert {k: seen.get(k) for k in env} == env

    async def test_exec_env_path_reaches_an_argv_command_as_given(
            self, sandbox: Sandbox) -> None:
        """A PATH given to a call is the process's PATH, unchanged."""
        path = "/opt/psdk-x:/usr/bin:/bin"
        result = await sandbox.exec(["cat", "/proc/self/environ"], env={"PATH": path})
        assert _environ(result.stdout_bytes).get("PATH") == path

    async def test_exec_env_path_reaches_a_shell_command_as_given(
            self, sandbox: Sandbox) -> None:
        """A string command's shell keeps the given PATH: no login shell resets it."""
        path = "/opt/psdk-x:/usr/bin:/bin"
        result = await sandbox.exec('printf %s "$PATH"', env={"PATH": path})
        assert result.stdout == path

    async def test_spec_env_applies_to_every_call(self, factory: Factory) -> None:
        """Variables from the spec are set in every command."""
        sandbox = await factory.sandbox(env={"PSDK_SPEC_A": "alpha", "PSDK_SPEC_B": "b e"})
        for _ in range(2):
            result = await sandbox.exec('printf "%s|%s" "$PSDK_SPEC_A" "$PSDK_SPEC_B"')
            assert result.stdout == "alpha|b e"

    async def test_call_env_overrides_spec_env(self, factory: Factory) -> None:
        """A call's variable wins over the spec's; the spec's others stay."""
        sandbox = await factory.sandbox(env={"PSDK_X": "spec", "PSDK_Y": "kept"})
        result = await sandbox.exec('printf "%s|%s" "$PSDK_X" "$PSDK_Y"',
                                    env={"PSDK_X": "call"})
        assert result.stdout == "call|kept"
        again = await sandbox.exec('printf "%s" "$PSDK_X"')
        assert again.stdout == "spec"

    async def test_exec_cwd_sets_the_working_directory(self, sandbox: Sandbox) -> None:
        """``cwd`` is the command's working directory (spaces allowed)."""
        await sandbox.files.mkdir("/tmp/psdk cwd dir")
        result = await sandbox.exec(["pwd"], cwd="/tmp/psdk cwd dir")
        assert result.stdout == "/tmp/psdk cwd dir\n"

    async def test_exec_relative_cwd_resolves_against_the_working_directory(
            self, sandbox: Sandbox) -> None:
        """A relative ``cwd`` is taken from the sandbox's working directory."""
        workdir = (await sandbox.exec(["pwd"])).stdout.strip()
        name = f"psdk-rel-{secrets.token_hex(4)}"
        await sandbox.exec(["mkdir", name])
        result = await sandbox.exec(["pwd"], cwd=name)
        assert result.stdout.strip() == posixpath.join(workdir, name)

    async def test_spec_cwd_is_the_default_working_directory(self, factory: Factory) -> None:
        """``SandboxSpec(cwd=...)`` is where commands run when the call gives none."""
        sandbox = await factory.sandbox(cwd="/tmp")
        result = await sandbox.exec(["pwd"])
        assert result.stdout == "/tmp\n"

    async def test_exec_stdin_bytes_reach_the_process(self, sandbox: Sandbox) -> None:
        """Bytes given as stdin reach the process exactly, then end of file."""
        data = bytes(range(256)) * 257
        result = await sandbox.exec(["cat"], stdin=data)
        assert result.stdout_bytes == data

    async def test_a_command_that_leaves_its_stdin_unread_still_returns(
            self, sandbox: Sandbox) -> None:
        """A command may end without reading its input: what it did not read is dropped,
        and the call reports the command's exit, not a broken pipe."""
        result = await sandbox.exec(["sh", "-c", "exit 3"], stdin=b"psdk" * _MiB,
                                    timeout=60)
        assert (result.exit_code, result.stdout_bytes) == (3, b"")

    async def test_exec_without_stdin_sees_end_of_file(self, sandbox: Sandbox) -> None:
        """With no stdin, a reader sees end of file at once instead of hanging."""
        result = await sandbox.exec(["cat"], timeout=60)
        assert (result.exit_code, result.stdout_bytes) == (0, b"")

    async def test_exec_large_output_on_both_streams_does_not_deadlock(
            self, sandbox: Sandbox) -> None:
        """32 MiB on stdout and 8 MiB on stderr, written at once, arrive whole."""
        out_size, err_size = 32 * _MiB, 8 * _MiB
        script = (f"(yes psdk-err | head -c {err_size} >&2) & "
                  f"yes psdk-out | head -c {out_size}; wait")
        with anyio.fail_after(240):
            # Past the default output limit (16 MiB): this call asks to keep it all.
            result = await sandbox.exec(["bash", "-c", script], timeout=200,
                                        output_limit=64 * _MiB)
        assert result.exit_code == 0
        assert len(result.stdout_bytes) == out_size
        assert len(result.stderr_bytes) == err_size
        expected_out = hashlib.sha256(_pattern(b"psdk-out", out_size)).hexdigest()
        expected_err = hashlib.sha256(_pattern(b"psdk-err", err_size)).hexdigest()
        assert hashlib.sha256(result.stdout_bytes).hexdigest() == expected_out
        assert hashlib.sha256(result.stderr_bytes).hexdigest() == expected_err

    @requires(Capability.EXEC_STREAM)
    async def test_exec_stream_delivers_output_before_the_command_ends(
            self, sandbox: Sandbox) -> None:
        """``on_stdout`` receives output while the command still runs."""
        gate = f"/tmp/{new_marker('gate')}"
        seen = bytearray()
        first = anyio.Event()
        finished = anyio.Event()
        results: list[ExecResult] = []

        def on_stdout(chunk: bytes) -> None:
            seen.extend(chunk)
            if b"first" in seen:
                first.set()

        async def run() -> None:
            results.append(await sandbox.exec(
                ["sh", "-c", 'echo first; while [ ! -e "$1" ]; do sleep 0.05; done; '
                 'echo second', "psdk-stream", gate], on_stdout=on_stdout, timeout=120))
            finished.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await first.wait()
                assert not finished.is_set()
                await sandbox.files.write(gate, b"")
        assert bytes(seen) == b"first\nsecond\n"
        assert results[0].stdout == "first\nsecond\n"

    @requires(Capability.EXEC_STREAM)
    async def test_exec_stream_callbacks_receive_each_stream(self, sandbox: Sandbox) -> None:
        """``on_stdout`` gets only stdout and ``on_stderr`` only stderr; async callbacks work."""
        out = bytearray()
        err = bytearray()

        async def on_stderr(chunk: bytes) -> None:
            err.extend(chunk)

        result = await sandbox.exec(["sh", "-c", "echo o1; echo e1 >&2; echo o2"],
                                    on_stdout=out.extend, on_stderr=on_stderr)
        assert (bytes(out), bytes(err)) == (b"o1\no2\n", b"e1\n")
        assert (result.stdout_bytes, result.stderr_bytes) == (bytes(out), bytes(err))

    @requires(Capability.EXEC_STREAM)
    async def test_exec_stream_callbacks_receive_all_of_a_large_output(
            self, sandbox: Sandbox) -> None:
        """Streamed chunks add up to the whole output, in order, for several MiB."""
        size = 8 * _MiB
        out = bytearray()
        err = bytearray()
        script = f"(yes psdk-err | head -c {size // 4} >&2) & yes psdk-out | head -c {size}; wait"
        result = await sandbox.exec(["bash", "-c", script], on_stdout=out.extend,
                                    on_stderr=err.extend, timeout=120)
        assert bytes(out) == _pattern(b"psdk-out", size) == result.stdout_bytes
        assert bytes(err) == _pattern(b"psdk-err", size // 4) == result.stderr_bytes

    async def test_exec_timeout_raises_command_timeout_with_partial_output(
            self, sandbox: Sandbox) -> None:
        """On timeout, CommandTimeout carries what the command printed before."""
        marker = new_marker("timeout")
        with anyio.fail_after(60), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["bash", "-c", _TREE, "psdk-tree", marker], timeout=2)
        assert "started" in caught.value.result.stdout
        assert "started-err" in caught.value.result.stderr

    async def test_exec_timeout_reports_the_kill_in_the_result(self, sandbox: Sandbox) -> None:
        """The partial result of a timed-out command has exit code -9 (killed)."""
        with anyio.fail_after(60), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["sleep", "300"], timeout=1)
        assert caught.value.result.exit_code == -9
        assert caught.value.provider == sandbox.provider.name

    async def test_exec_timeout_kills_the_whole_process_tree(self, sandbox: Sandbox) -> None:
        """After a timeout, no process the command started is left in the sandbox."""
        marker = new_marker("tree")
        with anyio.fail_after(60), pytest.raises(CommandTimeout) as caught:
            await sandbox.exec(["bash", "-c", _TREE, "psdk-tree", marker],
                               env={MARK_VAR: marker}, timeout=2)
        assert "started" in caught.value.result.stdout

        async def none_left() -> bool:
            return await marked_processes(sandbox, marker) == []

        await eventually(none_left, what=f"no process marked {marker}", timeout=5)

    async def test_cancelled_exec_leaves_no_process(self, sandbox: Sandbox) -> None:
        """Cancelling a running exec kills what it started inside the sandbox."""
        marker = new_marker("cancel")

        async def is_started() -> bool:
            return len(await marked_processes(sandbox, marker)) >= 2

        async def none_left() -> bool:
            return await marked_processes(sandbox, marker) == []

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: sandbox.exec(["bash", "-c", _TREE, "psdk-tree", marker],
                                                   env={MARK_VAR: marker}))
                await eventually(is_started, what="the command's processes running")
                tg.cancel_scope.cancel()
        await eventually(none_left, what=f"no process marked {marker}", timeout=10)

    async def test_twenty_concurrent_execs_are_all_correct(self, sandbox: Sandbox) -> None:
        """Twenty commands at once each get their own exit code and output."""
        results: dict[int, ExecResult] = {}

        async def run(i: int) -> None:
            results[i] = await sandbox.exec(
                ["sh", "-c", 'printf "out-%s" "$1"; printf "err-%s" "$1" >&2; '
                 'exit $(( $1 % 7 ))', "psdk-conc", str(i)])

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(run, i)
        for i in range(20):
            r = results[i]
            assert (r.exit_code, r.stdout, r.stderr) == (i % 7, f"out-{i}", f"err-{i}"), (i, r)

    @pytest.mark.parametrize("timeout", [0, -1, -0.5])
    async def test_exec_non_positive_timeout_is_invalid_input(
            self, sandbox: Sandbox, timeout: float) -> None:
        """A zero or negative timeout is refused with InvalidInput."""
        with pytest.raises(InvalidInput):
            await sandbox.exec(["true"], timeout=timeout)

    async def test_exec_invalid_env_name_is_invalid_input(self, sandbox: Sandbox) -> None:
        """An environment variable name that is not a name is refused with InvalidInput."""
        with pytest.raises(InvalidInput):
            await sandbox.exec(["true"], env={"NOT A NAME": "x"})

    async def test_exec_nul_in_argv_is_invalid_input(self, sandbox: Sandbox) -> None:
        """An argument containing a NUL byte is refused with InvalidInput."""
        with pytest.raises(InvalidInput):
            await sandbox.exec(["echo", "a\0b"])
