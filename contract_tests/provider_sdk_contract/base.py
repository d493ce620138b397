"""The base every contract test class derives from: the provider's settings, the
fixtures that make providers and sandboxes, and the :class:`Factory` that cleans up.

Every sandbox a test creates is tagged ``{TAG_KEY: <run id>}``; every volume is named
with the run's prefix. Cleanup runs shielded from cancellation, and whatever it misses
the plugin sweeps at the end of the session.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import pytest

from provider_sdk import open_provider
from provider_sdk.errors import NotFound, SandboxError
from provider_sdk.models import SandboxSpec, Snapshot, Template, TemplateSpec, Volume
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.markers import capability_skip
from provider_sdk_contract.run import TAG_KEY, volume_prefix

if TYPE_CHECKING:
    from provider_sdk_contract.run import ContractRun

__all__ = ["TAG_KEY", "ContractBase", "Factory", "volume_prefix"]


class Factory:
    """Creates a test's sandboxes, volumes and snapshots, and removes them afterwards."""

    _counter = itertools.count()

    def __init__(self, contract: ContractBase, provider: SandboxProvider, run_id: str) -> None:
        self._contract = contract
        self.provider = provider
        self.run_id = run_id
        self._sandboxes: list[str] = []
        self._snapshots: list[str] = []
        self._volumes: list[str] = []
        self._templates: list[str] = []

    @property
    def tag(self) -> dict[str, str]:
        """The metadata every sandbox of this run carries."""
        return {TAG_KEY: self.run_id}

    def spec(self, **fields: Any) -> SandboxSpec:
        """The provider's spec for these fields, tagged with the run id."""
        metadata = {**self.tag, **fields.pop("metadata", {})}
        return self._contract.sandbox_spec(metadata=metadata, **fields)

    async def sandbox(self, **fields: Any) -> Sandbox:
        """Create a tagged sandbox, killed when the test ends."""
        sandbox = await self.provider.create(self.spec(**fields))
        self._sandboxes.append(sandbox.id)
        return sandbox

    def adopt(self, sandbox_id: str) -> None:
        """Kill this sandbox too when the test ends."""
        self._sandboxes.append(sandbox_id)

    async def volume(self) -> Volume:
        """Create a volume with the run's name prefix, deleted when the test ends."""
        name = f"{volume_prefix(self.run_id)}{next(self._counter)}"
        volume = await self.provider.create_volume(name)
        self._volumes.append(name)
        return volume

    async def snapshot(self, sandbox: Sandbox) -> Snapshot:
        """Snapshot a sandbox; the snapshot is deleted when the test ends."""
        snap = await sandbox.snapshot()
        self._snapshots.append(snap.id)
        return snap

    async def template(self, spec: TemplateSpec, **options: Any) -> Template:
        """Build a template; it is deleted when the test ends."""
        template = await self.provider.build_template(spec, **options)
        self._templates.append(template.id)
        return template

    async def aclose(self) -> None:
        """Remove everything, sandboxes first (volumes in use cannot be deleted)."""
        async with anyio.create_task_group() as tg:
            for sandbox_id in dict.fromkeys(self._sandboxes):
                tg.start_soon(self._quietly, self.provider.kill, sandbox_id)
        for snapshot_id in self._snapshots:
            await self._quietly(self.provider.delete_snapshot, snapshot_id)
        for template_id in dict.fromkeys(self._templates):
            await self._quietly(self.provider.delete_template, template_id)
        for name in self._volumes:
            await self._quietly(self.provider.delete_volume, name)

    @staticmethod
    async def _quietly(op: Any, arg: str) -> None:
        try:
            await op(arg)
        except NotFound:
            pass
        except SandboxError as exc:
            # The test's verdict stands; the session sweep retries what is left.
            warnings.warn(f"contract cleanup: {op.__name__}({arg!r}) failed: {exc!r}",
                          stacklevel=1)


