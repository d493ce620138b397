"""Emulators: local servers that speak a vendor's wire protocol, backed by a neutral provider.

A vendor's provider (E2B, CubeSandbox, Daytona) is tested offline by pointing the vendor's
own, unmodified SDK at an emulator. Emulators are plugins, found through the entry-point
group ``provider_sdk.emulators`` exactly as providers are; an entry point names a
callable with the :class:`Emulator` signature. The name of an emulator is the name of the
provider it serves.

``psdk emulate NAME`` runs one in the foreground; ``psdk contract --provider NAME
--emulator`` starts one in-process and runs the contract suite against it::

    async with emulators.run("e2b", EmulatorOptions(api_key=Secret("k"))) as running:
        os.environ.update(running.environment())
        ...
"""

from __future__ import annotations

import contextlib
import errno
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import entry_points
from typing import Protocol, cast

import attrs

from provider_sdk.config import Secret
from provider_sdk.distributions import install_hint
from provider_sdk.errors import ConfigError, InvalidInput, QuotaExceeded

__all__ = ["BACKING_LABEL", "BODY_LIMIT", "GROUP", "INFLATE_LIMIT", "BodyTooLarge", "Emulator",
           "EmulatorOptions", "Faults", "RunningEmulator", "available", "backing_labels",
           "decoded", "emulated_by", "load", "run"]

BODY_LIMIT = 16 << 20
"""The most an emulator reads into memory for one request body (JSON, an RPC message),
counted after any ``Content-Encoding`` is undone."""

INFLATE_LIMIT = 256 << 20
"""The most a compressed body (``Content-Encoding: gzip`` or ``deflate``) may inflate to,
even when it is streamed to disk: past it the request is refused, so a small body cannot
make the emulator write (or hold) gigabytes."""

# How much one step of the inflater may produce: the memory a single compressed chunk can
# cost, however much it would inflate.
_INFLATE_STEP = 256 << 10

GROUP = "provider_sdk.emulators"

BACKING_LABEL = "psdk.emulated"
"""The one label an emulator puts on each sandbox it runs on its backend,
``"<provider> <id>"``: the emulated sandbox it runs. The client's own labels stay with
the emulator, which serves them. ``psdk ls`` lists such a sandbox once, under the
emulated provider, when that provider is listed too."""


def backing_labels(provider: str, sandbox_id: str) -> dict[str, str]:
    """The labels of the backend's sandbox that runs ``provider``'s ``sandbox_id``."""
    return {BACKING_LABEL: f"{provider} {sandbox_id}"}


def emulated_by(metadata: Mapping[str, str]) -> tuple[str, str] | None:
    """``(provider, id)`` of the emulated sandbox a backend's sandbox runs, from its
    labels (see :data:`BACKING_LABEL`); ``None`` for any other sandbox."""
    provider, sep, sandbox_id = metadata.get(BACKING_LABEL, "").partition(" ")
    return (provider, sandbox_id) if sep and provider and sandbox_id else None

# Where the well-known emulators live, for the hint in "not installed" errors.
_DISTRIBUTIONS = {
    "e2b": "sandbox-provider-sdk-e2b",
    "cube": "sandbox-provider-sdk-e2b",
    "daytona": "sandbox-provider-sdk-daytona",
}


def _secret(value: str) -> Secret:
    return value if isinstance(value, Secret) else Secret(value)


def _optional_secret(value: str | None) -> Secret | None:
    return None if value is None else _secret(value)


@attrs.frozen(kw_only=True)
class EmulatorOptions:
    """How to run an emulator.

    Attributes:
        port: TCP port on 127.0.0.1 (``0`` picks a free one). Emulators never bind to
            any other address.
        backend: the neutral provider that runs the sandboxes (``local`` or ``docker``).
        api_key: the key clients must present; ``None`` lets the emulator read its
            vendor's usual setting (``E2B_API_KEY``, ...) and fail, naming it, if unset.
        faults: fault injection, ``NAME -> VALUE`` (each emulator documents its names).
    """

    port: int = 0
    backend: str = "local"
    api_key: Secret | None = attrs.field(default=None, converter=_optional_secret)
    faults: Mapping[str, str] = attrs.field(factory=dict, converter=dict)


