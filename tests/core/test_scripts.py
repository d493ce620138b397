"""The in-sandbox scripts of ``provider_sdk.scripts``, run under real bash and dash on this
host against trees of processes the tests start: what the tree kill finds (odd names,
new sessions, orphans of a double fork, other users, a forking loop) and what it spares."""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider_sdk import scripts

SHELLS = [name for name in ("bash", "dash") if shutil.which(name)]


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] not in "ZXx"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _marked(token: str) -> set[int]:
    """Live processes with ``token`` in their command line (how the test, not the script,
    tells its processes apart)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline and _alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def _wait_for(token: str, count: int, *, sleeping: bool = False) -> set[int]:
    """``count`` live processes with ``token`` in their command line (``sleeping``: ones
    that run ``sleep TOKEN`` itself, not a shell on its way to start one)."""
    deadline = time.monotonic() + 20
    exact = f"sleep\0{token}\0".encode()
    while len(found := {pid for pid in _marked(token) if not sleeping
                        or _cmdline(pid) == exact}) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"only {len(found)} of {count} processes started")
        time.sleep(0.02)
    return found


def _kill_tree(shell: str, pid: int) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([shell, "-c", scripts.KILL_TREE, "psdk-kill", str(pid)],
                          capture_output=True, timeout=60, check=False)


@pytest.fixture
def token() -> Iterator[str]:
    """A sleep duration no other process uses; whatever carries it dies at the end."""
    value = f"987.{secrets.randbelow(10**6):06d}"
    yield value
    for pid in _marked(value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


@pytest.mark.parametrize("shell", SHELLS)
def test_kill_tree_kills_the_whole_tree_whatever_it_does(shell: str, token: str,
                                                         tmp_path: Path) -> None:
    """Odd names (a naive parse of ``/proc/PID/stat`` reads a wrong parent), a new
    session, a double fork's orphan in it, nohup, a cleared environment, a loop that
    keeps forking: all of it dies; a process outside the tree lives on."""
    odd = tmp_path / "a) R 1 1 1 (b"
    shutil.copy("/bin/sleep", odd)
    tree = (
        f'{shlex.quote(str(odd))} {token} &\n'
        f'(exec -a "a) b" sleep {token}) &\n'
        f"setsid sh -c '(sleep {token} &); exec sleep {token}' &\n"
        f"setsid sh -c 'sleep {token} & wait' loop-{token} &\n"
        f"nohup sleep {token} > /dev/null 2>&1 &\n"
        f"env -i /bin/sleep {token} &\n"
        f"sh -c 'while :; do sleep 0.01; done' forks-{token} &\n"
        "wait\n")
    outsider = subprocess.Popen(["sleep", token])
    root = subprocess.Popen(["bash", "-c", tree, f"root-{token}"])
    try:
        started = _wait_for(token, 11)
        assert {outsider.pid, root.pid} <= started
        done = _kill_tree(shell, root.pid)
        assert done.returncode == 0, done.stderr
        survivors = {pid for pid in started if _alive(pid)} - {outsider.pid}
        assert survivors == set(), [Path(f"/proc/{p}/cmdline").read_bytes() for p in survivors]
        assert _alive(outsider.pid)
    finally:
        outsider.kill()
        root.kill()
        outsider.wait()
        root.wait()


@pytest.mark.parametrize("shell", SHELLS)
def test_kill_tree_kills_processes_of_other_users(shell: str, token: str) -> None:
    """Run as root, the kill reaches a child that runs as ``nobody``: identity comes from
    ``/proc/PID/stat``, which every user can read, never from its environment."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    root = subprocess.Popen(["sh", "-c", f"setpriv --reuid=65534 --regid=65534 --clear-groups"
                             f" sleep {token} & wait", f"root-{token}"])
    try:
        started = _wait_for(token, 2)
        assert _kill_tree(shell, root.pid).returncode == 0
        assert {pid for pid in started if _alive(pid)} == set()
    finally:
        root.kill()
        root.wait()


@pytest.mark.parametrize("shell", SHELLS)
def test_kill_tree_of_a_missing_pid_says_so(shell: str) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert _kill_tree(shell, gone.pid).returncode == scripts.NO_SUCH_PROCESS
    assert _kill_tree(shell, "1; echo x").returncode == 2  # type: ignore[arg-type]


