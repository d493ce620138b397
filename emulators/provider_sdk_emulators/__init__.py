"""The project's emulators: local servers that speak E2B's, CubeSandbox's and Daytona's
wire protocols on 127.0.0.1, each sandbox a sandbox of a neutral provider of the core
(``local`` by default), so the vendors' unmodified SDKs, and the providers built on them,
run offline.

- :mod:`provider_sdk_emulators.e2b`: the E2B and CubeSandbox flavors (entry points
  ``e2b``, ``cube``).
- :mod:`provider_sdk_emulators.daytona`: Daytona (entry point ``daytona``).
- :mod:`provider_sdk_emulators.kit`: what both are built on (HTTP, WebSockets, routing,
  faults, bodies).

They are found through the core's entry-point group ``provider_sdk.emulators``
(:mod:`provider_sdk.emulators`) and run with ``psdk emulate NAME``. Nothing here is
imported by the core or by a provider: a provider talks to its emulator as to the real
service, through the vendor's SDK.
"""
