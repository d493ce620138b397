"""Questions the emulator asks inside a backend sandbox (where its links lead, whose its
files are, their user metadata), answered by a helper kept in the sandbox's code
interpreter where the backend has one.

envd answers these from its own process; a command per answer (a shell, ``stat``,
``python3``) cost the emulator tens of milliseconds per ``Stat``, ten times the rest of
the request, which made every client that checks a file before reading it look slow.
The helper is defined once per backend sandbox, in a context of its own (nothing of it
shows in the sandbox's other contexts), and gives each answer as the commands' fields
would be, JSON-encoded (names that are not UTF-8 survive). Where there is no
interpreter, or the helper's context is gone (the sandbox was paused, or code inside
ended it), the caller runs the command instead.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Sequence
from typing import Any

import anyio
import attrs

from provider_sdk import errors
from provider_sdk.capabilities import Capability
from provider_sdk.interpreter import CodeContext
from provider_sdk.sandbox import Sandbox

__all__ = ["ask_helper", "prepare_helper"]

# Each function prints, as JSON, the list of fields the matching shell script of
# ``_envd_entries`` prints NUL-separated.
_HELPER = r'''
def _psdk_resolve(paths):
    import json, os, stat
    fields = []
    for path in paths:
        resolved = os.path.realpath(path)
        try:
            st = os.stat(resolved)
        except OSError:
            fields += ["", "0", ""]
            continue
        kind = ("d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode)
                else "o")
        fields += [kind, format(stat.S_IMODE(st.st_mode), "o"), resolved]
    print(json.dumps(fields))


def _psdk_describe(paths):
    import grp, json, os, pwd
    named, attributes = [], []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            pass
        else:
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = "UNKNOWN"
            try:
                group = grp.getgrgid(st.st_gid).gr_name
            except KeyError:
                group = "UNKNOWN"
            named += [path, owner + ":" + group]
        found = {}
        try:
            for name in os.listxattr(path, follow_symlinks=False):
                if name.startswith("user.e2b."):
                    found[name[9:]] = os.getxattr(path, name, follow_symlinks=False).decode(
                        "utf-8", "replace")
        except OSError:
            pass
        attributes.append(json.dumps(found))
    print(json.dumps(named + [""] + attributes))
'''

FUNCTIONS = frozenset({"_psdk_resolve", "_psdk_describe"})
"""The helper's functions."""


@attrs.define
class _Helpers:
    """The helper's context in each sandbox of one backend provider."""

    lock: anyio.Lock = attrs.Factory(anyio.Lock)
    contexts: dict[str, CodeContext] = attrs.Factory(dict)


_BY_PROVIDER: weakref.WeakKeyDictionary[Any, _Helpers] = weakref.WeakKeyDictionary()


async def ask_helper(sandbox: Sandbox, function: str, paths: Sequence[str], *,
                     timeout: float) -> list[str] | None:
    """The fields the helper's ``function`` gives for ``paths`` in ``sandbox``; ``[]``
    if it took longer than ``timeout`` (as a command that did would give); ``None``
    where there is no helper to ask (no interpreter, or its context is gone), for the
    caller to run the command."""
    if function not in FUNCTIONS:
        raise ValueError(f"no helper function {function!r}")
    if not sandbox.provider.supports(Capability.CODE_INTERPRETER):
        return None
    helpers = _BY_PROVIDER.setdefault(sandbox.provider, _Helpers())
    try:
        context = await _context(helpers, sandbox)
        result = await sandbox.code.run(f"{function}({list(paths)!r})", context=context,
                                        timeout=timeout)
    except errors.CodeTimeout as exc:
        if not exc.context_kept:
            helpers.contexts.pop(sandbox.id, None)
        return []
    except errors.SandboxError:
        helpers.contexts.pop(sandbox.id, None)
        return None
    try:
        fields = json.loads(result.stdout) if result.error is None else None
    except ValueError:
        fields = None
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        helpers.contexts.pop(sandbox.id, None)  # tampered with: made anew next time
        return None
    return fields


async def prepare_helper(sandbox: Sandbox) -> None:
    """Start ``sandbox``'s helper now (the emulator does when it creates a sandbox, as
    envd is up when the sandbox is), so that the first question finds it ready; where
    it cannot start, the first question says so."""
    if sandbox.provider.supports(Capability.CODE_INTERPRETER):
        helpers = _BY_PROVIDER.setdefault(sandbox.provider, _Helpers())
        with contextlib.suppress(errors.SandboxError):
            await _context(helpers, sandbox)


async def _context(helpers: _Helpers, sandbox: Sandbox) -> CodeContext:
    async with helpers.lock:
        context = helpers.contexts.get(sandbox.id)
        if context is None:
            context = await sandbox.code.create_context(cwd="/")
            done = await sandbox.code.run(_HELPER, context=context)
            if done.error is not None:
                await sandbox.code.close_context(context)
                raise errors.SandboxError(f"the helper did not load: {done.error.name}")
            helpers.contexts[sandbox.id] = context
        return context
