# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors or `from_node` are never elaborated.)
"""Amaranth-simulator tests of the blocks of the functions hierarchical tiling introduces
(``step_lang.hier_tiling``): ``row_append_part`` (``RowAppendPartUnit``), ``block_row_offsets``
(``BlockRowOffsets``), the padding tiles in pieces (``PadTiles(pieces=p)``) and the BF16/FP32
``row_sum`` Accum (``AccumUnit(op="row_sum")``, ``float_numerics.row_sum_acc``).

Each block against the interpreter running the same one-node graph (the functions' ``apply`` /
``update``), bit for bit, under the three traffic patterns with protocol checkers; the row-sum
Accum also against ``row_sum`` of the concatenated tile; measured initiation intervals; error
flags; misuse; the ``rtl`` profile's timing of each against an Amaranth simulation of the
elaborated graph; every node of the hardware-tiled attention graphs has a block."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Fragment
from hw_helpers import assert_same_tokens, built_not_elaborated
from test_sim_rtl_profile import amaranth_pushes, sends

from examples import attention
from step_hw.addrgen import BlockRowOffsets, PadTiles, flatmap_unit
from step_hw.checks import node_formats
from step_hw.compute import AccumUnit, RowAppendPartUnit, RowAppendUnit, compute_unit
from step_hw.config import BF16_CONFIG, HwConfig
from step_hw.testing import PATTERNS, run_block
from step_lang import (
    DONE,
    Accum,
    FlatMap,
    Graph,
    Map,
    Sink,
    Source,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    functions,
    interpret,
    ragged,
)
from step_lang import numerics as nm
from step_lang.float_numerics import row_sum_acc
from step_lang.hier_tiling import hier_tile
from step_lang.ops import FlatMap as FlatMapOp
from step_lang.types import bfloat16, float32, int8, int16, int32

BF = np.dtype(ml_dtypes.bfloat16)
CFG = HwConfig()  # int16 Q8, 4x4 tiles
WIDE = HwConfig(tile_cols=8)  # whole [1, 8] padding tiles
FX16 = nm.functions(BF16_CONFIG)
ROW_SUM_ACC = row_sum_acc(FX16.numerics)
I32, I16, I8 = Tile(int32, 1, 1), Tile(int16, 1, 1), Tile(int8, 1, 1)


def s(v: int, dt: Any = np.int32) -> np.ndarray:
    """A ``[1,1]`` integer element."""
    return np.array([[v]], dtype=dt)


# -- one-node graphs, run by the interpreter and by the block ----------------------------------


def one_node(tiles: tuple[Tile, ...], build: Callable[..., Any], shape=None) -> tuple[Graph, Any]:
    g = Graph("unit_under_test")
    shape = shape or (ragged("o"), ragged("m"), ragged("n"))
    srcs = [Source(g, StreamType(t, shape), name=f"x{i}").out for i, t in enumerate(tiles)]
    node = build(*srcs)
    Sink(node.out, name="sink")
    return g, node


def unit_of(node: Any, config: HwConfig) -> Any:
    """The block the elaborator builds for ``node`` (its dispatch functions)."""
    return flatmap_unit(node, config) if isinstance(node, FlatMapOp) else compute_unit(node, config)


def run_node(
    tiles, build, inputs: list[list], config: HwConfig, pattern: str = "always", seed: int = 0
):
    """Interpret the node and simulate its block on the same tokens: (run, interpreter's tokens,
    block). Tokens are packed and unpacked with the node's formats (``float_dtype``: BF16 and
    FP32 tiles as bit patterns, as the elaborated graph's queues carry them)."""
    g, node = one_node(tiles, build)
    want = interpret(g, inputs={f"x{i}": t for i, t in enumerate(inputs)}).tokens(node.out)
    unit = unit_of(node, config)
    ins, out = node_formats(node, config)
    run = run_block(
        unit,
        {
            f"in{i}": (p, f, toks)
            for i, (p, f, toks) in enumerate(zip(unit.in_ports, ins, inputs, strict=True))
        },
        {"out": (unit.out, out)},
        pattern=pattern,
        seed=seed,
    )
    assert [len(run.transfers[f"in{i}"]) for i in range(len(inputs))] == [len(t) for t in inputs]
    return run, want, unit


