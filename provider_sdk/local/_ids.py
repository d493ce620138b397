"""Host ids of local sandboxes where the provider runs as root: a slot of its own for
each sandbox, none of them privileged.

An isolated sandbox started by root gets a *slot*, :data:`SLOT_SIZE` consecutive host
ids; its user namespace maps uids and gids ``0..65535`` onto them, so its root (the
agent) is the slot's first id and its user (uid 1000) the 1001st. No host account, no
other sandbox and not this process have any of them, so nothing the kernel lets host
root do (write ``/proc/sys``, change the host's device nodes, ...) is open to any id
inside, and per-user kernel counters (user namespaces, inotify instances, pipe
buffers) are each sandbox's own.

The slots lie in one range of host ids: the ``psdk`` entry of ``/etc/subuid`` and
``/etc/subgid`` where both have one (as rootless Podman and Docker's userns-remap
reserve theirs), else :data:`DEFAULT_START` and :data:`DEFAULT_COUNT` (above every id
systemd hands out, below the ids it keeps for itself). :func:`host_range` checks once
that no account, group or other subordinate range overlaps it. Two slots are never
handed out: the first holds the ids of files several sandboxes share (volumes, shown
to each through an idmapped mount), the last is the probe's.

Which sandbox holds which slot is recorded host-wide in :data:`REGISTRY`, one symlink
per slot to the sandbox's directory, so sandboxes of different homes and processes
never share one; a slot whose sandbox directory is gone is free again. A sandbox's
record keeps its slot, so its files (owned by its ids on the host) stay its own after
a restart. This module allocates ids and moves files between them; it starts nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import grp
import os
import pwd
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from provider_sdk.local._trees import walk

__all__ = ["DEFAULT_COUNT", "DEFAULT_START", "LEGACY_AGENT_ID", "REGISTRY", "SLOT_SIZE",
           "IdRange", "Registry", "host_range", "legacy", "rebase", "shift_tree"]

SLOT_SIZE = 65536
"""Host ids per sandbox: uids and gids ``0..65535`` inside."""
DEFAULT_START = 0x7000_0000
"""The range's first host id where ``/etc/subuid`` names none for ``psdk``."""
DEFAULT_COUNT = 0x0FFE_0000
"""The range's size by default: 4094 slots, ending below ``0x7FFE0000``."""
REGISTRY = Path("/var/lib/psdk/ids")
"""Where the slots held on this host are recorded."""
SUBORDINATE_NAME = "psdk"
"""The name whose ``/etc/subuid`` and ``/etc/subgid`` entries give the range."""
LEGACY_AGENT_ID = 2147483646
"""The host id of every sandbox's uid 0 in versions that mapped the sandbox user to the
host's root: files a sandbox made then are moved to its slot (:func:`legacy`)."""


class RangeError(OSError):
    """The range of host ids cannot be used here (it overlaps an account or another
    subordinate range, or ``/etc/subuid`` and ``/etc/subgid`` disagree)."""


@attrs.frozen
class IdRange:
    """Host ids ``start .. start + count - 1``, cut into slots of :data:`SLOT_SIZE`."""

    start: int
    count: int

    @property
    def slots(self) -> int:
        return self.count // SLOT_SIZE

    @property
    def storage(self) -> int:
        """The first id of the slot whose ids own shared files (volumes)."""
        return self.start

    @property
    def probe(self) -> int:
        """The first id of the slot a probe runs as (:func:`_users.separate_users`)."""
        return self.base(self.slots - 1)

    def base(self, slot: int) -> int:
        """The first host id of ``slot``."""
        return self.start + slot * SLOT_SIZE

    def slot(self, base: int) -> int | None:
        """The slot whose first id is ``base``, if it is one a sandbox may hold."""
        index, rest = divmod(base - self.start, SLOT_SIZE)
        return index if rest == 0 and 0 < index < self.slots - 1 else None


def _subordinate(path: Path) -> tuple[tuple[int, int] | None, list[tuple[str, int, int]]]:
    """The ``psdk`` entry of a subordinate id file, and every other entry."""
    mine: tuple[int, int] | None = None
    others: list[tuple[str, int, int]] = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None, []
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
            continue
        entry = (int(fields[1]), int(fields[2]))
        if fields[0] == SUBORDINATE_NAME:
            mine = entry
        else:
            others.append((fields[0], *entry))
    return mine, others


