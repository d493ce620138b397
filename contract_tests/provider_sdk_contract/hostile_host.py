"""Contract, hostile section: what of the host a sandbox's ids and writes reach
(``seal.ids``, ``seal.knobs``).

These tests walk what the sandbox has rather than try attacks on it: every id its user
namespace maps, and what that id is on the host; every mount it sees, and every path on
one that a command may write; every sysctl; every device node. The rules: no id inside
is the host's root, the test's own id, a host account's or another sandbox's; a path a
command may write is the sandbox's own (its root, a filesystem made for it, a process of
its own under ``/proc``); a device is one of the standard ones, which a command may use
but, where the node is the host's, not change. Attacks that show why (a host sysctl
written, a host device's mode changed) are a provider's regression tests, not these.

Inside, everything is done with bash, coreutils and findutils; the host side reads
``/etc/passwd`` and ``/etc/group`` through ``pwd`` and ``grp`` (the test runs where the
provider runs).
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Iterator

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase, Factory
from provider_sdk_contract.hostile_seal import host_paths
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import new_marker

__all__ = ["DEVICES_SCRIPT", "MAPS_SCRIPT", "STANDARD_DEVICES", "SYSCTLS_SCRIPT", "WRITABLE_SCRIPT"]

STANDARD_DEVICES = {(1, 3): "null", (1, 5): "zero", (1, 7): "full", (1, 8): "random",
                    (1, 9): "urandom", (5, 0): "tty", (5, 2): "ptmx"}
"""The device nodes every sandbox may have (major, minor), besides its own terminals
(``/dev/pts``, majors 136 to 143)."""
_PTY_MAJORS = range(136, 144)
MAPS_SCRIPT = "cat /proc/self/uid_map; echo --; cat /proc/self/gid_map"

# Every mount: its point, options and type. A mount of a filesystem made for the
# sandbox (tmpfs, devpts, mqueue) and its root are its own; a read-only mount has
# nothing writable (device nodes aside, checked on their own). Every other mount is
# walked for paths a command may write (or, owning them, make writable), sockets and
# FIFOs included; per-process /proc entries are left out (they are a process's own,
# and other processes' are the seal's tests).
WRITABLE_SCRIPT = r"""
own=" tmpfs devpts mqueue "
me=$(id -u)
n=0
while IFS= read -r line; do
  set -f; set -- $line; set +f
  point=$(printf '%b' "$5"); opts=",$6,"
  type=${line#* - }; type=${type%% *}
  n=$((n + 1))
  [ "$point" = / ] && continue
  case "$own" in *" $type "*) continue ;; esac
  case "$opts" in *,ro,*) continue ;; esac
  echo "walked $point"
  find "$point" -xdev \( -path '/proc/[0-9]*' -o -path /proc/self -o -path /proc/thread-self \) \
    -prune -o ! -type l ! -type c ! -type b \( -writable -o -user "$me" \) \
    -printf "WRITABLE %p ($type)\n" 2>/dev/null
done < /proc/self/mountinfo
echo "mounts $n"
"""

SYSCTLS_SCRIPT = r"""
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1))
  [ -w "$f" ] && printf 'WRITABLE %s\n' "$f"
done < <(find /proc/sys -type f -print0 2>/dev/null)
echo "checked $n"
"""

# Every device node on every mount but /proc's and /sys's, with its numbers; then the
# mount table, from which the test tells the filesystem each node lies on. The type is
# tested by stat, not find's -type: a node bound over another path has that path's
# directory entry.
DEVICES_SCRIPT = r"""
n=0
for point in $(awk '$9 != "proc" && $9 != "sysfs" {print $5}' /proc/self/mountinfo \
               | sort -u); do
  point=$(printf '%b' "$point")
  while IFS= read -r -d '' f; do
    [ -c "$f" ] || [ -b "$f" ] || continue
    n=$((n + 1))
    set -- $(stat -c '%t %T' "$f")
    printf 'DEVICE %s %d %d\n' "$f" "0x$1" "0x$2"
  done < <(find "$point" -xdev ! -type d ! -type l -print0 2>/dev/null)
done
echo "checked $n"
echo "--"
cat /proc/self/mountinfo
"""

# For each node given: changing its mode, its times, or its times to now (what any
# writer may do to a node: nothing the host's may suffer), each to what it is.
_CHANGE_DEVICES = r"""
for f in "$@"; do
  chmod "$(stat -c %a "$f")" "$f" 2>/dev/null && printf 'CHANGED mode of %s\n' "$f"
  touch -h -r "$f" "$f" 2>/dev/null && printf 'CHANGED times of %s\n' "$f"
  touch -c -a "$f" 2>/dev/null && printf 'CHANGED the access time of %s\n' "$f"
