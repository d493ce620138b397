"""A provider made of roles (``provider_sdk.roles``): each capability's calls go to the
role part that makes them, a role's parts must match what its class declares, and the
files API runs on the commands where a provider writes no files role."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

import pytest
from engines import require_bwrap

from provider_sdk import open_provider, registry
from provider_sdk.capabilities import Capability
from provider_sdk.command_files import CommandFiles
from provider_sdk.errors import Conflict, ProviderNotFound, UnsupportedCapability
from provider_sdk.models import SandboxInfo
from provider_sdk.provider import SandboxProvider

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def minimal() -> type[SandboxProvider]:
    """The guide's minimal provider class, importable as ``minimal_provider``."""
    require_bwrap()
    from minimal_provider import MinimalProvider

    return MinimalProvider


class _Pausing:
    """A control plane's pause part, for the checks below (never to be called)."""

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        raise AssertionError(sandbox_id)

    async def resume(self, sandbox_id: str) -> SandboxInfo:
        raise AssertionError(sandbox_id)


def _control_with_pausing(minimal: type[SandboxProvider], home: Path) -> object:
    from minimal_provider import Directories

    class Pausable(Directories, _Pausing):
        pass

    return Pausable(home)


def test_a_declared_capability_needs_its_part(minimal: type[SandboxProvider],
                                              tmp_path: Path) -> None:
    """A class that declares ``pause`` whose control plane cannot pause is refused when
    made, naming the capability and the part."""
    class Declares(minimal):  # type: ignore[misc,valid-type]
        capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.PAUSE})

    with pytest.raises(TypeError, match="pause is declared, but its control role has no "
                                        "Pausing part"):
        Declares(home=tmp_path)


async def test_a_part_whose_capability_is_not_declared_is_never_reached(
        minimal: type[SandboxProvider], tmp_path: Path) -> None:
    """A control plane that can pause, in a class that does not declare ``pause``, is
    accepted (one role may serve variants that declare less), and a pause is refused by
    the base before the role sees it (its pause would fail the test)."""
    from minimal_provider import Nsenter

    class WithPausing(minimal):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            control = _control_with_pausing(minimal, tmp_path)
            SandboxProvider.__init__(self, control=control,  # type: ignore[arg-type]
                                     commands=Nsenter(control))  # type: ignore[arg-type]

    provider = WithPausing()
    async with provider, provider.create() as sandbox:
        with pytest.raises(UnsupportedCapability, match="pause"):
            await sandbox.pause()


async def test_a_provider_without_a_files_role_gets_files_over_its_commands(
        minimal: type[SandboxProvider], tmp_path: Path) -> None:
    """The minimal provider writes no files role: the core's runs on its commands, and
    a call it does not declare is refused by the base before any role sees it."""
    provider = minimal(home=tmp_path)
    assert isinstance(provider._composed().files, CommandFiles)
    async with provider, provider.create() as sandbox:
        await sandbox.files.write("notes/a.txt", b"over commands\n")
        assert (await sandbox.exec(["cat", "notes/a.txt"])).stdout == "over commands\n"
        with pytest.raises(UnsupportedCapability, match="pause"):
            await sandbox.pause()


async def test_a_provider_is_found_by_where_it_is_importable(
        minimal: type[SandboxProvider], tmp_path: Path) -> None:
    """``module:Class`` names a provider that is not packaged (yet); a name that is not
    importable says so, listing what is installed."""
    async with open_provider("minimal_provider:MinimalProvider", home=str(tmp_path)) as found:
        assert type(found) is minimal
    with pytest.raises(ProviderNotFound):
        registry.load("no_such_module_anywhere:Nothing")


def test_roles_report_every_mismatch_at_once(minimal: type[SandboxProvider],
                                             tmp_path: Path) -> None:
    """``Roles.problems`` lists every declared capability whose part is missing, and
    nothing for a part whose capability is not declared."""
    from minimal_provider import Nsenter

    from provider_sdk.roles import Roles

    control = _control_with_pausing(minimal, tmp_path)
    commands = Nsenter(control)  # type: ignore[arg-type]
    roles = Roles(control=control, commands=commands,  # type: ignore[arg-type]
                  files=CommandFiles(commands, provider="minimal"))
    problems = roles.problems(frozenset({Capability.VOLUMES, Capability.METRICS}))
    assert sorted(problems) == [
        "metrics is declared, but its control role has no MetricsReader part",
        "volumes is declared, but its control role has no Volumes part"], problems



class _Recorded(_Pausing):
    """A pause part of its own, which records the calls it gets."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def pause(self, sandbox_id: str) -> SandboxInfo:
        self.calls.append(sandbox_id)
        raise Conflict("recorded", provider="minimal", sandbox_id=sandbox_id)


async def test_a_part_object_of_its_own_makes_its_capabilitys_calls(
        minimal: type[SandboxProvider], tmp_path: Path) -> None:
    """An object handed to the base in ``parts`` makes the calls of the capability
    whose part it has, in place of the role (whose own part would fail the test); it
    satisfies the class's declaration, which the role alone does not."""
    from minimal_provider import Directories, Nsenter

    part = _Recorded()

    class Declares(minimal):  # type: ignore[misc,valid-type]
        capabilities: ClassVar[frozenset[Capability]] = frozenset(
            {*minimal.capabilities, Capability.PAUSE})

        def __init__(self, *, parts: tuple[object, ...]) -> None:
            control = _control_with_pausing(minimal, tmp_path)
            SandboxProvider.__init__(self, control=control,  # type: ignore[arg-type]
                                     commands=Nsenter(control),  # type: ignore[arg-type]
                                     parts=parts)

    provider = Declares(parts=(part,))
    async with provider, provider.create() as sandbox:
        with pytest.raises(Conflict, match="recorded"):
            await sandbox.pause()
    assert part.calls == [sandbox.id]

    class Plain(minimal):  # type: ignore[misc,valid-type]
        capabilities: ClassVar[frozenset[Capability]] = frozenset(
            {*minimal.capabilities, Capability.PAUSE})

        def __init__(self, *, parts: tuple[object, ...]) -> None:
            control = Directories(tmp_path)
            SandboxProvider.__init__(self, control=control,  # type: ignore[arg-type]
                                     commands=Nsenter(control),  # type: ignore[arg-type]
                                     parts=parts)

    with pytest.raises(TypeError, match="pause is declared"):
        Plain(parts=())
    Plain(parts=(part,))  # the part object makes up for the role
