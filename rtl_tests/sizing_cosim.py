"""Sized queues on the generated RTL: one hardware-size graph, built twice (with the depths of a
queue-sizing report, and with every queue :data:`sim.sizing.DEEP` deep) and co-simulated on
each memory image against the interpreter.

Used by ``rtl_tests/test_sizing_verilator.py`` (the acceptance test) and by
``python -m bench.queue_sizing --cosim`` (the ``cosim`` figures of ``queue_sizing.json``). Both
size with :func:`stepcli.sizing.size_hardware` over :data:`stepcli.sizing.IMAGES` images, so
their designs share one Verilator build each (``rtl_tests.cosim`` caches by Verilog text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from sim.sizing import DEEP
from step_lang import interpret
from stepcli.sizing import hardware_case

from . import cosim

__all__ = ["SizedRun", "cosim_sized"]


@dataclass(frozen=True)
class SizedRun:
    """One memory image co-simulated with sized and with deep queues."""

    image: int
    cycles_sized: int
    cycles_deep: int
    # Names of the output tensors of the sized design that differ from the interpreter's.
    mismatched: tuple[str, ...]

    @property
    def slowdown(self) -> float:
        """Sized cycles over deep cycles, minus one (0.01 is 1% slower)."""
        return self.cycles_sized / self.cycles_deep - 1

    def to_json(self) -> dict:
        return {**asdict(self), "mismatched": list(self.mismatched)}


def cosim_sized(
    example: str,
    schedule: str,
    depths: Mapping[str, int],
    memories: Sequence[Mapping[str, np.ndarray]],
) -> list[SizedRun]:
    """Co-simulate the hardware-size ``example`` under ``schedule`` with queue ``depths`` and
    with every queue ``DEEP`` deep, on every image of ``memories``."""
    sized, _ = hardware_case(example, schedule)
    sized.queue_depths.update(depths)
    deep, _ = hardware_case(example, schedule)
    deep.queue_depths.update(dict.fromkeys(depths, DEEP))
    runs = []
    for i, memory in enumerate(memories):
        want = interpret(hardware_case(example, schedule)[0], memory).memory
        tag = f"{example}_{schedule}_{i}"
        got_sized = cosim.run(sized, memory, tag=f"sized_{tag}")
        got_deep = cosim.run(deep, memory, tag=f"deep_{tag}")
        mismatched = tuple(
            name
            for name, tensor in got_sized.outputs.items()
            if not np.array_equal(tensor, want[name])
        )
        runs.append(SizedRun(i, got_sized.cycles, got_deep.cycles, mismatched))
    return runs
