"""The sandbox commands of ``psdk``: providers, run, create, exec, ls, info, pause, resume,
kill, snapshot and cp.

Each command is an async function of the parsed arguments that returns the exit status.
They use only the public async API; errors are left to propagate to :func:`main
<provider_sdk.cli.main>`, which turns them into one line and an exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import posixpath
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from provider_sdk import config
from provider_sdk.capabilities import Capability
from provider_sdk.cli.console import (
    CliError,
    Console,
    cell,
    dump_json,
    human_size,
    labels_cell,
    table,
    to_json,
)
from provider_sdk.cli.places import Kind, default_places
from provider_sdk.errors import (
    CommandTimeout,
    FileNotFound,
    NotARegularFile,
    ProviderNotFound,
    SandboxError,
    SandboxNotFound,
)
from provider_sdk.models import (
    ExecResult,
    FileInfo,
    FileType,
    Lifecycle,
    NetworkPolicy,
    Resources,
    SandboxInfo,
    SandboxSpec,
    SandboxState,
    VolumeMount,
    broken_reason,
)
from provider_sdk.provider import SandboxProvider
from provider_sdk.sandbox import Sandbox

__all__ = [
    "cmd_cp",
    "cmd_create",
    "cmd_exec",
    "cmd_info",
    "cmd_kill",
    "cmd_ls",
    "cmd_pause",
    "cmd_resume",
    "cmd_run",
    "cmd_snapshot",
    "cmd_volume",
    "broken_reason",
    "exit_status",
    "parse_location",
    "provider_from",
    "provider_holding",
]

T = TypeVar("T")

_CHUNK = 1 << 20
# "ID:PATH": an id is whatever comes before the first colon, if that holds no slash.
# A local path with a colon in its first component is written "./name:x".
_REMOTE = re.compile(r"^([^/:]+):(.*)$", re.DOTALL)


@contextlib.asynccontextmanager
async def provider_from(args: argparse.Namespace) -> AsyncIterator[SandboxProvider]:
    """The provider named by ``--provider``, else the configured one, else ``local``."""
    async with config.open_provider(config.provider_name(args.provider)) as provider:
        yield provider


@contextlib.asynccontextmanager
async def provider_holding(args: argparse.Namespace, kind: Kind,
                           ident: str) -> AsyncIterator[SandboxProvider]:
    """The provider that holds the sandbox (or snapshot) ``ident``.

    ``--provider`` names the one provider to ask. Otherwise the provider ``psdk``
    recorded when it made ``ident`` is asked first (a stale record is dropped), then the
    configured default; the first that knows the id is the one. When none does, the
    error names every provider asked.
    """
    places = default_places()
    recorded = None if args.provider else places.provider_of(kind, ident)
    default = config.provider_name(args.provider)
    asked: list[str] = []
    for name in dict.fromkeys(n for n in (recorded, default) if n is not None):
        where = "" if args.provider else " (where psdk made it)" if name == recorded else \
            " (the default)"
        try:
            opened = config.open_provider(name)
        except ProviderNotFound:
            if name != recorded:
                raise
            asked.append(f"{name} (where psdk made it; not installed)")
            continue
        async with opened as provider:
            if await _knows(provider, kind, ident):
                yield provider
                return
        asked.append(f"{name}{where}")
        if name == recorded:
            places.forget(kind, ident)
    hint = "" if args.provider else "; name its provider with --provider P"
    raise CliError(f"no {kind} {ident!r} found; asked {' and '.join(asked)}{hint}")


async def _knows(provider: SandboxProvider, kind: Kind, ident: str) -> bool:
    """Whether ``provider`` holds the sandbox or snapshot ``ident``."""
    if kind == "sandbox":
        try:
            await provider.get_info(ident)
        except SandboxNotFound:
            return False
        return True
    if not provider.supports(Capability.SNAPSHOT_FILESYSTEM):
        return False
    return any(s.id == ident for s in await provider.list_snapshots())


def exit_status(code: int) -> int:
    """A command's exit code as a process exit status (signal N gives 128+N, as in sh)."""
    if code < 0:
        return 128 + (-code & 0x7F)
    return code & 0xFF