done
true
"""
_OWN_TYPES = {"tmpfs", "devpts", "mqueue"}


def _mounts(mountinfo: str) -> list[tuple[str, str]]:
    """Each mount's point and filesystem type, in the table's order (later ones lie on
    top of earlier ones at the same point)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)
        if len(fields) != 2:
            continue
        point = fields[0].split()[4].encode().decode("unicode_escape")
        found.append((point, fields[1].split()[0]))
    return found


def _filesystem_of(path: str, mounts: list[tuple[str, str]]) -> str:
    """The type of the filesystem ``path`` lies on: the last mount at the longest point
    that holds it."""
    best, kind = -1, "?"
    for point, fstype in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:
            best, kind = len(point), fstype
    return kind


def _last(stdout: str, word: str) -> int:
    lines = [line for line in stdout.splitlines() if line.startswith(word + " ")]
    assert lines, f"the walk did not finish: {stdout[-300:]!r}"
    return int(lines[-1].split()[1])


def _ranges(text: str) -> list[range]:
    """The host ids each line of a uid_map or gid_map covers."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and all(f.isdigit() for f in fields):
            _inside, outside, count = map(int, fields)
            found.append(range(outside, outside + count))
    return found


def _host_accounts(kind: str) -> Iterator[tuple[str, int]]:
    if kind == "uid":
        yield from ((f"user {p.pw_name!r}", p.pw_uid) for p in pwd.getpwall())
    else:
        yield from ((f"group {g.gr_name!r}", g.gr_gid) for g in grp.getgrall())


class HostileHostContract(ContractBase):
    """Ids and writes: nothing a sandbox has reaches what is the host's."""

    async def _maps(self, sandbox: Sandbox) -> dict[str, list[range]]:
        result = await sandbox.exec(["/bin/sh", "-c", MAPS_SCRIPT])
        assert result.exit_code == 0, result.stderr
        uid_map, _, gid_map = result.stdout.partition("--\n")
        maps = {"uid": _ranges(uid_map), "gid": _ranges(gid_map)}
        assert maps["uid"], f"no uid map could be read: {result.stdout!r}"
        assert maps["gid"], f"no gid map could be read: {result.stdout!r}"
        return maps

    @requires(Capability.SEAL_IDS)
    async def test_hostile_no_id_inside_is_a_privileged_host_id(self, sandbox: Sandbox) -> None:
        """No uid or gid the sandbox's user namespace maps is, on the host, root, this
        process's own id, or any account's or group's."""
        mine = {"uid": os.geteuid(), "gid": os.getegid()}
        for kind, ranges in (await self._maps(sandbox)).items():
            for covered in ranges:
                assert 0 not in covered, f"a {kind} inside is the host's root: {covered}"
                assert mine[kind] not in covered, (
                    f"a {kind} inside is this process's own ({mine[kind]}): {covered}")
                for name, ident in _host_accounts(kind):
                    assert ident not in covered, (
                        f"a {kind} inside is host {name}'s ({ident}): {covered}")

    @requires(Capability.SEAL_IDS)
    async def test_hostile_two_sandboxes_share_no_host_id(
            self, sandbox: Sandbox, factory: Factory) -> None:
        """Two sandboxes' user namespaces map no host id in common."""
        other = await factory.sandbox()
        ours, theirs = await self._maps(sandbox), await self._maps(other)
        for kind in ("uid", "gid"):
            for a in ours[kind]:
                for b in theirs[kind]:
                    assert a.stop <= b.start or b.stop <= a.start, (
                        f"both sandboxes map host {kind}s {max(a.start, b.start)}.."
                        f"{min(a.stop, b.stop) - 1}")

    @requires(Capability.SEAL_IDS)
    async def test_hostile_files_made_inside_are_the_sandboxs_own_ids_on_the_host(
            self, sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> None:
        """A file a command makes, or the files API writes, is owned on the host (where
        the test can see the sandbox's files) by ids of the sandbox's own maps, never
        root's or a host account's."""
        info = await sandbox.refresh()
        maps = await self._maps(sandbox)
        name = new_marker("owner")
        made = await sandbox.exec(["/bin/sh", "-c", 'echo x > "$PWD/$1"; echo x > "/tmp/$1"',
                                   "psdk-owner", name])
        assert made.exit_code == 0, made.stderr
        await sandbox.files.write(f"/tmp/{name}.api", "x")
        roots = host_paths(info.extra, tmp_path_factory.getbasetemp())
        found = [os.path.join(folder, file) for root in roots
                 for folder, _dirs, files in os.walk(root) for file in files
                 if file in (name, f"{name}.api")]
        if not found:
            pytest.skip("the sandbox's files are not visible from this host")
        assert any(path.endswith(".api") for path in found), found
        accounts = {"uid": dict(_host_accounts("uid")), "gid": dict(_host_accounts("gid"))}
        for path in found:
            st = os.lstat(path)
            for kind, ident in (("uid", st.st_uid), ("gid", st.st_gid)):
                assert ident != 0, f"{path} is the host root's ({kind} 0)"
                assert ident not in accounts[kind].values(), (
                    f"{path} is owned by a host account ({kind} {ident})")
                assert any(ident in covered for covered in maps[kind]), (
                    f"{path} is owned by {kind} {ident}, which no id inside maps to")

    @requires(Capability.SEAL_KNOBS)
    async def test_hostile_nothing_writable_but_the_sandboxs_own(self, sandbox: Sandbox) -> None:
        """Walked mount by mount: no path a command may write lies outside the
        sandbox's own filesystems (its root, those made for it) and its own processes'
        ``/proc`` entries; ``/proc`` itself is walked."""
        result = await sandbox.exec(["/bin/bash", "-c", WRITABLE_SCRIPT], timeout=120)
        assert result.exit_code == 0, result.stderr
        writable = [line for line in result.stdout.splitlines() if line.startswith("WRITABLE")]
        assert writable == [], "\n".join(writable)
        assert _last(result.stdout, "mounts") > 1
        assert "walked /proc" in result.stdout.splitlines(), result.stdout[-500:]

    @requires(Capability.SEAL_KNOBS)
    async def test_hostile_every_sysctl_is_read_only(self, sandbox: Sandbox) -> None:
        """No file under ``/proc/sys`` may be opened for writing by a command."""
        result = await sandbox.exec(["/bin/bash", "-c", SYSCTLS_SCRIPT], timeout=120)
        assert result.exit_code == 0, result.stderr
        writable = [line for line in result.stdout.splitlines() if line.startswith("WRITABLE")]
        assert writable == [], "\n".join(writable)
        assert _last(result.stdout, "checked") > 100, "too few sysctls were visible"

    @requires(Capability.SEAL_KNOBS)
    async def test_hostile_devices_are_standard_and_none_is_the_hosts(
            self, sandbox: Sandbox) -> None:
        """Every device node, wherever it is mounted, is a standard one (or the
        sandbox's own terminal), none lies on the host's device filesystem
        (``devtmpfs``), and one bound from any filesystem not made for the sandbox
        cannot have its mode or times changed, even to now."""
        result = await sandbox.exec(["/bin/bash", "-c", DEVICES_SCRIPT], timeout=120)
        assert result.exit_code == 0, result.stderr
        listed, _, mountinfo = result.stdout.partition("\n--\n")
        mounts = _mounts(mountinfo)
        devices = [line.split() for line in listed.splitlines() if line.startswith("DEVICE ")]
        assert _last(listed, "checked") == len(devices)
        assert any(path == "/dev/null" for _, path, *_ in devices), "no /dev/null seen"
        odd = [f"{path} ({major}:{minor})" for _, path, major, minor in devices
               if (int(major), int(minor)) not in STANDARD_DEVICES
               and int(major) not in _PTY_MAJORS]
        assert odd == [], f"non-standard device nodes: {', '.join(odd)}"
        hosts = [path for _, path, *_ in devices
                 if _filesystem_of(path, mounts) == "devtmpfs"]
        assert hosts == [], f"the host's device nodes: {', '.join(hosts)}"
        foreign = sorted({path for _, path, *_ in devices
                          if _filesystem_of(path, mounts) not in _OWN_TYPES})
        if foreign:
            probed = await sandbox.exec(["/bin/bash", "-c", _CHANGE_DEVICES, "psdk", *foreign])
            changed = [line for line in probed.stdout.splitlines()
                       if line.startswith("CHANGED")]
            assert changed == [], "\n".join(changed)
