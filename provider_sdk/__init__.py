"""provider-sdk: one neutral, async-first interface to code-execution sandboxes.

Business code needs one call, :func:`open_provider`, and the types below; which backend
runs the sandboxes is configuration (``PSDK_PROVIDER``, ``psdk.toml``, or a keyword)::

    from provider_sdk import open_provider

    async with open_provider() as provider:
        async with provider.create(metadata={"owner": "alice"}) as sandbox:
            result = await sandbox.exec("echo hello")
            print(result.stdout)
"""

from provider_sdk.capabilities import Capability
from provider_sdk.config import Secret, open_provider
from provider_sdk.errors import (
    AuthenticationError,
    CommandTimeout,
    ConfigError,
    Conflict,
    FileExists,
    FileNotFound,
    FileTooLarge,
    InvalidInput,
    IsADirectory,
    NotADirectory,
    NotARegularFile,
    NotFound,
    OperationTimeout,
    PermissionDenied,
    ProcessNotFound,
    ProviderNotFound,
    QuotaExceeded,
    RateLimited,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    SnapshotNotFound,
    TemplateBuildError,
    TemplateNotFound,
    Unavailable,
    UnsupportedCapability,
    VolumeNotFound,
)
from provider_sdk.models import (
    ExecResult,
    ExposedPort,
    FileInfo,
    FileType,
    Lifecycle,
    Metrics,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    Snapshot,
    Template,
    TemplateSpec,
    Volume,
    VolumeMount,
)
from provider_sdk.provider import Command, ProcessEvent, ProcessExit, ProcessOutput, SandboxProvider
from provider_sdk.registry import register
from provider_sdk.sandbox import EmulatedShell, Files, Process, Sandbox, Shell

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "Capability",
    "Command",
    "CommandTimeout",
    "ConfigError",
    "Conflict",
    "EmulatedShell",
    "ExecResult",
    "ExposedPort",
    "FileExists",
    "FileInfo",
    "FileNotFound",
    "FileTooLarge",
    "FileType",
    "Files",
    "InvalidInput",
    "IsADirectory",
    "Lifecycle",
    "Metrics",
    "NetworkPolicy",
    "NotADirectory",
    "NotARegularFile",
    "NotFound",
    "OperationTimeout",
    "PermissionDenied",
    "Process",
    "ProcessEvent",
    "ProcessExit",
    "ProcessNotFound",
    "ProcessOutput",
    "ProviderNotFound",
    "QuotaExceeded",
    "RateLimited",
    "Resources",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "SandboxNotFound",
    "SandboxNotRunning",
    "SandboxProvider",
    "SandboxSpec",
    "SandboxState",
    "Secret",
    "Shell",
    "Snapshot",
    "SnapshotNotFound",
    "Template",
    "TemplateBuildError",
    "TemplateNotFound",
    "TemplateSpec",
    "Unavailable",
    "UnsupportedCapability",
    "Volume",
    "VolumeMount",
    "VolumeNotFound",
    "__version__",
    "open_provider",
    "register",
]