# -------------------------------------------------------------- run / exec


async def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """Create a sandbox, run one command in it, kill it; exit with the command's code."""
    argv = _command_argv(args)
    async with provider_from(args) as provider:
        spec = SandboxSpec(template=args.template)
        with console.status(f"creating a {provider.name} sandbox"):
            sandbox = await provider.create(spec)
        try:
            return await _run_command(sandbox, argv, args, console)
        finally:
            with anyio.CancelScope(shield=True), console.status("removing the sandbox"):
                await sandbox.kill()


async def cmd_exec(args: argparse.Namespace, console: Console) -> int:
    """Run a command in an existing sandbox; exit with the command's code."""
    argv = _command_argv(args)
    async with provider_holding(args, "sandbox", args.id) as provider:
        sandbox = await connect_resuming(provider, args.id, console)
        return await _run_command(sandbox, argv, args, console)


async def connect_resuming(provider: SandboxProvider, sandbox_id: str,
                           console: Console) -> Sandbox:
    """A handle on the sandbox, resumed first if it was paused, saying so on stderr."""
    sandbox = await provider.connect(sandbox_id, resume=False)
    if sandbox.info.state in (SandboxState.PAUSED, SandboxState.PAUSING):
        with console.status(f"resuming {sandbox_id}"):
            await sandbox.resume()
        console.done(f"resumed sandbox {sandbox_id} on {provider.name} (it was paused)")
    return sandbox


def _command_argv(args: argparse.Namespace) -> list[str]:
    if not args.cmd:
        raise CliError("no command given: name it after "
                       f"{'the id' if args.command == 'exec' else 'the options'}, e.g. psdk "
                       f"{args.command} {'ID ' if args.command == 'exec' else ''}ls -l",
                       code=2)
    if not args.cmd[0]:
        raise CliError("the command's name is empty: give the program to run after '--', "
                       f"e.g. psdk {args.command} {'ID ' if args.command == 'exec' else ''}"
                       "-- ls -l", code=2)
    return list(args.cmd)


async def _run_command(sandbox: Sandbox, argv: Sequence[str], args: argparse.Namespace,
                       console: Console) -> int:
    stdin = await anyio.to_thread.run_sync(_read_stdin) if args.stdin else None
    stream = sandbox.provider.supports(Capability.EXEC_STREAM)
    try:
        if stream:
            result = await sandbox.exec(list(argv), env=dict(args.env), cwd=args.cwd,
                                        timeout=args.timeout, stdin=stdin,
                                        on_stdout=console.write_stdout,
                                        on_stderr=console.write_stderr)
        else:
            result = await sandbox.exec(list(argv), env=dict(args.env), cwd=args.cwd,
                                        timeout=args.timeout, stdin=stdin)
    except CommandTimeout as exc:
        if not stream:
            _print_result(exc.result, console)
        raise
    if not stream:
        _print_result(result, console)
    return exit_status(result.exit_code)


def _read_stdin() -> bytes:
    return sys.stdin.buffer.read()


def _print_result(result: ExecResult, console: Console) -> None:
    if result.stdout_bytes:
        console.write_stdout(result.stdout_bytes)
    if result.stderr_bytes:
        console.write_stderr(result.stderr_bytes)


# --------------------------------------------------------------- lifecycle


async def cmd_create(args: argparse.Namespace, console: Console) -> int:
    """Create a sandbox that outlives this command; print its id."""
    opening = (provider_holding(args, "snapshot", args.from_snapshot)
               if args.from_snapshot else provider_from(args))
    async with opening as provider:
        spec = _spec_from(args)
        with console.status(f"creating a {provider.name} sandbox"):
            sandbox = await provider.create(spec)
        default_places().remember("sandbox", sandbox.id, provider.name)
        info = await sandbox.refresh() if args.json else None
    console.out(sandbox.id if info is None else dump_json(info))
    console.done(f"created sandbox {sandbox.id} on {provider.name}")
    return 0