def grouped(elems: list[list], level: int = 1) -> list:
    """Tokens of groups of elements: each group closed by ``Stop(level)``, the last by
    ``Stop(level + 1)``, then done."""
    toks: list = []
    for group in elems:
        toks += [*group, Stop(level)]
    if toks:
        toks[-1] = Stop(level + 1)
    return [*toks, DONE]


def data(tokens: list) -> list[np.ndarray]:
    return [t for t in tokens if isinstance(t, np.ndarray)]


# -- row_append_part ---------------------------------------------------------------------------


def row_append_part(a, b, c):
    return Map(a, b, c, fn=functions.row_append_part, name="append")


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(
    ("tile", "offset", "config"),
    [(Tile(int16, 4, 4), I32, CFG), (Tile(int8, 2, 3), I16, CFG),
     (Tile(bfloat16, 4, 4), I16, BF16_CONFIG)],
    ids=["int16", "int8", "bf16"],
)  # fmt: skip
def test_row_append_part_matches_interpreter(tile: Tile, offset: Tile, config, pattern: str):
    """Offsets below, inside and above the tile: the row lands at an offset inside, the tile
    passes unchanged otherwise, and the error flag stays low."""
    rng = np.random.default_rng(PATTERNS.index(pattern))
    rows, cols = tile.rows, tile.cols
    ks = [*range(-3, rows + 3), -(2 ** (offset.dtype.nbytes * 8 - 1)), 2**7 - 1]

    def elem(shape):
        if tile.dtype == bfloat16:
            return (rng.standard_normal(shape) * 64).astype(BF)
        return rng.integers(-100, 100, shape).astype(tile.dtype.numpy)

    groups = [[(elem((rows, cols)), elem((1, cols)), s(k, offset.dtype.numpy)) for k in ks[:7]],
              [], [(elem((rows, cols)), elem((1, cols)), s(k, offset.dtype.numpy)) for k in ks[7:]]]  # fmt: skip
    inputs = [grouped([[e[i] for e in g] for g in groups]) for i in range(3)]
    run, want, unit = run_node(
        (tile, Tile(tile.dtype, 1, cols), offset), row_append_part, inputs, config, pattern
    )
    assert type(unit) is RowAppendPartUnit
    assert_same_tokens(run.outputs["out"], want)
    assert run.flags["error"] == 0 and run.flags["misaligned"] == 0
    # The values themselves: the row at 0 <= k < rows, the tile unchanged elsewhere.
    got = data(run.outputs["out"])
    elems = [e for g in groups for e in g]
    assert len(got) == len(elems) == len(ks)
    for out, (t, r, k) in zip(got, elems, strict=True):
        k = int(k[0, 0])
        expect = t.copy()
        if 0 <= k < rows:
            expect[k] = r[0]
        assert np.array_equal(out.astype(expect.dtype).view(np.uint8), expect.view(np.uint8)), k


def test_row_append_part_ii_1_latency_1():
    tile, row = np.arange(16, dtype=np.int16).reshape(4, 4), np.full((1, 4), -1, np.int16)
    ks = [-1, 0, 3, 4, 2, 7, 1, -5]
    inputs = [grouped([[tile] * 8]), grouped([[row] * 8]), grouped([[s(k) for k in ks]])]
    run, want, unit = run_node(
        (Tile(int16, 4, 4), Tile(int16, 1, 4), I32), row_append_part, inputs, CFG,
        pattern="always",
    )  # fmt: skip
    assert_same_tokens(run.outputs["out"], want)
    assert unit.initiation_interval == 1
    assert [t.cycle for t in run.transfers["in2"]] == list(range(10))  # 8 tiles, S2, done
    assert [t.cycle for t in run.transfers["out"]] == list(range(1, 11))


def test_row_append_dispatch_is_by_function():
    _, node = one_node((Tile(int16, 4, 4), Tile(int16, 1, 4), I32), row_append_part)
    with pytest.raises(
        StepTypeError, match=r"^Map 'append': function 'row_append_part' is not row_append$"
    ):
        RowAppendUnit.from_node(node, CFG)
    _, plain = one_node(
        (Tile(int16, 4, 4), Tile(int16, 1, 4), I32),
        lambda a, b, c: Map(a, b, c, fn=functions.row_append, name="plain"),
    )
    with pytest.raises(
        StepTypeError, match=r"^Map 'plain': function 'row_append' is not row_append_part$"
    ):
        RowAppendPartUnit.from_node(plain, CFG)
    unit = compute_unit(plain, CFG)
    Fragment.get(unit, None)  # elaborates (and marks it used)
    assert type(unit) is RowAppendUnit


