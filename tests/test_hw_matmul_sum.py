# amaranth: UnusedElaboratable=no
"""The AccumUnit of ``numerics.matmul_sum_out`` (``exact``): a matmul whose ``K`` is split over
the tiles of a group, summed exactly in the ``acc_bits`` register and rescaled once when emitted.

The hardware is checked against the interpreter token for token under the three traffic patterns
(plain Accums, held accumulators, dynamic rows, Scan), the interpreter's group results against
the Map ``matmul_out`` of the concatenated tiles, the ``overflow`` flag against a Python model of
its rule, and the rtl profile's cycle counts against an Amaranth simulation of the elaborated
graph.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment
from hw_helpers import assert_same_tokens

from step_hw.compute import AccumUnit, ScanUnit, compute_unit
from step_hw.config import HwConfig
from step_hw.testing import PATTERNS, run_block
from step_lang import (
    Accum,
    Graph,
    Scan,
    Sink,
    Source,
    StreamType,
    Tile,
    interpret,
    numerics,
    ragged,
)
from step_lang.errors import StepRuntimeError
from step_lang.tokens import to_tokens
from step_lang.types import DTYPES

ACC_BITS = 32


# -- references ----------------------------------------------------------------------------------


def _wrap(v: int, bits: int) -> int:
    return ((v + 2 ** (bits - 1)) % 2**bits) - 2 ** (bits - 1)


def _fits(v: int, bits: int) -> bool:
    return -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)


def _dot(a: np.ndarray, b: np.ndarray, transpose: bool) -> np.ndarray:
    """The exact integer product (Python ints)."""
    return a.astype(object) @ (b.T if transpose else b).astype(object)


def unsplit(a_tiles, b_tiles, transpose: bool, f: int, out_bits: int) -> np.ndarray:
    """The group's result as one matmul of the tiles concatenated along ``K``, written out:
    ``wrap(round_shift(wrap(sum, 32), f), out_bits)``."""
    s = sum((_dot(a, b, transpose) for a, b in zip(a_tiles, b_tiles, strict=True)), start=0)
    half = (1 << (f - 1)) if f else 0
    return np.vectorize(
        lambda v: _wrap((_wrap(v, ACC_BITS) + half) >> f, out_bits), otypes=[object]
    )(s)


def overflow_expected(groups, transpose: bool, f: int, out_bits: int) -> bool:
    """The unit's rule: a running sum (after each tile) leaves ``acc_bits``, or an emitted
    element (of a non-empty group) does not fit ``out_bits``."""
    half = (1 << (f - 1)) if f else 0
    for a_tiles, b_tiles in groups:
        s = 0
        for a, b in zip(a_tiles, b_tiles, strict=True):
            s = s + _dot(a, b, transpose)
            if not all(_fits(v, ACC_BITS) for v in np.ravel(s)):
                return True  # (the sticky flag: later sums no longer matter)
        if a_tiles and not all(
            _fits((_wrap(v, ACC_BITS) + half) >> f, out_bits) for v in np.ravel(s)
        ):
            return True
    return False


# -- plain Accums: K tiles of 1..5 per group ----------------------------------------------------


def _accum_graph(fn, ta: Tile, tb: Tile, shape, build=Accum, **kw):
    g = Graph("mm_sum")
    a = Source(g, StreamType(ta, shape), name="x0").out
    b = Source(g, StreamType(tb, shape), name="x1").out
    node = build(a, b, fn=fn, name="unit", **kw)
    Sink(node.out, name="sink")
    return g, node


def _values(rng, dt: str, shape, big: bool) -> np.ndarray:
    info = np.iinfo(dt)
    if big:  # the extremes often: sums that leave int32 (int16), results that leave out_bits
        v = rng.integers(info.min, info.max + 1, shape)
        pick = rng.random(shape) < 0.3
        v[pick] = rng.choice([info.min, info.max], shape)[pick]
    else:
        v = rng.integers(-(2 ** (info.bits // 4)), 2 ** (info.bits // 4), shape)
    return v.astype(dt)


def _run(unit, inputs, pattern, seed):
    ports = zip(unit.in_ports, unit.in_formats, inputs, strict=True)
    return run_block(
        unit,
        {f"in{i}": (p, fmt, toks) for i, (p, fmt, toks) in enumerate(ports)},
        {"out": (unit.out, unit.out_format)},
        pattern=pattern,
        seed=seed,
        max_cycles=50_000,
    )


# (elem dtype, frac_bits, out dtype, transpose_b, (M, K, N), lanes, big values)
CASES = {
    "int16 Q8 -> int16, wrapping int32": ("int16", 8, "int16", False, (2, 3, 4), 5, True),
    "int16 Q0 -> int32, wrapping int32": ("int16", 0, "int32", False, (2, 2, 2), 8, True),
    "int16 Q15 -> int32, matmul_t": ("int16", 15, "int32", True, (3, 2, 2), 1, True),
    "int16 Q5 -> int16, in range": ("int16", 5, "int16", False, (2, 3, 4), 24, False),
    "int8 Q3 -> int8, wrapping out": ("int8", 3, "int8", False, (2, 4, 3), 7, True),
    "int8 Q0 -> int16, matmul_t": ("int8", 0, "int16", True, (4, 3, 2), 6, True),
    "int8 Q7 -> int32, in range": ("int8", 7, "int32", False, (1, 4, 4), 16, False),
}


def _case(name: str, seed: int):
    elem, f, out, transpose, (m, k, n), lanes, big = CASES[name]
    cfg = HwConfig(elem_dtype=elem, frac_bits=f, lanes=lanes)
    fn = numerics.functions(cfg).matmul_sum_out(out, transpose_b=transpose)
    dt = DTYPES[elem]
    ta, tb = Tile(dt, m, k), Tile(dt, n, k) if transpose else Tile(dt, k, n)
    g, node = _accum_graph(fn, ta, tb, (ragged("o"), ragged("k")), rank=1)
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(1, 6, 4)] + [0]  # 1..5 K tiles; an empty group
    rng.shuffle(sizes)
    groups = [
        ([_values(rng, elem, (ta.rows, ta.cols), big) for _ in range(s)],
         [_values(rng, elem, (tb.rows, tb.cols), big) for _ in range(s)])
        for s in sizes
    ]  # fmt: skip
    data = [[grp[0] for grp in groups], [grp[1] for grp in groups]]
    return cfg, fn, g, node, groups, data, (f, out, transpose)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", list(CASES))
def test_accum_matches_interpreter_and_the_unsplit_matmul(name: str, pattern: str):
    seed = sorted(CASES).index(name) * 7 + PATTERNS.index(pattern)
    cfg, _, g, node, groups, data, (f, out, transpose) = _case(name, seed)
    want = interpret(g, inputs={"x0": data[0], "x1": data[1]}).tokens(node.out)
    unit = compute_unit(node, cfg)
    assert isinstance(unit, AccumUnit) and unit.op == "matmul"
    run = _run(unit, [to_tokens(d, 1) for d in data], pattern, seed)
    assert_same_tokens(run.outputs["out"], want)

    # every group's tile is the one matmul of its K tiles concatenated (an empty group: zeros)
    tiles = [t for t in want if isinstance(t, np.ndarray)]
    out_bits = DTYPES[out].nbytes * 8
    mm = numerics.functions(cfg).matmul_out(out, transpose_b=transpose)
    assert len(tiles) == len(groups)
    for tile, (a_tiles, b_tiles) in zip(tiles, groups, strict=True):
        np.testing.assert_array_equal(
            tile.astype(np.int64),
            unsplit(a_tiles, b_tiles, transpose, f, out_bits).astype(np.int64),
        )
        if a_tiles:  # the Map of the concatenated tiles, by the language's own function
            a, b = (
                np.concatenate(a_tiles, axis=1),
                np.concatenate(b_tiles, axis=1 if transpose else 0),
            )
            whole = mm.apply(Tile(DTYPES[out], a.shape[0], tile.shape[1]), a, b)
            np.testing.assert_array_equal(tile, whole)
        else:
            assert not tile.any()

    # the overflow flag: the rule of MacArrayDatapath; raised by the interpreter only where set
    flag = overflow_expected(groups, transpose, f, out_bits)
    assert run.flags["overflow"] == flag
    strict = numerics.functions(cfg, overflow="raise").matmul_sum_out(out, transpose_b=transpose)
    gs, ns = _accum_graph(strict, node.inputs[0].elem, node.inputs[1].elem,
                          (ragged("o"), ragged("k")), rank=1)  # fmt: skip
    try:
        interpret(gs, inputs={"x0": data[0], "x1": data[1]}).tokens(ns.out)
    except StepRuntimeError:
        assert flag
    else:
        assert flag == any(  # no raise: only a running sum that wrapped and came back flags
            any(
                not all(_fits(v, ACC_BITS) for v in np.ravel(s))
                for s in _prefix_sums(grp, transpose)
            )
            for grp in groups
        )
    big = CASES[name][-1]
    assert flag == big  # the cases are chosen to cover both


def _prefix_sums(group, transpose: bool):
    s = 0
    for a, b in zip(*group, strict=True):
        s = s + _dot(a, b, transpose)
        yield s


def test_a_running_sum_that_wraps_and_returns_is_flagged_but_exact():
    """+big, +big, -big, -big: the int32 register wraps twice, the group's sum is 0; the result
    is exact (modular) and the flag is set (a superset of ``overflow='raise'``, which sees 0)."""
    cfg = HwConfig(elem_dtype="int16", frac_bits=0, lanes=4)
    fn = numerics.functions(cfg).matmul_sum_out("int32")
    ta, tb = Tile(DTYPES["int16"], 1, 2), Tile(DTYPES["int16"], 2, 1)
    g, node = _accum_graph(fn, ta, tb, (ragged("o"), ragged("k")), rank=1)
    big = np.full((1, 2), 32767, np.int16)
    col = np.full((2, 1), 32767, np.int16)
    a = [[big, big, big, -big, -big, -big]]
    b = [[col] * 6]
    want = interpret(g, inputs={"x0": a, "x1": b}).tokens(node.out)
    assert [t.tolist() for t in want if isinstance(t, np.ndarray)] == [[[0]]]
    unit = compute_unit(node, cfg)
    run = _run(unit, [to_tokens(a, 1), to_tokens(b, 1)], "always", 0)
    assert_same_tokens(run.outputs["out"], want)
    assert run.flags["overflow"] == 1
    strict = numerics.functions(cfg, overflow="raise").matmul_sum_out("int32")
    gs, ns = _accum_graph(strict, ta, tb, (ragged("o"), ragged("k")), rank=1)
    assert [t.tolist() for t in interpret(gs, inputs={"x0": a, "x1": b}).tokens(ns.out)
            if isinstance(t, np.ndarray)] == [[[0]]]  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_random_k_splits(seed: int):
    """Random tile shapes, lanes, fraction bits, output dtypes and groups of 1..5 K tiles."""
    rng = np.random.default_rng(100 + seed)
    elem = ["int8", "int16"][seed % 2]
    bits = DTYPES[elem].nbytes * 8
    out = str(rng.choice(["int8", "int16", "int32"] if elem == "int8" else ["int16", "int32"]))
    out_bits = DTYPES[out].nbytes * 8
    f = int(rng.integers(0, min(bits, out_bits)))
    m, k, n = (int(x) for x in rng.integers(1, 5, 3))
    transpose = bool(rng.integers(2))
    cfg = HwConfig(elem_dtype=elem, frac_bits=f, lanes=int(rng.integers(1, m * k * n + 1)))
    fn = numerics.functions(cfg).matmul_sum_out(out, transpose_b=transpose)
    dt = DTYPES[elem]
    ta, tb = Tile(dt, m, k), Tile(dt, n, k) if transpose else Tile(dt, k, n)
    g, node = _accum_graph(fn, ta, tb, (ragged("o"), ragged("k")), rank=1)
    sizes = [int(s) for s in rng.integers(1, 6, 3)]
    big = bool(rng.integers(2))
    data = [
        [[_values(rng, elem, (t.rows, t.cols), big) for _ in range(s)] for s in sizes]
        for t in (ta, tb)
    ]
    want = interpret(g, inputs={"x0": data[0], "x1": data[1]}).tokens(node.out)
    pattern = PATTERNS[seed % len(PATTERNS)]
    run = _run(compute_unit(node, cfg), [to_tokens(d, 1) for d in data], pattern, seed)
    assert_same_tokens(run.outputs["out"], want)
    tiles = [t for t in want if isinstance(t, np.ndarray)]
    for tile, a_tiles, b_tiles in zip(tiles, data[0], data[1], strict=True):
        np.testing.assert_array_equal(
            tile.astype(np.int64),
            unsplit(a_tiles, b_tiles, transpose, f, out_bits).astype(np.int64),
        )
    groups = list(zip(data[0], data[1], strict=True))
    assert run.flags["overflow"] == overflow_expected(groups, transpose, f, out_bits)


# -- a rank-2 Accum: stops inside the group are dropped ------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
def test_rank_two_accum_folds_across_the_inner_stops(pattern: str):
    cfg = HwConfig(elem_dtype="int16", frac_bits=6, lanes=3)
    fn = numerics.functions(cfg).matmul_sum_out("int16")
    dt = DTYPES["int16"]
    g, node = _accum_graph(fn, Tile(dt, 2, 2), Tile(dt, 2, 3),
                           (ragged("o"), ragged("p"), ragged("k")), rank=2)  # fmt: skip
    rng = np.random.default_rng(5)
    shape = [[2, 1], [3], [1, 1, 2]]
    data = [
        [[[_values(rng, "int16", s, True) for _ in range(kk)] for kk in grp] for grp in shape]
        for s in ((2, 2), (2, 3))
    ]
    want = interpret(g, inputs={"x0": data[0], "x1": data[1]}).tokens(node.out)
    run = _run(compute_unit(node, cfg), [to_tokens(d, 2) for d in data], pattern, 5)
    assert_same_tokens(run.outputs["out"], want)
    tiles = [t for t in want if isinstance(t, np.ndarray)]
    for tile, ga, gb in zip(tiles, data[0], data[1], strict=True):
        flat_a, flat_b = [t for p in ga for t in p], [t for p in gb for t in p]
        np.testing.assert_array_equal(tile, unsplit(flat_a, flat_b, False, 6, 16))


# -- held accumulators ---------------------------------------------------------------------------


HELD = {
    # elem, frac_bits, out, transpose, (m_held, n_held), k dims, outer sizes
    "int16 Q8 -> int16": ("int16", 8, "int16", False, (2, 3), (2,), [2, 1, 3]),
    "int8 Q2 -> int8, matmul_t": ("int8", 2, "int8", True, (3, 1), (3,), [1, 2]),
    "int16 Q4 -> int32, two inner dims": ("int16", 4, "int32", False, (1, 2), (2, 2), [2, 1]),
}


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", list(HELD))
def test_held_accumulators_match_interpreter(name: str, pattern: str):
    elem, f, out, transpose, (hm, hn), k_dims, sizes = HELD[name]
    cfg = HwConfig(elem_dtype=elem, frac_bits=f, tile_rows=4, tile_cols=4, lanes=3)
    fn = numerics.functions(cfg).matmul_sum_out(out, transpose_b=transpose)
    dt = DTYPES[elem]
    ta, tb = Tile(dt, 2, 3), Tile(dt, 2, 3) if transpose else Tile(dt, 3, 2)
    rank = 1 + len(k_dims)
    shape = (ragged("o"), ragged("d"), hm, hn, *k_dims)
    g, node = _accum_graph(fn, ta, tb, shape, rank=rank, held=2, inner=len(k_dims))
    rng = np.random.default_rng(len(name) + PATTERNS.index(pattern))

    def nested(t: Tile) -> list:
        def ks(dims):
            if not dims:
                return _values(rng, elem, (t.rows, t.cols), True)
            return [ks(dims[1:]) for _ in range(dims[0])]

        return [[[[ks(k_dims) for _ in range(hn)] for _ in range(hm)] for _ in range(d)]
                for d in sizes]  # fmt: skip

    data = [nested(ta), nested(tb)]
    want = interpret(g, inputs={"x0": data[0], "x1": data[1]}).tokens(node.out)
    unit = compute_unit(node, cfg)
    assert isinstance(unit, AccumUnit)
    run = _run(unit, [to_tokens(d, len(shape) - 1) for d in data], pattern, 3)
    assert_same_tokens(run.outputs["out"], want)
    # the held position (i, j) of group o sums every (d, k) tile, rounded once
    tiles = [t for t in want if isinstance(t, np.ndarray)]
    assert len(tiles) == len(sizes) * hm * hn
    out_bits = DTYPES[out].nbytes * 8

    def flat(x):
        return [x] if isinstance(x, np.ndarray) else [t for y in x for t in flat(y)]

    positions = []  # (a tiles, b tiles) of every accumulator, in the order it folds them
    for o in range(len(sizes)):
        for i in range(hm):
            for j in range(hn):
                a_t = [t for dd in data[0][o] for t in flat(dd[i][j])]
                b_t = [t for dd in data[1][o] for t in flat(dd[i][j])]
                positions.append((a_t, b_t))
                np.testing.assert_array_equal(
                    tiles[(o * hm + i) * hn + j].astype(np.int64),
                    unsplit(a_t, b_t, transpose, f, out_bits).astype(np.int64),
                )
    assert run.flags["overflow"] == overflow_expected(positions, transpose, f, out_bits)


# -- dynamic rows of a -----------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
def test_dynamic_rows_match_interpreter(pattern: str):
    cfg = HwConfig(dyn_tile_rows=5, lanes=4, frac_bits=7)
    fn = numerics.functions(cfg).matmul_sum_out("int16")
    dt = DTYPES["int16"]
    g, node = _accum_graph(fn, Tile(dt, ragged("R"), 4), Tile(dt, 4, 3),
                           (ragged("o"), ragged("k")), rank=1)  # fmt: skip
    rng = np.random.default_rng(11 + PATTERNS.index(pattern))
    rows = [(5, 3), (0, 2), (2, 5), (3, 1), (1, 4)]  # (rows of a in the group, K tiles)
    data = [
        [[_values(rng, "int16", (r, 4), True) for _ in range(n)] for r, n in rows],
        [[_values(rng, "int16", (4, 3), True) for _ in range(n)] for _, n in rows],
    ]
    unit = compute_unit(node, cfg)
    assert unit.in_formats[0].dynamic and unit.out_format.dynamic
    inputs = [to_tokens(d, 1) for d in data]
    want = interpret(g, inputs={"x0": inputs[0], "x1": inputs[1]}).tokens(node.out)
    run = _run(unit, inputs, pattern, 2)
    assert_same_tokens(run.outputs["out"], want)
    tiles = [t for t in want if isinstance(t, np.ndarray)]
    for tile, (r, _), a_t, b_t in zip(tiles, rows, data[0], data[1], strict=True):
        assert tile.shape == (r, 3)
        np.testing.assert_array_equal(tile, unsplit(a_t, b_t, False, 7, 16))


# -- Scan: the running exact sum, rescaled at every element ------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
def test_scan_emits_every_prefix_rescaled(pattern: str):
    cfg = HwConfig(elem_dtype="int16", frac_bits=3, lanes=6)
    fn = numerics.functions(cfg).matmul_sum_out("int16", transpose_b=True)
    dt = DTYPES["int16"]
    g, node = _accum_graph(fn, Tile(dt, 2, 3), Tile(dt, 2, 3), (ragged("o"), ragged("k")),
                           build=Scan, rank=1)  # fmt: skip
    rng = np.random.default_rng(21)
    sizes = [3, 1, 4]
    data = [[[_values(rng, "int16", (2, 3), True) for _ in range(s)] for s in sizes]
            for _ in range(2)]  # fmt: skip
    want = interpret(g, inputs={"x0": data[0], "x1": data[1]}).tokens(node.out)
    unit = compute_unit(node, cfg)
    assert isinstance(unit, ScanUnit)
    run = _run(unit, [to_tokens(d, 1) for d in data], pattern, 4)
    assert_same_tokens(run.outputs["out"], want)
    tiles = iter(t for t in want if isinstance(t, np.ndarray))
    for a_t, b_t in zip(data[0], data[1], strict=True):
        for p in range(1, len(a_t) + 1):
            np.testing.assert_array_equal(next(tiles), unsplit(a_t[:p], b_t[:p], True, 3, 16))


# -- parameters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"op": "add", "in_shapes": ((2, 2),)},
         r"^AccumUnit exact applies to fixed-point op='matmul' only, not op='add' with float_dtype=None$"),
        ({"op": "matmul", "in_shapes": ((2, 2), (2, 2)), "float_dtype": "bfloat16"},
         r"^AccumUnit exact applies to fixed-point op='matmul' only, not op='matmul' with float_dtype='bfloat16'$"),
    ],
)  # fmt: skip
def test_exact_is_fixed_point_matmul_only(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AccumUnit(rank=1, elem_bits=16, exact=True, **kwargs)


def test_exact_must_be_a_bool():
    with pytest.raises(TypeError, match=r"^AccumUnit exact must be a bool"):
        AccumUnit(op="matmul", rank=1, in_shapes=((2, 2), (2, 2)), elem_bits=16, exact=1)


def test_from_node_selects_the_exact_datapath():
    cfg = HwConfig(frac_bits=4)
    fx = numerics.functions(cfg)
    dt = DTYPES["int16"]
    for fn, exact in ((fx.matmul_sum_out("int16"), True), (fx.matmul_acc_out("int16"), False)):
        _, node = _accum_graph(fn, Tile(dt, 2, 2), Tile(dt, 2, 2), (ragged("o"), 3), rank=1)
        unit = AccumUnit.from_node(node, cfg)
        Fragment.get(unit, None)  # (built: a unit never elaborated warns)
        assert unit._datapath.exact is exact
        assert unit._datapath.acc_register_bits == (32 if exact else None)


# -- the rtl profile times it as the hardware --------------------------------------------------


@pytest.mark.parametrize(
    ("lanes", "sizes", "held"),
    [(4, [2, 1, 3], False), (24, [5, 0, 1], False), (5, [1, 4], False), (3, [2, 1], True)],
)
def test_rtl_profile_times_it_as_the_hardware(lanes: int, sizes: list[int], held: bool):
    from tests.test_hw_random_fetch import hardware_cycles, profile_cycles

    cfg = HwConfig(frac_bits=5, lanes=lanes)
    fx = numerics.functions(cfg)
    dt = DTYPES["int16"]
    rng = np.random.default_rng(lanes)
    ta, tb = Tile(dt, 2, 3), Tile(dt, 3, 4)
    if held:
        shape, kw = (ragged("o"), ragged("d"), 2, 2), {"rank": 2, "held": 1, "inner": 1}
    else:
        shape, kw = (ragged("o"), ragged("k")), {"rank": 1}

    def data(t: Tile) -> list:
        if held:
            return [[[[_values(rng, "int16", (t.rows, t.cols), True) for _ in range(2)]
                      for _ in range(2)] for _ in range(s)] for s in sizes]  # fmt: skip
        return [[_values(rng, "int16", (t.rows, t.cols), True) for _ in range(s)] for s in sizes]

    inputs = {"x0": data(ta), "x1": data(tb)}
    cycles = {}
    for fn in (fx.matmul_sum_out("int16"), fx.matmul_acc_out("int16")):
        g, node = _accum_graph(fn, ta, tb, shape, **kw)
        hw, got, _, _ = hardware_cycles(g, {}, inputs, cfg)
        want = interpret(g, inputs=inputs).tokens(node.out)
        assert_same_tokens(got["sink"], want)
        assert profile_cycles(g, {}, inputs, cfg) == hw
        cycles[fn.name] = hw
    assert cycles["matmul_sum"] == cycles["matmul_acc"]