def _spec_from(args: argparse.Namespace) -> SandboxSpec:
    """The spec ``psdk create``'s options describe."""
    return SandboxSpec(
        template=args.template, snapshot=args.from_snapshot, metadata=dict(args.label),
        env=dict(args.env),
        resources=Resources(cpu=args.cpu, memory_mb=args.memory, disk_mb=args.disk),
        lifecycle=Lifecycle(idle_timeout=args.timeout, on_idle=args.on_idle),
        network=NetworkPolicy(allow_internet=args.network == "internet",
                              allow_out=args.allow_out, deny_out=args.deny_out),
        # (mypy reads attrs' tuple converter as a generic it cannot solve)
        volumes=[VolumeMount(volume=name, path=path, read_only=read_only)  # type: ignore[misc]
                 for name, path, read_only in args.volume])


async def cmd_ls(args: argparse.Namespace, console: Console) -> int:
    """List sandboxes, optionally those carrying every ``--label``: of every installed
    provider that can be asked (``--provider``: of that one).

    Broken records (a state the provider could not read) are hidden, with one warning
    line saying how many; ``--all`` shows them, in state ``broken`` with the reason.
    """
    infos = await _list_everywhere(args, console)
    infos.sort(key=lambda i: (i.created_at.timestamp() if i.created_at else float("inf"),
                              i.provider, i.id))
    broken = [i for i in infos if broken_reason(i) is not None]
    if broken and not args.all:
        infos = [i for i in infos if broken_reason(i) is None]
        n = len(broken)
        console.note(f"psdk: warning: {n} broken record{'s' if n != 1 else ''} hidden; "
                     f"psdk ls --all shows {'it' if n == 1 else 'them'}")
    if args.json:
        console.out(dump_json(infos))
        return 0
    header = ["ID", "PROVIDER", "STATE", "TEMPLATE", "CREATED", "METADATA"]
    rows = [[i.id, i.provider, "broken" if broken_reason(i) is not None else str(i.state),
             i.template or "-", _when(i.created_at, "-"), labels_cell(i.metadata)]
            for i in infos]
    if any(broken_reason(i) is not None for i in infos):
        header.append("PROBLEM")
        for row, info in zip(rows, infos, strict=True):
            row.append(broken_reason(info) or "-")
    for line in table(header, rows):
        console.out(line)
    return 0


async def _list_everywhere(args: argparse.Namespace, console: Console) -> list[SandboxInfo]:
    """The sandboxes of ``--provider``, else of every provider ``psdk`` looks in for an
    id: the default one, and each one ``psdk`` made a sandbox on; each sandbox once.

    The default provider's errors are the command's; another provider that cannot be
    asked (its API key unset, its engine down) is one warning line. A sandbox that an
    emulator runs on its backend (see :data:`provider_sdk.emulators.BACKING_LABEL`) is
    listed under the emulated provider's id alone when that provider answered.
    """
    from provider_sdk.emulators import emulated_by

    default = config.provider_name(args.provider)
    names = [default] if args.provider else \
        [default, *sorted(default_places().providers("sandbox") - {default})]
    found: dict[str, list[SandboxInfo]] = {}

    async def list_one(name: str) -> None:
        try:
            async with config.open_provider(name) as provider:
                found[name] = await provider.list(metadata=dict(args.label))
        except SandboxError as exc:
            if name == default:
                raise
            console.note(f"psdk: warning: the sandboxes psdk made on {name} are not "
                         f"listed: {exc}")

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(list_one, name)
    listed = {(info.provider, info.id) for infos in found.values() for info in infos}
    return [info for name in names for info in found.get(name, [])
            if emulated_by(info.metadata) not in listed]


