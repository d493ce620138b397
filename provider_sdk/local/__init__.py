"""The embedded local provider (entry point ``local``): sandboxes on this machine,
isolated with bubblewrap, that outlive the process that made them."""

from provider_sdk.local.provider import BrokenRecordWarning, LocalProvider, UnisolatedWarning

__all__ = ["BrokenRecordWarning", "LocalProvider", "UnisolatedWarning"]
