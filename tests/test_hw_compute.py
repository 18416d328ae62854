# amaranth: UnusedElaboratable=no
# (Units built only to test their constructors or `from_node` are never elaborated.)
"""Amaranth-simulator tests of `step_hw.compute`: every unit against the interpreter running the
same node with `step_lang.numerics` functions, on a case table and on hypothesis streams, under
the three traffic patterns with protocol checkers; measured initiation intervals and latencies;
parameter validation."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from amaranth.hdl import Fragment, Value
from amaranth.sim import Simulator
from hw_helpers import assert_same_tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from step_hw.compute import (
    AccumUnit,
    MapUnit,
    MatmulUnit,
    RetileUnit,
    ScanUnit,
    compute_unit,
)
from step_hw.config import HwConfig
from step_hw.payload import Kind
from step_hw.testing import PATTERNS, run_block
from step_lang import (
    DONE,
    Accum,
    Graph,
    Map,
    RetileStreamify,
    Scan,
    Sink,
    Source,
    StepRuntimeError,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    functions,
    interpret,
    ragged,
    regular,
    to_tokens,
)
from step_lang import numerics as nm
from step_lang.types import bool_, float32, int8, int16

CFG8 = HwConfig(elem_dtype="int8", frac_bits=4, tile_rows=4, tile_cols=4, lanes=2)
CFG16 = HwConfig(elem_dtype="int16", frac_bits=8, tile_rows=4, tile_cols=4, lanes=3)

# -- building a one-node graph and running both readers ----------------------------------------


@dataclass(frozen=True)
class Case:
    """One node under test: its inputs' tiles and a builder ``(functions, *streams) -> node``.

    Inputs are rank-``rank`` streams with ragged dims; ``inner`` fixes the innermost extent
    (Accum with ``retile_row`` needs a static one), otherwise it ranges over 0..3 (empty
    innermost vectors included).
    """

    id: str
    config: HwConfig
    tiles: tuple[Tile, ...]
    build: Callable[..., Any]
    rank: int = 2
    inner: int | None = None

    def graph(self, overflow: str = "wrap") -> tuple[Graph, Any]:
        g = Graph(self.id)
        inner = self.inner if self.inner is not None else ragged("n")
        shape = (ragged("o"), ragged("m"), inner)[-(self.rank + 1) :]
        srcs = [Source(g, StreamType(t, shape), name=f"x{i}").out for i, t in enumerate(self.tiles)]
        node = self.build(nm.functions(self.config, overflow=overflow), *srcs)
        Sink(node.out)
        return g, node


def fn_map(name: str) -> Callable[..., Any]:
    return lambda fns, *xs: Map(*xs, fn=getattr(fns, name), name="unit")


def fn_reduce(kind: type, name: str, rank: int = 1) -> Callable[..., Any]:
    return lambda fns, *xs: kind(*xs, fn=getattr(fns, name), rank=rank, name="unit")


T8, T8R = Tile(int8, 2, 2), Tile(int8, 2, 1)
T16, T16C = Tile(int16, 2, 2), Tile(int16, 1, 2)

CASES = [
    # element-wise Map, II = 1 (broadcast of a [2, 1] tile in one case)
    Case("add8", CFG8, (T8, T8), fn_map("add")),
    Case("sub16", CFG16, (T16, T16), fn_map("sub")),
    Case("mul8_bcast", CFG8, (T8, T8R), fn_map("mul")),
    Case("mul16", CFG16, (T16, T16), fn_map("mul")),
    Case("max16_bcast", CFG16, (T16C, T16), fn_map("maximum")),
    Case("div8", CFG8, (T8, T8), fn_map("div")),
    Case("div16", CFG16, (T16, T16), fn_map("div")),
    Case("exp8", CFG8, (T8,), fn_map("exp")),
    Case("exp16", CFG16, (T16,), fn_map("exp")),
    Case("silu16", CFG16, (T16,), fn_map("silu")),
    Case("recip16", CFG16, (T16,), fn_map("recip")),
    Case("row_sum8", CFG8, (Tile(int8, 2, 3),), fn_map("row_sum")),
    # matmul Map: MAC arrays, 2x3 @ 3x2 (12 products) on 2 and 3 lanes
    Case("matmul8", CFG8, (Tile(int8, 2, 3), Tile(int8, 3, 2)), fn_map("matmul")),
    Case("matmul_t16", CFG16, (Tile(int16, 2, 3), Tile(int16, 2, 3)), fn_map("matmul_t")),
    # Accum
    Case("accum_add8", CFG8, (T8,), fn_reduce(Accum, "accum_add")),
    Case("accum_max16_r2", CFG16, (T16,), fn_reduce(Accum, "accum_max", 2)),
    Case("accum_matmul8", CFG8, (T8, T8), fn_reduce(Accum, "matmul_acc")),
    Case("accum_retile8", CFG8, (Tile(int8, 1, 3),), fn_reduce(Accum, "retile_row"), inner=3),
    Case("accum_add16_rank1", CFG16, (T16,), fn_reduce(Accum, "accum_add"), rank=1),
    # Scan
    Case("scan_add16", CFG16, (T16,), fn_reduce(Scan, "accum_add")),
    Case("scan_max8_r2", CFG8, (T8,), fn_reduce(Scan, "accum_max", 2)),
    Case("scan_matmul16", CFG16, (T16, T16), fn_reduce(Scan, "matmul_t_acc")),
    # RetileStreamify
    Case(
        "retile_rows16", CFG16, (Tile(int16, 3, 2),), lambda fns, x: RetileStreamify(x, name="unit")
    ),
    Case(
        "retile_cols8",
        CFG8,
        (Tile(int8, 2, 3),),
        lambda fns, x: RetileStreamify(x, split="cols", name="unit"),
    ),
    Case(
        "retile_masked8",
        CFG8,
        (Tile(int8, 3, 2), Tile(bool_, 3, 1)),
        lambda fns, x, pad: RetileStreamify(x, is_pad=pad, name="unit"),
    ),
]
CASE_IDS = [c.id for c in CASES]


def extremes(t: Tile) -> list[int]:
    if t.dtype == bool_:
        return [0, 1]
    info = np.iinfo(t.dtype.numpy)
    return [int(info.min), int(info.max), 0, -1, 1, int(info.min) + 1, 1 << 4]


def random_tile(rng: np.random.Generator, t: Tile) -> np.ndarray:
    """Random values, a third of them extremes (MIN, MAX, 0, +-1, ...)."""
    shape = (t.rows, t.cols)
    if t.dtype == bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(t.dtype.numpy)
    vals = rng.integers(int(info.min), int(info.max) + 1, shape)
    pick = rng.random(shape) < 1 / 3
    vals[pick] = rng.choice(extremes(t), shape)[pick]
    return vals.astype(t.dtype.numpy)


def skeleton(rng: np.random.Generator, case: Case) -> list:
    """A nested structure of ``None`` leaves (rank ``case.rank``; only innermost dims empty)."""

    def level(k: int) -> list:
        if k == 1:
            return [None] * (case.inner if case.inner is not None else int(rng.integers(0, 4)))
        return [level(k - 1) for _ in range(int(rng.integers(1, 3)))]

    return [level(case.rank) for _ in range(int(rng.integers(1, 4)))]


def fill(nested: Any, leaf: Callable[[], Any]) -> Any:
    if isinstance(nested, list):
        return [fill(x, leaf) for x in nested]
    return leaf()


def run_case(case: Case, inputs: list[list], pattern: str, seed: int = 0):
    """Interpret the case's node and simulate its unit on the same tokens; both outputs."""
    g, node = case.graph()
    want = interpret(g, inputs={f"x{i}": toks for i, toks in enumerate(inputs)}).tokens(node.out)
    unit = compute_unit(node, case.config)
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
    )
    return run, want, unit