# -- block_row_offsets -------------------------------------------------------------------------


def offsets(rows: int, n_rows: int, n_cols: int):
    fn = functions.block_row_offsets(rows, n_rows, n_cols)
    return lambda k: FlatMap(k, fn=fn, name="offsets")


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(
    ("rows", "n_rows", "n_cols", "tile"),
    [(4, 3, 2, I32), (1, 1, 1, I32), (16, 2, 4, I16), (3, 5, 1, I8), (2, 1, 3, I16)],
)
def test_block_row_offsets_matches_interpreter(rows, n_rows, n_cols, tile, pattern):
    dt = tile.dtype.numpy
    lo = int(np.iinfo(dt).min)
    top = (n_rows - 1) * rows
    ks = [0, 5, -1, -7, rows * n_rows - 1, 60, lo + top, lo + top + 1, int(np.iinfo(dt).max)]
    inputs = [grouped([[s(k, dt) for k in ks[:4]], [], [s(k, dt) for k in ks[4:]]])]
    run, want, unit = run_node((tile,), offsets(rows, n_rows, n_cols), inputs, CFG, pattern)
    assert type(unit) is BlockRowOffsets
    assert_same_tokens(run.outputs["out"], want)
    got = [int(t[0, 0]) for t in data(run.outputs["out"])]
    assert got == [k - i * rows for k in ks for i in range(n_rows) for _ in range(n_cols)]
    assert any(v < 0 for v in got)
    assert run.flags["error"] == 0


def test_block_row_offsets_one_per_cycle():
    """II 1 per offset: 3 elements of 6 offsets each, written back to back from cycle 1; each
    element is taken with its last offset; the closing stop and done follow."""
    inputs = [grouped([[s(2), s(-1), s(9)]])]
    run, want, unit = run_node((I32,), offsets(4, 3, 2), inputs, CFG)
    assert_same_tokens(run.outputs["out"], want)
    assert unit.initiation_interval == 1
    assert [t.cycle for t in run.transfers["out"]] == list(range(1, 21))
    assert [t.cycle for t in run.transfers["in0"]] == [5, 11, 17, 18, 19]


def test_block_row_offsets_wrap_sets_the_error_flag():
    """``k - (n_rows - 1) * rows`` below int16: the interpreter raises; the block wraps and
    raises its error flag."""
    unit = BlockRowOffsets(rows=4, n_rows=3, n_cols=1, elem_bits=16)
    fmt = unit.in_formats[0]
    run = run_block(
        unit, {"in0": (unit.in0, fmt, [s(-32761, np.int16), DONE])}, {"out": (unit.out, fmt)}
    )
    assert [int(t[0, 0]) for t in data(run.outputs["out"])] == [-32761, -32765, 32767]
    assert run.flags["error"] == 1
    run = run_block(
        unit, {"in0": (unit.in0, fmt, [s(-32760, np.int16), DONE])}, {"out": (unit.out, fmt)}
    )
    assert [int(t[0, 0]) for t in data(run.outputs["out"])] == [-32760, -32764, -32768]
    assert run.flags["error"] == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rows": 0}, ValueError, r"^BlockRowOffsets rows must be a positive integer, not 0$"),
        ({"n_cols": 1.5}, TypeError, r"^BlockRowOffsets n_cols must be a positive integer, not 1\.5$"),
        ({"elem_bits": 12}, ValueError, r"^BlockRowOffsets elem_bits must be one of 8, 16, 32, not 12$"),
    ],
)  # fmt: skip
def test_block_row_offsets_rejects_bad_parameters(kwargs, error, message):
    params = {"rows": 4, "n_rows": 2, "n_cols": 2, "elem_bits": 16, **kwargs}
    with pytest.raises(error, match=message):
        BlockRowOffsets(**params)


# -- PadTiles in pieces ------------------------------------------------------------------------