async def cmd_info(args: argparse.Namespace, console: Console) -> int:
    """Show one sandbox's state and details."""
    async with provider_holding(args, "sandbox", args.id) as provider:
        info = await provider.get_info(args.id)
    if args.json:
        console.out(dump_json(info))
        return 0
    lines = _info_lines(info)
    width = max(len(key) for key, _ in lines) + 2
    for key, value in lines:
        console.out(f"{cell(key) + ':':<{width}}{cell(value)}")
    return 0


def _info_lines(info: SandboxInfo) -> list[tuple[str, str]]:
    res = to_json(info.resources)
    lines = [
        ("id", info.id),
        ("provider", info.provider),
        ("state", str(info.state)),
        ("template", info.template or "-"),
        ("created", _when(info.created_at, "-")),
        ("expires", _when(info.expires_at, "never")),
        ("metadata", labels_cell(info.metadata)),
        ("resources", ", ".join(f"{k}={v}" for k, v in res.items() if v is not None) or "-"),
    ]
    lines += [(k, "-" if v is None else str(v)) for k, v in sorted(info.extra.items())]
    return lines


async def cmd_pause(args: argparse.Namespace, console: Console) -> int:
    """Pause a sandbox."""
    return await _change_state(args, console, ("pausing", "paused"), Sandbox.pause)


async def cmd_resume(args: argparse.Namespace, console: Console) -> int:
    """Resume a paused sandbox; returns once it answers."""
    return await _change_state(args, console, ("resuming", "resumed"), Sandbox.resume)


async def _change_state(args: argparse.Namespace, console: Console, verbs: tuple[str, str],
                        change: Callable[[Sandbox], Awaitable[SandboxInfo]]) -> int:
    doing, done = verbs
    async with provider_holding(args, "sandbox", args.id) as provider:
        sandbox = await provider.connect(args.id, resume=False)
        with console.status(f"{doing} {args.id}"):
            await change(sandbox)
    console.done(f"{done} sandbox {args.id} on {provider.name}")
    return 0


async def cmd_kill(args: argparse.Namespace, console: Console) -> int:
    """Kill a sandbox, or remove a broken record; an unknown id is an error (killing
    twice is not)."""
    async with provider_holding(args, "sandbox", args.id) as provider:
        broken = broken_reason(await provider.get_info(args.id)) is not None
        with console.status(f"killing {args.id}"):
            await provider.kill(args.id)
    default_places().forget("sandbox", args.id)
    what = "removed broken record" if broken else "killed sandbox"
    console.done(f"{what} {args.id} on {provider.name}")
    return 0


async def cmd_snapshot(args: argparse.Namespace, console: Console) -> int:
    """Snapshot a sandbox and print the snapshot's id; list or remove snapshots."""
    if args.action == "create":
        async with provider_holding(args, "sandbox", args.id) as provider:
            sandbox = await provider.connect(args.id, resume=False)
            with console.status(f"snapshotting {args.id}"):
                snapshot = await sandbox.snapshot()
            default_places().remember("snapshot", snapshot.id, provider.name)
        console.out(dump_json(snapshot) if args.json else snapshot.id)
        console.done(f"took snapshot {snapshot.id} of sandbox {args.id} on {provider.name}")
    elif args.action == "ls":
        async with provider_from(args) as provider:
            snapshots = await provider.list_snapshots(sandbox_id=args.sandbox)
        snapshots.sort(key=lambda s: (_when(s.created_at, ""), s.id))
        _print_rows(console, args.json, snapshots, ["ID", "SANDBOX", "CAPTURES", "CREATED"],
                    lambda s: [s.id, s.sandbox_id or "-", ",".join(sorted(s.captures)) or "-",
                               _when(s.created_at, "-")])
    else:
        for snapshot_id in args.ids:
            async with provider_holding(args, "snapshot", snapshot_id) as provider:
                await provider.delete_snapshot(snapshot_id)
            default_places().forget("snapshot", snapshot_id)
            console.done(f"removed snapshot {snapshot_id} on {provider.name}")
        if args.json:
            console.out(dump_json(args.ids))
    return 0


