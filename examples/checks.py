"""The examples' argument rules (numpy only): a one-line ``ValueError`` naming the parameter and
the value, as ``swiglu.build: tile_b must be a positive integer, not 0``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from step_lang.integers import is_integer

__all__ = [
    "dtype_name",
    "is_positive_int",
    "number_in",
    "positive_int",
    "positive_or_none",
    "shown",
]


def shown(value: Any) -> str:
    """``repr`` of a value in a message; a numpy integer as the plain number."""
    return str(int(value)) if isinstance(value, np.integer) else repr(value)


def is_positive_int(value: Any) -> bool:
    """Whether ``value`` is a positive integer (numpy integers too, bools not:
    :func:`step_lang.integers.is_integer`)."""
    return is_integer(value) and value >= 1


def positive_int(where: str, value: Any) -> int:
    """``value`` as an ``int`` if it is a positive integer (numpy integers too, bools not)."""
    if not is_positive_int(value):
        raise ValueError(f"{where} must be a positive integer, not {shown(value)}")
    return int(value)


def positive_or_none(where: str, value: Any) -> int | None:
    """``None``, or ``value`` as an ``int`` if it is a positive integer."""
    if value is None:
        return None
    if not is_positive_int(value):
        raise ValueError(f"{where} must be a positive integer or None, not {shown(value)}")
    return int(value)


def number_in(where: str, value: Any, low: float, high: float) -> float:
    """``value`` as a ``float`` if it is a finite real number (numpy numbers too, bools and
    strings not) in ``[low, high]``; a ``ValueError`` naming ``where`` and the value if not."""
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )
    if not real or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{where} must be a number in [{low:g}, {high:g}], not {shown(value)}")
    return float(value)


def dtype_name(where: str, value: Any) -> str:
    """``value`` if it names a ``step_lang`` dtype."""
    from step_lang.types import DTYPES, dtype

    try:
        dtype(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be one of {', '.join(DTYPES)}, not {value!r}") from None
    return value
