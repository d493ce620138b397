"""How the local agent starts a command, on both of its paths: a command after a pause
is started by the launcher of a spare supervisor (forked ahead, which becomes the
sandbox user only to start it); one soon after another by a supervisor that switches
user as it forks. Either way the command runs as the sandbox user with no other group,
a raised OOM score and a session of its own, under a supervisor that stays root; and a
launcher that a command stops or kills only leaves the start to its supervisor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Callable

import anyio
import pytest

from provider_sdk.capabilities import Capability
from provider_sdk.errors import CommandTimeout
from provider_sdk.local import LocalProvider, _procs, _spawner
from provider_sdk.sandbox import Sandbox

pytestmark = pytest.mark.anyio

PAUSE = 0.3
"""Seconds of quiet after which the spawner holds a spare (it waits 20 ms)."""
GRACE = 10.0

# The command's identity, and its supervisor's: its parent once the launcher, if any, is
# gone (a launcher is killed as soon as it reports).
IDENTITY = textwrap.dedent("""\
    import os, time
    def uid(pid):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("Uid:"):
                return line.split()[1]
    time.sleep(0.3)
    parent = os.getppid()
    print(os.getuid(), os.getgid(), os.getgroups(), os.getsid(0) == os.getpid(),
          open("/proc/self/oom_score_adj").read().strip(),
          uid(parent), open(f"/proc/{parent}/oom_score_adj").read().strip())
    """)

# The processes of the sandbox user that run the agent's program: idle launchers.
# Every process running the agent's program (the brackets keep this script's own command
# line from matching): its uid, OOM score, parent's uid, and whether its environment
# is readable here.
AGENTS = textwrap.dedent("""\
    import os
    def field(pid, name):
        return next(l.split()[1] for l in open(f"/proc/{pid}/status")
                    if l.startswith(name + ":"))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            if b"/etc/psdk/agent" + b".py" not in cmdline or cmdline.startswith(b"/usr/bin/bwrap"):
                continue
            uid, parent_uid = field(pid, "Uid"), field(field(pid, "PPid"), "Uid")
            oom = open(f"/proc/{pid}/oom_score_adj").read().strip()
        except OSError:
            continue
        try:
            open(f"/proc/{pid}/environ", "rb").read()
            environ = "readable"
        except PermissionError:
            environ = "refused"
        print(uid, oom, parent_uid, environ)
    """)


async def run(sandbox: Sandbox, argv: list[str], *, after_pause: bool,
              cwd: str | None = None) -> str:
    """stdout of ``argv`` run after a pause (a spare's launcher starts it) or at once
    after another command (its supervisor does)."""
    if after_pause:
        await anyio.sleep(PAUSE)
    else:
        await sandbox.exec(["true"])
    with anyio.fail_after(GRACE):
        result = await sandbox.exec(argv, cwd=cwd)
    assert result.exit_code == 0, result
    return result.stdout


@pytest.fixture
async def isolated(provider: LocalProvider) -> LocalProvider:
    """The provider, where its agent runs as the sandbox's root and switches user."""
    if not provider.supports(Capability.EXEC_CONTAINED):
        pytest.skip("the agent runs as the sandbox user here: nothing to switch")
    return provider


@pytest.mark.parametrize("after_pause", [True, False], ids=["launched", "direct"])
async def test_a_command_runs_as_the_user_under_a_root_supervisor(
        isolated: LocalProvider, after_pause: bool) -> None:
    """uid and gid 1000, no supplementary group, OOM score 1000, its own session; the
    supervisor it ends up under is root with OOM score 0."""
    async with isolated.create() as sandbox:
        out = await run(sandbox, ["python3", "-c", IDENTITY], after_pause=after_pause)
    assert out.split() == ["1000", "1000", "[]", "True", "1000", "0", "0"], out


async def test_a_sandbox_at_rest_holds_one_launcher_out_of_the_users_reach(
        isolated: LocalProvider) -> None:
    """While a command runs, the spawner makes the next spare once it has been quiet:
    its launcher (the one process of the agent's program with OOM score 1000, a child
    of a root supervisor) waits as root, with its environment closed to the user, and
    no process of the agent's program is the user's. The launcher that started the
    command is gone by then."""
    async with isolated.create() as sandbox:
        out = await run(sandbox, ["python3", "-c", f"import time; time.sleep({PAUSE})\n"
                                  + AGENTS], after_pause=True)
    agents = [line.split() for line in out.splitlines()]
    assert [a for a in agents if a[1] == "1000"] == [["0", "1000", "0", "refused"]], out
    assert not [a for a in agents if a[0] != "0"], out


@pytest.mark.parametrize("after_pause", [True, False], ids=["launched", "direct"])
async def test_a_working_directory_the_user_cannot_enter_is_entered_as_before(
        isolated: LocalProvider, after_pause: bool) -> None:
    """A directory the user may see but not enter: the supervisor enters it as root, as
    without a launcher (whose start, as the user, is refused)."""
    async with isolated.create() as sandbox:
        await sandbox.exec(["sh", "-c", "mkdir -p /tmp/shut && chmod 600 /tmp/shut"])
        out = await run(sandbox, ["/bin/pwd"], cwd="/tmp/shut", after_pause=after_pause)
    assert out == "/tmp/shut\n"


# Processes still running the flood or its hidden child (the brackets keep this scan's
# own command line from matching).
LEFT = textwrap.dedent("""\
    import os
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"hidde" + b"n" in cmdline or cmdline.startswith(b"yes"):
            print(pid, cmdline)
    """)


@pytest.mark.parametrize("after_pause", [True, False], ids=["launched", "direct"])
async def test_a_flood_that_hides_a_child_still_ends_at_its_timeout(
        isolated: LocalProvider, after_pause: bool) -> None:
    """A command that writes without end and leaves a child in a session of its own,
    holding its output, ends at its timeout with its output bounded and nothing left
    running: through the spare the agent holds as through a supervisor forked for it."""
    async with isolated.create() as sandbox:
        if after_pause:
            await anyio.sleep(PAUSE)
        else:
            await sandbox.exec(["true"])
        flood = "setsid sh -c 'while :; do echo hidden; done' & exec yes flood"
        with anyio.fail_after(GRACE), pytest.raises(CommandTimeout) as timed:
            await sandbox.exec(["sh", "-c", flood], timeout=1, output_limit=1 << 16)
        result = timed.value.result
        assert len(result.stdout_bytes) <= 1 << 16
        assert result.stdout_truncated
        left = await sandbox.exec(["python3", "-c", LEFT])
        assert left.stdout == "", left


@pytest.mark.parametrize("sig", ["STOP", "KILL"])
async def test_an_idle_launcher_stopped_or_killed_leaves_the_start_to_its_supervisor(
        isolated: LocalProvider, sig: str) -> None:
    """A background process of the user stops or kills every process it may signal,
    the idle launcher among them: the next command still runs, and promptly."""
    async with isolated.create() as sandbox:
        await sandbox.start(["sh", "-c", f"sleep {PAUSE}; kill -{sig} -1; sleep 30"])
        await anyio.sleep(2 * PAUSE)
        with anyio.fail_after(GRACE):
            result = await sandbox.exec(["echo", "still here"])
        assert (result.exit_code, result.stdout) == (0, "still here\n")
        stopped = await sandbox.exec(["sh", "-c", "grep -l '^State:.*T' /proc/[0-9]*/status"])
        assert stopped.stdout == "", stopped  # the stopped launcher was killed, not left


@pytest.mark.parametrize("sig", ["STOP", "KILL"])
async def test_a_command_that_stops_or_kills_its_launcher_still_reports(
        isolated: LocalProvider, sig: str) -> None:
    """A command that signals its first parent (the launcher, if it is still there) at
    once: its exit status and output come back, promptly."""
    async with isolated.create() as sandbox:
        for _ in range(3):
            await anyio.sleep(PAUSE)
            with anyio.fail_after(GRACE):
                result = await sandbox.exec(
                    ["sh", "-c", f"kill -{sig} $PPID 2>/dev/null; echo out; exit 3"])
            assert (result.exit_code, result.stdout) == (3, "out\n"), result


def _supervise_after_a_stopped_launcher(report: socket.socket) -> None:
    """In a child of the test: as a supervisor, start a command through a launcher that
    has started it and then stopped before reporting; report what ``start`` returned."""
    _procs.prctl(_procs.PR_SET_CHILD_SUBREAPER, 1)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the launcher: starts the command, then is stopped, as a command would
        mine.close()
        request, fds = _procs.recv_packet(theirs)
        assert request is not None
        command = subprocess.Popen(request["argv"], stdin=fds[0], stdout=fds[1],
                                   stderr=fds[2], start_new_session=True)
        command.returncode = 0
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(0)
    theirs.close()
    launcher = _spawner.Launcher(pid, mine)
    null = os.open(os.devnull, os.O_RDWR)
    started = launcher.start({"argv": ["sleep", "0.5"], "env": {}, "cwd": "/"}, [null] * 3)
    children = _procs.children_of().get(os.getpid(), [])
    with open(f"/proc/{started}/cmdline", "rb") as cmdline:
        report.send(f"{started} {children} {cmdline.read()!r}".encode())


def _in_a_child(scene: Callable[[socket.socket], None], wait: float) -> str:
    """Play ``scene`` in a forked child (it may fork, stop and become a subreaper
    there); what it reported on the socket it was given, once it exited cleanly."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ours.close()
            scene(theirs)
            code = 0
        finally:
            os._exit(code)
    theirs.close()
    ours.settimeout(wait)
    said = ours.recv(4096).decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said
    return said


def test_a_launcher_stopped_before_it_reports_hands_its_command_to_the_supervisor() -> None:
    """The supervisor's side, made certain: the launcher started the command and was
    stopped before it could say so. ``start`` kills it and returns its own child, the
    command, reparented."""
    started = time.monotonic()
    said = _in_a_child(_supervise_after_a_stopped_launcher, GRACE)
    command, children, cmdline = said.split(" ", 2)
    assert children == f"[{command}]"
    assert cmdline == repr(b"sleep\x000.5\x00")
    assert time.monotonic() - started < GRACE


def _run_through(spawner: _spawner.Spawner, argv: list[str]) -> tuple[object, bytes]:
    """Run ``argv`` through ``spawner`` as the agent does: the supervisor's first report
    (within two seconds) and the command's output."""
    out_r, out_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    try:
        ctl = spawner.spawn({"argv": argv, "env": {}, "cwd": "/"}, null, out_w, null)
    finally:
        os.close(out_w)
        os.close(null)
    with ctl, open(out_r, "rb") as out:
        ctl.settimeout(2.0)
        try:
            reply: object = _procs.recv_packet(ctl)[0]
            if isinstance(reply, dict) and set(reply) == {"supervisor"}:
                reply = _procs.recv_packet(ctl)[0]  # its pid first, then the start's
        except TimeoutError:
            reply = "no answer"
        return reply, out.read() if isinstance(reply, dict) else b""


def _spares_go_to_the_agent(report: socket.socket) -> None:
    """In a child of the test: an agent's spawner, stopped once it has passed a spare,
    then with its spare killed; report what the commands run through it answered."""
    _procs.prctl(_procs.PR_SET_CHILD_SUBREAPER, 1)
    spawner = _spawner.Spawner(None, keep=[], isolated=False)
    said = []
    time.sleep(PAUSE)  # quiet: the spawner forks a spare and passes it on
    os.kill(spawner.pid, signal.SIGSTOP)
    said.append(_run_through(spawner, ["echo", "spare"]))
    os.kill(spawner.pid, signal.SIGCONT)
    said.append(_run_through(spawner, ["echo", "forked"]))
    time.sleep(PAUSE)
    spares = _procs.children_of().get(spawner.pid, [])  # the next spare
    for pid in spares:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + GRACE
    while any(os.path.exists(f"/proc/{pid}") for pid in spares) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the spawner has reaped it: its socket is closed
    said.append(_run_through(spawner, ["echo", "after a lost spare"]))
    time.sleep(PAUSE)
    os.kill(spawner.pid, signal.SIGKILL)  # the agent holds a spare: that is enough
    os.waitpid(spawner.pid, 0)
    said.append(_run_through(spawner, ["echo", "without a spawner"]))
    report.send(repr([(isinstance(r, dict) and "pid" in r, out) for r, out in said]).encode())


def test_a_command_after_a_pause_goes_straight_to_the_spare_the_agent_holds() -> None:
    """The spawner passes each spare it makes to the agent, which hands the next command
    to it directly: with the spawner stopped, or gone, that command still starts. A
    command soon after goes through the spawner, and so does one whose spare died
    meanwhile."""
    said = _in_a_child(_spares_go_to_the_agent, GRACE + 4 * PAUSE)
    assert said == repr([(True, b"spare\n"), (True, b"forked\n"),
                         (True, b"after a lost spare\n"), (True, b"without a spawner\n")])


# Stops every process it may signal, again and again: each process of the sandbox user
# but itself, a launcher from the moment it becomes the user, a command before its exec.
STOPPER = textwrap.dedent("""\
    import os
    while True:
        try:
            os.kill(-1, 19)
        except OSError:
            pass
    """)


@pytest.mark.parametrize("after_pause", [True, False], ids=["launched", "direct"])
async def test_a_process_that_stops_every_process_of_the_user_holds_no_exec_past_its_timeout(
        isolated: LocalProvider, after_pause: bool) -> None:
    """A background process that stops every process of the user in a loop catches the
    next command before its exec (the launcher's child, or the supervisor's): that
    exec still ends at its timeout, not at the agent's wait for a start."""
    async with isolated.create() as sandbox:
        await sandbox.start(["python3", "-c", STOPPER])
        for _ in range(3):
            if after_pause:
                await anyio.sleep(PAUSE)
            began = time.monotonic()
            with anyio.fail_after(1 + GRACE), pytest.raises(CommandTimeout):
                await sandbox.exec(["sleep", "30"], timeout=1)
            assert time.monotonic() - began < 1 + GRACE