async def cmd_volume(args: argparse.Namespace, console: Console) -> int:
    """Create a volume and print its id; list or remove volumes."""
    async with provider_from(args) as provider:
        if args.action == "create":
            volume = await provider.create_volume(args.name)
            console.out(dump_json(volume) if args.json else volume.id)
            console.done(f"created volume {volume.name} on {provider.name}")
        elif args.action == "ls":
            volumes = sorted(await provider.list_volumes(), key=lambda v: v.name)
            _print_rows(console, args.json, volumes, ["ID", "NAME", "CREATED"],
                        lambda v: [v.id, v.name, _when(v.created_at, "-")])
        else:
            for name in args.names:
                await provider.delete_volume(name)
                console.done(f"removed volume {name} on {provider.name}")
            if args.json:
                console.out(dump_json(args.names))
    return 0


def _print_rows(console: Console, json_output: bool, items: Sequence[T],
                header: list[str], row: Callable[[T], list[str]]) -> None:
    """``items`` as JSON, or as a table with ``header`` (nothing but the header if none)."""
    if json_output:
        console.out(dump_json(list(items)))
        return
    for line in table(header, [row(item) for item in items]):
        console.out(line)


# ---------------------------------------------------------------------- cp


def parse_location(text: str) -> tuple[str | None, str]:
    """``"ID:PATH"`` -> ``(ID, PATH)``; a local path -> ``(None, path)``."""
    match = _REMOTE.match(text)
    if match:
        return match.group(1), match.group(2)
    return None, text


async def cmd_cp(args: argparse.Namespace, console: Console) -> int:
    """Copy a file (a directory tree with ``-r``) into, out of, or between sandboxes;
    either side may be ``ID:PATH``."""
    src_id, src = parse_location(args.src)
    dst_id, dst = parse_location(args.dst)
    if src_id is None:
        if dst_id is None:
            raise CliError("neither side is in a sandbox: write one as ID:PATH", code=2)
        async with provider_holding(args, "sandbox", dst_id) as provider:
            sandbox = await connect_resuming(provider, dst_id, console)
            if args.recursive and await anyio.Path(src).is_dir():
                await _upload_tree(sandbox, src, dst, console)
            else:
                await _upload(sandbox, src, dst, console)
        return 0
    if not src:
        raise CliError(f"{args.src!r} names no file: write ID:PATH", code=2)
    async with contextlib.AsyncExitStack() as stack:
        provider = await stack.enter_async_context(provider_holding(args, "sandbox", src_id))
        source = await connect_resuming(provider, src_id, console)
        tree = args.recursive and (await source.files.stat(src)).type == FileType.DIRECTORY
        if dst_id is None:
            await (_download_tree if tree else _download)(source, src, dst, console)
        else:
            if dst_id != src_id:
                provider = await stack.enter_async_context(
                    provider_holding(args, "sandbox", dst_id))
            target = source if dst_id == src_id else \
                await connect_resuming(provider, dst_id, console)
            await (_tree_between if tree else _between)(source, src, target, dst, console)
    return 0


async def _remote_target(sandbox: Sandbox, path: str, name: str) -> str:
    """Where a file called ``name`` lands when copied to ``path`` in ``sandbox``."""
    if not path or path.endswith("/"):
        return posixpath.join(path or ".", name)
    with contextlib.suppress(FileNotFound):
        if (await sandbox.files.stat(path)).type == FileType.DIRECTORY:
            return posixpath.join(path, name)
    return path