def case_tokens(case: Case, rng: np.random.Generator) -> list[list]:
    structure = skeleton(rng, case)
    return [
        to_tokens(fill(structure, lambda t=t: random_tile(rng, t)), case.rank) for t in case.tiles
    ]


# -- the case table, under every traffic pattern ---------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_unit_matches_interpreter(case: Case, pattern: str):
    rng = np.random.default_rng(abs(hash((case.id, pattern))) % 2**32)
    inputs = case_tokens(case, rng)
    run, want, _ = run_case(case, inputs, pattern, seed=int(rng.integers(2**31)))
    assert_same_tokens(run.outputs["out"], want)
    assert [len(run.transfers[f"in{i}"]) for i in range(len(inputs))] == [len(t) for t in inputs]


def test_empty_groups_and_empty_stream():
    """Accum emits the initial value for an empty group; a lone done token passes through."""
    case = CASES[CASE_IDS.index("accum_max16_r2")]
    lo = np.iinfo(np.int16).min
    t = np.array([[1, -2], [3, lo]], dtype=np.int16)
    toks = [Stop(1), Stop(2), t, Stop(2), DONE]  # [[[], []], [[t]]]
    run, want, _ = run_case(case, [toks], "random")
    assert_same_tokens(run.outputs["out"], want)
    assert np.all(run.outputs["out"][0] == lo) and np.array_equal(run.outputs["out"][1], t)
    for case in CASES:
        run, want, _ = run_case(case, [[DONE]] * len(case.tiles), "periodic")
        assert run.outputs["out"] == want == [DONE]


