"""Credentials read from files named on the command line: one credential alone
(``--api-key-file``, ``--token-file``), or owners with their tokens
(``--owners-file``); each kept as a :class:`~provider_sdk.secret.Secret` from the moment
it is read, and named by no error."""

from __future__ import annotations

from provider_sdk.errors import ConfigError
from provider_sdk.secret import Secret

__all__ = ["read_owner_tokens", "read_secret_file"]

_MAX_FILE = 64 << 10


def read_secret_file(path: str, option: str, what: str = "key") -> Secret:
    """The credential (a ``what``: key, token) in the file at ``path``, given with
    ``option``.

    Raises:
        ConfigError: naming ``option`` and ``path`` (never the content): the file cannot
            be read, is larger than 64 KiB, is not UTF-8, or does not hold one line.
    """
    key = _read_text(path, option, f"it should hold the {what} alone").strip()
    if not key or "\n" in key:
        raise ConfigError(f"{option} {path}: it must hold the {what} alone, on one line")
    return Secret(key)


def read_owner_tokens(path: str, option: str) -> list[tuple[Secret, str]]:
    """The owners in the file at ``path`` (given with ``option``), each with its token:
    one ``OWNER TOKEN`` per line (the token is the line's last word, the owner what
    comes before it); blank lines and lines starting with ``#`` are skipped.

    Raises:
        ConfigError: naming ``option``, ``path`` and a line number (never a token): the
            file cannot be read, is larger than 64 KiB or not UTF-8, a line lacks its
            owner or token, an owner is not one (see
            :func:`~provider_sdk.manager.check_owner`) or comes twice, a token comes
            twice, or the file names no owner.
    """
    from provider_sdk.errors import InvalidInput
    from provider_sdk.manager import check_owner

    owners: dict[str, int] = {}
    tokens: dict[str, int] = {}
    found: list[tuple[Secret, str]] = []
    text = _read_text(path, option, "it should hold one 'OWNER TOKEN' per line")
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{option} {path}, line {number}"
        parts = line.rsplit(None, 1)
        if len(parts) != 2:
            raise ConfigError(f"{where}: expected 'OWNER TOKEN'")
        owner, token = parts[0].strip(), parts[1]
        try:
            check_owner(owner)
        except InvalidInput as exc:
            raise ConfigError(f"{where}: {exc.message}") from None
        if owner in owners:
            raise ConfigError(f"{where}: owner {owner!r} again (first on line "
                              f"{owners[owner]})")
        if token in tokens:
            raise ConfigError(f"{where}: the token of line {tokens[token]} again: each "
                              "owner needs a token of its own")
        owners[owner] = tokens[token] = number
        found.append((Secret(token), owner))
    if not found:
        raise ConfigError(f"{option} {path}: names no owner (one 'OWNER TOKEN' per line)")
    return found


def _read_text(path: str, option: str, expected: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot read it ({exc.strerror})") from None
    if len(data) > _MAX_FILE:
        raise ConfigError(f"{option} {path}: larger than {_MAX_FILE} bytes; {expected}")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{option} {path}: not UTF-8 text") from None