def pad_pieces(fn, p: int):
    piece_fn = fn if p == 1 else fn.pieces(p)
    return lambda n, k: FlatMap(n, k, fn=piece_fn, name="pad")


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_pad_tiles_pieces_every_offset(p: int, pattern: str):
    """``pad_mask(8)`` in ``p`` pieces, every offset of the tile, 1 to 3 tiles per request: the
    interpreter's pieces, and the unpieced tiles when concatenated."""
    kv = 8
    whole = attention.pad_mask(kv, "int16", 256)
    pairs = [(n, k) for k in range(kv) for n in (1, 2, 3)]
    n_toks = grouped([[s(n) for n, _ in pairs[:10]], [], [s(n) for n, _ in pairs[10:]]])
    k_toks = grouped([[s(k) for _, k in pairs[:10]], [], [s(k) for _, k in pairs[10:]]])
    config = WIDE if p == 1 else CFG
    run, want, unit = run_node((I32, I32), pad_pieces(whole, p), [n_toks, k_toks], config, pattern)
    assert type(unit) is PadTiles and unit.pieces == p
    assert unit.out_format.cols == kv // p
    assert_same_tokens(run.outputs["out"], want)
    assert run.flags["error"] == 0
    got = data(run.outputs["out"])
    assert len(got) == sum(n for n, _ in pairs) * p
    at = 0
    for n, k in pairs:
        tiles = whole.apply(Tile(int16, 1, kv), s(n), s(k))
        for t in tiles:
            assert np.array_equal(np.concatenate(got[at : at + p], axis=1), t), (n, k)
            at += p


def test_pad_bias_pieces_bf16():
    """``pad_bias`` of BF16 tiles (``-inf`` past the offset) in 4 pieces of 2 columns."""
    fn = attention.pad_bias(8, "bfloat16")
    pairs = [(2, 0), (1, 7), (3, 3), (1, 4), (2, 6)]
    inputs = [grouped([[s(n) for n, _ in pairs]]), grouped([[s(k) for _, k in pairs]])]
    run, want, _ = run_node((I32, I32), pad_pieces(fn, 4), inputs, BF16_CONFIG, "random")
    assert_same_tokens(run.outputs["out"], want)
    last = np.concatenate(data(run.outputs["out"])[8:12], axis=1).astype(np.float32)
    assert last.tolist() == [[0, 0, 0, 0, 0, 0, 0, 0]]  # (1, 7): nothing padded
    last = np.concatenate(data(run.outputs["out"])[20:24], axis=1).astype(np.float32)
    assert last.tolist() == [[0, 0, 0, 0, -np.inf, -np.inf, -np.inf, -np.inf]]  # (3, 3)


def test_pad_tiles_pieces_one_per_cycle():
    """II 1 per piece: (2 tiles, 4 pieces) and (1, 4) are 12 pieces written back to back."""
    fn = attention.pad_mask(8, "int16", 256)
    inputs = [grouped([[s(2), s(1)]]), grouped([[s(5), s(0)]])]
    run, want, unit = run_node((I32, I32), pad_pieces(fn, 4), inputs, CFG)
    assert_same_tokens(run.outputs["out"], want)
    assert unit.initiation_interval == 1
    assert [t.cycle for t in run.transfers["out"]] == list(range(1, 15))
    assert [t.cycle for t in run.transfers["in0"]] == [7, 11, 12, 13]


def test_pad_tiles_pieces_error_flag_and_parameters():
    unit = PadTiles(kv_tile=8, valid=1, pad=0, in_bits=(32, 32), elem_bits=16, pieces=2)
    fmt = unit.in_formats[0]
    run = run_block(
        unit,
        {"in0": (unit.in0, fmt, [s(1), s(0), DONE]), "in1": (unit.in1, fmt, [s(8), s(1), DONE])},
        {"out": (unit.out, unit.out_format)},
    )
    assert len(data(run.outputs["out"])) == 2  # n = 0 writes nothing
    assert run.flags["error"] == 1
    with pytest.raises(ValueError, match=r"^PadTiles pieces must divide kv_tile 8, not 3$"):
        PadTiles(kv_tile=8, valid=1, pad=0, in_bits=(32, 32), elem_bits=16, pieces=3)
    with pytest.raises(TypeError, match=r"^PadTiles pieces must be a positive integer, not '2'$"):
        PadTiles(kv_tile=8, valid=1, pad=0, in_bits=(32, 32), elem_bits=16, pieces="2")


