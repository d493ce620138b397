"""The module Inspect's ``inspect_ai`` entry point loads: importing the environment
registers it as ``psdk``."""

from provider_sdk_inspect.environment import PsdkSandboxEnvironment

__all__ = ["PsdkSandboxEnvironment"]