# -- hypothesis streams -----------------------------------------------------------------------


@st.composite
def streams(draw, case: Case) -> list[list]:
    """Zipped token lists for ``case``: one shared ragged structure, values with extremes."""

    def level(k: int) -> list:
        if k == 1:
            n = case.inner if case.inner is not None else draw(st.integers(0, 3))
            return [None] * n
        return [level(k - 1) for _ in range(draw(st.integers(1, 2)))]

    structure = [level(case.rank) for _ in range(draw(st.integers(0, 3)))]

    def tile(t: Tile) -> np.ndarray:
        n = t.rows * t.cols
        if t.dtype == bool_:
            vals = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        else:
            info = np.iinfo(t.dtype.numpy)
            elem = st.one_of(
                st.sampled_from(extremes(t)), st.integers(int(info.min), int(info.max))
            )
            vals = draw(st.lists(elem, min_size=n, max_size=n))
        return np.array(vals).reshape(t.rows, t.cols).astype(t.dtype.numpy)

    return [to_tokens(fill(structure, lambda t=t: tile(t)), case.rank) for t in case.tiles]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_streams(data):
    case = data.draw(st.sampled_from(CASES), label="case")
    pattern = data.draw(st.sampled_from(PATTERNS), label="pattern")
    inputs = data.draw(streams(case), label="inputs")
    run, want, _ = run_case(case, inputs, pattern, seed=data.draw(st.integers(0, 2**16)))
    assert_same_tokens(run.outputs["out"], want)


@pytest.mark.parametrize("op", ["exp", "silu", "recip"])
def test_every_int8_value(op: str):
    """Every int8 input of the approximation units, against the numerics model."""
    values = np.arange(-128, 128, dtype=np.int8).reshape(-1, 4, 4)
    case = Case(op, CFG8, (Tile(int8, 4, 4),), fn_map(op), rank=0)
    run, want, _ = run_case(case, [[*values, DONE]], "always")
    assert_same_tokens(run.outputs["out"], want)


# -- throughput and latency (pattern "always") ------------------------------------------------


def cycles(transfers) -> list[int]:
    return [t.cycle for t in transfers]