async def _upload(sandbox: Sandbox, src: str, dst: str, console: Console) -> None:
    local = anyio.Path(src)
    if await local.is_dir():
        raise CliError(f"{src} is a directory: cp -r copies directories")
    size = (await local.stat()).st_size
    target = await _remote_target(sandbox, dst, os.path.basename(src))
    progress = console.progress(f"{src} -> {sandbox.id}:{target}", size)

    async def chunks() -> AsyncIterator[bytes]:
        async with await anyio.open_file(src, "rb") as f:
            while chunk := await f.read(_CHUNK):
                progress.advance(len(chunk))
                yield chunk

    try:
        await sandbox.files.write(target, chunks())
    finally:
        progress.close()
    console.done(f"copied {src} to {sandbox.id}:{target} ({human_size(size)})")


def _refuse_special(sandbox: Sandbox, path: str, info: FileInfo) -> None:
    """Refuse a source that is a directory, device, FIFO or socket before reading it.

    The provider refuses a device or FIFO reached through a symlink when it reads;
    this only spares the round trip for what stat already shows.
    """
    if info.type == FileType.DIRECTORY:
        raise CliError(f"{sandbox.id}:{path} is a directory: cp -r copies directories")
    if info.type == FileType.OTHER:
        raise NotARegularFile(f"{path} is not a regular file (a device, FIFO or socket): "
                              "cp copies regular files", provider=sandbox.provider.name,
                              sandbox_id=sandbox.id)


async def _download(sandbox: Sandbox, src: str, dst: str, console: Console) -> None:
    info = await sandbox.files.stat(src)
    _refuse_special(sandbox, src, info)
    target = dst
    if await anyio.Path(dst).is_dir():
        target = os.path.join(dst, posixpath.basename(src.rstrip("/")))
    progress = console.progress(f"{sandbox.id}:{src} -> {target}", info.size)
    try:
        await sandbox.files.download(src, target, progress=progress.advance)
    finally:
        progress.close()
    console.done(f"copied {sandbox.id}:{src} to {target} ({human_size(info.size)})")


async def _between(source: Sandbox, src: str, target: Sandbox, dst: str,
                   console: Console) -> None:
    info = await source.files.stat(src)
    _refuse_special(source, src, info)
    path = await _remote_target(target, dst, posixpath.basename(src.rstrip("/")))
    progress = console.progress(f"{source.id}:{src} -> {target.id}:{path}", info.size)

    async def chunks() -> AsyncIterator[bytes]:
        async for chunk in source.files.stream(src):
            progress.advance(len(chunk))
            yield chunk

    try:
        await target.files.write(path, chunks())
    finally:
        progress.close()
    console.done(f"copied {source.id}:{src} to {target.id}:{path} "
                 f"({human_size(info.size)})")


async def _upload_tree(sandbox: Sandbox, src: str, dst: str, console: Console) -> None:
    target = await _remote_target(sandbox, dst, posixpath.basename(posixpath.normpath(src)))
    await sandbox.files.upload_dir(src, target)
    console.done(f"copied {src} to {sandbox.id}:{target}")


async def _download_tree(sandbox: Sandbox, src: str, dst: str, console: Console) -> None:
    target = dst
    if await anyio.Path(dst).is_dir():
        target = os.path.join(dst, posixpath.basename(posixpath.normpath(src)))
    await sandbox.files.download_dir(src, target)
    console.done(f"copied {sandbox.id}:{src} to {target}")


async def _tree_between(source: Sandbox, src: str, target: Sandbox, dst: str,
                        console: Console) -> None:
    """A tree from one sandbox to another, through a local temporary directory."""
    path = await _remote_target(target, dst, posixpath.basename(posixpath.normpath(src)))
    with tempfile.TemporaryDirectory(prefix="psdk-cp-") as staging:
        await source.files.download_dir(src, staging)
        await target.files.upload_dir(staging, path)
    console.done(f"copied {source.id}:{src} to {target.id}:{path}")


# ------------------------------------------------------------------ helpers


def _when(value: dt.datetime | None, missing: str) -> str:
    if value is None:
        return missing
    if value.tzinfo is not None:
        value = value.astimezone()
    return value.strftime("%Y-%m-%d %H:%M:%S")

