"""The E2B provider's exposed ports through the emulator: what the ``ExposedPort`` holds,
the token of a sandbox made by another provider instance (connect tells it), and a
sandbox made with public traffic outside the provider, which has no token to give."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox
from provider_emulators import emulator, provider_options

from provider_sdk import open_provider
from provider_sdk.emulators import RunningEmulator
from provider_sdk.errors import Conflict
from provider_sdk.provider import SandboxProvider

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    home: Path = tmp_path_factory.mktemp("e2b-ports")
    with emulator("e2b", home) as em:
        yield em


@pytest.fixture
async def provider(running: RunningEmulator) -> AsyncIterator[SandboxProvider]:
    async with open_provider("e2b", **provider_options(running)) as opened:
        yield opened


async def test_exposed_port_is_the_sdk_host_with_the_traffic_token(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    async with provider.create() as sandbox:
        exposed = await sandbox.expose(8000)
        assert exposed.url == exposed.base_url == \
            f"http://8000-{sandbox.id}.{running.settings['E2B_DOMAIN']}/"
        assert exposed.token_header == "e2b-traffic-access-token"
        async with open_provider("e2b", **provider_options(running)) as other:
            again = await (await other.connect(sandbox.id)).expose(8000)
        assert again.token == exposed.token
        assert (await sandbox.expose(9000)).token == exposed.token  # one per sandbox


async def test_a_sandbox_with_public_traffic_has_no_token_to_expose(
        running: RunningEmulator, provider: SandboxProvider) -> None:
    made = await AsyncSandbox.create(api_key=running.api_key.reveal(),
                                     api_url=running.settings["E2B_API_URL"],
                                     sandbox_url=running.settings["E2B_SANDBOX_URL"])
    try:
        sandbox = await provider.connect(made.sandbox_id)
        with pytest.raises(Conflict, match="public"):
            await sandbox.expose(8000)
    finally:
        await made.kill()
