"""Reading a request head from a client nobody has checked yet, for the relays to a
sandbox's port (the port proxy of local and docker, an emulator's preview proxy).

Anyone on this machine can connect to a relay, and a connection that has not shown a
credential costs the relay a task, a socket and the bytes of its head so far. So the
head is bounded: at most :data:`MAX_HEAD` bytes, whatever the pieces it comes in (no
more is read than that bound allows, so a larger head is never taken whole and then
found complete), within :data:`HEAD_TIMEOUT` seconds. Until it shows a credential, a
connection waits in a :class:`Gate`: at most :data:`TOKEN_TIMEOUT` seconds, and
at most :data:`MAX_WAITING_PER_CLIENT` of one client address and :data:`MAX_WAITING`
in all wait at once. Every client of a relay on 127.0.0.1 comes from a loopback address,
most from 127.0.0.1 itself, so a crowd of connections that never show a token shares
an address with those that do: a new connection is never turned away for the crowd;
it takes the place of the oldest waiting one of its address (of all, once the gate is
full), which is answered ``503`` and closed. A client that sends its head as it
connects, token first or in the same piece, leaves the gate before a crowd can push
it out, and from then on nothing unauthenticated counts against it.

This module knows no token and no vendor: a relay says which lines of a head show a
credential (``shows_credential``), compared as it likes.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import anyio
import anyio.abc
import attrs

__all__ = ["HEAD_TIMEOUT", "MAX_HEAD", "MAX_WAITING", "MAX_WAITING_PER_CLIENT",
           "TOKEN_TIMEOUT", "Gate", "HeadRefused", "Ticket", "client_address", "read_head"]

MAX_HEAD = 32 * 1024
"""Bytes of a request head (without its final blank line) a relay takes; past them the
request is refused with ``431``."""
HEAD_TIMEOUT = 15.0
"""Seconds a client has to send its whole request head (``408`` after)."""
TOKEN_TIMEOUT = 5.0
"""Seconds a client has to show its credential in the head (``408`` after)."""
MAX_WAITING = 256
"""Connections of one gate waiting to show a credential, at most."""
MAX_WAITING_PER_CLIENT = 64
"""Connections from one client address waiting to show a credential, at most."""


class HeadRefused(Exception):
    """The head cannot be taken: ``status`` is the answer to give (``400`` for a
    connection that ended first, ``408``, ``431``, ``503``), ``reason`` says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@attrs.define(eq=False)
class Ticket:
    """One connection's place in a :class:`Gate`."""

    client: str
    """The address it comes from."""
    scope: anyio.CancelScope
    """Cancelled when a newer connection takes its place."""
    evicted: bool = False
    """Whether one did."""


class Gate:
    """The connections of one relay waiting to show a credential in their head.

    Used on one event loop only (the relay's): it holds no lock.
    """

    def __init__(self, *, total: int = MAX_WAITING,
                 per_client: int = MAX_WAITING_PER_CLIENT) -> None:
        self._total = total
        self._per_client = per_client
        self._all: collections.OrderedDict[Ticket, None] = collections.OrderedDict()
        self._by_client: dict[str, collections.OrderedDict[Ticket, None]] = {}

    @property
    def waiting(self) -> int:
        """How many connections wait now."""
        return len(self._all)

    def enter(self, client: str, scope: anyio.CancelScope) -> Ticket:
        """Make a place for a connection from ``client``, whose wait ``scope`` holds:
        the oldest waiting one of ``client`` makes room when it has its share, else the
        oldest of all when the gate is full (its scope is cancelled)."""
        mine = self._by_client.get(client)
        if mine is not None and len(mine) >= self._per_client:
            self._evict(next(iter(mine)))
        elif len(self._all) >= self._total:
            self._evict(next(iter(self._all)))
        ticket = Ticket(client, scope)
        self._all[ticket] = None
        self._by_client.setdefault(client, collections.OrderedDict())[ticket] = None
        return ticket

    def _evict(self, ticket: Ticket) -> None:
        ticket.evicted = True
        ticket.scope.cancel()
        self.leave(ticket)

    def leave(self, ticket: Ticket) -> None:
        """The connection waits no more (it showed a credential, or ended); twice is
        fine."""
        if ticket not in self._all:
            return
        del self._all[ticket]
        mine = self._by_client[ticket.client]
        del mine[ticket]
        if not mine:
            del self._by_client[ticket.client]


def client_address(stream: anyio.abc.ByteStream) -> str:
    """The address a connection comes from (its IP, without the port), or ``""``."""
    remote = stream.extra(anyio.abc.SocketAttribute.remote_address, None)
    if isinstance(remote, tuple) and remote:
        return str(remote[0])
    return "" if remote is None else str(remote)


async def read_head(client: anyio.abc.ByteStream, gate: Gate, *,
                    shows_credential: Callable[[bytes, bool], bool] | None = None,
                    limit: int = MAX_HEAD) -> tuple[bytes, bytes]:
    """The request head from ``client`` (without its final blank line) and the bytes
    that came after it.

    The connection waits in ``gate`` until a complete line of its head shows a
    credential (``shows_credential(line, is_request_line)``; without it, until the head
    is complete), at most :data:`TOKEN_TIMEOUT` seconds; the whole head must come within
    :data:`HEAD_TIMEOUT` seconds and ``limit`` bytes.

    Raises:
        HeadRefused: the head is too large, late, cut short, or the connection was
            pushed out of the gate by newer ones.
    """
    start = anyio.current_time()
    data = bytearray()
    scanned = 0  # bytes of data whose complete lines were shown to shows_credential
    searched = 0  # bytes of data known to hold no end of head
    waiting = anyio.CancelScope(deadline=start + TOKEN_TIMEOUT)
    ticket: Ticket | None = gate.enter(client_address(client), waiting)
    try:
        with waiting:
            while True:
                end = data.find(b"\r\n\r\n", max(0, searched - 3))
                if end > limit or (end < 0 and len(data) >= limit + 4):
                    raise HeadRefused(431, "the request head is too large")
                if end >= 0:
                    return bytes(data[:end]), bytes(data[end + 4:])
                line_end = data.rfind(b"\r\n", max(scanned, searched - 1))
                searched = len(data)
                if ticket is not None and shows_credential is not None \
                        and line_end >= scanned:
                    lines = bytes(data[scanned:line_end]).split(b"\r\n")
                    if any(shows_credential(line, scanned == 0 and number == 0)
                           for number, line in enumerate(lines)):
                        gate.leave(ticket)  # admitted: nothing waiting counts against it
                        ticket = None
                        waiting.deadline = start + HEAD_TIMEOUT
                    scanned = line_end + 2
                try:
                    data += await client.receive(limit + 4 - len(data))
                except anyio.EndOfStream:
                    raise HeadRefused(400, "the connection ended before a complete "
                                           "request head") from None
        if ticket is not None and ticket.evicted:
            raise HeadRefused(503, "too many connections are waiting to show a credential")
        if ticket is not None and shows_credential is not None:
            raise HeadRefused(408, "no credential in the request head in time")
        raise HeadRefused(408, "no complete request head in time")
    finally:
        if ticket is not None:
            gate.leave(ticket)

