"""Helpers shared by the hierarchical-tiling tests: bit-exact comparison of a graph and its
:func:`~step_lang.hier_tiling.hier_tile` form, and the checked rewrite."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from step_lang import Graph, interpret, metrics
from step_lang.hier_tiling import hier_tile, tiling_report
from step_lang.types import Tile


def bits(a: np.ndarray) -> np.ndarray:
    """BF16 arrays as their bit patterns (NaN payloads and signed zeros compare); others as
    they are."""
    return a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a


def same_outputs(
    g: Graph,
    h: Graph,
    memory: dict[str, np.ndarray],
    outs: list[str],
    *,
    flops: bool = False,
    check: bool = True,
) -> None:
    """The tensors ``outs`` bit for bit equal after running ``g`` and ``h`` on copies of
    ``memory``; with ``flops`` also the same FLOPs, evaluated with the dims each run observed
    (the rewrite names some ragged dims differently: ``unpack0_chunks`` for ``unpack0_n``).
    ``check``: every stream of ``h`` checked against its type (``interpret``)."""
    r0 = interpret(g, {k: v.copy() for k, v in memory.items()})
    r1 = interpret(h, {k: v.copy() for k, v in memory.items()}, check=check)
    for name in outs:
        np.testing.assert_array_equal(bits(r1.memory[name]), bits(r0.memory[name]))
    if flops:
        before = metrics(g).evaluate(_dims(r0.bindings)).flops
        assert metrics(h).evaluate(_dims(r1.bindings)).flops == before


def _dims(b) -> dict[str, int]:
    """The observed dims: regular ones, and ragged ones that took a single value."""
    single = {str(k): next(iter(v)) for k, v in b.ragged.items() if len(v) == 1}
    return {**single, **b.values()}


def largest_tile(graph: Graph) -> tuple[int, int]:
    """The most rows and the most columns of any static tile in ``graph``."""
    rows = cols = 0
    for node in graph.nodes.values():
        for t in node.out_types:
            if isinstance(t.elem, Tile) and isinstance(t.elem.rows, int):
                rows, cols = max(rows, t.elem.rows), max(cols, t.elem.cols)
    return rows, cols


def rewrite(g: Graph, hw: int) -> Graph:
    """``hier_tile(g, hw, hw)``, checked: ``g`` unchanged, no tile above the hardware tile, the
    same off-chip bytes (symbolically)."""
    before = {n.name: tuple(n.out_types) for n in g.nodes.values()}
    h = hier_tile(g, hw, hw)
    assert {n.name: tuple(n.out_types) for n in g.nodes.values()} == before  # g unchanged
    rows, cols = largest_tile(h)
    assert rows <= hw and cols <= hw
    report = tiling_report(g, h)
    assert report.offchip_after == report.offchip_before
    return h