def data_tiles(case: Case, count: int, rng: np.random.Generator) -> list[list]:
    return [[*(random_tile(rng, t) for _ in range(count)), DONE] for t in case.tiles]


@pytest.mark.parametrize("op", ["add", "div", "exp", "row_sum"])
def test_elementwise_ii_1_latency_1(op: str):
    tiles = (T16, T16) if op in ("add", "div") else (T16,)
    case = Case(op, CFG16, tiles, fn_map(op), rank=0)
    run, want, _ = run_case(case, data_tiles(case, 16, np.random.default_rng(1)), "always")
    assert_same_tokens(run.outputs["out"], want)
    taken, given_ = cycles(run.transfers["in0"]), cycles(run.transfers["out"])
    assert np.all(np.diff(taken) == 1) and np.all(np.diff(given_) == 1)  # one tile per cycle
    assert [o - i for i, o in zip(taken, given_, strict=True)] == [1] * 17  # 16 tiles + done


@pytest.mark.parametrize(
    ("shapes", "lanes"),
    [
        (((2, 2), (2, 2)), 2),  # 8 products: 4 cycles
        (((2, 2), (2, 2)), 8),  # 1 cycle
        (((2, 3), (3, 2)), 5),  # 12 products: 3 cycles
        (((4, 4), (4, 4)), 16),  # 64 products: 4 cycles
        (((4, 4), (4, 4)), 64),  # 1 cycle
    ],
)
def test_matmul_ii(shapes, lanes: int):
    """A new tile pair every ``ceil(M*K*N / lanes)`` cycles; the result ``II`` cycles after
    the pair is first valid."""
    (mm, kk), (_, nn) = shapes
    ii = math.ceil(mm * kk * nn / lanes)
    config = HwConfig(elem_dtype="int8", frac_bits=4, lanes=lanes)
    case = Case("mm", config, tuple(Tile(int8, *s) for s in shapes), fn_map("matmul"), rank=0)
    run, want, unit = run_case(case, data_tiles(case, 8, np.random.default_rng(2)), "always")
    assert unit.initiation_interval == ii and unit.lanes == lanes
    assert_same_tokens(run.outputs["out"], want)
    taken, given_ = cycles(run.transfers["in0"]), cycles(run.transfers["out"])
    assert cycles(run.transfers["in1"]) == taken
    assert list(np.diff(taken[:8])) == [ii] * 7
    assert list(np.diff(given_[:8])) == [ii] * 7
    assert given_[0] == ii  # offered from cycle 0, taken in cycle ii - 1, out in cycle ii


def test_accum_throughput():
    """Data tokens are folded one per cycle; a stop above the rank costs one extra beat."""
    case = CASES[CASE_IDS.index("accum_add8")]
    rng = np.random.default_rng(3)
    toks = [
        *(random_tile(rng, T8) for _ in range(6)),
        Stop(1),
        *(random_tile(rng, T8) for _ in range(6)),
        Stop(2),
        DONE,
    ]
    run, want, _ = run_case(case, [toks], "always")
    assert_same_tokens(run.outputs["out"], want)
    taken, given_ = cycles(run.transfers["in0"]), cycles(run.transfers["out"])
    assert taken[:7] == list(range(7))  # 6 tiles and S1, back to back
    assert taken[7:14] == list(range(7, 14))
    assert given_ == [7, 14, 15, 16]  # acc after S1; acc and S1 after S2; done
    assert taken[14] == 15  # done waits while the pending S1 is written


def test_retile_throughput():
    case = Case("rows", CFG16, (Tile(int16, 3, 2),), lambda fns, x: RetileStreamify(x), rank=0)
    run, want, _ = run_case(case, data_tiles(case, 4, np.random.default_rng(4)), "always")
    assert_same_tokens(run.outputs["out"], want)
    assert cycles(run.transfers["out"]) == list(range(1, 14))  # 3 rows per tile, then done
    assert cycles(run.transfers["in0"]) == [2, 5, 8, 11, 12]


