"""A ``SandboxAgent`` driven by the Agents SDK's ``ScriptedModel`` through its sandbox's
lifecycle on every provider, and the session's whole surface under it: what the Agents
SDK's own clients are tested for. No network beyond 127.0.0.1, no API key."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from agents import RunConfig, Runner
from agents.items import ToolCallOutputItem
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.entries import (
    Dir,
    File,
    InContainerMountStrategy,
    LocalDir,
    LocalFile,
    RcloneMountPattern,
    S3Mount,
)
from agents.sandbox.errors import (
    ExposedPortUnavailableError,
    InvalidManifestPathError,
    MountConfigError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session import SandboxSession
from agents.sandbox.session.runtime_helpers import RESOLVE_WORKSPACE_PATH_HELPER
from agents.sandbox.snapshot import NoopSnapshot
from agents.testing import ScriptedModel, assistant_message
from agents_fixtures import PROVIDERS, exec_step, provider_setup, write_stdin_to_last
from daytona_emulator_fixtures import daytona_emulator
from engines import require_bwrap
from provider_sdk_openai_agents import (
    TAG,
    ProviderSandboxClient,
    ProviderSandboxClientOptions,
    ProviderSandboxSession,
    ProviderSandboxSessionState,
)
from provider_sdk_openai_agents._workspace import SnapshotRef, decode_ref, encode_ref

from provider_sdk import open_provider
from provider_sdk.capabilities import Capability
from provider_sdk.errors import ConfigError
from provider_sdk.manager import MemoryStore, SandboxManager
from provider_sdk.models import SandboxState

pytestmark = pytest.mark.anyio

__all__ = ["daytona_emulator"]  # the session's Daytona emulator, for the daytona cases


def _manifest(tmp_path: Path) -> Manifest:
    """Every kind of entry that needs no cloud credentials. Local sources are read
    relative to the working directory (the Agents SDK's base for them): ``tmp_path``."""
    (tmp_path / "local.txt").write_text("from a local file\n")
    tree = tmp_path / "tree" / "sub"
    tree.mkdir(parents=True)
    (tree / "leaf.txt").write_text("from a local dir\n")
    return Manifest(entries={
        "seed.txt": File(content=b"seed\n"),
        "data": Dir(children={"inner.txt": File(content=b"inner\n")}),
        "local.txt": LocalFile(src=Path("local.txt")),
        "tree": LocalDir(src=Path("tree")),
    })


def _outputs(result: Any) -> list[str]:
    return [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


async def _live(provider: str, options: dict[str, Any], session_hex: str) -> list[str]:
    async with open_provider(provider, **options) as p:
        found = await p.list(metadata={TAG: session_hex})
        return [i.id for i in found if i.state not in (SandboxState.KILLED,
                                                       SandboxState.STOPPED)]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_scripted_agent_works_in_a_sandbox_of_the_provider(
        provider: str, tmp_path: Path, daytona_emulator: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner creates the sandbox, writes the manifest into the workspace, runs the
    model's commands there (one of them interactive, on a terminal), and kills the
    sandbox when the run ends."""
    with provider_setup(provider, tmp_path) as (options, _env):
        async with ProviderSandboxClient(provider, provider_options=options) as client:
            interactive = await _has_terminals(provider, options)
            model = ScriptedModel([
                exec_step("cat seed.txt data/inner.txt local.txt tree/sub/leaf.txt; "
                          "echo written > out.txt; cat out.txt", "c1"),
                exec_step("read line; echo got:$line", "c2", tty=interactive,
                          yield_time_ms=500),
                *([write_stdin_to_last("hello\n", "c3")] if interactive else []),
                [assistant_message("done")],
            ])
            monkeypatch.chdir(tmp_path)
            agent = SandboxAgent(name="worker", model=model,
                                 instructions="work in the workspace",
                                 default_manifest=_manifest(tmp_path))
            result = await Runner.run(agent, "go", run_config=RunConfig(
                sandbox=SandboxRunConfig(client=client), tracing_disabled=True))
        first, *rest = _outputs(result)
        assert "Process exited with code 0" in first
        assert "seed\ninner\nfrom a local file\nfrom a local dir\nwritten" in first
        tools = {tool.name for tool in model.calls[0].tools}
        if interactive:  # on a terminal, typed into by the model's next turn
            started, typed = rest
            assert "Process running with session ID" in started
            assert "got:hello" in typed
            assert "Process exited with code 0" in typed
            assert "write_stdin" in tools
        else:  # one-shot, its stdin empty; the model gets no tool to type with
            [ran] = rest
            assert "got:\n" in ran
            assert "Process exited with code 0" in ran
            assert "write_stdin" not in tools
        assert result.final_output == "done"
        assert model.remaining_steps == 0
        session_hex = _session_hex(model)
        assert await _live(provider, options, session_hex) == []


async def _has_terminals(provider: str, options: dict[str, Any]) -> bool:
    async with open_provider(provider, **options) as p:
        return p.supports(Capability.TERMINAL_PTY)


def _session_hex(model: ScriptedModel) -> str:
    """The session id the client tagged the run's sandbox with (in the instructions the
    runner gave the model, the workspace's description holds no id: ask the first call's
    tools' session instead)."""
    call = model.first_call
    assert call is not None
    for tool in call.tools:
        session = getattr(tool, "session", None)
        inner = session._inner if isinstance(session, SandboxSession) else session
        if isinstance(inner, ProviderSandboxSession):
            return inner.state.session_id.hex
    raise AssertionError("no sandbox tool in the model's first call")


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_session_surface_works_on_the_provider(
        provider: str, tmp_path: Path, daytona_emulator: Any) -> None:
    """Patches, the Agents SDK's path rules (lexical and through links), archives,
    exposed ports, and the workspace persisted from one sandbox and hydrated into
    another, by a provider snapshot and by an archive."""
    with provider_setup(provider, tmp_path) as (options, _env):
        async with ProviderSandboxClient(provider, provider_options=options) as client:
            made = await client.create(manifest=Manifest(entries={
                "seed.txt": File(content=b"seed\n")}),
                options=ProviderSandboxClientOptions(exposed_ports=(8321,)))
            async with made as session:
                await _check_patch(session)
                await _check_escapes(session)
                await _check_archives(session)
                await _check_ports(session)
                archived = await _persisted(client, session, "archive")
                snapshotted = await _persisted(client, session, "auto")
                inner = made._inner
                assert isinstance(inner, ProviderSandboxSession)
                # auto: a provider snapshot where there are some, else an archive
                has_snapshots = inner.sandbox.provider.supports(Capability.SNAPSHOT_FILESYSTEM)
                assert (decode_ref(snapshotted) is not None) == has_snapshots
                assert decode_ref(archived) is None
                assert tarfile.is_tarfile(io.BytesIO(archived))
            await client.delete(made)
            for image in (archived, snapshotted):
                await _check_hydrated(client, image)
            ref = decode_ref(snapshotted)
            if ref is not None:  # a provider snapshot outlives the run: its owner deletes it
                await inner.sandbox.provider.delete_snapshot(ref.snapshot_id)


async def _check_patch(session: SandboxSession) -> None:
    await session.apply_patch({"type": "create_file", "path": "notes/plan.md",
                               "diff": "+first\n+second\n"})
    await session.apply_patch({"type": "update_file", "path": "notes/plan.md",
                               "diff": "@@\n first\n-second\n+changed\n"})
    assert (await session.read(Path("notes/plan.md"))).read() == b"first\nchanged"


async def _check_escapes(session: SandboxSession) -> None:
    with pytest.raises(InvalidManifestPathError):
        await session.read(Path("../../etc/hostname"))
    with pytest.raises(InvalidManifestPathError):
        await session.write(Path("/etc/owned"), io.BytesIO(b"x"))
    linked = await session.exec("ln -s /etc outside")
    assert linked.ok(), linked.stderr
    with pytest.raises(InvalidManifestPathError):
        await session.read(Path("outside/hostname"))
    with pytest.raises(InvalidManifestPathError):
        await session.write(Path("outside/owned"), io.BytesIO(b"x"))
    with pytest.raises(WorkspaceReadNotFoundError):
        await session.read(Path("missing.txt"))
    # The path checker the session installed is removed from the sandbox: the next
    # file call installs it again, and still checks.
    helper = str(RESOLVE_WORKSPACE_PATH_HELPER.install_path)
    assert (await session.exec("rm", "-f", helper, shell=False)).ok()
    assert (await session.read(Path("seed.txt"))).read() == b"seed\n"
    with pytest.raises(InvalidManifestPathError):
        await session.read(Path("outside/hostname"))
    # A link out would make the workspace's archive unsafe (and the Agents SDK's rules
    # refuse to remove it through the session, as they resolve it).
    assert (await session.exec("rm outside")).ok()


def _tar(members: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


async def _check_archives(session: SandboxSession) -> None:
    await session.extract("bundle.tar", _tar({"pkg/a.txt": b"A", "pkg/deep/b.txt": b"B"}))
    assert (await session.read(Path("pkg/deep/b.txt"))).read() == b"B"
    with pytest.raises(WorkspaceArchiveWriteError):
        await session.extract("evil.tar", _tar({"../evil.txt": b"E"}))
    probe = await session.exec("test -e ../evil.txt")
    assert probe.exit_code == 1


# Whether an Agents SDK endpoint (host, port, query) opens the provider's exposed port:
# local and docker put the token in the URL's query; E2B's goes in a header, Daytona's
# URL has a path, and Cube has no exposed ports.
OPENS_PORTS = {"local": True, "docker": True, "e2b": False, "cube": False, "daytona": False}


async def _check_ports(session: SandboxSession) -> None:
    with pytest.raises(ExposedPortUnavailableError):
        await session.resolve_exposed_port(9999)  # not among the options' exposed_ports
    inner = session._inner
    assert isinstance(inner, ProviderSandboxSession)
    if not OPENS_PORTS[inner.state.provider]:
        with pytest.raises(ExposedPortUnavailableError):
            await session.resolve_exposed_port(8321)
        return
    endpoint = await session.resolve_exposed_port(8321)
    url = endpoint.url_for("http")
    async with httpx.AsyncClient(timeout=10) as http:  # the token alone, nothing serving
        unserved = await http.get(url)
    async with httpx.AsyncClient(timeout=10) as http:
        bare = await http.get(url.split("?")[0])
    assert unserved.status_code == 502  # let through to the sandbox, where nothing answers
    assert bare.status_code in (401, 403)  # the token is in the endpoint's query
    if not (await session.exec("command -v python3")).ok():
        return  # the template has no server to run (the Docker provider's base image)
    server = await inner.sandbox.start(
        ["python3", "-m", "http.server", "8321", "--bind", "127.0.0.1"],
        cwd=inner.state.manifest.root, stdin=False)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            with anyio.fail_after(30):  # the server takes a moment to listen
                answer = await http.get(url)
                while answer.status_code != 200:
                    await anyio.sleep(0.2)
                    answer = await http.get(url)
    finally:
        await server.kill()
    assert "seed.txt" in answer.text  # the listing of the workspace the server runs in


async def _persisted(client: ProviderSandboxClient, session: SandboxSession,
                     mode: str) -> bytes:
    inner = session._inner
    assert isinstance(inner, ProviderSandboxSession)
    inner.state.workspace_persistence = mode  # type: ignore[assignment]
    return bytes((await session.persist_workspace()).read())


async def _check_hydrated(client: ProviderSandboxClient, image: bytes) -> None:
    made = await client.create(manifest=Manifest())
    async with made as session:
        await session.hydrate_workspace(io.BytesIO(image))
        assert (await session.read(Path("notes/plan.md"))).read() == b"first\nchanged"
        assert (await session.read(Path("pkg/a.txt"))).read() == b"A"
        assert (await session.exec("cat seed.txt")).stdout == b"seed\n"
    await client.delete(made)


async def test_a_cloud_mount_is_refused_before_a_sandbox_is_made(tmp_path: Path) -> None:
    """The client mounts no cloud storage: a manifest with a mount is refused, clearly."""
    client = ProviderSandboxClient("local", provider_options={"home": str(tmp_path)})
    mount = S3Mount(bucket="data",
                    mount_strategy=InContainerMountStrategy(pattern=RcloneMountPattern()))
    manifest = Manifest(entries={"bucket": mount})

    async def create_and_clean_up() -> None:
        made = await client.create(manifest=manifest)
        await client.delete(made)  # reached only if the refusal is gone: nothing left behind

    with pytest.raises(MountConfigError, match="does not mount cloud storage"):
        await create_and_clean_up()
    await client.aclose()


async def test_a_hostile_workspace_archive_is_refused(tmp_path: Path) -> None:
    """``hydrate_workspace`` refuses an archive that climbs out of the workspace, and
    writes nothing."""
    with provider_setup("local", tmp_path) as (options, _env):
        async with ProviderSandboxClient("local", provider_options=options) as client:
            made = await client.create()
            async with made as session:
                with pytest.raises(WorkspaceArchiveWriteError):
                    await session.hydrate_workspace(_tar({"ok.txt": b"1", "../up.txt": b"2"}))
                listing = await session.exec("ls -A . ..")
                assert b"ok.txt" not in listing.stdout
                assert b"up.txt" not in listing.stdout
            await client.delete(made)


async def test_an_owners_runs_share_the_resident_sandbox_of_a_manager(
        tmp_path: Path) -> None:
    """With a ``SandboxManager`` and an owner, each run works in the owner's resident
    sandbox, which outlives the runs: what one run wrote, the next finds."""
    require_bwrap()
    async with open_provider("local", home=str(tmp_path)) as provider, \
            SandboxManager(provider, MemoryStore()) as manager:
        client = ProviderSandboxClient(manager, owner="alice")
        for step, cmd in enumerate(["echo one >> log.txt", "echo two >> log.txt; cat log.txt"]):
            model = ScriptedModel([exec_step(cmd, f"c{step}"), [assistant_message("ok")]])
            agent = SandboxAgent(name="resident", model=model, instructions="log")
            result = await Runner.run(agent, "go", run_config=RunConfig(
                sandbox=SandboxRunConfig(client=client), tracing_disabled=True))
        assert "one\ntwo" in _outputs(result)[-1]
        made = await client.create()
        snapshot = await (await manager.acquire("alice")).snapshot()
        async with made as session:  # a provider snapshot would replace the owner's sandbox
            with pytest.raises(WorkspaceArchiveWriteError):
                await session.hydrate_workspace(
                    io.BytesIO(encode_ref(SnapshotRef("local", snapshot.id))))
        await provider.delete_snapshot(snapshot.id)
        resident = await manager.acquire("alice")
        assert resident.info.state == SandboxState.RUNNING
        await manager.release("alice")
    with pytest.raises(ConfigError):
        ProviderSandboxClient(manager)  # a manager needs an owner


def test_the_environment_never_shows_in_a_repr() -> None:
    """Values of ``env`` (tokens, say) stay out of the options' and the state's reprs."""
    options = ProviderSandboxClientOptions(env={"TOKEN": "s3cret-value"})
    state = ProviderSandboxSessionState(provider="local", sandbox_id="x", env=options.env,
                                        manifest=Manifest(), snapshot=NoopSnapshot(id="x"))
    assert "s3cret-value" not in repr(options)
    assert "s3cret-value" not in repr(state)