@attrs.frozen(kw_only=True)
class RunningEmulator:
    """A started emulator.

    Attributes:
        name: the emulator's (and its provider's) name.
        url: the base URL it serves on, on 127.0.0.1.
        settings: the environment settings that point the provider at it (URLs,
            domains), without credentials.
        api_key_settings: names of the settings that carry the API key.
        api_key: the key it checks.
    """

    name: str
    url: str
    settings: Mapping[str, str] = attrs.field(factory=dict, converter=dict)
    api_key_settings: tuple[str, ...] = ()
    api_key: Secret = attrs.field(converter=_secret)

    def environment(self) -> dict[str, str]:
        """Every setting the provider needs, the API key's included (revealed)."""
        return {**self.settings, **dict.fromkeys(self.api_key_settings, self.api_key.reveal())}


class Faults:
    """The faults an emulator injects: named non-negative numbers, and what was served.

    Each emulator declares the names it knows, with a description of each (what a count
    means, or that a value is seconds of latency); values come from
    :attr:`EmulatorOptions.faults` and may be changed while it runs (an emulator's admin
    endpoint calls :meth:`set`). The emulator decides when a fault applies and calls
    :meth:`served` each time it injects one, so a test can check what it got.
    """

    def __init__(self, known: Mapping[str, str], initial: Mapping[str, str] | None = None):
        self.known = dict(known)
        self._values: dict[str, float] = dict.fromkeys(self.known, 0.0)
        self._served: dict[str, int] = dict.fromkeys(self.known, 0)
        for name, value in (initial or {}).items():
            self.set(name, value)

    def set(self, name: str, value: str | float) -> None:
        """Set fault ``name`` to ``value`` (a non-negative number; ``0`` turns it off).

        Raises:
            ConfigError: an unknown name (the message lists the known ones) or a value
                that is not a non-negative number.
        """
        if name not in self.known:
            raise ConfigError(f"unknown fault {name!r}; known: {', '.join(sorted(self.known))}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if not number >= 0 or number == float("inf"):
            raise ConfigError(f"fault {name!r} needs a non-negative number, got {value!r}")
        self._values[name] = number

    def value(self, name: str) -> float:
        """The current value of fault ``name``."""
        return self._values[name]

    def count(self, name: str) -> int:
        """The current value of fault ``name`` as a count."""
        return int(self._values[name])

    def served(self, name: str) -> None:
        """Record that fault ``name`` was injected once."""
        self._served[name] += 1

    def take(self, name: str) -> bool:
        """Whether to inject the counted fault ``name`` now; if so, one count is used
        up and the injection recorded."""
        left = self.count(name)
        if left <= 0:
            return False
        self._values[name] = float(left - 1)
        self.served(name)
        return True

    def report(self) -> dict[str, dict[str, float]]:
        """``{"set": {name: value}, "served": {name: times}}`` for every known fault."""
        return {"set": dict(self._values),
                "served": {name: float(n) for name, n in self._served.items()}}


class BodyTooLarge(QuotaExceeded):
    """A request body is larger than the emulator accepts (after decompression); an
    emulator answers it with 413 and reads no further.

    Attributes:
        limit: the limit in bytes that the body passed.
    """

    def __init__(self, message: str, *, limit: int, **kw: str | None) -> None:
        super().__init__(message, **kw)
        self.limit = limit


def _inflater(encoding: str) -> zlib._Decompress | None:
    """A decompressor for one ``Content-Encoding`` value; ``None`` for ``identity``."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj(wbits=32 + zlib.MAX_WBITS)  # zlib header (or gzip)
    raise InvalidInput(f"unsupported Content-Encoding {encoding!r}; "
                       "send gzip, deflate or identity")


async def decoded(chunks: AsyncIterable[bytes], encoding: str | None, *,
                  limit: int | None) -> AsyncIterator[bytes]:
    """A request body's chunks with ``encoding`` undone, bounded as it inflates.

    The body is inflated step by step, each step producing at most a few hundred KiB,
    so memory stays bounded however much a chunk would inflate; the running total is
    checked before each chunk is yielded.

    Args:
        chunks: the body as it arrives.
        encoding: the ``Content-Encoding`` header (``None``, ``identity``, ``gzip``,
            ``deflate``, or several of these separated by commas, applied in order).
        limit: the most bytes to yield; ``None`` for no limit on an identity body. A
            compressed body is always held to :data:`INFLATE_LIMIT` at most.

    Raises:
        BodyTooLarge: the body (decoded) passes its limit; nothing past it is yielded.
        InvalidInput: an unknown encoding, or a corrupt or truncated compressed body.
    """
    stages = [d for name in (encoding or "").split(",") if (d := _inflater(name))]
    stages.reverse()  # the last encoding applied is the first to undo
    if stages:
        limit = INFLATE_LIMIT if limit is None else min(limit, INFLATE_LIMIT)
    total = 0

    def count(piece: bytes) -> bytes:
        nonlocal total
        total += len(piece)
        if limit is not None and total > limit:
            raise BodyTooLarge(f"the request body is larger than {limit} bytes"
                               f"{' once decompressed' if stages else ''}", limit=limit)
        return piece

    def inflate(index: int, data: bytes, final: bool = False) -> Iterator[bytes]:
        # One stage's output feeds the next; each step is bounded, and a step that
        # filled its bound is followed by another, since zlib may hold output back.
        if index == len(stages):
            if data:
                yield count(data)
            return
        stage = stages[index]
        try:
            while True:
                piece = stage.decompress(data, _INFLATE_STEP)
                data = stage.unconsumed_tail
                if stage.eof and stage.unused_data.strip(b"\0"):
                    raise InvalidInput("the compressed body has data after its end")
                yield from inflate(index + 1, piece)
                if not data and len(piece) < _INFLATE_STEP:
                    break
            if final:
                yield from inflate(index + 1, stage.flush(), final=True)
        except zlib.error as exc:
            raise InvalidInput(f"the compressed body is corrupt: {exc}") from None

    async for chunk in chunks:
        if not stages:
            yield count(chunk)
            continue
        for piece in inflate(0, chunk):
            yield piece
    if stages:
        for piece in inflate(0, b"", final=True):
            yield piece
        if not all(stage.eof for stage in stages):
            raise InvalidInput("the compressed body ends early")


class Emulator(Protocol):
    """What an entry point in :data:`GROUP` names: start on enter, stop on exit."""

    def __call__(self, options: EmulatorOptions, /) -> AbstractAsyncContextManager[
            RunningEmulator]:
        """An async context manager that serves until it is exited."""
        ...


def _entry_points() -> dict[str, Callable[[], object]]:
    return {ep.name: ep.load for ep in entry_points(group=GROUP)}


def available() -> list[str]:
    """Names of every installed emulator, sorted; nothing is imported."""
    return sorted(_entry_points())


def load(name: str) -> Emulator:
    """The emulator named ``name``.

    Raises:
        ConfigError: none is installed under that name (the message says what to
            install and lists what is installed), or it failed to import.
    """
    loaders = _entry_points()
    if name not in loaders:
        dist = _DISTRIBUTIONS.get(name)
        install = f"; install it with: {install_hint(dist)}" if dist else ""
        installed = ", ".join(sorted(loaders)) or "none"
        raise ConfigError(f"no emulator named {name!r}{install}; installed: {installed}")
    try:
        obj = loaders[name]()
    except (ImportError, AttributeError) as exc:
        dist = _DISTRIBUTIONS.get(name)
        again = f"{dist}: {install_hint(dist)}" if dist else "the distribution that provides it"
        raise ConfigError(f"emulator {name!r} failed to import ({exc}); reinstall {again}") \
            from exc
    if not callable(obj):
        raise ConfigError(f"emulator {name!r}: {obj!r} is not callable")
    return cast(Emulator, obj)


@asynccontextmanager
async def run(name: str, options: EmulatorOptions | None = None) -> AsyncIterator[
        RunningEmulator]:
    """Start the emulator ``name``; stop it when the block exits.

    Raises:
        ConfigError: no such emulator, or its port on 127.0.0.1 is taken (the message
            names the port).
    """
    options = options or EmulatorOptions()
    async with contextlib.AsyncExitStack() as stack:
        try:
            running = await stack.enter_async_context(load(name)(options))
        except Exception as exc:
            if not _address_in_use(exc):
                raise
            raise ConfigError(f"emulator {name!r}: port {options.port} on 127.0.0.1 is "
                              "already in use; pick another with --port, or 0 for any free "
                              "one") from exc
        yield running


def _address_in_use(exc: BaseException) -> bool:
    """Whether ``exc`` is, or groups (an emulator's task group), EADDRINUSE."""
    if isinstance(exc, OSError):
        return exc.errno == errno.EADDRINUSE
    return any(_address_in_use(e) for e in getattr(exc, "exceptions", ()))