# -- row_sum Accum (BF16 and FP32) -------------------------------------------------------------

#: BF16 specials: signed zeros, subnormals (flushed), smallest and largest normals, one,
#: infinities, NaNs (quiet and signalling)
SPECIAL16 = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80,
             0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1]  # fmt: skip
SPECIAL32 = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF,
             0xFF7FFFFF, 0x3F800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F808000]  # fmt: skip


def random_tile(rng: np.random.Generator, t: Tile, special: float = 0.2) -> np.ndarray:
    """Values of mixed sign over the whole exponent range (large and small magnitudes), many
    within 2**24 of each other (so that FP32 sums round and the chain's order matters),
    ``special`` of them special values."""
    shape = (t.rows, t.cols)
    exps = [rng.integers(lo, hi, shape) for lo, hi in ((-140, 127), (-24, 25), (-4, 5))]
    which = rng.choice(3, shape, p=[0.3, 0.4, 0.3])
    normal = np.clip(rng.standard_normal(shape), -1.99, 1.99)  # finite below 2**127 * 1.99
    vals = normal * 2.0 ** np.choose(which, exps).astype(np.float64)
    if t.dtype == bfloat16:
        vals, special_bits, ut = vals.astype(BF), SPECIAL16, np.uint16
    else:
        vals, special_bits, ut = vals.astype(np.float32), SPECIAL32, np.uint32
    bits = vals.view(ut)
    pick = rng.random(shape) < special
    bits[pick] = np.array(rng.choice(special_bits, shape), dtype=ut)[pick]
    return vals


def row_sum_accum(rank: int = 1):
    return lambda x: Accum(x, fn=ROW_SUM_ACC, rank=rank, name="sums")


def row_sum_of_concatenation(group: list[np.ndarray], t: Tile) -> np.ndarray:
    """``row_sum`` of the group's tiles side by side (zeros for an empty group)."""
    if not group:
        return np.zeros((t.rows, 1), dtype=t.dtype.numpy)
    wide = np.concatenate(group, axis=1)
    return FX16.row_sum.apply(Tile(t.dtype, t.rows, wide.shape[1]), wide)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"uint{a.dtype.itemsize * 8}")


ROW_SUM_TILES = [Tile(bfloat16, 4, 4), Tile(bfloat16, 2, 3), Tile(bfloat16, 1, 4),
                 Tile(float32, 2, 2)]  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("t", ROW_SUM_TILES, ids=str)
def test_row_sum_accum_bit_exact(t: Tile, pattern: str):
    """Many random tiles in groups of 0 to 9: the block equals ``row_sum_acc`` (the interpreter)
    and ``row_sum`` of each group's tiles concatenated, bit for bit."""
    rng = np.random.default_rng(sum(map(ord, str(t) + pattern)))
    sizes = [int(n) for n in rng.integers(0, 10, 24)]
    sizes[3] = 0
    groups = [[random_tile(rng, t) for _ in range(n)] for n in sizes]
    run, want, unit = run_node((t,), row_sum_accum(), [grouped(groups)], BF16_CONFIG, pattern)
    assert type(unit) is AccumUnit and unit.op == "row_sum"
    assert_same_tokens(run.outputs["out"], want)
    got = data(run.outputs["out"])
    assert len(got) == len(groups)
    for out, group in zip(got, groups, strict=True):
        assert out.shape == (t.rows, 1) and out.dtype == t.dtype.numpy
        assert np.array_equal(_bits(out), _bits(row_sum_of_concatenation(group, t)))


def test_row_sum_accum_many_tiles():
    """600 random 4x4 BF16 tiles, a third of them special values, in groups of 1 to 12."""
    t = Tile(bfloat16, 4, 4)
    rng = np.random.default_rng(2024)
    groups, left = [], 600
    while left:
        n = min(left, int(rng.integers(1, 13)))
        groups.append([random_tile(rng, t, special=0.33) for _ in range(n)])
        left -= n
    run, want, _ = run_node((t,), row_sum_accum(), [grouped(groups)], BF16_CONFIG, "random")
    assert_same_tokens(run.outputs["out"], want)
    got = data(run.outputs["out"])
    for out, group in zip(got, groups, strict=True):
        assert np.array_equal(_bits(out), _bits(row_sum_of_concatenation(group, t)))
    assert any(np.isnan(x.astype(np.float32)).any() for x in got)
    assert any(np.isinf(x.astype(np.float32)).any() for x in got)


