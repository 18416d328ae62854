"""The traffic patterns every stream block is tested under: plain Python, without Amaranth, so
the command line (``step validate --pattern``) and argument checks read the names from here.

``step_hw.testing`` (the Amaranth-simulator drivers) and ``step_hw.cosim.streams`` (the cocotb
drivers) both use :func:`pauses`, so the two tiers exercise blocks the same way.
"""

import itertools
import random
from collections.abc import Iterator

__all__ = ["PATTERNS", "pauses"]

#: The traffic patterns every stream block is tested under, by name.
PATTERNS = ("always", "periodic", "random")


def pauses(pattern: str, *, rng: random.Random | None = None) -> Iterator[bool]:
    """An endless pause pattern, one flag per cycle (``True`` = stall this cycle).

    As cocotbext-axi's ``set_pause_generator``: ``"always"`` never pauses (always valid / always
    ready), ``"periodic"`` pauses one cycle in four, ``"random"`` pauses each cycle with
    probability 1/2, drawn from ``rng`` (default: a generator seeded with 0, for reproducibility).
    """
    if pattern == "always":
        return itertools.repeat(False)
    if pattern == "periodic":
        return itertools.cycle([False, False, False, True])
    if pattern == "random":
        rng = rng if rng is not None else random.Random(0)
        return (rng.random() < 0.5 for _ in itertools.count())
    raise ValueError(f"Pause pattern must be one of {', '.join(PATTERNS)}, not {pattern!r}")
