"""Numbers as the command line takes them as text (``-p``, ``-j``, ``--hw``, ``--hw-tile``,
``--images``, ...): ASCII digits in the plain forms a user types, read exactly or refused.

``int()`` and ``float()`` would also take ``1_0`` (as 10), ``+4``, other scripts' digits (``٤``),
``1e400`` (as ``inf``) and ``1e-400`` (as ``0.0``); none of these is accepted here, so a value
is never read as another than the one typed.
"""

from __future__ import annotations

import math
import re

__all__ = ["int_rule", "number_rule", "read_int", "read_number"]

_INT = re.compile(r"-?[0-9]+\Z")
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")


def read_int(text: str) -> int | None:
    """The integer ``text`` spells (``-12``, ``0064``), or ``None`` if it spells none."""
    return int(text) if _INT.match(text) else None


def read_number(text: str) -> int | float | None:
    """The number ``text`` spells: an ``int`` for an integer, a ``float`` for a decimal or an
    exponent form (``0.5``, ``1e3``); ``None`` for anything else, and for a decimal a float
    cannot hold (``1e400`` would be ``inf``, ``1e-400`` would be ``0.0``)."""
    if not _NUMBER.match(text):
        return None
    if _INT.match(text):
        return int(text)
    value = float(text)
    mantissa = re.split(r"[eE]", text)[0]
    if value in (float("inf"), float("-inf")) or (value == 0 and mantissa.strip("-0.")):
        return None
    return value


def int_rule(text: str) -> str:
    """What ``text``, which :func:`read_int` refused, should have been (for a message)."""
    try:
        int(text)
    except ValueError:
        return "an integer"
    return "an integer in ASCII digits (as 16 or -3)"  # 1_6, +4, other scripts' digits


def number_rule(text: str) -> str:
    """What ``text``, which :func:`read_number` refused, should have been (for a message)."""
    try:
        value = float(text)
    except ValueError:
        return "a number"
    if not math.isfinite(value):
        return "a finite number"
    if value == 0:
        return "a number a float can hold (it would be 0.0)"
    return "a number in ASCII digits (as 0.5 or 1e3)"  # 1_0, +4, other scripts' digits