def test_row_sum_acc_is_row_sum_of_the_concatenation():
    """The reference itself, on many more groups than the simulator runs: ``row_sum_acc`` over
    a group's column blocks is ``row_sum`` of the concatenated tile (BF16 and FP32)."""
    rng = np.random.default_rng(7)
    for t in (Tile(bfloat16, 3, 4), Tile(float32, 2, 3)):
        out = Tile(t.dtype, t.rows, 1)
        for _ in range(1500):
            group = [random_tile(rng, t, special=0.1) for _ in range(int(rng.integers(1, 6)))]
            acc = ROW_SUM_ACC.init(out, (group[0],))
            for x in group:
                acc = ROW_SUM_ACC.update(out, acc, x)
            got = ROW_SUM_ACC.emit(out, acc)
            assert np.array_equal(_bits(got), _bits(row_sum_of_concatenation(group, t)))


def test_row_sum_accum_special_values():
    """Hand cases, one row each: flush-to-zero of subnormals (in and out), infinities, the NaN
    of inf - inf, overflow to infinity, cancellation and an FP32 sum BF16 could not hold."""
    t = Tile(bfloat16, 1, 2)

    def row(*bits: int) -> np.ndarray:
        return np.array([bits], dtype=np.uint16).view(BF)

    groups = [
        [row(0x0001, 0x807F), row(0x0001, 0x0000)],  # subnormals flush to +0
        [row(0x8000, 0x8000)],  # -0 + -0 on a +0 accumulator: +0
        [row(0x7F80, 0x3F80), row(0xFF80, 0x3F80)],  # inf - inf: NaN
        [row(0x7F7F, 0x7F7F)],  # overflow: +inf
        [row(0x7F7F, 0x3F80), row(0xFF7F, 0x3F80)],  # 1 lost against max, max cancels: 1
        [row(0x3F80, 0x3B80), row(0x3B80, 0x3B80)],  # 1 + 4 * 2**-8: FP32 1.015625
        [row(0x7FC0, 0x3F80)],  # NaN
    ]
    want_bits = [0x0000, 0x0000, 0x7FC0, 0x7F80, 0x3F80, 0x3F82, 0x7FC0]
    run, want, _ = run_node((t,), row_sum_accum(), [grouped(groups)], BF16_CONFIG, "periodic")
    assert_same_tokens(run.outputs["out"], want)
    got = [int(_bits(x)[0, 0]) for x in data(run.outputs["out"])]
    assert got == want_bits
    for out, group in zip(data(run.outputs["out"]), groups, strict=True):
        assert np.array_equal(_bits(out), _bits(row_sum_of_concatenation(group, t)))


def test_row_sum_accum_rank_2_and_ii_1():
    """Rank 2 folds across inner stops; one data token per cycle."""
    t = Tile(bfloat16, 2, 3)
    rng = np.random.default_rng(11)
    toks = [*(random_tile(rng, t) for _ in range(3)), Stop(1), random_tile(rng, t), Stop(2)]
    toks += [random_tile(rng, t), Stop(1), random_tile(rng, t), Stop(2), DONE]
    run, want, _ = run_node((t,), row_sum_accum(2), [toks], BF16_CONFIG)
    assert_same_tokens(run.outputs["out"], want)
    assert len(data(want)) == 2
    first = [x for x in toks[:5] if isinstance(x, np.ndarray)]
    assert np.array_equal(_bits(run.outputs["out"][0]), _bits(row_sum_of_concatenation(first, t)))

    def cycles(n: int) -> int:
        inputs = [grouped([[random_tile(rng, t) for _ in range(n)]])]
        run, want, unit = run_node((t,), row_sum_accum(), inputs, BF16_CONFIG)
        assert_same_tokens(run.outputs["out"], want)
        assert unit.initiation_interval == 1
        return run.cycles

    assert cycles(20) - cycles(4) == 16


