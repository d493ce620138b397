"""The emulator kit: what every vendor emulator is built on, written once.

- :mod:`~provider_sdk_emulators.kit.http`: a small HTTP/1.1 server on anyio and h11
  (bounded, decoded request bodies; streamed responses; the WebSocket handshake).
- :mod:`~provider_sdk_emulators.kit.websocket`: WebSocket framing for a handler that
  took its request over.
- :mod:`~provider_sdk_emulators.kit.routing`: a table of routes with path parameters.
- :mod:`~provider_sdk_emulators.kit.service`: the API-key check, the latency fault and the
  admin API (``/_emulator/faults``).
- :mod:`~provider_sdk_emulators.kit.multipart`: a streaming ``multipart/form-data`` reader.
- :mod:`~provider_sdk_emulators.kit.bodies`: request bodies decoded, and bounded as they
  inflate.
- :mod:`~provider_sdk_emulators.kit.faults`: the faults an emulator injects, and what it
  served.
- :mod:`~provider_sdk_emulators.kit.port_relay`: the relay to a server listening in one
  of the backend's sandboxes.
- :mod:`~provider_sdk_emulators.kit.kernel`: a code-interpreter kernel in a sandbox.
- :mod:`~provider_sdk_emulators.kit.usage`: resource use as the vendors' daemons report it.

What an emulator is, and how one is found and run, is :mod:`provider_sdk.emulators` in
the core. The kit knows nothing of any vendor.
"""
