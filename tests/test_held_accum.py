# amaranth: UnusedElaboratable=no
"""Accum with held accumulators (``Accum(..., held=h, inner=i)``): language, interpreter and the
AccumUnit's bank of accumulators.

The interpreter's result is checked against the same fold written without held accumulators
(the held dims moved outside by Bufferize + Streamify, then a plain Accum), and the hardware
against the interpreter, token for token, under back-pressure.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hw_helpers import assert_same_tokens
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from step_hw.compute import AccumUnit, compute_unit
from step_hw.config import HwConfig
from step_hw.testing import PATTERNS, run_block
from step_lang import (
    Accum,
    Bufferize,
    Graph,
    Sink,
    Source,
    Streamify,
    StreamType,
    Tile,
    interpret,
    numerics,
    ragged,
)
from step_lang import functions as F
from step_lang.errors import StepTypeError
from step_lang.metrics import metrics
from step_lang.stoprules import held_stop
from step_lang.tokens import DONE, Stop, to_tokens
from step_lang.types import bfloat16, float32, int16

BF16_CFG = HwConfig(elem_dtype="bfloat16", acc_dtype="float32", tile_rows=4, tile_cols=4, lanes=3)
INT_CFG = HwConfig(tile_rows=4, tile_cols=4, lanes=3)
BF = np.dtype(ml_dtypes.bfloat16)


def _nested(rng, groups, d_of, m, n, k, tiles, make):
    """One nested list per input: ``[o][d][m][n][k]`` tiles (``d_of(g)`` outer elements)."""
    outs = []
    for t in tiles:
        outs.append(
            [
                [
                    [[[make(rng, t) for _ in range(k)] for _ in range(n)] for _ in range(m)]
                    for _ in range(d_of(g))
                ]
                for g in range(groups)
            ]
        )
    return outs


def _float_tile(rng, t: Tile) -> np.ndarray:
    v = rng.standard_normal((t.rows, t.cols)) * 2.0 ** rng.integers(-4, 4, (t.rows, t.cols))
    return v.astype(BF if t.dtype == bfloat16 else np.float32)


def _int_tile(rng, t: Tile) -> np.ndarray:
    return rng.integers(-200, 200, (t.rows, t.cols)).astype(np.int16)


def _graph(tiles, m, n, k_dims, build):
    g = Graph("held")
    shape = (ragged("o"), ragged("d"), m, n, *k_dims)
    srcs = [Source(g, StreamType(t, shape), name=f"x{i}").out for i, t in enumerate(tiles)]
    node = build(*srcs)
    Sink(node.out, name="sink")
    return g, node


def _reordered(tiles, m, n, k, build_plain):
    """The same fold without held accumulators: each group buffered whole and read
    ``(m, n, d, k)``; needs a static ``d`` (``d``)."""

    def make(d):
        g = Graph("plain")
        srcs = [
            Source(g, StreamType(t, (ragged("o"), d, m, n, k)), name=f"x{i}").out
            for i, t in enumerate(tiles)
        ]
        reads = [
            Streamify(
                Bufferize(s, 4, name=f"buf{i}").out,
                out_shape=(m, n, d, k),
                stride=(n * k, k, m * n * k, 1),
                name=f"read{i}",
            ).out
            for i, s in enumerate(srcs)
        ]
        node = build_plain(*reads)
        Sink(node.out, name="sink")
        return g, node

    return make


# -- the language ------------------------------------------------------------------------------


def test_held_dims_shape_and_params():
    g, node = _graph(
        (Tile(float32, 2, 2),),
        3,
        2,
        (4,),
        lambda x: Accum(x, fn=F.accum_add, rank=2, held=2, inner=1),
    )
    assert node.out.shape[-2:] == (3, 2) and len(node.out.shape) == 3
    assert node.params() == {"fn": "accum_add", "rank": 2, "held": 2, "inner": 1}
    assert node.held_shape == (3, 2)
    # the accumulators are held on chip: 6 tiles of 2x2 float32
    (cost,) = [c for c in metrics(g, "artifact").nodes if c.name == node.name]
    assert cost.onchip_bytes == 6 * 16


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 2, "held": 2, "inner": 2}, r"held dims must lie inside an outer reduced dim: inner = 2 must be below rank = 2"),
        ({"rank": 1, "held": 0, "inner": 1}, r"inner = 1 needs held dims \(held = 0\)"),
        ({"rank": 2, "held": -1}, r"held must be a non-negative integer, not -1"),
        ({"rank": 3, "held": 2, "inner": 1}, r"rank must be an integer in \[1, 2\] for input shape .* with 2 held dims, not 3"),
    ],
)  # fmt: skip
def test_bad_held_parameters_are_refused(kwargs, message):
    with pytest.raises(StepTypeError, match=message):
        _graph((Tile(float32, 2, 2),), 3, 2, (4,), lambda x: Accum(x, fn=F.accum_add, **kwargs))


def test_dynamic_held_dims_are_refused():
    g = Graph("dyn")
    x = Source(g, StreamType(Tile(float32, 2, 2), (ragged("o"), 2, ragged("m"), 3)), name="x").out
    with pytest.raises(StepTypeError, match=r"held dims \[m\d*\] of input shape .* must be static"):
        Accum(x, fn=F.accum_add, rank=2, held=1, inner=1)


def test_held_stop_levels():
    assert [held_stop(i, (2, 3)) for i in range(6)] == [0, 0, 1, 0, 0, 2]
    assert [held_stop(i, (4,)) for i in range(4)] == [0, 0, 0, 1]


# -- the interpreter: the same values as the fold with the held dims outside -------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d=st.integers(1, 3),
    m=st.integers(1, 3),
    n=st.integers(1, 3),
    k=st.integers(1, 3),
    groups=st.integers(0, 3),
    fmt=st.sampled_from(["bf16_matmul", "f32_add", "int16_matmul"]),
    seed=st.integers(0, 2**16),
)
def test_held_fold_equals_the_reordered_fold(d, m, n, k, groups, fmt, seed):
    if fmt == "bf16_matmul":
        fx = numerics.functions(BF16_CFG)
        tiles = (Tile(bfloat16, 2, 3), Tile(bfloat16, 3, 2))
        fn, make = fx.matmul_acc_out("bfloat16"), _float_tile
    elif fmt == "int16_matmul":
        fx = numerics.functions(INT_CFG)
        tiles = (Tile(int16, 2, 3), Tile(int16, 3, 2))
        fn, make = fx.matmul_acc_out("int16"), _int_tile
    else:
        tiles, fn, make = (Tile(float32, 2, 2),), F.accum_add, _float_tile

    def held(*xs):
        return Accum(*xs, fn=fn, rank=2, held=2, inner=1, name="acc")

    def plain(*xs):
        return Accum(*xs, fn=fn, rank=2, name="acc")

    g, node = _graph(tiles, m, n, (k,), held)
    h, hnode = _reordered(tiles, m, n, k, plain)(d)
    rng = np.random.default_rng(seed)
    data = _nested(rng, groups, lambda _: d, m, n, k, tiles, make)
    got = interpret(g, inputs={f"x{i}": v for i, v in enumerate(data)}).tokens(node.out)
    want = interpret(h, inputs={f"x{i}": v for i, v in enumerate(data)}).tokens(hnode.out)
    assert_same_tokens(got, want)
    assert sum(isinstance(t, np.ndarray) for t in got) == groups * m * n


def test_held_fold_with_ragged_outer_dim():
    """Groups of 2, 1 and 3 outer elements: each group's accumulators restart."""
    tiles = (Tile(float32, 1, 2),)
    g, node = _graph(tiles, 2, 2, (2,), lambda x: Accum(x, fn=F.accum_add, rank=2, held=2, inner=1))
    rng = np.random.default_rng(3)
    sizes = [2, 1, 3]
    (data,) = _nested(rng, 3, lambda gi: sizes[gi], 2, 2, 2, tiles, _float_tile)
    toks = interpret(g, inputs={"x0": data}).tokens(node.out)
    tiles_out = [t for t in toks if isinstance(t, np.ndarray)]
    for gi in range(3):
        for p, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            acc = None
            for dd in range(sizes[gi]):
                for kk in range(2):
                    x = np.asarray(data[gi][dd][i][j][kk], np.float32)
                    acc = x if acc is None else (acc + x).astype(np.float32)
            np.testing.assert_array_equal(tiles_out[4 * gi + p], acc)
    assert [t for t in toks if not isinstance(t, np.ndarray)] == [
        Stop(1), Stop(2), Stop(1), Stop(2), Stop(1), Stop(2), DONE,
    ]  # fmt: skip


