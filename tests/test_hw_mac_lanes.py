"""The MAC arrays' lane selection (``step_hw.compute._unit``: ``LaneSchedule``,
``MacSchedule.select_operands``, ``select_by_step``): each lane's operands and chain input are
selected by only the bits of the step counter they change with (a 16 x 16 x 16 matmul on 64
lanes: a row every 4 steps, a column among 4), and the BF16 array stays bit for bit the
interpreter's for every shape of schedule: outputs in one step or over several, chains crossing
steps, idle lanes, transposed ``b``, accumulating. (The fixed-point array, which shares the
selection, is checked against the interpreter in ``test_hw_compute.py`` and
``test_hw_matmul_sum.py``.)"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Const, Module, Signal
from amaranth.sim import Simulator
from hw_helpers import assert_same_tokens, run_unit
from test_hw_float_units import one_node, stream

from step_hw.compute._unit import LaneSchedule, select_by_step, step_bits
from step_hw.config import HwConfig
from step_hw.contract import matmul_steps
from step_lang import Accum, Map, Tile, numerics
from step_lang.types import bfloat16


def test_step_bits_of_constant_row_column_and_irregular_keys():
    assert step_bits([7] * 64, 6) == []
    assert step_bits([t // 4 for t in range(64)], 6) == [2, 3, 4, 5]  # a row every 4 steps
    assert step_bits([(t % 4) * 4 + 1 for t in range(64)], 6) == [0, 1]  # a column among 4
    assert step_bits(list(range(6)), 3) == [0, 1, 2]
    # k = 3t mod 4 on 3 lanes: a function of bits 0 and 1 here...
    assert step_bits([3 * t % 4 for t in range(6)], 3) == [0, 1]
    # ...but this one is not a function of the bits that change it alone: every bit
    assert step_bits([0, 1, 1, 0, 2], 3) == [0, 1, 2]


def test_paper_scale_lanes_select_by_row_and_column_bits():
    """16 x 16 x 16 on 64 lanes (Fig. 8) and on 16 (the MoE): operand ``a`` by the row bits,
    ``b`` by the column bits, every lane but the chains' first a constant chain input."""
    for lanes, a_bits, b_bits in ((64, [2, 3, 4, 5], [0, 1]), (16, [4, 5, 6, 7], [0, 1, 2, 3])):
        steps = matmul_steps(16, 16, 16, lanes)
        width = (steps - 1).bit_length()
        s = LaneSchedule((16, 16, 16), lanes, steps)
        for lane in range(lanes):
            assert step_bits(s.a_index[lane], width) == a_bits
            assert step_bits(s.b_index[lane], width) == b_bits
            starts = [o if f else -1 for o, f in zip(s.output[lane], s.first[lane], strict=True)]
            assert step_bits(starts, width) == ([] if lane % 16 else list(range(width)))


def test_select_by_step_drives_each_steps_value():
    keys = [(t // 4) * 10 + t % 2 for t in range(13)]  # 13 of 16 steps
    m = Module()
    step, target = Signal(4), Signal(8)
    select_by_step(m, target, step, keys, lambda k: Const(k, 8))
    seen = []

    async def bench(ctx):
        for t in range(16):
            ctx.set(step, t)
            seen.append(ctx.get(target))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert seen[:13] == keys  # steps 13 to 15 use no key (an idle lane's)


def _matmul_case(dims, lanes, transpose_b, accumulate, pattern, seed):
    mm, kk, nn = dims
    cfg = HwConfig(elem_dtype="bfloat16", acc_dtype="float32", tile_rows=4, tile_cols=4,
                   lanes=lanes)  # fmt: skip
    fx = numerics.functions(cfg)
    b_tile = Tile(bfloat16, nn, kk) if transpose_b else Tile(bfloat16, kk, nn)
    tiles = (Tile(bfloat16, mm, kk), b_tile)
    if accumulate:
        fn = fx.matmul_acc_out("bfloat16", transpose_b=transpose_b)
        build = lambda a, b: Accum(a, b, fn=fn, rank=1)  # noqa: E731
    else:
        fn = fx.matmul_out("bfloat16", transpose_b=transpose_b)
        build = lambda a, b: Map(a, b, fn=fn)  # noqa: E731
    g, node = one_node(tiles, build)
    return run_unit(g, node, stream(np.random.default_rng(seed), tiles), cfg, pattern, seed)


# (M, K, N), lanes, transpose_b
SCHEDULES = [
    ((4, 4, 4), 4, False),  # an output per step, the row every 4 steps
    ((4, 4, 4), 8, True),  # two outputs per step, b transposed
    ((4, 4, 4), 16, False),  # four outputs per step
    ((4, 4, 4), 2, False),  # every output over two steps
    ((3, 4, 2), 5, False),  # chains crossing steps at irregular lanes, idle lanes at the end
    ((4, 3, 4), 64, False),  # one step, idle lanes
]


@pytest.mark.parametrize("accumulate", [False, True], ids=["map", "accum"])
@pytest.mark.parametrize("dims,lanes,transpose_b", SCHEDULES)
def test_mac_array_matches_interpreter_under_back_pressure(dims, lanes, transpose_b, accumulate):
    seed = sum(dims) * lanes + transpose_b + 2 * accumulate
    run, want, unit = _matmul_case(dims, lanes, transpose_b, accumulate, "random", seed)
    assert_same_tokens(run.outputs["out"], want)
    assert sum(isinstance(t, np.ndarray) for t in want) >= 3
    assert unit.initiation_interval == matmul_steps(*dims, lanes)
