"""The fast tier's one-input cells as tables (``step_hw.cosim.cell_tables``), checked on Verilator.

One design maps all 65,536 BF16 values, as 4,096 tiles of 4 x 4, through SiLU, exp and recip
(every element of a tile has a cell of its own, the same module at any tile size: 48 cells build
in a fraction of the time of a 16 x 16 tile's 768).
Built with the cells' arithmetic (``STEP_COSIM_FAST_TABLES=0``), its outputs are the cells'
Verilog on every input; they must equal the tables the fast tier reads instead, the
interpreter's results, and the results of the same design built with the tables, in the same
number of cycles. Without a table's plusarg the harness stops with its name.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from step_hw import cosim
from step_hw.config import BF16_CONFIG
from step_hw.cosim import cell_tables
from step_lang import DONE, Graph, Map, Sink, Source, StreamType, Tile, interpret, numerics
from step_lang.types import bfloat16

HW = dataclasses.replace(BF16_CONFIG, tile_rows=4, tile_cols=4)
UNARY = ("silu", "exp", "recip")
ALL_BF16 = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
TILES = ALL_BF16.size // (HW.tile_rows * HW.tile_cols)


def _graph() -> Graph:
    fns = numerics.functions(HW)
    g = Graph("cell_tables")
    for op in UNARY:
        tile = Tile(bfloat16, HW.tile_rows, HW.tile_cols)
        x = Source(g, StreamType(tile, (TILES,)), name=f"x_{op}").out
        Sink(Map(x, fn=getattr(fns, op), name=op).out, name=f"y_{op}")
    return g


def _inputs() -> dict[str, list]:
    tiles = list(ALL_BF16.view(ml_dtypes.bfloat16).reshape(TILES, HW.tile_rows, HW.tile_cols))
    return {f"x_{op}": [*tiles, DONE] for op in UNARY}


def _bits(tokens: list) -> np.ndarray:
    tiles = [t for t in tokens if isinstance(t, np.ndarray)]
    return np.concatenate([np.asarray(t).view(np.uint16).ravel() for t in tiles])


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[cosim.Design, cosim.CosimResult]]:
    """Without tables ("0") and with them ("1"): (the build, its run)."""
    graph, inputs = _graph(), _inputs()
    got = {}
    with pytest.MonkeyPatch.context() as mp:
        for tables in ("0", "1"):
            mp.setenv(cell_tables.TABLES_ENV, tables)
            got[tables] = (
                cosim.design(graph, HW, tier="fast", quiet=True),
                cosim.run(graph, {}, inputs=inputs, config=HW, tier="fast", tag=f"tables{tables}"),
            )
    return got


def test_the_cells_verilog_equals_its_table_on_every_input(runs):
    arithmetic = runs["0"][1]
    assert not runs["0"][0].desc.get("cell_tables")  # the cells computed
    tabled = runs["1"][0]
    assert tabled.desc["cell_tables"] == [f"step_fp_{op}_bf16" for op in sorted(UNARY)]
    for op in UNARY:
        table = np.loadtxt(
            tabled.folder / cell_tables.FOLDER / f"step_fp_{op}_bf16.hex",
            dtype=np.uint16,
            converters=lambda s: int(s, 16),
        )
        got = _bits(arithmetic.sinks[f"y_{op}"])
        bad = np.flatnonzero(got != table)
        assert not bad.size, f"{op}: {bad.size} inputs differ, first {ALL_BF16[bad[:4]]}"


def test_tables_give_the_interpreters_results_in_the_same_cycles(runs):
    graph = _graph()
    want = interpret(graph, {}, inputs=_inputs()).streams
    for op in UNARY:
        w = _bits(want[f"{op}.out"])
        for tables in ("0", "1"):
            assert np.array_equal(_bits(runs[tables][1].sinks[f"y_{op}"]), w), (op, tables)
    assert runs["0"][1].cycles == runs["1"][1].cycles > TILES


def test_a_run_without_its_tables_stops_with_their_name(runs, monkeypatch):
    from step_hw.cosim import harness

    monkeypatch.setenv(cell_tables.TABLES_ENV, "1")
    monkeypatch.setattr(cell_tables, "plusargs", lambda folder, modules: [])
    with pytest.raises(harness.CosimError, match=r"no \+TABLE_step_fp_exp_bf16="):
        cosim.run(_graph(), {}, inputs=_inputs(), config=HW, tier="fast", tag="no_tables")
    # a file that is not there: $readmemh would only warn and leave the table zero
    missing = [f"+TABLE_step_fp_{op}_bf16=/nonexistent/{op}.hex" for op in sorted(UNARY)]
    monkeypatch.setattr(cell_tables, "plusargs", lambda folder, modules: missing)
    with pytest.raises(harness.CosimError, match=r"cannot read the table of step_fp_exp_bf16"):
        cosim.run(_graph(), {}, inputs=_inputs(), config=HW, tier="fast", tag="no_tables")