# -- misaligned zipped inputs -------------------------------------------------------------------


def small_tile(rng: np.random.Generator, t: Tile) -> np.ndarray:
    shape = (t.rows, t.cols)
    if t.dtype == bool_:
        return rng.random(shape) < 0.5
    return rng.integers(1, 4, shape).astype(t.dtype.numpy)


def _raises(case: Case, inputs: list[list]) -> bool:
    """Whether the interpreter with ``overflow="raise"`` numerics refuses these tokens."""
    g, _ = case.graph(overflow="raise")
    try:
        interpret(g, inputs={f"x{i}": toks for i, toks in enumerate(inputs)})
    except StepRuntimeError as exc:
        assert "overflow='raise'" in str(exc) or "division by zero" in str(exc), str(exc)
        return True
    return False


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_overflow_flag_is_where_the_interpreter_raises(case: Case):
    """The sticky ``overflow`` flag of a fixed-point unit rises exactly when its results wrapped
    or saturated: when the interpreter under ``overflow="raise"`` raises on the same tokens."""
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    seen = set()
    for trial in range(8):
        if trial % 2:  # small positive values: nothing wraps, saturates or divides by zero
            structure = skeleton(rng, case)
            inputs = [
                to_tokens(fill(structure, lambda t=t: small_tile(rng, t)), case.rank)
                for t in case.tiles
            ]
        else:
            inputs = case_tokens(case, rng)
        run, want, unit = run_case(case, inputs, "always")
        assert_same_tokens(run.outputs["out"], want)
        raised = _raises(case, inputs)
        assert run.flags.get("overflow", 0) == int(raised), (case.id, raised, run.flags)
        seen.add(raised)
    has_flag = "overflow" in unit.signature.members
    # add, sub, mul, div, exp, recip, row_sum and accum add meet an overflow in 8 random runs
    # with extreme values; max, silu, retile and the int32-accumulated matmuls never overflow.
    assert seen == ({False, True} if case.id in OVERFLOWING else {False}), seen
    assert has_flag == (case.id not in NEVER_FLAGGED)


OVERFLOWING = {
    "add8", "sub16", "mul8_bcast", "mul16", "div8", "div16", "exp8", "exp16", "recip16",
    "row_sum8", "accum_add8", "accum_add16_rank1", "scan_add16",
}  # fmt: skip
NEVER_FLAGGED = {
    "max16_bcast", "silu16", "accum_max16_r2", "accum_retile8", "scan_max8_r2",
    "retile_rows16", "retile_cols8", "retile_masked8",
}  # fmt: skip


def test_misaligned_inputs_raise_the_flag():
    unit = MapUnit(op="add", in_shapes=[(1, 1), (1, 1)], elem_bits=8)
    fmt0, fmt1 = unit.in_formats
    seen: list[int] = []

    async def bench(ctx):
        ctx.set(unit.out.ready, 1)
        for a, b in [
            (np.array([[1]]), np.array([[2]])),
            (Stop(1), Stop(1)),
            (np.array([[1]]), Stop(1)),
        ]:
            ctx.set(unit.in0.valid, 1)
            ctx.set(unit.in1.valid, 1)
            ctx.set(Value.cast(unit.in0.payload), fmt0.pack(a))
            ctx.set(Value.cast(unit.in1.payload), fmt1.pack(b))
            await ctx.tick()
            seen.append(ctx.get(unit.misaligned))

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [0, 0, 1]


# -- from_node --------------------------------------------------------------------------------


def test_from_node_builds_each_unit():
    kinds = {}
    for case in CASES:
        _, node = case.graph()
        unit = compute_unit(node, case.config)
        kinds[case.id] = type(unit)
        Fragment.get(unit, None)  # elaborates (and marks it used)
        assert [p.signature for p in unit.in_ports] == [
            f.signature().flip() for f in unit.in_formats
        ]
        assert len(unit.out_ports) == 1
    assert kinds["div16"] is MapUnit and kinds["matmul8"] is MatmulUnit
    assert kinds["accum_retile8"] is AccumUnit and kinds["scan_add16"] is ScanUnit
    assert kinds["retile_masked8"] is RetileUnit


