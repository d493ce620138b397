"""``ProviderContract``: the whole suite in one class a provider's tests subclass;
``EventLoopContract``: the sections that lean on the event loop, for a run on a second
loop."""

from __future__ import annotations

import pytest

from provider_sdk_contract.code_interpreter import CodeInterpreterContract
from provider_sdk_contract.commands import ExecContract
from provider_sdk_contract.directories import DirectoryContract
from provider_sdk_contract.files import FilesContract
from provider_sdk_contract.hostile_archives import HostileArchiveContract
from provider_sdk_contract.hostile_code import HostileCodeContract
from provider_sdk_contract.hostile_escapes import HostileEscapeContract
from provider_sdk_contract.hostile_host import HostileHostContract
from provider_sdk_contract.hostile_limits import HostileLimitContract
from provider_sdk_contract.hostile_output import HostileOutputContract
from provider_sdk_contract.hostile_port_clients import HostilePortClientsContract
from provider_sdk_contract.hostile_ports import HostilePortsContract
from provider_sdk_contract.hostile_seal import HostileSealContract
from provider_sdk_contract.idle import IdleContract
from provider_sdk_contract.isolation import IsolationContract
from provider_sdk_contract.lifecycle import LifecycleContract
from provider_sdk_contract.listing import ListingContract
from provider_sdk_contract.metadata import MetadataContract
from provider_sdk_contract.metrics import MetricsContract
from provider_sdk_contract.network import NetworkContract
from provider_sdk_contract.network_update import NetworkUpdateContract
from provider_sdk_contract.pause import PauseContract
from provider_sdk_contract.portable import PortableContract
from provider_sdk_contract.ports import PortsContract
from provider_sdk_contract.processes import ProcessContract
from provider_sdk_contract.rollback import RollbackContract
from provider_sdk_contract.scale import ScaleContract
from provider_sdk_contract.shell import ShellContract
from provider_sdk_contract.snapshots import SnapshotContract
from provider_sdk_contract.templates import TemplateContract
from provider_sdk_contract.terminals import TerminalContract
from provider_sdk_contract.unsupported import UnsupportedContract
from provider_sdk_contract.users import UserContract
from provider_sdk_contract.volumes import VolumeContract

__all__ = ["EventLoopContract", "ProviderContract"]


class ProviderContract(
    # pytest runs the tests of the last base first. Files go first: the 256 MiB
    # transfer measures this process's memory before other tests raise its peak. The
    # hostile section runs last: its fork bomb and floods load the machine most.
    HostileLimitContract,
    HostileHostContract,
    HostileSealContract,
    HostileEscapeContract,
    HostileOutputContract,
    HostileArchiveContract,
    HostileCodeContract,
    HostilePortClientsContract,
    HostilePortsContract,
    ScaleContract,
    TemplateContract,
    UnsupportedContract,
    MetricsContract,
    IsolationContract,
    PortsContract,
    NetworkUpdateContract,
    NetworkContract,
    VolumeContract,
    RollbackContract,
    SnapshotContract,
    IdleContract,
    PauseContract,
    CodeInterpreterContract,
    TerminalContract,
    ShellContract,
    ProcessContract,
    UserContract,
    PortableContract,
    ExecContract,
    MetadataContract,
    ListingContract,
    LifecycleContract,
    DirectoryContract,
    FilesContract,
):
    """Every contract test. Subclass it as ``Test<Provider>Contract`` and set
    ``provider_name`` (and ``known_failures``, ``provider_options()`` as needed)."""

    pytestmark = pytest.mark.anyio


class EventLoopContract(
    HostileEscapeContract,
    HostileOutputContract,
    PortsContract,
    CodeInterpreterContract,
    TerminalContract,
    ShellContract,
    ProcessContract,
    ExecContract,
):
    """The sections whose tests lean on the event loop most: timeouts and cancellation,
    streamed output and stdin, output floods, background processes, sessions, the code
    interpreter's kernels, and exposing ports. For a second run on another loop
    (``async_backend = "trio"``) where the whole suite would cost too much; subclass it
    as :class:`ProviderContract`.
    The servers and clients that attack an exposed port are left out: a port proxy
    serves them from a loop of its own whatever the caller's, so a second caller's loop
    tries nothing new there."""

    pytestmark = pytest.mark.anyio