class ContractBase:
    """Settings a provider's test class gives, and the fixtures every contract test uses.

    Subclass :class:`~provider_sdk_contract.ProviderContract` (not this) and set:

    ``provider_name``
        the provider's registry name; it is built with ``open_provider(provider_name,
        **provider_options(...))``.
    ``known_failures``
        ``{"test_name": "why, with a link"}``: strict expected failures.
    ``test_timeout``
        seconds before a hung test is cancelled and failed (default 180).
    ``template_base``
        for ``templates.build``: an image a Dockerfile's ``FROM`` can name on this
        backend without network (default: none, and the template tests skip).
    ``other_user``
        for ``exec.user``: a user other than root that the default template has
        (default ``nobody``).
    ``async_backend``
        the event loop the tests run on: ``"asyncio"`` (the default) or ``"trio"``,
        for a provider whose vendor SDK runs on trio too.

    Override :meth:`provider_options` for constructor options, and :meth:`sandbox_spec`
    to add fields (a template) to every sandbox the suite creates.
    """

    provider_name: ClassVar[str]
    known_failures: ClassVar[Mapping[str, str]] = {}
    test_timeout: ClassVar[float] = 180.0
    """Seconds before a test still running is cancelled and failed."""
    template_base: ClassVar[str | None] = None
    """The ``FROM`` image of the templates the suite builds (``templates.build``)."""
    other_user: ClassVar[str] = "nobody"
    """A user besides root in the default template (``exec.user``)."""
    async_backend: ClassVar[str] = "asyncio"
    """The event loop the tests run on (anyio's backend name: asyncio or trio)."""

    def provider_options(self, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        """Options for ``open_provider``; called once per test class.

        Call ``pytest.skip("X_API_KEY not set")`` here when credentials are missing.
        """
        return {}

    def sandbox_spec(self, **fields: Any) -> SandboxSpec:
        """The spec of every sandbox the suite creates; ``fields`` come from the test."""
        return SandboxSpec(**fields)

    # -------------------------------------------------------------------- fixtures

    @pytest.fixture(scope="class")
    def anyio_backend(self) -> str:
        """The event loop of this class's tests: :attr:`async_backend`."""
        return self.async_backend

    @pytest.fixture(scope="class")
    def provider_opts(self, tmp_path_factory: pytest.TempPathFactory,
                      psdk_contract_run: ContractRun) -> dict[str, Any]:
        """The options every provider instance of this class is opened with."""
        options = self.provider_options(tmp_path_factory)
        psdk_contract_run.watch(self.provider_name, options)
        return options

    @pytest.fixture
    async def provider(self, provider_opts: dict[str, Any],
                       request: pytest.FixtureRequest) -> AsyncIterator[SandboxProvider]:
        """A provider, closed after the test. A test whose capabilities this instance
        does not hold (where its host decides) is skipped here, as collection skips
        those the class does not declare."""
        async with self._open(provider_opts) as provider:
            reason = capability_skip(request.node, self.provider_name, provider.capabilities)
            if reason is not None:
                pytest.skip(reason)
            yield provider

    @pytest.fixture
    async def second_provider(self, provider_opts: dict[str, Any]
                              ) -> AsyncIterator[SandboxProvider]:
        """Another provider instance with the same options, as another process would open."""
        async with self._open(provider_opts) as second:
            yield second

    @pytest.fixture
    async def factory(self, provider: SandboxProvider,
                      psdk_contract_run: ContractRun) -> AsyncIterator[Factory]:
        """Creates tagged sandboxes, volumes and snapshots; removes them after the test."""
        factory = Factory(self, provider, psdk_contract_run.id)
        try:
            yield factory
        finally:
            with anyio.CancelScope(shield=True):
                await factory.aclose()

    @pytest.fixture
    async def sandbox(self, provider: SandboxProvider,
                      psdk_contract_run: ContractRun) -> AsyncIterator[Sandbox]:
        """A running sandbox, killed after the test."""
        spec = self.sandbox_spec(metadata={TAG_KEY: psdk_contract_run.id})
        sandbox = await provider.create(spec)
        try:
            yield sandbox
        finally:
            with anyio.CancelScope(shield=True):
                await sandbox.kill()

    @contextlib.asynccontextmanager
    async def _open(self, options: dict[str, Any]) -> AsyncIterator[SandboxProvider]:
        provider = open_provider(self.provider_name, **options)
        try:
            yield provider
        finally:
            with anyio.CancelScope(shield=True):
                await provider.aclose()