def one_node(tiles, build, shape=(3,)):
    g = Graph("t")
    srcs = [Source(g, StreamType(t, shape)).out for t in tiles]
    return build(*srcs)


FNS16 = nm.functions(CFG16)


@pytest.mark.parametrize(
    ("build", "cls", "message"),
    [
        (
            lambda: one_node(
                [Tile(float32, 2, 2)] * 2, lambda a, b: Map(a, b, fn=functions.add, name="f")
            ),
            MapUnit,
            r"^Map 'f', port 'in0': dtype float32 is not supported by the hardware \(int16/int32\)$",
        ),
        (
            lambda: one_node([T16] * 2, lambda a, b: Map(a, b, fn=functions.add, name="plain")),
            MapUnit,
            r"^Map 'plain': function 'add' has no hardware arithmetic; build the graph with step_lang\.numerics\.functions\(config\)$",
        ),
        (
            lambda: one_node([T16, T16], lambda a, b: Map(a, b, fn=FNS16.matmul, name="mm")),
            MapUnit,
            r"^Map 'mm': function 'matmul' is not one of MapUnit's operations \(add, sub, mul, div, max, exp, silu, recip, row_sum\)$",
        ),
        (
            lambda: one_node([T16], lambda a: Map(a, fn=FNS16.exp, name="e")),
            MatmulUnit,
            r"^Map 'e': function 'exp' is not one of MatmulUnit's operations \(matmul\)$",
        ),
        (
            lambda: one_node([Tile(int16, 8, 2)], lambda a: Map(a, fn=FNS16.exp, name="big")),
            MapUnit,
            r"^Map 'big', port 'in0': tile Tile<int16, 8x2> does not fit the configured 4x4 tile$",
        ),
        (
            lambda: one_node([T16], lambda a: Map(a, fn=nm.functions(CFG8).exp, name="q4")),
            None,
            r"^Map 'q4': function 'exp' computes with 4 fraction bits, the hardware with 8$",
        ),
        (  # (dynamic rows are encoded: tests/test_hw_dynamic_tiles.py)
            lambda: one_node(
                [Tile(int16, 2, ragged("c"))], lambda a: Map(a, fn=FNS16.exp, name="cols")
            ),
            MapUnit,
            r"^Map 'cols', port 'in0': tile Tile<int16, 2xc> has dynamic columns; hardware tiles have static columns",
        ),
        (
            lambda: one_node(
                [Tile(int16, 1, 2)],
                lambda a: Accum(a, fn=FNS16.retile_row, rank=1, name="tall"),
                shape=(2, 5),
            ),
            AccumUnit,
            r"^Accum 'tall', port 'out': tile Tile<int16, 5x2> does not fit the configured 4x4 tile$",
        ),
        (
            lambda: one_node(
                [T16], lambda a: Accum(a, fn=functions.accum_mul, rank=1, name="prod"), shape=(2, 2)
            ),
            AccumUnit,
            r"^Accum 'prod': function 'accum_mul' has no hardware arithmetic; build the graph with step_lang\.numerics\.functions\(config\)$",
        ),
    ],
)
def test_from_node_errors_name_the_node(build, cls, message):
    node = build()
    with pytest.raises(StepTypeError, match=message):
        (cls.from_node if cls is not None else compute_unit)(node, CFG16)


