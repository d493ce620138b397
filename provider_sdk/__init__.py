"""provider-sdk: one neutral, async-first interface to code-execution sandboxes.

Business code needs one call, :func:`open_provider`, and the types below; which backend
runs the sandboxes is configuration (``PSDK_PROVIDER``, ``psdk.toml``, or a keyword)::

    from provider_sdk import open_provider

    async with open_provider() as provider:
        async with provider.create(metadata={"owner": "alice"}) as sandbox:
            result = await sandbox.exec("echo hello")
            print(result.stdout)
"""

from typing import TYPE_CHECKING

from provider_sdk.lazy import lazy_exports

if TYPE_CHECKING:
    from provider_sdk.capabilities import Capability
    from provider_sdk.commands import Command, ProcessEvent, ProcessExit, ProcessOutput
    from provider_sdk.config import Secret, open_provider
    from provider_sdk.errors import (
        AuthenticationError,
        CodeTimeout,
        CommandTimeout,
        ConfigError,
        Conflict,
        ContextNotFound,
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
        UnsafeArchive,
        UnsupportedCapability,
        VolumeNotFound,
    )
    from provider_sdk.interpreter import CodeContext, CodeError, CodeResult
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
    from provider_sdk.provider import SandboxProvider
    from provider_sdk.registry import register
    from provider_sdk.sandbox import EmulatedShell, Files, Process, Sandbox, Shell

# Names are imported when first used, so `import provider_sdk.cli` (psdk --help) stays fast.
_EXPORTS: dict[str, str] = {
    "AuthenticationError": "provider_sdk.errors",
    "Capability": "provider_sdk.capabilities",
    "CodeContext": "provider_sdk.interpreter",
    "CodeError": "provider_sdk.interpreter",
    "CodeResult": "provider_sdk.interpreter",
    "CodeTimeout": "provider_sdk.errors",
    "Command": "provider_sdk.commands",
    "CommandTimeout": "provider_sdk.errors",
    "ConfigError": "provider_sdk.errors",
    "Conflict": "provider_sdk.errors",
    "ContextNotFound": "provider_sdk.errors",
    "EmulatedShell": "provider_sdk.sandbox",
    "ExecResult": "provider_sdk.models",
    "ExposedPort": "provider_sdk.models",
    "FileExists": "provider_sdk.errors",
    "FileInfo": "provider_sdk.models",
    "FileNotFound": "provider_sdk.errors",
    "FileTooLarge": "provider_sdk.errors",
    "FileType": "provider_sdk.models",
    "Files": "provider_sdk.sandbox",
    "InvalidInput": "provider_sdk.errors",
    "IsADirectory": "provider_sdk.errors",
    "Lifecycle": "provider_sdk.models",
    "Metrics": "provider_sdk.models",
    "NetworkPolicy": "provider_sdk.models",
    "NotADirectory": "provider_sdk.errors",
    "NotARegularFile": "provider_sdk.errors",
    "NotFound": "provider_sdk.errors",
    "OperationTimeout": "provider_sdk.errors",
    "PermissionDenied": "provider_sdk.errors",
    "Process": "provider_sdk.sandbox",
    "ProcessEvent": "provider_sdk.commands",
    "ProcessExit": "provider_sdk.commands",
    "ProcessNotFound": "provider_sdk.errors",
    "ProcessOutput": "provider_sdk.commands",
    "ProviderNotFound": "provider_sdk.errors",
    "QuotaExceeded": "provider_sdk.errors",
    "RateLimited": "provider_sdk.errors",
    "Resources": "provider_sdk.models",
    "Sandbox": "provider_sdk.sandbox",
    "SandboxError": "provider_sdk.errors",
    "SandboxInfo": "provider_sdk.models",
    "SandboxNotFound": "provider_sdk.errors",
    "SandboxNotRunning": "provider_sdk.errors",
    "SandboxProvider": "provider_sdk.provider",
    "SandboxSpec": "provider_sdk.models",
    "SandboxState": "provider_sdk.models",
    "Secret": "provider_sdk.config",
    "Shell": "provider_sdk.sandbox",
    "Snapshot": "provider_sdk.models",
    "SnapshotNotFound": "provider_sdk.errors",
    "Template": "provider_sdk.models",
    "TemplateBuildError": "provider_sdk.errors",
    "TemplateNotFound": "provider_sdk.errors",
    "TemplateSpec": "provider_sdk.models",
    "Unavailable": "provider_sdk.errors",
    "UnsafeArchive": "provider_sdk.errors",
    "UnsupportedCapability": "provider_sdk.errors",
    "Volume": "provider_sdk.models",
    "VolumeMount": "provider_sdk.models",
    "VolumeNotFound": "provider_sdk.errors",
    "open_provider": "provider_sdk.config",
    "register": "provider_sdk.registry",
}

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "Capability",
    "CodeContext",
    "CodeError",
    "CodeResult",
    "CodeTimeout",
    "Command",
    "CommandTimeout",
    "ConfigError",
    "Conflict",
    "ContextNotFound",
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
    "UnsafeArchive",
    "UnsupportedCapability",
    "Volume",
    "VolumeMount",
    "VolumeNotFound",
    "__version__",
    "open_provider",
    "register",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
