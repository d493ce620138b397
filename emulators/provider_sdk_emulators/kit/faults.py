"""The faults an emulator injects, by name, and what it served.

Each emulator declares the faults it knows; ``psdk emulate --fault NAME=VALUE`` (the
:attr:`~provider_sdk.emulators.EmulatorOptions.faults` of its options) sets them at
start, and its admin API (:mod:`~provider_sdk_emulators.kit.service`) while it runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from provider_sdk.errors import ConfigError

__all__ = ["Faults"]


class Faults:
    """The faults an emulator injects: named non-negative numbers, and what was served.

    Each emulator declares the names it knows, with a description of each (what a count
    means, or that a value is seconds of latency); values come from
    :attr:`~provider_sdk.emulators.EmulatorOptions.faults` and may be changed while it
    runs (an emulator's admin endpoint calls :meth:`set`). The emulator decides when a
    fault applies and calls :meth:`served` each time it injects one, so a test can check
    what it got.
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
