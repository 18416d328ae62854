"""The simulator's rules for a number given as a setting: a one-line error naming the owner,
the setting and the value (``MemoryConfig: channels must be a positive integer, not 0``),
never clamped or rounded. Used by the profiles, the memory model and queue sizing, and by the
command line's sizing options (``stepcli.sizing``)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_int", "check_number"]


def _where(owner: str, name: str) -> str:
    return f"{owner}: {name}" if owner else name


def check_int(
    owner: str, name: str, value: Any, minimum: int, error: type[Exception] = ValueError
) -> int:
    """``value`` must be an integer (not a bool) of at least ``minimum`` (0 or 1): an
    ``error`` naming ``owner: name`` (``name`` alone without an owner) and the value
    otherwise. Returns ``value``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        rule = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise error(f"{_where(owner, name)} must be {rule}, not {value!r}")
    return value


def check_number(
    owner: str, name: str, value: Any, minimum: float, error: type[Exception] = ValueError
) -> float:
    """``value`` must be a finite number (an int or a float, not a bool) of at least
    ``minimum``: an ``error`` as :func:`check_int`'s otherwise. Returns ``value``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < minimum
    ):
        raise error(
            f"{_where(owner, name)} must be a finite number of at least {minimum}, not {value!r}"
        )
    return value