@pytest.mark.parametrize("shell", SHELLS)
def test_probe_file_tells_regular_files_from_the_rest(shell: str, tmp_path: Path) -> None:
    regular = tmp_path / "f"
    regular.write_bytes(b"x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-zero").symlink_to("/dev/zero")
    (tmp_path / "to-file").symlink_to(regular)
    expected = {"f": "file", "fifo": "other", "to-zero": "other", "to-file": "file",
                "missing": "missing", ".": "directory"}
    for name, kind in expected.items():
        argv = [shell, "-c", scripts.PROBE_FILE, "psdk-probe", str(tmp_path / name)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        assert (name, done.stdout.strip()) == (name, kind)
    command = scripts.probe_file_command("/dev/zero", shell=shell)
    assert subprocess.run(command, shell=True, capture_output=True, text=True,
                          timeout=30, check=True).stdout == "other\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_export_script_exports_values_exactly(shell: str) -> None:
    env = {"A": "it's $HOME `x` \"q\"", "B": "line\nbreak", "EMPTY": ""}
    text = scripts.export_script(env) + 'printf "%s|%s|%s" "$A" "$B" "${EMPTY-unset}"'
    done = subprocess.run([shell, "-c", text], capture_output=True, text=True, timeout=30,
                          check=True)
    assert done.stdout == "|".join(env.values())


@pytest.mark.parametrize("shell", SHELLS)
def test_kill_marked_kills_the_marked_and_spares_the_rest(shell: str, token: str) -> None:
    """Every process carrying the mark dies, its children included (they inherit it); a
    process with another mark, or none, lives on; the kill's own argv holds no mark."""
    mark = "x" + secrets.token_hex(8)
    marked = {**os.environ, **scripts.mark_env(mark)}
    other = {**os.environ, **scripts.mark_env("x" + secrets.token_hex(8))}
    tree = subprocess.Popen(["sh", "-c", f"sleep {token} & setsid sleep {token} & wait"],
                            env=marked)
    spared = [subprocess.Popen(["sleep", token], env=other),
              subprocess.Popen(["sleep", token])]
    argv = scripts.kill_marked_argv(mark, shell=shell)
    assert mark not in argv
    try:
        started = _wait_for(token, 5)
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        tree.wait(timeout=30)
        assert {pid for pid in started if _alive(pid)} == {p.pid for p in spared}
    finally:
        for process in (tree, *spared):
            process.kill()
            process.wait()


def _orphan_tree(token: str, mark: str) -> tuple[subprocess.Popen[bytes], set[int]]:
    """A marked command whose double fork left an orphan in a session of its own (its
    middle process gone before any kill), and the pids of the command and the orphan."""
    root = subprocess.Popen(
        ["bash", "-c", f"(setsid sleep {token} &); exec sleep {token}"],
        env={**os.environ, **scripts.mark_env(mark)})
    # The command and the orphan, each running its sleep (the subshell between them, a
    # bash with the token in its command line too, is gone by then).
    return root, _wait_for(token, 2, sleeping=True)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("form", ["argv", "command"])
def test_kill_command_ends_an_orphan_in_a_new_session_the_tree_kill_misses(
        shell: str, form: str, token: str) -> None:
    """The tree kill cannot find a double fork's orphan in a session of its own; the
    command kill finds it by its mark. A process under another mark lives on; the kill's
    own argv holds no mark."""
    mark = scripts.new_mark()
    root, started = _orphan_tree(token, mark)
    spared = subprocess.Popen(["sleep", token],
                              env={**os.environ, **scripts.mark_env(scripts.new_mark())})
    try:
        assert _kill_tree(shell, root.pid).returncode == 0
        root.wait(timeout=30)
        orphans = {pid for pid in started if _alive(pid)}
        assert len(orphans) == 1  # the tree kill missed it
        argv = scripts.kill_command_argv(root.pid, mark, shell=shell)
        assert mark not in argv
        if form == "argv":
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        else:
            done = subprocess.run(scripts.kill_command(root.pid, mark, shell=shell),
                                  shell=True, capture_output=True, timeout=60, check=False)
        # The command's own pid is gone by now: the kill says so, and kills the orphan.
        assert done.returncode == scripts.NO_SUCH_PROCESS, done.stderr
        assert {pid for pid in started if _alive(pid)} == set()
        assert _alive(spared.pid)
    finally:
        spared.kill()
        spared.wait()
        root.kill()
        root.wait()


@pytest.mark.parametrize("shell", SHELLS)
def test_kill_command_kills_the_tree_and_the_marked_at_once(shell: str, token: str) -> None:
    """With the command alive, one kill ends it and its orphan (exit 0); without a mark
    it is the tree kill alone."""
    mark = scripts.new_mark()
    root, started = _orphan_tree(token, mark)
    try:
        alone = subprocess.run(scripts.kill_command_argv(root.pid, None, shell=shell),
                               capture_output=True, timeout=60, check=False)
        assert alone.returncode == 0, alone.stderr
        root.wait(timeout=30)
        assert len({pid for pid in started if _alive(pid)}) == 1
    finally:
        root.kill()
        root.wait()
    root, started = _orphan_tree(f"{token}1", mark)
    try:
        done = subprocess.run(scripts.kill_command_argv(root.pid, mark, shell=shell),
                              capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        root.wait(timeout=30)
        assert {pid for pid in started if _alive(pid)} == set()
    finally:
        root.kill()
        root.wait()


def test_new_marks_are_fresh_words() -> None:
    marks = {scripts.new_mark() for _ in range(100)}
    assert len(marks) == 100
    assert all(len(mark) == 32 and mark.isascii() and mark.isalnum() for mark in marks)


@pytest.mark.parametrize("mark", ["", "a b", "x;y", "x\n", "é1"])
def test_a_mark_is_letters_and_digits(mark: str) -> None:
    with pytest.raises(ValueError, match="letters and digits"):
        scripts.mark_env(mark)
    with pytest.raises(ValueError, match="letters and digits"):
        scripts.kill_marked_argv(mark)
    with pytest.raises(ValueError, match="letters and digits"):
        scripts.kill_command_argv(1, mark)
    with pytest.raises(ValueError, match="letters and digits"):
        scripts.kill_command(1, mark)
