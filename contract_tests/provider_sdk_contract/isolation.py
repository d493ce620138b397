"""Contract: sandboxes are isolated from each other and from the host."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.support import eventually, marked_processes, new_marker

_SEPARATOR = "--psdk-cmdline-end--"
_ALL_CMDLINES = f'for f in /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo {_SEPARATOR}; done'


class IsolationContract(ContractBase):
    """Isolation: no sandbox sees another's files, the host's files, or the host's processes."""

    async def test_a_file_in_one_sandbox_is_invisible_in_another(
            self, factory: Factory) -> None:
        """A file one sandbox writes does not exist in another."""
        first = await factory.sandbox()
        second = await factory.sandbox()
        name = new_marker("private")
        await first.files.write(f"/tmp/{name}", b"mine")
        await first.files.write(name, b"mine too")
        assert not await second.files.exists(f"/tmp/{name}")
        assert not await second.files.exists(name)
        assert (await second.exec(["test", "-e", f"/tmp/{name}"])).exit_code != 0

    async def test_a_host_file_is_invisible_inside(self, sandbox: Sandbox,
                                                   tmp_path: Path) -> None:
        """A file the test creates on the host is not at the same path inside."""
        host_file = tmp_path / f"{new_marker('host')}.txt"
        host_file.write_text("host only")
        assert not await sandbox.files.exists(str(host_file))
        assert (await sandbox.exec(["test", "-e", str(host_file)])).exit_code != 0

    async def test_host_processes_are_invisible_inside(self, sandbox: Sandbox) -> None:
        """A process of the test runner, marked in argv and environment, is not seen inside."""
        marker = new_marker("host-proc")
        env = {**os.environ, "PSDK_CONTRACT_HOST_MARK": marker}
        async with await anyio.open_process(
                [sys.executable, "-c", "import sys; sys.stdin.read()", marker],
                env=env) as host:
            try:
                async def started() -> bool:  # the child has exec'd: its argv is its own
                    path = anyio.Path(f"/proc/{host.pid}/cmdline")
                    return marker.encode() in await path.read_bytes()

                await eventually(started, what="the marked host process started")
                assert await marked_processes(sandbox, marker) == []
            finally:
                host.kill()

    async def test_the_test_runner_is_invisible_inside(self, sandbox: Sandbox) -> None:
        """No process inside has the command line of the test runner itself."""
        runner = await anyio.Path("/proc/self/cmdline").read_bytes()
        result = await sandbox.exec(["sh", "-c", _ALL_CMDLINES])
        inside = result.stdout_bytes.split(f"{_SEPARATOR}\n".encode())
        assert len(inside) > 1, "no process listed inside the sandbox"
        assert runner not in inside