def test_from_node_refuses_other_nodes():
    node = one_node([T16], lambda a: RetileStreamify(a, name="r"))
    with pytest.raises(
        StepTypeError, match=r"^RetileStreamify 'r': MapUnit builds Map nodes only$"
    ):
        MapUnit.from_node(node, CFG16)
    with pytest.raises(
        TypeError, match=r"^AccumUnit\.from_node needs a step_lang node, not 'acc'$"
    ):
        AccumUnit.from_node("acc", CFG16)
    sink = one_node([T16], lambda a: Sink(a, name="s"))
    with pytest.raises(StepTypeError, match=r"^Sink 's': has no compute unit$"):
        compute_unit(sink, CFG16)
    with pytest.raises(TypeError, match=r"^config must be a HwConfig, not 8$"):
        RetileUnit.from_node(node, 8)


def test_regular_dims_are_fine_for_the_hardware():
    # Symbols in the stream shape do not matter; only the tile must be static.
    node = one_node([T16], lambda a: Map(a, fn=FNS16.silu, name="s"), shape=(regular("d"), 2))
    unit = compute_unit(node, CFG16)
    Fragment.get(unit, None)
    assert isinstance(unit, MapUnit)


# -- constructor validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "kwargs", "error", "message"),
    [
        (
            MapUnit,
            {"op": "pow", "in_shapes": [(2, 2)], "elem_bits": 8},
            ValueError,
            r"^MapUnit op must be one of 'add', 'sub', 'mul', 'div', 'max', 'exp', 'silu', 'recip', 'row_sum', not 'pow'$",
        ),
        (
            MapUnit,
            {"op": "add", "in_shapes": [(2, 2)], "elem_bits": 8},
            ValueError,
            r"^MapUnit in_shapes must hold 2 shape\(s\) for op 'add', not 1$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": (2, 2), "elem_bits": 8},
            TypeError,
            r"^MapUnit in_shapes must be a sequence of \(rows, cols\) pairs, not \(2, 2\)$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": [4], "elem_bits": 8},
            TypeError,
            r"^MapUnit in_shapes\[0\] must be a \(rows, cols\) pair, not 4$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": [(2, 0)], "elem_bits": 8},
            ValueError,
            r"^MapUnit in_shapes\[0\] must be a pair of positive integers, not \(2, 0\)$",
        ),
        (
            MapUnit,
            {"op": "add", "in_shapes": [(2, 3), (2, 2)], "elem_bits": 8},
            ValueError,
            r"^MapUnit in_shapes \(2, 3\) and \(2, 2\) do not broadcast$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": [(2, 2)], "elem_bits": 12},
            ValueError,
            r"^MapUnit elem_bits must be one of 8, 16, 32, not 12$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": [(2, 2)], "elem_bits": 8, "frac_bits": 8},
            ValueError,
            r"^MapUnit frac_bits must be an integer in \[0, 8\), not 8$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": [(2, 2)], "elem_bits": 8, "frac_bits": 1.0},
            TypeError,
            r"^MapUnit frac_bits must be an integer in \[0, 8\), not 1\.0$",
        ),
        (
            MapUnit,
            {"op": "exp", "in_shapes": [(2, 2)], "elem_bits": 8, "level_bits": 0},
            ValueError,
            r"^MapUnit level_bits must be a positive integer, not 0$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 3), (2, 2)], "elem_bits": 8},
            ValueError,
            r"^MatmulUnit in_shapes \(2, 3\) and \(2, 2\) do not match for a @ b$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 3), (2, 2)], "elem_bits": 8, "transpose_b": True},
            ValueError,
            r"^MatmulUnit in_shapes \(2, 3\) and \(2, 2\) do not match for a @ b\.T$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 2), (2, 2)], "elem_bits": 8, "lanes": 0},
            ValueError,
            r"^MatmulUnit lanes must be a positive integer, not 0$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 2), (2, 2)], "elem_bits": 8, "lanes": True},
            TypeError,
            r"^MatmulUnit lanes must be a positive integer, not True$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 2), (2, 2)], "elem_bits": 8, "transpose_b": 1},
            TypeError,
            r"^MatmulUnit transpose_b must be a bool, not 1$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 2), (2, 2)], "elem_bits": 32, "acc_bits": 16},
            ValueError,
            r"^MatmulUnit acc_bits 16 is narrower than elem_bits 32$",
        ),
        (
            MatmulUnit,
            {"in_shapes": [(2, 2), (2, 2)], "elem_bits": 16, "frac_bits": 9, "out_bits": 8},
            ValueError,
            r"^MatmulUnit frac_bits 9 do not fit out_bits 8$",
        ),
        (
            AccumUnit,
            {"op": "add", "rank": 8, "in_shapes": [(2, 2)], "elem_bits": 8},
            ValueError,
            r"^AccumUnit rank must be an integer in \[1, 7\] for 3 level bits, not 8$",
        ),
        (
            AccumUnit,
            {"op": "add", "rank": "1", "in_shapes": [(2, 2)], "elem_bits": 8},
            TypeError,
            r"^AccumUnit rank must be an integer in \[1, 7\], not '1'$",
        ),
        (
            AccumUnit,
            {"op": "add", "rank": 1, "in_shapes": [(2, 2)], "elem_bits": 8, "lanes": 4},
            ValueError,
            r"^AccumUnit lanes applies to op='matmul' only$",
        ),
        (
            AccumUnit,
            {"op": "retile_row", "rank": 1, "in_shapes": [(1, 2)], "elem_bits": 8},
            ValueError,
            r"^AccumUnit out_rows is required for op='retile_row'$",
        ),
        (
            AccumUnit,
            {"op": "retile_row", "rank": 1, "in_shapes": [(2, 2)], "elem_bits": 8, "out_rows": 3},
            ValueError,
            r"^AccumUnit out_rows must be a multiple of the input's 2 rows, not 3$",
        ),
        (
            AccumUnit,
            {"op": "max", "rank": 1, "in_shapes": [(2, 2)], "elem_bits": 8, "out_rows": 4},
            ValueError,
            r"^AccumUnit out_rows applies to op='retile_row' only$",
        ),
        (
            ScanUnit,
            {"op": "retile_row", "rank": 1, "in_shapes": [(1, 2)], "elem_bits": 8},
            ValueError,
            r"^ScanUnit op must be one of 'add', 'max', 'matmul', not 'retile_row'$",
        ),
        (
            RetileUnit,
            {"rows": 2, "cols": 2, "elem_bits": 8, "split": "diag"},
            ValueError,
            r"^RetileUnit split must be one of 'rows', 'cols', not 'diag'$",
        ),
        (
            RetileUnit,
            {"rows": 2, "cols": 2, "elem_bits": 8, "split": "cols", "masked": True},
            ValueError,
            r"^RetileUnit masked applies to split='rows' only$",
        ),
        (
            RetileUnit,
            {"rows": -1, "cols": 2, "elem_bits": 8},
            ValueError,
            r"^RetileUnit rows must be a positive integer, not -1$",
        ),
    ],
)
def test_constructor_validation(cls, kwargs, error, message):
    with pytest.raises(error, match=message):
        cls(**kwargs)


@pytest.mark.parametrize("cls", [MapUnit, MatmulUnit, AccumUnit, ScanUnit, RetileUnit])
def test_keyword_only(cls):
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 2 were given$"):
        cls("add")


def test_stop_and_done_payloads_carry_no_data():
    """Stops and done beats leave the data field zero (as ``TokenFormat.pack`` writes them)."""
    case = CASES[CASE_IDS.index("mul16")]
    toks = [np.full((2, 2), 7, dtype=np.int16), Stop(1), Stop(2), DONE]
    run, _, unit = run_case(case, [toks, toks], "always")
    for t in run.transfers["out"][1:]:
        assert t.payload >> (2 + unit.out_format.level_bits) == 0
        assert t.payload & 3 in (Kind.STOP, Kind.DONE)
