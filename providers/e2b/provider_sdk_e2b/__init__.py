"""E2B and CubeSandbox for provider-sdk.

``provider_sdk_e2b.provider.E2BProvider`` (entry point ``e2b``) and
``provider_sdk_e2b.cube.CubeProvider`` (entry point ``cube``) talk to the services
through the ``e2b`` SDK; :mod:`provider_sdk_e2b.emulator` serves both wire protocols on
127.0.0.1, backed by a neutral provider, for offline tests.
"""
