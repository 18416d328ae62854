"""What counts as an integer where a user passes one to a function (a parameter, a dim's value,
an index): a Python ``int`` or a numpy integer, never a bool (``True`` is not a tile size) and
never a float (``2.0`` would hide a computation that went wrong). The argument rules of
``step_lang``, ``step_hw.cosim.arguments`` and ``examples.checks`` use :func:`is_integer` and go
on with the value as a Python ``int`` (a numpy integer's arithmetic wraps at its width).

A setting that an object keeps (``MemoryConfig``, the profiles, ``HwConfig``: ``sim.checks`` and
``step_hw.checks``) must be a Python ``int`` itself: it is stored as given, so a numpy integer
there is refused rather than kept at its width."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["is_integer"]


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an ``int`` or a numpy integer and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