@functools.cache
def host_range(etc: Path = Path("/etc")) -> IdRange:
    """This host's range for sandboxes' ids, checked (``RangeError`` if unusable)."""
    uid_entry, uid_others = _subordinate(etc / "subuid")
    gid_entry, gid_others = _subordinate(etc / "subgid")
    if uid_entry != gid_entry:
        raise RangeError(f"{etc}/subuid and {etc}/subgid give {SUBORDINATE_NAME!r} different "
                         "ranges: give it the same one in both")
    start, count = uid_entry or (DEFAULT_START, DEFAULT_COUNT)
    where = (f"the range {etc}/subuid gives {SUBORDINATE_NAME!r}" if uid_entry
             else "the local provider's default range")
    if start < SLOT_SIZE or start + count > 0xFFFF_FFFF or count < 3 * SLOT_SIZE:
        raise RangeError(f"{where} ({start}, {count} ids) must lie above 65535, below "
                         f"2^32 - 1, and hold at least {3 * SLOT_SIZE} ids")
    end = start + count
    for kind, entries in (("subuid", uid_others), ("subgid", gid_others)):
        for name, other, size in entries:
            if other < end and start < other + size:
                raise RangeError(f"{where} ({start}..{end - 1}) overlaps {name!r}'s in "
                                 f"{etc}/{kind}: give {SUBORDINATE_NAME!r} a range of its own "
                                 "there")
    for name, ident in _accounts():
        if start <= ident < end:
            raise RangeError(f"{where} ({start}..{end - 1}) holds the id of host {name} "
                             f"({ident}): give {SUBORDINATE_NAME!r} another range in "
                             f"{etc}/subuid and {etc}/subgid")
    return IdRange(start, count)


def _accounts() -> list[tuple[str, int]]:
    """This host's users and groups (every source the C library reads), with their ids."""
    return [(f"user {p.pw_name!r}", p.pw_uid) for p in pwd.getpwall()] + \
        [(f"group {g.gr_name!r}", g.gr_gid) for g in grp.getgrall()]


class Registry:
    """Which sandbox holds which slot, for every process and home on this host."""

    def __init__(self, ids: IdRange, path: Path = REGISTRY) -> None:
        self.ids = ids
        self.path = path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _holder(self, slot: int) -> str | None:
        """The directory recorded for ``slot``, if that directory still exists."""
        try:
            holder = os.readlink(self.path / str(slot))
        except OSError:
            return None
        return holder if os.path.isdir(holder) else None

    def _record(self, slot: int, directory: str) -> None:
        staging = self.path / f".{slot}-{secrets.token_hex(4)}"
        os.symlink(directory, staging)
        os.replace(staging, self.path / str(slot))

    def claim(self, directory: Path, wanted: int | None = None) -> int:
        """A slot's first id for the sandbox at ``directory``: ``wanted`` (the one its
        record names) if it is free or already the sandbox's, else a free one.
        ``OSError`` (``ENOSPC``) when every slot is held."""
        mine = str(directory.absolute())
        with self._locked():
            slot = None if wanted is None else self.ids.slot(wanted)
            if slot is not None and self._holder(slot) in (None, mine):
                self._record(slot, mine)
                return wanted  # type: ignore[return-value]
            first = 1 + secrets.randbelow(self.ids.slots - 2)
            for offset in range(self.ids.slots - 2):
                slot = 1 + (first - 1 + offset) % (self.ids.slots - 2)
                if self._holder(slot) is None:
                    self._record(slot, mine)
                    return self.ids.base(slot)
        raise OSError(28, f"every one of the {self.ids.slots - 2} id ranges for sandboxes "
                          "on this host is held by a sandbox")

    def release(self, base: int, directory: Path) -> None:
        """Free the slot at ``base`` if ``directory``'s sandbox holds it."""
        slot = self.ids.slot(base)
        if slot is None:
            return
        with self._locked():
            try:
                holder = os.readlink(self.path / str(slot))
            except OSError:
                return
            if holder == str(directory.absolute()):
                (self.path / str(slot)).unlink(missing_ok=True)

    def holder(self, base: int) -> str | None:
        """The sandbox directory that holds the slot at ``base`` now, if any."""
        slot = self.ids.slot(base)
        return None if slot is None else self._holder(slot)


def rebase(old: int, new: int) -> Callable[[int], int]:
    """Host ids of one slot moved to another's (ids outside the slot stay)."""
    return lambda ident: new + ident - old if old <= ident < old + SLOT_SIZE else ident


def legacy(base: int) -> Callable[[int], int]:
    """The ids an earlier version gave a sandbox's files (its user the host's root, its
    uid 0 :data:`LEGACY_AGENT_ID`) moved to the slot at ``base``."""
    moved = {0: base + 1000, LEGACY_AGENT_ID: base}
    return lambda ident: moved.get(ident, ident)


def shift_tree(root: Path, move: Callable[[int], int]) -> None:
    """Give every file under ``root`` (and ``root``) the owner ``move(uid)`` and group
    ``move(gid)``: symlinks themselves, never what they point to. Only ids ``move``
    changes are written, so an unchanged tree costs one ``lstat`` per file. The walk
    goes by directory descriptors (``_trees.walk``): a directory swapped for a symlink
    meanwhile (the files are a sandbox's) leads nowhere outside ``root``."""
    st = os.lstat(root)
    if (move(st.st_uid), move(st.st_gid)) != (st.st_uid, st.st_gid):
        os.lchown(root, move(st.st_uid), move(st.st_gid))
    for folder, name, st in walk(root):
        uid, gid = move(st.st_uid), move(st.st_gid)
        if (uid, gid) != (st.st_uid, st.st_gid):
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, gid, dir_fd=folder, follow_symlinks=False)
