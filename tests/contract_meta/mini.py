"""The pieces of the contract plugin's meta-tests: a tiny provider for the conftest
pytester writes, the contract class that opts into it, and what the tests read back.

The provider lives only in the generated conftest: it keeps sandboxes in a class dict,
declares ``metrics`` and nothing else (``mini``; ``mini-vol`` adds volumes), and appends
what it does to a log file, so a test sees whether a provider was opened, and what was
created, killed and deleted. A file ``kill-fails`` beside the log makes every kill fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["CONTRACT", "HANG", "LEAK", "MINI_CONFTEST", "log_lines", "write_contract"]

MINI_CONFTEST = '''
import itertools
from pathlib import Path

import attrs

from provider_sdk import registry
from provider_sdk.capabilities import Capability
from provider_sdk.errors import (FileNotFound, SandboxNotFound, SandboxNotRunning,
                                 Unavailable, VolumeNotFound)
from provider_sdk.models import ExecResult, Metrics, SandboxInfo, SandboxState, Volume
from provider_sdk.provider import SandboxProvider

pytest_plugins = ["provider_sdk_contract.plugin"]


class MiniProvider(SandboxProvider):
    """Sandboxes are records; commands print nothing; files never exist."""

    name = "mini"
    capabilities = frozenset({Capability.METRICS})
    sandboxes: dict = {}
    ids = itertools.count()

    def __init__(self, *, log: str) -> None:
        self.log = Path(log)
        self._write("open")
        if self.log.with_name("narrow").exists():  # this instance holds none of them
            self._hold_only(frozenset())

    def _write(self, line):
        with self.log.open("a") as f:
            f.write(line + "\\n")

    async def _create(self, spec):
        info = SandboxInfo(id=f"mini-{next(self.ids)}", provider=self.name,
                           state=SandboxState.RUNNING, metadata=spec.metadata)
        self.sandboxes[info.id] = info
        self._write(f"create {info.id}")
        return info

    async def _info(self, sandbox_id):
        if sandbox_id not in self.sandboxes:
            raise SandboxNotFound("unknown", provider=self.name, sandbox_id=sandbox_id)
        return self.sandboxes[sandbox_id]

    async def _list(self, *, metadata, state):
        return list(self.sandboxes.values())

    async def _kill(self, sandbox_id):
        if self.log.with_name("kill-fails").exists():
            raise Unavailable("the backend refuses kills", provider=self.name,
                              sandbox_id=sandbox_id)
        if sandbox_id in self.sandboxes:
            info = self.sandboxes[sandbox_id]
            self.sandboxes[sandbox_id] = attrs.evolve(info, state=SandboxState.KILLED)
            self._write(f"kill {sandbox_id}")

    async def _exec(self, sandbox_id, command):
        if (await self._info(sandbox_id)).state != SandboxState.RUNNING:
            raise SandboxNotRunning("killed", provider=self.name, sandbox_id=sandbox_id)
        return ExecResult(exit_code=0)

    async def _metrics(self, sandbox_id):
        return Metrics(memory_bytes=4096)

    def _read_file(self, sandbox_id, path):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _write_file(self, sandbox_id, path, chunks):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _list_dir(self, sandbox_id, path):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _stat(self, sandbox_id, path):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _mkdir(self, sandbox_id, path, *, parents, exist_ok):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _remove(self, sandbox_id, path, *, recursive):
        raise FileNotFound(path, provider=self.name, sandbox_id=sandbox_id)

    async def _rename(self, sandbox_id, src, dst):
        raise FileNotFound(src, provider=self.name, sandbox_id=sandbox_id)


class MiniVolumeProvider(MiniProvider):
    """The same, with volumes: records too."""

    name = "mini-vol"
    capabilities = frozenset({Capability.METRICS, Capability.VOLUMES})
    volumes: dict = {}

    async def _create_volume(self, name):
        self.volumes[name] = Volume(id=name, name=name, provider=self.name)
        self._write(f"create-volume {name}")
        return self.volumes[name]

    async def _get_volume(self, name):
        if name not in self.volumes:
            raise VolumeNotFound(name, provider=self.name)
        return self.volumes[name]

    async def _list_volumes(self):
        return list(self.volumes.values())

    async def _delete_volume(self, name):
        if name not in self.volumes:
            raise VolumeNotFound(name, provider=self.name)
        del self.volumes[name]
        self._write(f"delete-volume {name}")


registry.register("mini", MiniProvider)
registry.register("mini-vol", MiniVolumeProvider)
'''

CONTRACT = '''
from provider_sdk_contract import ProviderContract


class TestMiniContract(ProviderContract):
    provider_name = {name!r}
    known_failures = {known!r}
    test_timeout = {timeout!r}

    def provider_options(self, tmp_path_factory):
        return {{"log": {log!r}}}
{extra}
'''


LEAK = '''
    async def test_leaks_a_tagged_sandbox(self, provider, factory):
        sandbox = await provider.create(factory.spec())
        print("leaked", sandbox.id)
'''

HANG = '''
    async def test_hangs(self, sandbox):
        import anyio
        await anyio.sleep_forever()
'''


def write_contract(pytester: pytest.Pytester, log: Path, *, name: str = "mini",
                   known: dict[str, str] | None = None, extra: str = "",
                   timeout: float = 2) -> None:
    """Write ``test_mini.py``: the contract on provider ``name``, with ``extra`` tests."""
    pytester.makepyfile(test_mini=CONTRACT.format(name=name, known=known or {},
                                                  log=str(log), extra=extra,
                                                  timeout=timeout))


def log_lines(log: Path) -> list[str]:
    """What the provider did, one line each."""
    return log.read_text().splitlines() if log.exists() else []
