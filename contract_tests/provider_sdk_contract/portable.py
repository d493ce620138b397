"""Contract: the portable baseline, what a program may take for granted in a sandbox of
the provider's default template wherever it runs: Python 3 by both its names
(``python``), and a ``/tmp`` that takes files."""

from __future__ import annotations

import re

from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires

_SAME = "import os, sys; print(os.path.realpath(sys.executable))"


class PortableContract(ContractBase):
    """The default template's baseline: the commands and places a program written for
    one provider's sandbox uses in another's."""

    @requires(Capability.PYTHON)
    async def test_python_runs_python_3_by_both_names(self, sandbox: Sandbox) -> None:
        """``python -c`` runs code and ``python3 -V`` names a Python 3, each found on the
        default ``PATH`` through the shell."""
        result = await sandbox.exec("python -c 'print(6*7)'")
        assert (result.exit_code, result.stdout) == (0, "42\n"), result
        version = await sandbox.exec("python3 -V")
        assert version.exit_code == 0, version
        assert re.fullmatch(r"Python 3\.\d+\.\d+\S*\n", version.stdout), version

    @requires(Capability.PYTHON)
    async def test_python_and_python3_are_one_interpreter(self, sandbox: Sandbox) -> None:
        """``python`` is the same program as ``python3`` (not some other Python)."""
        both = [await sandbox.exec([name, "-c", _SAME]) for name in ("python", "python3")]
        assert [r.exit_code for r in both] == [0, 0], both
        assert both[0].stdout == both[1].stdout, both

    async def test_tmp_takes_files_from_commands_and_the_files_api(
            self, sandbox: Sandbox) -> None:
        """The sandbox's user writes to ``/tmp`` (a file of its own naming and one of
        ``mktemp``'s); the files API reads what it wrote there, and writes there too."""
        script = ('echo from-the-command > /tmp/psdk-portable && f=$(mktemp) && '
                  'echo scratch > "$f" && cat "$f" && rm "$f"')
        result = await sandbox.exec(script)
        assert (result.exit_code, result.stdout) == (0, "scratch\n"), result
        assert await sandbox.files.read("/tmp/psdk-portable") == b"from-the-command\n"
        await sandbox.files.write("/tmp/psdk-portable-api", b"from-the-api\n")
        read = await sandbox.exec(["cat", "/tmp/psdk-portable-api"])
        assert (read.exit_code, read.stdout) == (0, "from-the-api\n"), read
