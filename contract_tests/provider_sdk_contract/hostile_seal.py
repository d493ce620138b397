"""Contract, hostile section: nothing of the host inside (``seal.host``).

Inside, the tests look at every process they did not start: its descriptors must not
lead to host files, it must not be traceable, readable through ``/proc`` or signalable,
and no command line or mount shows where the provider keeps its sandboxes on the host.
Outside, a setuid file made inside must not show up as a root-owned setuid file in the
provider's home. Everything inside is done with bash builtins and coreutils; ``perl``
(when the image has it) makes the ``ptrace`` call itself.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.sandbox import Sandbox
from provider_sdk_contract.base import ContractBase
from provider_sdk_contract.markers import requires
from provider_sdk_contract.support import new_marker

# For each descriptor of any process that names a path: the file it is open on must be
# the file at that path inside (a device: the same device, whichever /dev holds its
# node). Deleted files (" (deleted)") have no path to compare. Links that cannot be
# read are skipped: they are not visible inside.
_FOREIGN_DESCRIPTORS = r"""
n=0
for l in /proc/[0-9]*/fd/*; do
  t=$(readlink "$l" 2>/dev/null) || continue
  case "$t" in /*) ;; *) continue ;; esac
  case "$t" in *" (deleted)") continue ;; esac
  if [ -c "$l" ] || [ -b "$l" ]; then id='device %t:%T'; else id='%d:%i'; fi
  a=$(stat -L -c "$id" "$l" 2>/dev/null) || continue
  n=$((n + 1))
  b=$(stat -L -c "$id" "$t" 2>/dev/null) || b=absent
  [ "$a" = "$b" ] || printf 'FOREIGN %s -> %s (%s, inside: %s)\n' "$l" "$t" "$a" "$b"
done
echo "checked $n"
"""

# Every process but this shell and its own children: reading its environment, opening
# its memory, signalling it and (with perl on x86_64) PTRACE_SEIZE or taking its stdin
# with pidfd_open + pidfd_getfd must all fail.
# Bash builtins open the /proc files, so the checks fork nothing that could be confused
# with a target. PTRACE_SEIZE (not ATTACH) never stops the target; perl's syscall()
# passes a string as a pointer, hence the "+ 0".
# The scan starts a moment after the command, so that what the provider starts beside
# a running command (a helper made ready for the next one) is there to be checked too.
_REACH_OTHERS = r"""
sleep 0.5
seize=
if command -v perl >/dev/null 2>&1 && [ "$(uname -m)" = x86_64 ]; then seize=1; fi
n=0
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  { read -r s < "$d/stat"; } 2>/dev/null || continue
  s=${s##*) }; set -- $s; [ "$2" = "$$" ] && continue
  n=$((n + 1))
  if { read -r -d '' x < "$d/environ"; } 2>/dev/null && [ -n "$x" ]; then
    echo "REACHED environ of $p"; fi
  if { exec 3< "$d/mem"; } 2>/dev/null; then echo "REACHED mem of $p"; exec 3<&-; fi
  if kill -0 "$p" 2>/dev/null; then echo "REACHED signal to $p"; fi
  if [ -n "$seize" ] && perl -e 'exit(syscall(101, 0x4206, $ARGV[0] + 0, 0, 0) == -1 ? 1 : 0)' \
      "$p" 2>/dev/null; then echo "REACHED ptrace of $p"; fi
  if [ -n "$seize" ] && perl -e 'my $f = syscall(434, $ARGV[0] + 0, 0);
      exit($f >= 0 && syscall(438, $f, 0, 0) >= 0 ? 0 : 1)' "$p" 2>/dev/null; then
    echo "REACHED descriptors of $p"; fi
done
echo "checked $n"
"""

_ALL_CMDLINES = 'for f in /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo; done'


def _checked(stdout: str) -> int:
    lines = [line for line in stdout.splitlines() if line.startswith("checked ")]
    assert lines, f"the scan did not finish: {stdout[-300:]!r}"
    return int(lines[-1].split()[1])


def host_paths(extra: Mapping[str, Any], base: Path) -> list[str]:
    """Host directories the provider might leak: absolute paths in ``info().extra``
    that exist on this host (a home, a volume's path), and the test session's temporary
    root, under which every home the suite's providers and emulators use lives."""
    found = {str(base)}
    for value in extra.values():
        if isinstance(value, str) and value.startswith("/") and len(value) > 1 \
                and os.path.isdir(value):
            found.add(os.path.normpath(value))
    # Outermost first, each once: a path under another is covered by it.
    roots: list[str] = []
    for path in sorted(found):
        if not any(path.startswith(root.rstrip("/") + "/") for root in roots):
            roots.append(path)
    return roots


def _files_named(roots: list[str], name: str) -> Iterator[Path]:
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            if name in files:
                yield Path(folder, name)


class HostileSealContract(ContractBase):
    """The seal: no host descriptor, path, process or privileged file reachable inside."""

    @requires(Capability.SEAL_HOST)
    async def test_hostile_no_descriptor_inside_leads_to_a_host_file(
            self, sandbox: Sandbox) -> None:
        """Every descriptor of every process inside that names a path is open on the
        file at that path inside, never on a host file (such as an agent's log)."""
        result = await sandbox.exec(["/bin/bash", "-c", _FOREIGN_DESCRIPTORS], timeout=120)
        assert result.exit_code == 0, result.stderr
        foreign = [line for line in result.stdout.splitlines() if line.startswith("FOREIGN")]
        assert foreign == [], "\n".join(foreign)
        assert _checked(result.stdout) > 0, "no descriptor was visible to check"

    @requires(Capability.SEAL_HOST)
    async def test_hostile_processes_not_started_by_the_command_are_out_of_reach(
            self, sandbox: Sandbox) -> None:
        """No process the command did not start (the provider's agent, an init) can be
        read through ``/proc/PID/environ`` or ``/proc/PID/mem``, signalled, traced, or
        robbed of a descriptor."""
        result = await sandbox.exec(["/bin/bash", "-c", _REACH_OTHERS], timeout=120)
        assert result.exit_code == 0, result.stderr
        reached = [line for line in result.stdout.splitlines() if line.startswith("REACHED")]
        assert reached == [], "\n".join(reached)
        assert _checked(result.stdout) > 0, "no other process was visible to check"

    @requires(Capability.SEAL_HOST)
    async def test_hostile_no_host_path_in_command_lines(
            self, sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> None:
        """No command line inside (``/proc/1/cmdline`` included) names the provider's
        home or this test session's directories on the host."""
        info = await sandbox.refresh()
        result = await sandbox.exec(["/bin/bash", "-c", _ALL_CMDLINES])
        assert result.exit_code == 0, result.stderr
        seen = result.stdout_bytes.replace(b"\0", b" ")
        assert b"\n" in seen, "no command line was read"
        for path in host_paths(info.extra, tmp_path_factory.getbasetemp()):
            assert path.encode() not in seen, f"a command line inside shows {path}"

    @requires(Capability.SEAL_HOST)
    async def test_hostile_no_host_path_in_mountinfo(
            self, sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> None:
        """``/proc/self/mountinfo`` inside names neither the provider's home nor this test
        session's directories on the host."""
        info = await sandbox.refresh()
        mountinfo = await sandbox.exec(["cat", "/proc/self/mountinfo"])
        assert mountinfo.exit_code == 0, mountinfo.stderr
        assert mountinfo.stdout, "mountinfo inside is empty"
        for path in host_paths(info.extra, tmp_path_factory.getbasetemp()):
            assert path not in mountinfo.stdout, f"mountinfo inside shows {path}"

    @requires(Capability.SEAL_HOST)
    async def test_hostile_setuid_file_made_inside_is_not_root_setuid_on_the_host(
            self, sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> None:
        """``chmod 4755`` and ``chmod 2755`` on files made inside never give a root-owned
        setuid or setgid file on the host, where the test can see the sandbox's files."""
        info = await sandbox.refresh()
        name = new_marker("suid")
        script = ('cp /bin/true "$PWD/$1.u" && chmod 4755 "$PWD/$1.u"; '
                  'cp /bin/true "$PWD/$1.g" && chmod 2755 "$PWD/$1.g"; '
                  'cp /bin/true "/tmp/$1.u" && chmod 4755 "/tmp/$1.u"; true')
        made = await sandbox.exec(["/bin/bash", "-c", script, "psdk-suid", name])
        assert made.exit_code == 0, made.stderr
        roots = host_paths(info.extra, tmp_path_factory.getbasetemp())
        found = [p for suffix in (".u", ".g") for p in _files_named(roots, name + suffix)]
        if not found:
            pytest.skip("the sandbox's files are not visible from this host")
        for path in found:
            st = path.lstat()
            privileged = st.st_mode & (stat.S_ISUID | stat.S_ISGID)
            assert not (st.st_uid == 0 and privileged), (
                f"{path} is root-owned with mode {stat.filemode(st.st_mode)} on the host")
