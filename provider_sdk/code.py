"""A sandbox's code interpreter (``sandbox.code``, capability ``code.interpreter``):
stateful contexts, runs and their results, each validated, evented and handed to the
provider's hooks::

    ctx = await sandbox.code.create_context(language="python", cwd="/tmp")
    await sandbox.code.run("x = 41", context=ctx)
    result = await sandbox.code.run("x + 1", context=ctx)
    assert result.text == "42"

The value types are in :mod:`provider_sdk.interpreter`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from provider_sdk._hooks import ProviderHooks
from provider_sdk.capabilities import Capability
from provider_sdk.errors import InvalidInput, attributed
from provider_sdk.events import span
from provider_sdk.files import check_path
from provider_sdk.interpreter import LANGUAGES, CodeContext, CodeResult, CodeRun, TextCallback
from provider_sdk.limits import check_limit
from provider_sdk.models import _env_map

__all__ = ["SandboxCode"]


class _Owner(Protocol):
    """What :class:`SandboxCode` needs of its sandbox (a
    :class:`~provider_sdk.sandbox.Sandbox`): the provider's hooks and the sandbox's id."""

    @property
    def provider(self) -> ProviderHooks: ...

    @property
    def id(self) -> str: ...


class SandboxCode:
    """The code interpreter of one sandbox (``code.interpreter``).

    A context is an interpreter that keeps its state from one :meth:`run` to the next;
    contexts are independent of each other. :meth:`run` without a context uses the
    sandbox's default context, made on first use. Contexts belong to the provider
    instance that made them.
    """

    def __init__(self, sandbox: _Owner) -> None:
        self._sandbox = sandbox

    async def create_context(self, *, language: str = "python", cwd: str | None = None,
                             env: Mapping[str, str] | None = None) -> CodeContext:
        """Start a context: a fresh interpreter of ``language`` (``"python"``), in
        ``cwd`` (default: the sandbox's working directory), with ``env`` over the
        sandbox's environment. An unknown language is
        :class:`~provider_sdk.errors.InvalidInput`."""
        provider, sandbox_id = self._sandbox.provider, self._sandbox.id
        provider.require(Capability.CODE_INTERPRETER, sandbox_id=sandbox_id)
        with attributed(provider.name, sandbox_id):
            if not isinstance(language, str) or language not in LANGUAGES:
                raise InvalidInput(f"language: {language!r} is not one of "
                                   f"{', '.join(sorted(LANGUAGES))}")
            if cwd is not None:
                check_path(cwd, provider.name, sandbox_id)
            checked = _env_map(env)
        async with span("code.context.create", provider.name, sandbox_id):
            return await provider._create_code_context(sandbox_id, language=language,
                                                       cwd=cwd, env=checked)

    async def run(self, code: str, *, context: CodeContext | None = None,
                  env: Mapping[str, str] | None = None, timeout: float | None = None,
                  on_stdout: TextCallback | None = None,
                  on_stderr: TextCallback | None = None,
                  output_limit: int | None = None) -> CodeResult:
        """Run ``code`` in ``context`` (default: the sandbox's default context) and
        return its :class:`~provider_sdk.interpreter.CodeResult`: ``text``, the plain
        text of the last expression's value, ``stdout``, ``stderr``, and ``error`` for
        an exception the code raised (a result, not an error of this call).

        ``env`` is set in ``os.environ`` for this run only. ``timeout`` (seconds,
        finite) interrupts the code and raises
        :class:`~provider_sdk.errors.CodeTimeout` with the partial result; the context
        keeps what earlier runs defined. A run whose caller cancels it is interrupted
        the same way. ``on_stdout``/``on_stderr`` receive text as it arrives, all of
        it; the result keeps at most ``output_limit`` bytes of each of stdout, stderr
        and text (default: the provider's
        :attr:`~provider_sdk.provider.SandboxProvider.output_limit`, as
        :meth:`~provider_sdk.sandbox.Sandbox.exec`). A closed context raises
        :class:`~provider_sdk.errors.ContextNotFound`.
        """
        provider, sandbox_id = self._sandbox.provider, self._sandbox.id
        provider.require(Capability.CODE_INTERPRETER, sandbox_id=sandbox_id)
        with attributed(provider.name, sandbox_id):
            request = CodeRun(code=_checked_code(code), context_id=self._context_id(context),
                              env=_env_map(env), timeout=_checked_timeout(timeout),
                              output_limit=check_limit("output_limit", provider.output_limit
                                                       if output_limit is None
                                                       else output_limit),
                              on_stdout=on_stdout, on_stderr=on_stderr)
        async with span("code.run", provider.name, sandbox_id):
            return await provider._run_code(sandbox_id, request)

    async def close_context(self, context: CodeContext) -> None:
        """End a context and what it holds. Closing twice is not an error; a run in a
        closed context raises :class:`~provider_sdk.errors.ContextNotFound`."""
        provider, sandbox_id = self._sandbox.provider, self._sandbox.id
        provider.require(Capability.CODE_INTERPRETER, sandbox_id=sandbox_id)
        with attributed(provider.name, sandbox_id):
            context_id = self._context_id(context)
            if context_id is None:
                raise InvalidInput("context: expected a CodeContext, got None")
        async with span("code.context.close", provider.name, sandbox_id):
            await provider._close_code_context(sandbox_id, context_id)

    def _context_id(self, context: CodeContext | None) -> str | None:
        if context is None:
            return None
        if not isinstance(context, CodeContext):
            raise InvalidInput(f"context: expected a CodeContext, got "
                               f"{type(context).__name__}")
        if context.sandbox_id != self._sandbox.id:
            raise InvalidInput(f"context: {context.id!r} belongs to sandbox "
                               f"{context.sandbox_id!r}, not this one")
        return context.id


def _checked_code(code: str) -> str:
    if not isinstance(code, str):
        raise InvalidInput(f"code: expected a string, got {type(code).__name__}")
    return code


def _checked_timeout(timeout: float | None) -> float | None:
    if timeout is not None and (isinstance(timeout, bool)
                                or not isinstance(timeout, (int, float))
                                or not 0 < timeout < math.inf):
        raise InvalidInput(f"timeout must be a finite positive number of seconds, "
                           f"got {timeout!r}")
    return timeout
