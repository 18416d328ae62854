# amaranth: UnusedElaboratable=no
# (Units built only to test their constructors are never elaborated.)
"""The BF16/FP32 compute units (``step_hw.compute.float_datapaths``) against the interpreter
running the same node with ``step_lang.float_numerics`` functions, bit for bit: every operation
on random tiles with special values, under the three traffic patterns, and their measured
initiation intervals."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hw_helpers import assert_same_tokens, run_unit

from step_hw.compute import AccumUnit, MapUnit, MatmulUnit, ScanUnit, compute_unit
from step_hw.config import HwConfig
from step_hw.testing import PATTERNS
from step_lang import (
    DONE,
    Accum,
    Graph,
    Map,
    Scan,
    Sink,
    Source,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    ragged,
)
from step_lang import numerics as nm
from step_lang.types import bfloat16, float32, int16

BF = np.dtype(ml_dtypes.bfloat16)
CFG = HwConfig(elem_dtype="bfloat16", acc_dtype="float32", tile_rows=4, tile_cols=4, lanes=3)
FX = nm.functions(CFG)

#: BF16 special values: zeros, subnormals, smallest/largest normals, one, infinities, NaN
SPECIAL16 = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80,
             0x7F80, 0xFF80, 0x7FC0, 0x7F81]  # fmt: skip
SPECIAL32 = [0x00000000, 0x80000000, 0x00000001, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
             0x3F800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F808000, 0x3F818000]  # fmt: skip


def random_tile(rng: np.random.Generator, t: Tile) -> np.ndarray:
    """Normal values of mixed scale, a quarter of them special values."""
    shape = (t.rows, t.cols)
    if t.dtype == bfloat16:
        vals = (rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 8, shape)).astype(BF)
        bits, special = vals.view(np.uint16), SPECIAL16
    else:
        vals = (rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape)).astype(np.float32)
        bits, special = vals.view(np.uint32), SPECIAL32
    pick = rng.random(shape) < 0.25
    bits[pick] = rng.choice(special, shape)[pick]
    return vals


def one_node(tiles: tuple[Tile, ...], build) -> tuple[Graph, object]:
    g = Graph("unit_under_test")
    shape = (ragged("o"), ragged("m"), ragged("n"))
    srcs = [Source(g, StreamType(t, shape), name=f"x{i}").out for i, t in enumerate(tiles)]
    node = build(*srcs)
    Sink(node.out)
    return g, node


def stream(rng: np.random.Generator, tiles: tuple[Tile, ...], groups=(2, 0, 3)) -> list[list]:
    """Tokens of ``[[t, t], [], [t, t, t]]``-shaped streams, one per input."""
    out = []
    for t in tiles:
        toks: list = []
        for n in groups:
            toks += [random_tile(rng, t) for _ in range(n)] + [Stop(1)]
        toks[-1] = Stop(2)
        out.append([*toks, DONE])
    return out


def run_node(tiles, build, pattern: str, seed: int = 0, inputs=None):
    g, node = one_node(tiles, build)
    rng = np.random.default_rng(seed)
    inputs = inputs or stream(rng, tiles)
    return run_unit(g, node, inputs, CFG, pattern, seed)


B22, B21, B12 = Tile(bfloat16, 2, 2), Tile(bfloat16, 2, 1), Tile(bfloat16, 1, 2)
F22 = Tile(float32, 2, 2)

CASES = {
    "add": ((B22, B22), lambda a, b: Map(a, b, fn=FX.add)),
    "add_f32": ((F22, F22), lambda a, b: Map(a, b, fn=FX.add)),
    "sub_bcast": ((B22, B21), lambda a, b: Map(a, b, fn=FX.sub)),
    "mul_bcast": ((B12, B22), lambda a, b: Map(a, b, fn=FX.mul)),
    "max": ((B22, B22), lambda a, b: Map(a, b, fn=FX.maximum)),
    "max_f32": ((F22, F22), lambda a, b: Map(a, b, fn=FX.maximum)),
    "row_sum": ((Tile(bfloat16, 2, 4),), lambda a: Map(a, fn=FX.row_sum)),
    "exp": ((B22,), lambda a: Map(a, fn=FX.exp)),
    "silu": ((B22,), lambda a: Map(a, fn=FX.silu)),
    "recip": ((B22,), lambda a: Map(a, fn=FX.recip)),
    "div_bcast": ((B22, B21), lambda a, b: Map(a, b, fn=FX.div)),
    "to_bf16": ((F22,), lambda a: Map(a, fn=FX.to_bf16)),
    "to_f32": ((B22,), lambda a: Map(a, fn=FX.to_f32)),
    # 2x3 @ 3x2 on 3 lanes: 4 steps, a chain that crosses steps and one that does not
    "matmul": ((Tile(bfloat16, 2, 3), Tile(bfloat16, 3, 2)), lambda a, b: Map(a, b, fn=FX.matmul)),
    "matmul_t_bf16": (
        (Tile(bfloat16, 2, 3), Tile(bfloat16, 2, 3)),
        lambda a, b: Map(a, b, fn=FX.matmul_out("bfloat16", transpose_b=True)),
    ),
    "accum_add": ((B22,), lambda a: Accum(a, fn=FX.accum_add, rank=1)),
    "accum_add_f32": ((F22,), lambda a: Accum(a, fn=FX.accum_add, rank=1)),
    "accum_max_r2": ((B22,), lambda a: Accum(a, fn=FX.accum_max, rank=2)),
    "accum_matmul_bf16": (
        (Tile(bfloat16, 2, 4), Tile(bfloat16, 4, 2)),
        lambda a, b: Accum(a, b, fn=FX.matmul_acc_out("bfloat16"), rank=1),
    ),
    "accum_matmul_f32": ((B22, B22), lambda a, b: Accum(a, b, fn=FX.matmul_acc, rank=1)),
    "scan_add": ((B22,), lambda a: Scan(a, fn=FX.accum_add, rank=1)),
    "scan_matmul_t": ((B22, B22), lambda a, b: Scan(a, b, fn=FX.matmul_t_acc, rank=1)),
}


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", list(CASES))
def test_float_unit_matches_interpreter(case: str, pattern: str):
    tiles, build = CASES[case]
    run, want, _ = run_node(tiles, build, pattern, seed=len(case) * 7 + PATTERNS.index(pattern))
    assert_same_tokens(run.outputs["out"], want)
    assert sum(isinstance(t, np.ndarray) for t in want) >= 1  # the case computed something


@pytest.mark.parametrize(
    "case,steps",
    [("add", 1), ("mul_bcast", 1), ("max", 1), ("row_sum", 1), ("to_bf16", 1), ("to_f32", 1),
     ("exp", 1), ("silu", 1), ("recip", 1), ("div_bcast", 1),
     ("matmul", 4), ("accum_add", 1), ("accum_matmul_bf16", 6), ("scan_add", 1)],
)  # fmt: skip
def test_float_unit_initiation_interval(case: str, steps: int):
    """Cycles per data token, counted: ``n`` more tiles take ``n * II`` more cycles, with II 1
    (``ceil(M*K*N / lanes)`` for a MAC array: 12 products on 3 lanes, 16 on 3)."""
    tiles, build = CASES[case]
    rng = np.random.default_rng(5)

    def cycles(n: int) -> int:
        inputs = [[*(random_tile(rng, t) for _ in range(n)), Stop(2), DONE] for t in tiles]
        run, want, _ = run_node(tiles, build, "always", inputs=inputs)
        assert_same_tokens(run.outputs["out"], want)
        return run.cycles

    assert (cycles(24) - cycles(8)) / 16 == steps


def test_float_accumulation_is_fp32_and_rounded_once():
    """An Accum of BF16 tiles keeps an FP32 sum: 1 + 256 * 2**-9 is 1.5 in FP32, while a BF16
    running sum would stay at 1 (every 2**-9 is below half an ulp of 1)."""
    one = np.full((2, 2), 1.0, dtype=BF)
    tiny = np.full((2, 2), 2.0**-9, dtype=BF)
    toks = [one, *([tiny] * 256), Stop(2), DONE]
    run, want, _ = run_node((B22,), CASES["accum_add"][1], "always", inputs=[toks])
    assert_same_tokens(run.outputs["out"], want)
    assert float(run.outputs["out"][0][0, 0]) == 1.5


def test_matmul_split_over_k_equals_the_whole_matmul():
    """matmul_acc continues the k-order chain from the accumulator: Accum over K-tiles gives the
    unsplit matmul bit for bit (the order hierarchical tiling relies on)."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 8)) * 8).astype(BF)
    b = (rng.standard_normal((8, 2)) * 8).astype(BF)
    whole = FX.matmul.apply(Tile(float32, 2, 2), a, b)
    acc = FX.matmul_acc.init(Tile(float32, 2, 2), (a[:, :4], b[:4]))
    for k in (0, 4):
        acc = FX.matmul_acc.update(Tile(float32, 2, 2), acc, a[:, k : k + 4], b[k : k + 4])
    assert np.array_equal(whole.view(np.uint32), acc.view(np.uint32))