# -- hardware: the AccumUnit's bank against the interpreter, under back-pressure ---------------


def _run_unit(cfg, tiles, fn, m, n, k_dims, groups_d, pattern, seed, make, inner=1):
    rank = 1 + len(k_dims)
    g, node = _graph(
        tiles, m, n, k_dims, lambda *xs: Accum(*xs, fn=fn, rank=rank, held=2, inner=inner)
    )
    rng = np.random.default_rng(seed)
    flat_k = int(np.prod(k_dims))
    data = _nested(rng, len(groups_d), lambda gi: groups_d[gi], m, n, flat_k, tiles, make)
    if len(k_dims) == 2:  # [.., k0 * k1] -> [.., k0, k1]
        data = [
            [[[[[ks[a * k_dims[1] : (a + 1) * k_dims[1]] for a in range(k_dims[0])] for ks in row]
               for row in mm] for mm in dd] for dd in grp]
            for grp in data
        ]  # fmt: skip
    inputs = [to_tokens(v, 4 + len(k_dims) - 1) for v in data]
    want = interpret(g, inputs={f"x{i}": v for i, v in enumerate(data)}).tokens(node.out)
    unit = compute_unit(node, cfg)
    assert isinstance(unit, AccumUnit)
    run = run_block(
        unit,
        {
            f"in{i}": (p, f, toks)
            for i, (p, f, toks) in enumerate(
                zip(unit.in_ports, unit.in_formats, inputs, strict=True)
            )
        },
        {"out": (unit.out, unit.out_format)},
        pattern=pattern,
        seed=seed,
        max_cycles=50_000,
    )
    return run, want


