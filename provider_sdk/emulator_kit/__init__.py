"""The emulator kit: what every vendor emulator is built on, written once.

- :mod:`~provider_sdk.emulator_kit.http`: a small HTTP/1.1 server on anyio and h11
  (bounded, decoded request bodies; streamed responses; the WebSocket handshake).
- :mod:`~provider_sdk.emulator_kit.websocket`: WebSocket framing for a handler that
  took its request over.
- :mod:`~provider_sdk.emulator_kit.routing`: a table of routes with path parameters.
- :mod:`~provider_sdk.emulator_kit.service`: the API-key check, the latency fault and the
  admin API (``/_emulator/faults``).
- :mod:`~provider_sdk.emulator_kit.multipart`: a streaming ``multipart/form-data`` reader.

What an emulator is, and how one is found and run, is :mod:`provider_sdk.emulators`;
faults are :class:`provider_sdk.emulators.Faults`. The kit knows nothing of any vendor.
"""
