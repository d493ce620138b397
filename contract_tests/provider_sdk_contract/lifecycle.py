"""Contract: creating, finding, reconnecting and killing sandboxes."""

from __future__ import annotations

import secrets
from typing import Any

import anyio
import pytest

from provider_sdk import open_provider
from provider_sdk.errors import SandboxNotFound, SandboxNotRunning
from provider_sdk.models import SandboxState
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import TAG_KEY, ContractBase, Factory


class _BodyFailed(Exception):
    """Raised inside an ``async with`` block to show the sandbox is still killed."""


async def _assert_gone(provider: SandboxProvider, sandbox_id: str) -> None:
    """The sandbox is unknown to the provider, or known only as killed."""
    try:
        info = await provider.get_info(sandbox_id)
    except SandboxNotFound:
        return
    assert info.state == SandboxState.KILLED, f"{sandbox_id} is {info.state}, not killed"


class LifecycleContract(ContractBase):
    """Lifecycle: create, info, list, connect, kill, and ``async with``."""

    async def test_create_returns_a_running_sandbox(self, sandbox: Sandbox,
                                                    provider: SandboxProvider) -> None:
        """``create`` returns a handle whose info says running, for this provider."""
        assert sandbox.id
        assert sandbox.info.state == SandboxState.RUNNING
        assert sandbox.info.provider == provider.name

    async def test_create_answers_commands_at_once(self, sandbox: Sandbox) -> None:
        """``create`` returns only when the data plane answers: a command runs right away."""
        result = await sandbox.exec(["echo", "ready"])
        assert (result.exit_code, result.stdout) == (0, "ready\n")

    async def test_create_keeps_metadata(self, factory: Factory) -> None:
        """Metadata given at create is on the handle, exactly."""
        label = secrets.token_hex(4)
        sandbox = await factory.sandbox(metadata={"psdk-label": label})
        assert sandbox.metadata == {**factory.tag, "psdk-label": label}

    async def test_info_reports_running_state_and_metadata(self, factory: Factory) -> None:
        """``get_info`` reports the id, provider, running state and metadata."""
        label = secrets.token_hex(4)
        sandbox = await factory.sandbox(metadata={"psdk-label": label})
        info = await factory.provider.get_info(sandbox.id)
        assert info.id == sandbox.id
        assert info.provider == factory.provider.name
        assert info.state == SandboxState.RUNNING
        assert info.metadata.get("psdk-label") == label

    async def test_list_by_metadata_returns_only_the_matching_sandbox(
            self, factory: Factory) -> None:
        """Of two sandboxes with different labels, a metadata filter returns the right one."""
        token = secrets.token_hex(4)
        first = await factory.sandbox(metadata={"psdk-label": f"a-{token}"})
        second = await factory.sandbox(metadata={"psdk-label": f"b-{token}"})
        found_a = await factory.provider.list(metadata={"psdk-label": f"a-{token}"})
        found_b = await factory.provider.list(metadata={"psdk-label": f"b-{token}"})
        assert [i.id for i in found_a] == [first.id]
        assert [i.id for i in found_b] == [second.id]

    async def test_list_by_metadata_matches_every_given_pair(self, factory: Factory) -> None:
        """A filter with two pairs returns only sandboxes carrying both."""
        token = secrets.token_hex(4)
        both = await factory.sandbox(metadata={"psdk-a": token, "psdk-b": token})
        await factory.sandbox(metadata={"psdk-a": token})
        found = await factory.provider.list(metadata={"psdk-a": token, "psdk-b": token})
        assert [i.id for i in found] == [both.id]

    async def test_list_by_state_returns_running_sandboxes(self, factory: Factory) -> None:
        """``list(state="running")`` includes a running sandbox, reported as running."""
        token = secrets.token_hex(4)
        sandbox = await factory.sandbox(metadata={"psdk-label": token})
        found = await factory.provider.list(metadata={"psdk-label": token}, state="running")
        assert [(i.id, i.state) for i in found] == [(sandbox.id, SandboxState.RUNNING)]

    async def test_connect_from_a_second_provider_sees_the_same_sandbox(
            self, sandbox: Sandbox, second_provider: SandboxProvider) -> None:
        """A second provider instance connects by id and sees the first one's files."""
        token = secrets.token_hex(8)
        await sandbox.files.write("/tmp/psdk-connect.txt", token)
        again = await second_provider.connect(sandbox.id)
        assert again.id == sandbox.id
        result = await again.exec(["cat", "/tmp/psdk-connect.txt"])
        assert result.stdout == token

    async def test_kill_twice_is_not_an_error(self, factory: Factory) -> None:
        """Killing a sandbox that is already killed succeeds quietly."""
        sandbox = await factory.sandbox()
        await sandbox.kill()
        await sandbox.kill()
        await factory.provider.kill(sandbox.id)
        await _assert_gone(factory.provider, sandbox.id)

    async def test_kill_of_an_unknown_id_is_not_an_error(self, factory: Factory) -> None:
        """Kill is idempotent even for an id the provider never had."""
        await factory.provider.kill("psdk-contract-never-existed")

    async def test_exec_after_kill_raises(self, factory: Factory) -> None:
        """Running a command in a killed sandbox raises SandboxNotRunning or SandboxNotFound."""
        sandbox = await factory.sandbox()
        await sandbox.kill()
        with pytest.raises((SandboxNotRunning, SandboxNotFound)) as caught:
            await sandbox.exec(["true"])
        assert caught.value.provider == factory.provider.name

    async def test_file_read_after_kill_raises(self, factory: Factory) -> None:
        """Reading a file of a killed sandbox raises SandboxNotRunning or SandboxNotFound."""
        sandbox = await factory.sandbox()
        await sandbox.files.write("/tmp/psdk-after-kill.txt", b"x")
        await sandbox.kill()
        with pytest.raises((SandboxNotRunning, SandboxNotFound)):
            await sandbox.files.read("/tmp/psdk-after-kill.txt")

    async def test_killed_sandbox_is_not_listed_as_running(self, factory: Factory) -> None:
        """After kill, listing by its metadata no longer shows it running."""
        token = secrets.token_hex(4)
        sandbox = await factory.sandbox(metadata={"psdk-label": token})
        await sandbox.kill()
        found = await factory.provider.list(metadata={"psdk-label": token})
        assert all(i.state == SandboxState.KILLED for i in found), found

    async def test_unknown_id_raises_sandbox_not_found(self, provider: SandboxProvider) -> None:
        """``get_info`` of an unknown id raises SandboxNotFound carrying the provider name."""
        unknown = f"psdk-missing-{secrets.token_hex(6)}"
        with pytest.raises(SandboxNotFound) as caught:
            await provider.get_info(unknown)
        assert caught.value.provider == provider.name

    async def test_connect_to_unknown_id_raises_sandbox_not_found(
            self, provider: SandboxProvider) -> None:
        """``connect`` to an unknown id raises SandboxNotFound naming that id."""
        unknown = f"psdk-missing-{secrets.token_hex(6)}"
        with pytest.raises(SandboxNotFound) as caught:
            await provider.connect(unknown)
        assert caught.value.provider == provider.name
        assert caught.value.sandbox_id == unknown

    async def test_async_with_kills_the_sandbox_on_exit(
            self, provider: SandboxProvider, factory: Factory) -> None:
        """``async with provider.create(...)`` kills the sandbox when the block ends."""
        async with provider.create(factory.spec()) as sandbox:
            factory.adopt(sandbox.id)
            assert (await sandbox.exec(["true"])).exit_code == 0
        await _assert_gone(provider, sandbox.id)

    async def test_async_with_kills_the_sandbox_when_the_body_raises(
            self, provider: SandboxProvider, factory: Factory) -> None:
        """An exception leaving the block still kills the sandbox, and propagates."""
        ids: list[str] = []

        async def body() -> None:
            async with provider.create(factory.spec()) as sandbox:
                factory.adopt(sandbox.id)
                ids.append(sandbox.id)
                raise _BodyFailed

        with pytest.raises(_BodyFailed):
            await body()
        assert len(ids) == 1
        await _assert_gone(provider, ids[0])

    async def test_async_with_kills_the_sandbox_when_cancelled(
            self, provider: SandboxProvider, factory: Factory) -> None:
        """Cancelling the block (a cancel scope) still kills the sandbox."""
        ids: list[str] = []
        with anyio.CancelScope() as scope:
            async with provider.create(factory.spec()) as sandbox:
                factory.adopt(sandbox.id)
                ids.append(sandbox.id)
                scope.cancel()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert len(ids) == 1
        await _assert_gone(provider, ids[0])

    async def test_keep_leaves_the_sandbox_running(
            self, provider: SandboxProvider, factory: Factory) -> None:
        """``keep()`` inside the block leaves the sandbox running after it."""
        async with provider.create(factory.spec()) as sandbox:
            factory.adopt(sandbox.id)
            sandbox.keep()
        info = await provider.get_info(sandbox.id)
        assert info.state == SandboxState.RUNNING
        assert (await sandbox.exec(["true"])).exit_code == 0

    async def test_provider_aclose_twice_is_not_an_error(
            self, provider_opts: dict[str, Any], factory: Factory) -> None:
        """Closing a provider twice is fine; closing it leaves its sandboxes running."""
        first = open_provider(self.provider_name, **provider_opts)
        sandbox = await first.create(factory.spec())
        factory.adopt(sandbox.id)
        await first.aclose()
        await first.aclose()
        info = await factory.provider.get_info(sandbox.id)
        assert info.state == SandboxState.RUNNING

    async def test_tagged_sandboxes_are_listed_under_the_run_tag(self, factory: Factory) -> None:
        """Sandboxes are found by the suite's own tag, which the end-of-run sweep relies on."""
        sandbox = await factory.sandbox()
        found = await factory.provider.list(metadata={TAG_KEY: factory.run_id})
        assert sandbox.id in {i.id for i in found}