def test_float_units_refuse_fixed_point_and_wrong_dtypes():
    fixed = nm.functions(HwConfig())
    _, node = one_node((Tile(int16, 2, 2),) * 2, lambda a, b: Map(a, b, fn=fixed.add, name="adder"))
    with pytest.raises(StepTypeError, match=r"adder.*computes in int16, the hardware in bfloat16"):
        compute_unit(node, CFG)
    with pytest.raises(ValueError, match="op 'mul' takes bfloat16 tiles, not float32"):
        MapUnit(op="mul", in_shapes=[(2, 2)] * 2, elem_bits=32, float_dtype="float32")
    with pytest.raises(ValueError, match="elem_bits of bfloat16 is 16, not 32"):
        AccumUnit(op="add", rank=1, in_shapes=[(2, 2)], elem_bits=32, float_dtype="bfloat16")
    with pytest.raises(ValueError, match="out_bits of a BF16 MAC array is 16 or 32, not 8"):
        MatmulUnit(in_shapes=[(2, 2)] * 2, elem_bits=16, out_bits=8, float_dtype="bfloat16")
    with pytest.raises(ValueError, match="float_dtype must be 'bfloat16' with elem_bits 16"):
        ScanUnit(op="matmul", rank=1, in_shapes=[(2, 2)] * 2, elem_bits=32, float_dtype="float32")


def test_bf16_graph_without_hardware_function_is_refused_naming_node_and_function():
    """A BF16 graph built with the float functions of ``step_lang.functions`` (no hardware
    arithmetic) is refused at elaboration, one line naming the node and the function."""
    from step_hw.elaborate import ElaboratedGraph
    from step_lang import LinearOffChipLoad, LinearOffChipStore
    from step_lang import functions as F

    g = Graph("generic_silu")
    x, y = g.tensor("x", (4, 4), "bfloat16"), g.tensor("y", (4, 4), "bfloat16")
    act = Map(LinearOffChipLoad(x, tile=(4, 4)).out, fn=F.silu, name="act").out
    LinearOffChipStore(act, y)
    with pytest.raises(StepTypeError) as info:
        ElaboratedGraph(g, CFG)
    message = str(info.value)
    assert "\n" not in message
    assert (
        message.startswith("Map 'act'") and "function 'silu' has no hardware arithmetic" in message
    )
