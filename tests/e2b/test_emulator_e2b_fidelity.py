"""The emulator's E2B flavor behaves as E2B's API and envd do where a client can tell:
each test drives the unmodified ``e2b`` SDK and checks one behaviour of the real
service."""

from __future__ import annotations

import datetime as dt

from e2b import Sandbox, SandboxQuery

from provider_sdk.emulators import RunningEmulator


def _ids(query: SandboxQuery | None = None, **options: object) -> list[str]:
    paginator = Sandbox.list(query=query, **options)  # type: ignore[arg-type]
    found: list[str] = []
    while paginator.has_next:
        found += [s.sandbox_id for s in paginator.next_items()]
    return found


def test_list_pages_newest_first_by_default(e2b_emulator: RunningEmulator) -> None:
    first = Sandbox.create(metadata={"fidelity": "order"})
    second = Sandbox.create(metadata={"fidelity": "order"})
    try:
        query = SandboxQuery(metadata={"fidelity": "order"})
        assert _ids(query) == [second.sandbox_id, first.sandbox_id]
        assert _ids(query, limit=1) == [second.sandbox_id, first.sandbox_id]
        assert _ids(query, order="asc") == [first.sandbox_id, second.sandbox_id]
    finally:
        first.kill()
        second.kill()


def test_started_after_includes_a_sandbox_started_at_that_instant(
        e2b_emulator: RunningEmulator) -> None:
    # The API's startedAfter is "at or after": a sandbox's own startedAt finds it.
    sandbox = Sandbox.create()
    try:
        started = Sandbox.get_info(sandbox.sandbox_id).started_at
        assert _ids(SandboxQuery(started_after=started)) == [sandbox.sandbox_id]
        later = started + dt.timedelta(microseconds=1)
        assert _ids(SandboxQuery(started_after=later)) == []
    finally:
        sandbox.kill()
