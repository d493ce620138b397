"""DaytonaProvider beyond the contract: settings, the mapping onto Daytona's fields,
extensions, and resilience to the faults the emulator injects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from daytona_emulator_fixtures import admin, provider_options
from provider_sdk_daytona.provider import DaytonaProvider

from provider_sdk import open_provider
from provider_sdk.errors import (
    ConfigError,
    InvalidInput,
    RateLimited,
    SandboxNotFound,
    SandboxNotRunning,
    Unavailable,
    UnsupportedCapability,
)
from provider_sdk.models import Lifecycle, NetworkPolicy, SandboxState, VolumeMount
from provider_sdk.provider import SandboxProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
async def provider() -> AsyncIterator[DaytonaProvider]:
    async with DaytonaProvider(**provider_options(), unavailable_window=5) as provider:
        yield provider


@pytest.fixture(autouse=True)
def no_faults_left() -> Any:
    yield
    admin({name: 0 for name in admin()["known"]})


def _served() -> dict[str, float]:
    """How often each fault was served so far (the emulator lives for the session)."""
    served: dict[str, float] = admin()["served"]
    return served


async def _daytona_fields(provider: DaytonaProvider, sandbox_id: str) -> Any:
    return await provider.client.get(sandbox_id)


# ------------------------------------------------------------------------- settings

def test_a_missing_api_key_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="DAYTONA_API_KEY"):
        open_provider("daytona")


def test_a_malformed_api_url_is_a_config_error_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "k")
    monkeypatch.setenv("DAYTONA_API_URL", "127.0.0.1:9/api")
    with pytest.raises(ConfigError, match="DAYTONA_API_URL"):
        open_provider("daytona")


def test_settings_come_from_the_environment_and_the_key_is_never_shown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    options = provider_options()
    monkeypatch.setenv("DAYTONA_API_KEY", options["api_key"])
    monkeypatch.setenv("DAYTONA_API_URL", options["api_url"])
    monkeypatch.setenv("DAYTONA_TARGET", "local")
    provider = open_provider("daytona")
    assert isinstance(provider, DaytonaProvider)
    assert options["api_key"] not in repr(provider)
    assert options["api_url"] in repr(provider)


async def test_a_wrong_key_is_an_authentication_error() -> None:
    from provider_sdk.errors import AuthenticationError

    options = {**provider_options(), "api_key": "wrong-key-value"}
    async with DaytonaProvider(**options) as provider:
        with pytest.raises(AuthenticationError) as caught:
            await provider.list()
    assert "wrong-key-value" not in str(caught.value)


# ------------------------------------------------------------------------- mapping

async def test_the_default_idle_policy_turns_daytonas_auto_stop_off(
        provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        fields = await _daytona_fields(provider, sandbox.id)
        assert (fields.auto_stop_interval, fields.auto_delete_interval) == (0, -1)


async def test_idle_kill_maps_to_auto_stop_then_delete(provider: DaytonaProvider) -> None:
    async with provider.create(lifecycle=Lifecycle(idle_timeout=90, on_idle="kill")) as sandbox:
        fields = await _daytona_fields(provider, sandbox.id)
        assert (fields.auto_stop_interval, fields.auto_delete_interval) == (2, 0)


async def test_idle_pause_maps_to_auto_stop_only(provider: DaytonaProvider) -> None:
    async with provider.create(lifecycle=Lifecycle(idle_timeout=600, on_idle="pause")) as sb:
        fields = await _daytona_fields(provider, sb.id)
        assert (fields.auto_stop_interval, fields.auto_delete_interval) == (10, -1)


async def _eventually_state(provider: DaytonaProvider, sandbox_id: str,
                            state: SandboxState | None) -> None:
    """Poll (reads are not activity) until the sandbox is in ``state``; None: gone."""
    with anyio.fail_after(30):
        while True:
            try:
                if (await provider.get_info(sandbox_id)).state == state:
                    return
            except SandboxNotFound:
                if state is None:
                    return
            await anyio.sleep(0.1)


async def test_an_idle_sandbox_is_paused_and_resumes(provider: DaytonaProvider) -> None:
    admin({"minute_seconds": 1})  # the emulator's minute lasts a second
    async with provider.create(lifecycle=Lifecycle(idle_timeout=30, on_idle="pause")) as sb:
        await sb.files.write("kept.txt", b"idle")
        await _eventually_state(provider, sb.id, SandboxState.PAUSED)
        again = await provider.connect(sb.id)
        assert await again.files.read("kept.txt") == b"idle"


async def test_an_idle_sandbox_is_killed(provider: DaytonaProvider) -> None:
    admin({"minute_seconds": 1})
    sandbox = await provider.create(lifecycle=Lifecycle(idle_timeout=30, on_idle="kill"))
    await _eventually_state(provider, sandbox.id, None)


async def test_network_policy_maps_to_block_all_and_allow_lists(
        provider: DaytonaProvider) -> None:
    async with provider.create() as closed:
        assert (await _daytona_fields(provider, closed.id)).network_block_all is True
    policy = NetworkPolicy(allow_out=("127.0.0.0/8",))
    async with provider.create(network=policy) as allowed:
        fields = await _daytona_fields(provider, allowed.id)
        assert (fields.network_block_all, fields.network_allow_list) == (False, "127.0.0.0/8")
    assert not provider.supports("network.deny_out")
    with pytest.raises(UnsupportedCapability, match="deny_out") as caught:
        await provider.create(network=NetworkPolicy(allow_internet=True,
                                                    deny_out=("127.0.0.1/32",)))
    assert caught.value.capability == "network.deny_out"


async def test_metadata_hides_the_sdk_and_provider_labels(provider: DaytonaProvider) -> None:
    async with provider.create(metadata={"team": "a"}, cwd="/tmp") as sandbox:
        assert sandbox.metadata == {"team": "a"}
        labels = (await _daytona_fields(provider, sandbox.id)).labels
        assert labels["code-toolbox-language"] == "python"
        assert labels["provider-sdk.cwd"] == "/tmp"
        assert dict((await provider.get_info(sandbox.id)).metadata) == {"team": "a"}
        listed = [i for i in await provider.list() if i.id == sandbox.id]
        assert [dict(i.metadata) for i in listed] == [{"team": "a"}]


async def test_set_metadata_keeps_the_sdk_and_provider_labels(
        provider: DaytonaProvider) -> None:
    """Daytona replaces labels whole: the reserved ones go with the new, so the spec's
    cwd still holds after an update."""
    async with provider.create(metadata={"team": "a"}, cwd="/tmp") as sandbox:
        before = (await _daytona_fields(provider, sandbox.id)).labels
        assert before["provider-sdk.cwd"] == "/tmp"
        info = await sandbox.set_metadata({"owner": "alice"})
        assert dict(info.metadata) == {"team": "a", "owner": "alice"}
        after = (await _daytona_fields(provider, sandbox.id)).labels
        assert after == {**before, "owner": "alice"}
        with pytest.raises(InvalidInput, match=r"'provider-sdk\.cwd' is reserved"):
            await sandbox.set_metadata({"provider-sdk.cwd": "/"})
        assert (await sandbox.exec("pwd")).stdout == "/tmp\n"


async def test_set_metadata_reads_the_labels_fresh_into_the_handle_it_keeps(
        provider: DaytonaProvider) -> None:
    """What another client labelled since this provider last looked is kept: the labels
    are read just before they are replaced, refreshing the SDK handle the provider
    keeps rather than building another."""
    async with provider.create(metadata={"team": "a"}) as sandbox:
        kept = provider._calls.sandboxes[sandbox.id]
        async with DaytonaProvider(**provider_options()) as other:
            await (await other.connect(sandbox.id)).set_metadata({"stage": "review"})
        info = await sandbox.set_metadata({"owner": "alice"})
        assert dict(info.metadata) == {"team": "a", "stage": "review", "owner": "alice"}
        assert provider._calls.sandboxes[sandbox.id] is kept
        assert dict((await provider.get_info(sandbox.id)).metadata) == dict(info.metadata)


async def test_set_metadata_without_a_reread_replaces_the_labels_it_saw_in_one_call(
        provider: DaytonaProvider) -> None:
    """``reread=False`` sends the labels of the handle the provider keeps, with the new
    ones, without reading them first: a label another client set since is gone, and
    the SDK's and the provider's own labels (the working directory) are kept."""
    async with provider.create(metadata={"team": "a"}, cwd="/tmp") as sandbox:
        async with DaytonaProvider(**provider_options()) as other:
            await (await other.connect(sandbox.id)).set_metadata({"stage": "review"})
        info = await sandbox.set_metadata({"owner": "alice"}, reread=False)
        assert dict(info.metadata) == {"team": "a", "owner": "alice"}
        assert dict((await provider.get_info(sandbox.id)).metadata) == dict(info.metadata)
        labels = (await _daytona_fields(provider, sandbox.id)).labels
        assert labels["provider-sdk.cwd"] == "/tmp"
        assert "code-toolbox-language" in labels
        assert (await sandbox.exec("pwd")).stdout == "/tmp\n"


async def test_the_sdk_and_provider_labels_are_reserved(provider: DaytonaProvider) -> None:
    for key in ("code-toolbox-language", "provider-sdk.cwd"):
        with pytest.raises(InvalidInput, match=rf"^\[daytona\] metadata: label '{key}'"):
            await provider.create(metadata={key: "x"})


async def test_an_image_is_created_through_the_image_extension(
        provider: DaytonaProvider) -> None:
    async with provider.create(extensions={"daytona.image": "debian:12"}) as sandbox:
        fields = await _daytona_fields(provider, sandbox.id)
        assert "FROM debian:12" in fields.build_info.dockerfile_content


async def test_resources_without_an_image_are_refused(provider: DaytonaProvider) -> None:
    from provider_sdk.models import Resources

    with pytest.raises(InvalidInput, match=r"daytona\.image"):
        await provider.create(resources=Resources(cpu=2))


async def test_unknown_daytona_extensions_are_refused(provider: DaytonaProvider) -> None:
    with pytest.raises(InvalidInput, match=r"daytona\.nope"):
        await provider.create(extensions={"daytona.nope": 1})


async def test_read_only_volume_mounts_are_refused(provider: DaytonaProvider) -> None:
    """``volumes.read_only`` is not declared: a read-only mount is refused naming it."""
    assert not provider.supports("volumes.read_only")
    volume = await provider.create_volume("psdk-daytona-ro")
    try:
        with pytest.raises(UnsupportedCapability, match="read_only") as caught:
            await provider.create(volumes=[VolumeMount(volume=volume.name, path="/mnt/v",
                                                       read_only=True)])
        assert caught.value.capability == "volumes.read_only"
    finally:
        await provider.delete_volume(volume.name)


async def test_pause_is_daytona_stop_and_loses_processes(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.exec("(exec -a psdk-daytona-bg sleep 300) > /dev/null 2>&1 &")
        assert (await sandbox.pause()).state == SandboxState.PAUSED
        assert (await _daytona_fields(provider, sandbox.id)).state == "stopped"
        with pytest.raises(SandboxNotRunning):
            await sandbox.files.read("/etc/hostname")
        await sandbox.resume()
        scan = await sandbox.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"])
        assert "psdk-daytona-bg" not in scan.stdout


async def test_archive_extension_then_resume(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.files.write("kept.txt", b"archived")
        info = await provider.ex_archive(sandbox.id)
        assert (info.state, info.extra["daytona_state"]) == (SandboxState.PAUSED, "archived")
        assert not set(info.metadata) & provider.internal_labels
        again = await provider.connect(sandbox.id)
        assert await again.files.read("kept.txt") == b"archived"


async def test_recover_extension_of_a_healthy_sandbox_is_refused(
        provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        with pytest.raises(InvalidInput):
            await provider.ex_recover(sandbox.id)


async def test_shell_exit_ends_the_command_not_the_session(
        provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox, await sandbox.shell() as shell:
        await shell.run("cd /tmp && export KEPT=yes")
        assert (await shell.run("echo before; exit 5")).exit_code == 5
        result = await shell.run('echo "$PWD $KEPT"')
        assert result.stdout == "/tmp yes\n"


async def test_shell_keeps_plain_variables_and_functions(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox, await sandbox.shell() as shell:
        await shell.run("PLAIN=not-exported; f() { echo from-function; }")
        result = await shell.run('echo "$PLAIN"; f')
        assert result.stdout == "not-exported\nfrom-function\n"


async def test_a_shell_keeps_the_output_limit_set_on_its_provider(
        provider: DaytonaProvider) -> None:
    """The daemon answers a session command with its whole output: the shell keeps what
    the provider's ``output_limit`` (set on the instance) allows of each stream, and
    counts the rest."""
    provider.output_limit = 1000
    async with provider.create() as sandbox, await sandbox.shell() as shell:
        result = await shell.run("head -c 3000 /dev/zero | tr '\\0' a; "
                                 "head -c 2500 /dev/zero | tr '\\0' b >&2")
    assert (result.stdout, result.stderr) == ("a" * 1000, "b" * 1000)
    assert (result.stdout_truncated, result.stderr_truncated) == (2000, 1500)


async def test_large_output_is_downloaded_from_files(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        result = await sandbox.exec("head -c 6000000 /dev/zero | tr '\\0' x")
        assert result.stdout_bytes == b"x" * 6_000_000


def test_the_sync_facade_drives_the_daytona_provider() -> None:
    from provider_sdk.sync import open_provider as open_sync

    with open_sync("daytona", **provider_options()) as provider, \
            provider.create(metadata={"via": "sync"}) as sandbox:
        assert sandbox.exec("echo hi").stdout == "hi\n"
        sandbox.files.write("/tmp/sync.txt", b"sync")
        assert sandbox.files.read("/tmp/sync.txt") == b"sync"
        with sandbox.shell() as shell:
            shell.run("cd /tmp")
            assert shell.run("pwd").stdout == "/tmp\n"


# ---------------------------------------------------------------------- resilience

async def test_502s_around_a_create_are_retried(provider: DaytonaProvider) -> None:
    before = _served()
    admin({"transition_502": 2, "toolbox_502_after_start": 2})
    async with provider.create() as sandbox:
        assert (await sandbox.exec(["echo", "up"])).stdout == "up\n"
    after = _served()
    assert [after[f] - before[f] for f in ("transition_502", "toolbox_502_after_start")] == [
        2, 2]


async def test_502s_around_a_resume_are_retried(provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.pause()
        admin({"transition_502": 1, "toolbox_502_after_start": 3})
        await sandbox.resume()
        assert (await sandbox.exec(["true"])).exit_code == 0


async def test_a_create_answered_502_after_it_worked_makes_one_sandbox(
        provider: DaytonaProvider) -> None:
    before = _served()["transition_502_after"]
    admin({"transition_502_after": 1})
    async with provider.create(metadata={"once": "yes-502"}) as sandbox:
        assert _served()["transition_502_after"] - before == 1
        assert [i.id for i in await provider.list(metadata={"once": "yes-502"})] == [sandbox.id]


async def test_a_snapshot_answered_502_after_it_worked_is_kept(
        provider: DaytonaProvider) -> None:
    async with provider.create() as sandbox:
        await sandbox.files.write("kept.txt", b"snap")
        before = _served()["transition_502_after"]
        admin({"transition_502_after": 1})
        snapshot = await sandbox.snapshot()
        try:
            assert _served()["transition_502_after"] - before == 1
            async with provider.create(snapshot=snapshot.id) as copy:
                assert await copy.files.read("kept.txt") == b"snap"
        finally:
            await provider.delete_snapshot(snapshot.id)


async def test_pause_resume_and_kill_answered_502_after_they_worked(
        provider: DaytonaProvider) -> None:
    sandbox = await provider.create()
    admin({"transition_502_after": 1})
    assert (await sandbox.pause()).state == SandboxState.PAUSED
    admin({"transition_502_after": 1})
    assert (await sandbox.resume()).state == SandboxState.RUNNING
    assert (await sandbox.exec(["echo", "back"])).stdout == "back\n"
    admin({"transition_502_after": 1})
    await sandbox.kill()
    with pytest.raises(SandboxNotFound):
        await provider.get_info(sandbox.id)


async def test_502s_past_the_window_are_unavailable() -> None:
    async with DaytonaProvider(**provider_options(), unavailable_window=0.5) as provider:
        admin({"transition_502": 1000})
        with pytest.raises(Unavailable):
            await provider.create()


async def test_a_429_is_rate_limited_with_retry_after(provider: SandboxProvider) -> None:
    admin({"rate_limit_429": 1})
    with pytest.raises(RateLimited) as caught:
        await provider.list()
    assert caught.value.retry_after == 1.0


async def test_a_slow_start_is_waited_for(provider: DaytonaProvider) -> None:
    before = _served()
    admin({"start_delay": 1.5, "latency": 0.05})
    async with provider.create() as sandbox:
        assert (await sandbox.exec(["true"])).exit_code == 0
    after = _served()
    assert after["start_delay"] - before["start_delay"] == 1
    assert after["latency"] - before["latency"] >= 3