def test_row_sum_accum_refuses_fixed_point():
    with pytest.raises(
        ValueError,
        match=r"^AccumUnit op 'row_sum' accumulates floating-point tiles only \(float_dtype "
        r"'bfloat16' or 'float32'\); fixed-point row sums have no accumulating form$",
    ):
        AccumUnit(op="row_sum", rank=1, in_shapes=[(2, 2)], elem_bits=16)
    with pytest.raises(ValueError, match=r"^ScanUnit op must be one of "):
        from step_hw.compute import ScanUnit

        ScanUnit(op="row_sum", rank=1, in_shapes=[(2, 2)], elem_bits=16, float_dtype="bfloat16")


# -- the rtl profile times the blocks as the hardware runs -------------------------------------


def _graph(tiles, build, tokens: list[list]) -> tuple[Graph, dict]:
    g, _ = one_node(tiles, build)
    return g, {f"x{i}": toks for i, toks in enumerate(tokens)}


def _rtl_cases() -> dict[str, tuple]:
    rng = np.random.default_rng(4)
    t = Tile(bfloat16, 2, 3)
    pads = [(2, 3), (1, 0), (3, 7)]
    return {
        "row_append_part": (
            CFG,
            *_graph(
                (Tile(int16, 4, 4), Tile(int16, 1, 4), I32),
                row_append_part,
                [
                    grouped([[np.full((4, 4), i, np.int16) for i in range(4)]]),
                    grouped([[np.full((1, 4), -i, np.int16) for i in range(4)]]),
                    grouped([[s(k) for k in (-1, 2, 5, 3)]]),
                ],
            ),
        ),
        "block_row_offsets": (
            CFG,
            *_graph((I32,), offsets(4, 3, 2), [grouped([[s(3), s(-2)], [s(9)]])]),
        ),
        "pad_mask_pieces": (
            CFG,
            *_graph(
                (I32, I32),
                pad_pieces(attention.pad_mask(8, "int16", 256), 4),
                [grouped([[s(n) for n, _ in pads]]), grouped([[s(k) for _, k in pads]])],
            ),
        ),
        "row_sum_acc": (
            BF16_CONFIG,
            *_graph(
                (t,),
                row_sum_accum(),
                [grouped([[random_tile(rng, t) for _ in range(n)] for n in (3, 0, 5, 1)])],
            ),
        ),
    }


RTL_CASES = _rtl_cases()


@pytest.mark.parametrize("case", list(RTL_CASES))
def test_rtl_profile_matches_an_amaranth_simulation(case: str):
    """Every queue push and the bench's cycle count of the elaborated one-node graph, from the
    ``rtl`` profile and from an Amaranth simulation (``test_sim_rtl_profile.amaranth_pushes``)."""
    config, graph, inputs = RTL_CASES[case]
    want, cycles = amaranth_pushes(graph, inputs, config)
    assert sends(graph, inputs, config) == (want, cycles)
    assert len(want[_out(graph)]) > 3  # the block wrote something


def _out(graph: Graph) -> str:
    (sink,) = (n for n in graph.nodes.values() if n.name == "sink")
    return sink.inputs[0].name


# -- the hardware-tiled attention graphs -------------------------------------------------------


@pytest.mark.parametrize("schedule", ["interleaved", "coarse", "dynamic"])
def test_hardware_tiled_attention_has_a_block_for_every_node(schedule: str):
    """Decode attention on 4x4 hardware tiles (``step_lang.hier_tiling``): every node has a
    block, among them the four of this file."""
    cfg = attention.AttentionConfig(head_dim=8, kv_tile=8, max_len=32)
    h = hier_tile(attention.hardware(schedule, 6, 2, hw=BF16_CONFIG, config=cfg), 4, 4)
    top = built_not_elaborated(h, BF16_CONFIG)
    kinds = {type(b) for b in top.blocks.values()}
    assert {BlockRowOffsets, PadTiles, RowAppendPartUnit, AccumUnit} <= kinds
    ops_ = {b.op for b in top.blocks.values() if isinstance(b, AccumUnit)}
    assert "row_sum" in ops_
    pieces = {b.pieces for b in top.blocks.values() if isinstance(b, PadTiles)}
    assert pieces == {2}