@pytest.mark.parametrize("pattern", PATTERNS)
def test_bf16_held_matmul_unit_matches_interpreter(pattern):
    fx = numerics.functions(BF16_CFG)
    tiles = (Tile(bfloat16, 2, 3), Tile(bfloat16, 3, 2))
    run, want = _run_unit(
        BF16_CFG,
        tiles,
        fx.matmul_acc_out("bfloat16"),
        2,
        3,
        (2,),
        [2, 1, 3],
        pattern,
        7,
        _float_tile,
    )
    assert_same_tokens(run.outputs["out"], want)
    assert sum(isinstance(t, np.ndarray) for t in want) == 3 * 6


@pytest.mark.parametrize("pattern", PATTERNS)
def test_int16_held_add_unit_with_two_inner_dims(pattern):
    fx = numerics.functions(INT_CFG)
    tiles = (Tile(int16, 2, 2),)
    run, want = _run_unit(
        INT_CFG, tiles, fx.accum_add, 3, 1, (2, 2), [1, 2], pattern, 11, _int_tile, inner=2
    )
    assert_same_tokens(run.outputs["out"], want)
    assert sum(isinstance(t, np.ndarray) for t in want) == 2 * 3


@pytest.mark.parametrize("pattern", PATTERNS)
def test_bf16_held_matmul_unit_on_dynamic_tiles_matches_interpreter(pattern):
    """Held accumulators of dynamic tiles (a hardware-tiled matmul with a dynamic M: the down
    projection of dynamic tiling, ``step_lang.hier_tiling``): ``a`` tiles of 0 to 4 rows, the
    same within a group, each bank word a dynamic accumulator with its row count."""
    cfg = BF16_CFG
    fx = numerics.functions(cfg)
    rows = ragged("r")
    tiles = (Tile(bfloat16, rows, 3), Tile(bfloat16, 3, 2))
    g, node = _graph(
        tiles, 2, 3, (2,),
        lambda *xs: Accum(*xs, fn=fx.matmul_acc_out("bfloat16"), rank=2, held=2, inner=1),
    )  # fmt: skip
    rng = np.random.default_rng(5)
    data: list[list] = [[], []]
    for n_rows, d in [(3, 2), (0, 1), (4, 3), (1, 1)]:  # (a's rows, outer elements) per group
        a_t, b_t = Tile(bfloat16, n_rows, 3), tiles[1]
        for i, t in enumerate((a_t, b_t)):
            data[i].append(
                [[[[_float_tile(rng, t) for _ in range(2)] for _ in range(3)] for _ in range(2)]
                 for _ in range(d)]
            )  # fmt: skip
    inputs = [to_tokens(v, 4) for v in data]
    want = interpret(g, inputs={f"x{i}": v for i, v in enumerate(data)}).tokens(node.out)
    unit = compute_unit(node, cfg)
    assert isinstance(unit, AccumUnit) and unit.in_formats[0].dynamic
    run = run_block(
        unit,
        {f"in{i}": (p, f, t) for i, (p, f, t) in
         enumerate(zip(unit.in_ports, unit.in_formats, inputs, strict=True))},
        {"out": (unit.out, unit.out_format)},
        pattern=pattern,
        seed=3,
        max_cycles=50_000,
    )  # fmt: skip
    assert_same_tokens(run.outputs["out"], want)
    out_rows = [t.shape[0] for t in want if isinstance(t, np.ndarray)]
    assert out_rows == [3] * 6 + [0] * 6 + [4] * 6 + [1] * 6


def test_held_unit_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match=r"^AccumUnit inner must be an integer in \[1, rank\)"):
        AccumUnit(op="add", rank=2, in_shapes=((2, 2),), elem_bits=16, held=(2,), inner=0)
    with pytest.raises(ValueError, match=r"^AccumUnit held accumulators fold add, max or matmul"):
        AccumUnit(op="retile_row", rank=2, in_shapes=((1, 2),), elem_bits=16, out_rows=2,
                  held=(2,), inner=1)  # fmt: skip
    with pytest.raises(ValueError, match=r"^AccumUnit rank \+ held dims = 9 exceeds the 7"):
        AccumUnit(op="add", rank=7, in_shapes=((2, 2),), elem_bits=16, held=(2, 2), inner=1)
