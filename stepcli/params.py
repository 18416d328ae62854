"""Typed, range-checked parameters of the command line's examples.

Every ``-p key=value`` (and every value of a sweep spec) is checked here before anything is
built or run: its type (an ``int`` parameter refuses ``1.5`` and ``abc``), its range (``tile_b``
must be at least 1) and, for choices, its value. The upper bounds keep a typo from running
without bound (a batch of ``1e9``); they are far above the paper's sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .numbers import int_rule, number_rule, read_int, read_number

__all__ = ["MAX_SEED", "MAX_SIZE", "Param", "ParamError"]

# The largest size (batch, hidden, tile, ...) the examples accept: 2**16, 64 times the paper's.
MAX_SIZE = 1 << 16
# Seeds of numpy's generators used by the examples.
MAX_SEED = (1 << 32) - 1


class ParamError(ValueError):
    """A parameter value of the wrong type or outside its range."""


@dataclass(frozen=True)
class Param:
    """How to check one parameter: ``kind`` is ``"int"``, ``"float"``, ``"str"`` or ``"choice"``.

    ``low``/``high`` bound numbers (inclusive; ``low_open`` makes ``low`` exclusive);
    ``choices`` lists the values of a ``"choice"``.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    choices: Sequence[str] = ()
    low_open: bool = False

    def check(self, example: str, key: str, value: Any) -> Any:
        """Return ``value`` converted to the parameter's type, or raise :class:`ParamError`."""
        where = f"example '{example}': parameter {key}"
        if self.kind == "int":
            value = _int(where, value)
        elif self.kind == "float":
            value = _float(where, value)
        elif self.kind == "choice":
            if value not in self.choices:
                raise ParamError(f"{where} must be one of {', '.join(self.choices)}, not {value!r}")
            return value
        else:
            if not isinstance(value, str):
                raise ParamError(f"{where} must be a string, not {value!r}")
            return value
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            rel = "greater than" if self.low_open else "at least"
            raise ParamError(f"{where} must be {rel} {_num(self.low)}, not {value!r}")
        if self.high is not None and value > self.high:
            raise ParamError(f"{where} must be at most {_num(self.high)}, not {value!r}")
        return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _int(where: str, value: Any) -> int:
    if isinstance(value, str):
        text, value = value, read_int(value.strip())
        if value is None:
            raise ParamError(f"{where} must be {int_rule(text.strip())}, not {text!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"{where} must be an integer, not {value!r}")
    return value


def _float(where: str, value: Any) -> float | int:
    if isinstance(value, str):
        text, value = value, read_number(value.strip())
        if value is None:  # also 1e400 and 1e-400, which a float holds as inf and 0.0
            raise ParamError(f"{where} must be {number_rule(text.strip())}, not {text!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParamError(f"{where} must be a number, not {value!r}")
    if not math.isfinite(value):
        raise ParamError(f"{where} must be a finite number, not {value!r}")
    return value
