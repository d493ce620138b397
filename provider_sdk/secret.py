"""``Secret``: a credential held as a string that gives its value away only when asked.

A leaf module (it imports nothing of provider_sdk), so models and settings can both
hold secrets; :mod:`provider_sdk.config` and the package export it too.
"""

from __future__ import annotations

__all__ = ["Secret"]


class Secret(str):
    """A string holding a credential, which gives it away only through :meth:`reveal`.

    As a string it is ``***``: ``repr``, ``str``, formatting, concatenation,
    ``json.dumps`` and anything else that reads its characters see the mask, never
    the value. Equality (with another Secret or with the string it holds), hashing
    and truth follow the real value. Use :meth:`reveal` where the real value must be
    sent.
    """

    __slots__ = ("_value",)
    _value: str

    def __new__(cls, value: str) -> Secret:
        """Hold ``value`` (itself a :class:`Secret`, or any string)."""
        if not isinstance(value, str):
            raise TypeError(f"a Secret holds a string, not {type(value).__name__}")
        self = super().__new__(cls, "***")
        self._value = value.reveal() if isinstance(value, Secret) else str.__str__(value)
        return self

    def __repr__(self) -> str:
        return "Secret('***')"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self._value == (other._value if isinstance(other, Secret) else other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._value)  # equal to the string it holds, so hashed as it is

    def __bool__(self) -> bool:
        return bool(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))

    def reveal(self) -> str:
        """The real value."""
        return self._value
