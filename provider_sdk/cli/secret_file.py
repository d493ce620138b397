"""A credential read from a file named on the command line (``--api-key-file``,
``--token-file``): one line, the credential alone, kept as a
:class:`~provider_sdk.secret.Secret` from the moment it is read."""

from __future__ import annotations

from provider_sdk.errors import ConfigError
from provider_sdk.secret import Secret

__all__ = ["read_secret_file"]

_MAX_FILE = 64 << 10


def read_secret_file(path: str, option: str, what: str = "key") -> Secret:
    """The credential (a ``what``: key, token) in the file at ``path``, given with
    ``option``.

    Raises:
        ConfigError: naming ``option`` and ``path`` (never the content): the file cannot
            be read, is larger than 64 KiB, is not UTF-8, or does not hold one line.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot read it ({exc.strerror})") from None
    if len(data) > _MAX_FILE:
        raise ConfigError(f"{option} {path}: larger than {_MAX_FILE} bytes; "
                          f"it should hold the {what} alone")
    try:
        key = data.decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{option} {path}: not UTF-8 text") from None
    if not key or "\n" in key:
        raise ConfigError(f"{option} {path}: it must hold the {what} alone, on one line")
    return Secret(key)
