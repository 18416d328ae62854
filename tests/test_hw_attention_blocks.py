# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors or `from_node` are never elaborated.)
"""Amaranth-simulator tests of the blocks that decode attention needs (`step_hw.addrgen`,
`step_hw.compute.rowops`): each against the interpreter running the same one-node graph, on a
case table and on hypothesis streams, under the three traffic patterns with protocol checkers;
measured initiation intervals and latencies; error flags; misuse. Also: every node of the
hardware-size attention graphs has a block."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from amaranth.hdl import Fragment, Value
from amaranth.sim import Simulator
from hw_helpers import assert_same_tokens
from hypothesis import given, settings
from hypothesis import strategies as st

from examples import attention
from step_hw.addrgen import CacheReadAddr, LastTileFlags, PadTiles, flatmap_unit
from step_hw.compute import (
    CountUnit,
    RegionIdUnit,
    RegionSelectUnit,
    RowAppendUnit,
    compute_unit,
)
from step_hw.config import HwConfig
from step_hw.elaborate import ElaboratedGraph, supported_kinds
from step_hw.payload import Kind, TokenFormat
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
    to_tokens,
)
from step_lang import numerics as nm
from step_lang.types import int8, int16, int32

CFG = HwConfig()  # int16 Q8, 4x4 tiles
I32, I16 = Tile(int32, 1, 1), Tile(int16, 1, 1)
KV = Tile(int16, 4, 4)

# -- one-node graphs, run by both readers ------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """An input stream's tile type and the range its elements are drawn from."""

    tile: Tile
    lo: int
    hi: int


@dataclass(frozen=True)
class Case:
    """One node under test: its inputs and a builder ``(*streams) -> node``; inputs are rank-
    ``rank`` streams with ragged dims (innermost vectors of 0..3 elements)."""

    id: str
    inputs: tuple[Input, ...]
    build: Callable[..., Any]
    rank: int = 2

    def graph(self) -> tuple[Graph, Any]:
        g = Graph(self.id)
        shape = (ragged("o"), ragged("m"), ragged("n"))[-(self.rank + 1) :]
        srcs = [
            Source(g, StreamType(x.tile, shape), name=f"x{i}").out
            for i, x in enumerate(self.inputs)
        ]
        node = self.build(*srcs)
        Sink(node.out)
        return g, node


def flatmap(fn) -> Callable[..., Any]:
    return lambda *xs: FlatMap(*xs, fn=fn, name="unit")


def map_(fn) -> Callable[..., Any]:
    return lambda *xs: Map(*xs, fn=fn, name="unit")


def count(rank: int) -> Callable[..., Any]:
    return lambda x: Accum(x, fn=nm.accum_count("int32"), rank=rank, name="unit")


FULL16 = (-(2**15), 2**15 - 1)

CASES = [
    Case("cache_read_addr", (Input(I32, 0, 9), Input(I32, 0, 4)),
         flatmap(nm.cache_read_addr(4, "int32"))),
    Case("cache_read_addr16", (Input(I16, -3, 3), Input(I32, 0, 7)),
         flatmap(nm.cache_read_addr(7, "int16")), rank=1),
    Case("last_tile_flags", (Input(I32, 0, 5),), flatmap(functions.last_tile_flags)),
    Case("pad_mask", (Input(I32, 1, 4), Input(I32, 0, 3)),
         flatmap(attention.pad_mask(4, "int16", 256))),
    Case("pad_bias16", (Input(I16, 1, 3), Input(I32, 0, 2)),
         flatmap(attention.pad_bias(3, "int16")), rank=1),
    Case("row_append", (Input(KV, *FULL16), Input(Tile(int16, 1, 4), *FULL16), Input(I32, 0, 3)),
         map_(functions.row_append)),
    Case("row_append8", (Input(Tile(int8, 2, 3), -128, 127), Input(Tile(int8, 1, 3), -128, 127),
                         Input(I16, 0, 1)), map_(functions.row_append), rank=1),
    Case("region_id", (Input(KV, *FULL16),), map_(attention.region_id(3, "int32"))),
    Case("region_id16", (Input(I32, -5, 5),), map_(attention.region_id(1, "int16")), rank=1),
    Case("region_select", (Input(I32, 0, 2),), map_(attention.region_select(3))),
    Case("count_r1", (Input(KV, *FULL16),), count(1)),
    Case("count_r2", (Input(I32, 0, 1),), count(2)),
]  # fmt: skip
CASE_IDS = [c.id for c in CASES]


def unit_of(node: Any) -> Any:
    return flatmap_unit(node, CFG) if node.kind == "FlatMap" else compute_unit(node, CFG)


def run_case(case: Case, inputs: list[list], pattern: str, seed: int = 0):
    """Interpret the case's node and simulate its block on the same tokens; both outputs."""
    g, node = case.graph()
    want = interpret(g, inputs={f"x{i}": t for i, t in enumerate(inputs)}).tokens(node.out)
    unit = unit_of(node)
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


def structure(rank: int, draw: Callable[[int, int], int]) -> list:
    """A nested structure of ``None`` leaves (rank ``rank``; only innermost dims may be empty)."""

    def level(k: int) -> list:
        if k == 1:
            return [None] * draw(0, 3)
        return [level(k - 1) for _ in range(draw(1, 2))]

    return [level(rank) for _ in range(draw(0, 3))]


def fill(nested: Any, leaf: Callable[[], Any]) -> Any:
    if isinstance(nested, list):
        return [fill(x, leaf) for x in nested]
    return leaf()


def case_tokens(case: Case, draw: Callable[[int, int], int]) -> list[list]:
    """Zipped token lists: one shared ragged structure, element values in the inputs' ranges
    (their ends, the extremes, a third of the time)."""
    shape = structure(case.rank, draw)

    def leaf(x: Input) -> np.ndarray:
        n = x.tile.rows * x.tile.cols
        vals = [(x.lo, x.hi)[draw(0, 1)] if draw(0, 2) == 0 else draw(x.lo, x.hi) for _ in range(n)]
        return np.array(vals).reshape(x.tile.rows, x.tile.cols).astype(x.tile.dtype.numpy)

    return [to_tokens(fill(shape, lambda x=x: leaf(x)), case.rank) for x in case.inputs]


def numpy_draw(rng: np.random.Generator) -> Callable[[int, int], int]:
    return lambda lo, hi: int(rng.integers(lo, hi + 1))


def s(v: int) -> np.ndarray:
    """A ``[1,1]`` int32 element."""
    return np.array([[v]], dtype=np.int32)


# -- the case table, under every traffic pattern ---------------------------------------------


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_block_matches_interpreter(case: Case, pattern: str):
    rng = np.random.default_rng(sum(map(ord, case.id + pattern)))
    for _ in range(2):
        inputs = case_tokens(case, numpy_draw(rng))
        run, want, _ = run_case(case, inputs, pattern, seed=int(rng.integers(2**31)))
        assert_same_tokens(run.outputs["out"], want)
        assert [len(run.transfers[f"in{i}"]) for i in range(len(inputs))] == [
            len(t) for t in inputs
        ]


def test_empty_stream_and_empty_sub_streams():
    """A lone done passes through; elements without pieces (0 tiles) write nothing."""
    for case in CASES:
        run, want, _ = run_case(case, [[DONE]] * len(case.inputs), "periodic")
        assert run.outputs["out"] == want == [DONE]
    case = CASES[CASE_IDS.index("last_tile_flags")]
    toks = [s(0), s(2), Stop(1), s(0), Stop(1), Stop(2), DONE]
    run, want, _ = run_case(case, [toks], "random")
    assert_same_tokens(run.outputs["out"], want)
    assert len(run.outputs["out"]) == 2 + 4


# -- hypothesis streams -----------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_streams(data):
    case = data.draw(st.sampled_from(CASES), label="case")
    pattern = data.draw(st.sampled_from(PATTERNS), label="pattern")
    inputs = case_tokens(case, lambda lo, hi: data.draw(st.integers(lo, hi)))
    run, want, _ = run_case(case, inputs, pattern, seed=data.draw(st.integers(0, 2**16)))
    assert_same_tokens(run.outputs["out"], want)


# -- throughput and latency (pattern "always") ------------------------------------------------


def cycles(transfers) -> list[int]:
    return [t.cycle for t in transfers]


def test_generators_write_one_piece_per_cycle():
    """II 1 per output piece: 1, 4, 2 and 3 addresses are written back to back from cycle 1 (the
    element offered in cycle 0); each element is taken with its last piece."""
    case = replace(CASES[CASE_IDS.index("cache_read_addr")], rank=0)
    counts = [1, 4, 2, 3]
    idx = [np.array([[i]], dtype=np.int32) for i in range(4)]
    tiles = [np.array([[n]], dtype=np.int32) for n in counts]
    run, want, unit = run_case(case, [[*idx, DONE], [*tiles, DONE]], "always")
    assert_same_tokens(run.outputs["out"], want)
    assert unit.initiation_interval == 1
    assert cycles(run.transfers["out"]) == list(range(1, 12))  # 10 addresses and done
    assert cycles(run.transfers["in0"]) == [0, 4, 6, 9, 10]
    assert cycles(run.transfers["in1"]) == cycles(run.transfers["in0"])


@pytest.mark.parametrize("name", ["last_tile_flags", "pad_mask"])
def test_other_generators_ii(name: str):
    case = replace(CASES[CASE_IDS.index(name)], rank=0)
    n = [np.array([[k]], dtype=np.int32) for k in (2, 1, 3)]
    inputs = [[*n, DONE], [*(np.array([[1]], dtype=np.int32) for _ in n), DONE]]
    run, want, _ = run_case(case, inputs[: len(case.inputs)], "always")
    assert_same_tokens(run.outputs["out"], want)
    assert cycles(run.transfers["out"]) == list(range(1, 8))
    assert cycles(run.transfers["in0"]) == [1, 2, 5, 6]


@pytest.mark.parametrize("name", ["row_append", "region_id", "region_select"])
def test_row_ops_ii_1_latency_1(name: str):
    case = replace(CASES[CASE_IDS.index(name)], rank=0)
    rng = np.random.default_rng(5)
    draw = numpy_draw(rng)

    def leaf(x: Input) -> np.ndarray:
        return np.array(
            [[draw(x.lo, x.hi) for _ in range(x.tile.cols)] for _ in range(x.tile.rows)]
        ).astype(x.tile.dtype.numpy)

    inputs = [[*(leaf(x) for _ in range(12)), DONE] for x in case.inputs]
    run, want, unit = run_case(case, inputs, "always")
    assert_same_tokens(run.outputs["out"], want)
    assert unit.initiation_interval == 1
    taken, given_ = cycles(run.transfers["in0"]), cycles(run.transfers["out"])
    assert taken == list(range(13)) and given_ == list(range(1, 14))


def test_count_throughput():
    """One element per cycle; a stop above the rank costs one extra beat."""
    case = CASES[CASE_IDS.index("count_r1")]
    t = np.zeros((4, 4), dtype=np.int16)
    toks = [t, t, t, Stop(1), t, Stop(2), Stop(1), Stop(2), DONE]
    run, want, unit = run_case(case, [toks], "always")
    assert_same_tokens(run.outputs["out"], want)
    assert [int(x[0, 0]) for x in run.outputs["out"] if isinstance(x, np.ndarray)] == [3, 1, 0, 0]
    assert unit.initiation_interval == 1
    assert cycles(run.transfers["in0"])[:5] == list(range(5))


# -- error flags --------------------------------------------------------------------------------


def error_flag(unit: Any, tokens: list[list]) -> int:
    """Offer zipped ``tokens`` (data only) with an always-ready output; the error flag after."""
    flags: list[int] = []

    async def bench(ctx):
        ctx.set(unit.out.ready, 1)
        for toks in zip(*tokens, strict=True):
            for p, f, t in zip(unit.in_ports, unit.in_formats, toks, strict=True):
                ctx.set(p.valid, 1)
                ctx.set(Value.cast(p.payload), f.pack(t))
            while not ctx.get(unit.in_ports[0].ready):
                await ctx.tick()
            await ctx.tick()
        for p in unit.in_ports:
            ctx.set(p.valid, 0)
        await ctx.tick()
        flags.append(ctx.get(unit.error))

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return flags[0]


@pytest.mark.parametrize(
    ("make", "good", "bad"),
    [
        (
            lambda: CacheReadAddr(row_offset=4, in_bits=(32, 32), elem_bits=32),
            [[s(1)], [s(4)]],
            [[s(1)], [s(5)]],  # more tiles than the row holds
        ),
        (
            lambda: CacheReadAddr(row_offset=4, in_bits=(32, 32), elem_bits=32),
            [[s(1)], [s(0)]],
            [[s(1)], [s(-1)]],  # a negative tile count
        ),
        (
            lambda: LastTileFlags(in_bits=32),
            [[s(0)]],
            [[s(-2)]],  # a negative tile count
        ),
        (
            lambda: PadTiles(kv_tile=4, valid=0, pad=-7, in_bits=(32, 32), elem_bits=16),
            [[s(1)], [s(3)]],
            [[s(2)], [s(4)]],  # offset outside the tile
        ),
        (
            lambda: PadTiles(kv_tile=4, valid=0, pad=-7, in_bits=(32, 32), elem_bits=16),
            [[s(1)], [s(0)]],
            [[s(0)], [s(0)]],  # no tile at all
        ),
        (
            lambda: RowAppendUnit(shape=(4, 4), elem_bits=16, offset_bits=32),
            [[np.zeros((4, 4))], [np.ones((1, 4))], [s(3)]],
            [[np.zeros((4, 4))], [np.ones((1, 4))], [s(-1)]],
        ),
        (
            lambda: RegionSelectUnit(n=3, in_bits=32),
            [[s(0)]],
            [[s(3)]],
        ),
    ],
)
def test_error_flag_where_the_interpreter_raises(make, good, bad):
    assert error_flag(make(), good) == 0
    assert error_flag(make(), bad) == 1


def test_out_of_range_values_written():
    """What the blocks write where the interpreter raises (documented in their docstrings)."""
    case = Case("ra", (Input(I32, 0, 0), Input(I32, 0, 0)), flatmap(nm.cache_read_addr(2)))
    _, node = case.graph()
    unit = flatmap_unit(node, CFG)
    run = run_block(
        unit,
        {"in0": (unit.in0, unit.in_formats[0], [s(3), DONE]),
         "in1": (unit.in1, unit.in_formats[1], [s(5), DONE])},
        {"out": (unit.out, unit.out_format)},
    )  # fmt: skip
    assert [int(t[0, 0]) for t in run.outputs["out"][:-1]] == [6, 7]  # row_offset addresses
    sel = RegionSelectUnit(n=2, in_bits=32)
    run = run_block(
        sel,
        {"in0": (sel.in0, sel.in_formats[0], [s(2), s(1), DONE])},
        {"out": (sel.out, sel.out_format)},
    )
    assert [t.tolist() for t in run.outputs["out"][:-1]] == [[False, False], [False, True]]


def test_stop_and_done_payloads_carry_no_data():
    case = CASES[CASE_IDS.index("pad_mask")]
    toks = [[s(2), Stop(1), Stop(2), DONE], [s(1), Stop(1), Stop(2), DONE]]
    run, _, unit = run_case(case, toks, "always")
    for t in run.transfers["out"][2:]:
        assert t.payload >> (2 + unit.out_format.level_bits) == 0
        assert t.payload & 3 in (Kind.STOP, Kind.DONE)


# -- from_node and misuse -----------------------------------------------------------------------


def test_dispatch_picks_each_block():
    want = {
        "cache_read_addr": CacheReadAddr,
        "cache_read_addr16": CacheReadAddr,
        "last_tile_flags": LastTileFlags,
        "pad_mask": PadTiles,
        "pad_bias16": PadTiles,
        "row_append": RowAppendUnit,
        "region_id": RegionIdUnit,
        "region_select": RegionSelectUnit,
        "count_r1": CountUnit,
    }
    for case in CASES:
        _, node = case.graph()
        unit = unit_of(node)
        Fragment.get(unit, None)  # elaborates (and marks it used)
        if case.id in want:
            assert type(unit) is want[case.id]
        assert [p.signature for p in unit.in_ports] == [
            f.signature().flip() for f in unit.in_formats
        ]
        assert len(unit.out_ports) == 1


def one_node(tiles, build, shape=(3, 2)):
    g = Graph("t")
    srcs = [Source(g, StreamType(t, shape)).out for t in tiles]
    return build(*srcs)


@pytest.mark.parametrize(
    ("build", "make", "message"),
    [
        (
            lambda: one_node([I32, I32], lambda a, b: FlatMap(a, b, fn=functions.cache_read_addr(4), name="addr")),
            flatmap_unit,
            r"^FlatMap 'addr', port 'out': dtype int64 is not supported by the hardware \(int16/int32\)$",
        ),
        (
            lambda: one_node([I32, I32], lambda a, b: FlatMap(a, b, fn=attention.pad_bias(4), name="bias")),
            flatmap_unit,
            r"^FlatMap 'bias', port 'out': dtype float32 is not supported by the hardware \(int16/int32\)$",
        ),
        (
            lambda: one_node([Tile(int16, 2, 2)], lambda a: FlatMap(a, fn=functions.retile_cols, name="cols")),
            CacheReadAddr.from_node,
            r"^FlatMap 'cols': function 'retile_cols' has no CacheReadAddr \(it builds cache_read_addr\)$",
        ),
        (
            lambda: one_node([Tile(int16, 1, 4)], lambda a: FlatMap(a, fn=functions.retile_rows, name="rows")),
            PadTiles.from_node,
            r"^FlatMap 'rows': function 'retile_rows' has no PadTiles \(it builds pad_bias, pad_mask\)$",
        ),
        (
            lambda: one_node([Tile(int16, 1, 1)], lambda a: FlatMap(a, fn=functions.last_tile_flags, name="flags")),
            CacheReadAddr.from_node,
            r"^FlatMap 'flags': function 'last_tile_flags' has no CacheReadAddr \(it builds cache_read_addr\)$",
        ),
        (
            lambda: one_node([I32, I32], lambda a, b: FlatMap(a, b, fn=attention.pad_mask(8, "int16", 256), name="wide")),
            flatmap_unit,
            r"^FlatMap 'wide', port 'out': tile Tile<int16, 1x8> does not fit the configured 4x4 tile$",
        ),
        (
            lambda: one_node([I32, I32], lambda a, b: FlatMap(a, b, fn=attention.pad_mask(4, "int16", 2**16), name="one")),
            flatmap_unit,
            r"^FlatMap 'one': PadTiles valid must fit a 16-bit element \[-32768, 32767\], not 65536$",
        ),
        (
            lambda: one_node([I32], lambda a: Map(a, fn=attention.region_id(0), name="id64")),
            compute_unit,
            r"^Map 'id64', port 'out': dtype int64 is not supported by the hardware \(int16/int32\)$",
        ),
        (
            lambda: one_node([I32], lambda a: Map(a, fn=attention.region_select(2), name="sel")),
            RowAppendUnit.from_node,
            r"^Map 'sel': function 'region_select' is not row_append$",
        ),
        (
            lambda: one_node([Tile(int16, 1, 1)], lambda a: Accum(a, fn=functions.accum_count, rank=1, name="cnt")),
            compute_unit,
            r"^Accum 'cnt', port 'out': dtype int64 is not supported by the hardware \(int16/int32\)$",
        ),
        (
            lambda: one_node([I32], lambda a: Map(a, fn=attention.region_id(70000, "int16"), name="big")),
            compute_unit,
            r"^Map 'big': RegionIdUnit region must be a non-negative integer below 32768, not 70000$",
        ),
        (
            lambda: one_node([KV], lambda a: Accum(a, fn=nm.accum_count(), rank=1, name="c")),
            RegionIdUnit.from_node,
            r"^Accum 'c': RegionIdUnit builds Map nodes only$",
        ),
    ],
)  # fmt: skip
def test_from_node_errors_name_the_node(build, make, message):
    node = build()
    with pytest.raises(StepTypeError, match=message):
        make(node, CFG)


def test_generic_flatmap_is_refused_naming_the_node():
    def rule(err, t):
        return Tile(int32, 1, 1), (), None

    fn = functions.FlatMapFn("repeat_twice", 1, 0, rule, lambda out, x: [x, x])
    node = one_node([I32], lambda a: FlatMap(a, fn=fn, name="twice"))
    with pytest.raises(
        StepTypeError, match=r"^FlatMap 'twice': function 'repeat_twice' has no hardware block "
    ):
        flatmap_unit(node, CFG)


def test_from_node_refuses_non_nodes():
    with pytest.raises(StepTypeError, match=r"^str '\?': is not a FlatMap$"):
        flatmap_unit("addr", CFG)
    with pytest.raises(TypeError, match=r"^CountUnit\.from_node needs a step_lang node, not 3$"):
        CountUnit.from_node(3, CFG)
    with pytest.raises(
        TypeError, match=r"^CacheReadAddr\.from_node needs a step_lang node, not 3$"
    ):
        CacheReadAddr.from_node(3, CFG)


SEL2 = TokenFormat("selector", n=2)


@pytest.mark.parametrize(
    ("cls", "kwargs", "error", "message"),
    [
        (CacheReadAddr, {"row_offset": 0, "in_bits": (32, 32), "elem_bits": 32}, ValueError,
         r"^CacheReadAddr row_offset must be a positive integer, not 0$"),
        (CacheReadAddr, {"row_offset": 2**17, "in_bits": (32, 32), "elem_bits": 32}, ValueError,
         r"^CacheReadAddr row_offset must be at most 65536, not 131072$"),
        (CacheReadAddr, {"row_offset": 4, "in_bits": 32, "elem_bits": 32}, TypeError,
         r"^CacheReadAddr in_bits must be a pair of widths, not 32$"),
        (CacheReadAddr, {"row_offset": 4, "in_bits": (32, 12), "elem_bits": 32}, ValueError,
         r"^CacheReadAddr in_bits\[1\] must be one of 8, 16, 32, not 12$"),
        (LastTileFlags, {"in_bits": 64}, ValueError,
         r"^LastTileFlags in_bits must be one of 8, 16, 32, not 64$"),
        (PadTiles, {"kv_tile": 4, "valid": 0, "pad": -(2**15) - 1, "in_bits": (32, 32), "elem_bits": 16},
         ValueError, r"^PadTiles pad must fit a 16-bit element \[-32768, 32767\], not -32769$"),
        (PadTiles, {"kv_tile": 4, "valid": 0.5, "pad": 0, "in_bits": (32, 32), "elem_bits": 16},
         TypeError, r"^PadTiles valid must be an integer, not 0\.5$"),
        (RowAppendUnit, {"shape": (4, 0), "elem_bits": 16, "offset_bits": 32}, ValueError,
         r"^RowAppendUnit shape must be a pair of positive integers, not \(4, 0\)$"),
        (RowAppendUnit, {"shape": (4, 4), "elem_bits": 16, "offset_bits": 1}, ValueError,
         r"^RowAppendUnit offset_bits must be one of 8, 16, 32, not 1$"),
        (RegionIdUnit, {"in_format": "tile", "region": 0, "elem_bits": 32}, TypeError,
         r"^RegionIdUnit in_format must be a TokenFormat, not 'tile'$"),
        (RegionIdUnit, {"in_format": SEL2, "region": -1, "elem_bits": 8}, ValueError,
         r"^RegionIdUnit region must be a non-negative integer below 128, not -1$"),
        (RegionSelectUnit, {"n": 0, "in_bits": 32}, ValueError,
         r"^RegionSelectUnit n must be a positive integer, not 0$"),
        (CountUnit, {"in_format": SEL2, "rank": 8, "elem_bits": 32}, ValueError,
         r"^CountUnit rank must be an integer in \[1, 7\], not 8$"),
        (CountUnit, {"in_format": SEL2, "rank": True, "elem_bits": 32}, TypeError,
         r"^CountUnit rank must be an integer in \[1, 7\], not True$"),
    ],
)  # fmt: skip
def test_constructor_validation(cls, kwargs, error, message):
    with pytest.raises(error, match=message):
        cls(**kwargs)


@pytest.mark.parametrize(
    "cls",
    [CacheReadAddr, LastTileFlags, PadTiles, RowAppendUnit, RegionIdUnit, RegionSelectUnit, CountUnit],
)  # fmt: skip
def test_keyword_only(cls):
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 2 were given$"):
        cls(4)


# -- the attention graphs ------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", attention.SCHEDULES)
def test_every_attention_node_kind_is_supported(schedule: str):
    g = attention.hardware(schedule)
    assert {n.kind for n in g.nodes.values()} <= set(supported_kinds())


def test_coarse_attention_elaborates():
    """Every node gets its block and the whole graph elaborates. (Coarse only: the RTL tests
    convert the interleaved schedule, `make rtl`'s, and co-simulate the dynamic one.)"""
    top = ElaboratedGraph(attention.hardware("coarse"))
    assert set(top.blocks) == {
        n.name for n in top.graph.nodes.values() if n.kind not in ("Source", "Sink", "Feedback")
    }
    Fragment.get(top, None)


def test_float_attention_is_refused_by_name():
    g = attention.build(attention.SMALL, "interleaved", 2, 1)
    with pytest.raises(
        StepTypeError,
        match=r"^tensor 'q': dtype float32 has no hardware encoding under int16 \(floating "
        r"point needs HwConfig\(elem_dtype='bfloat16'\)\)$",
    ):
        ElaboratedGraph(g)


def test_hardware_numerics_close_to_float():
    """The fixed-point graph is a faithful attention: within 0.01 of the float64 reference, the
    caches appended exactly, every schedule bit-identical; exp of the most negative int16 is 0."""
    assert nm.exp_q(np.array([-(2**15)]), 16, 8)[0] == 0
    memory = attention.hardware_inputs([0, 5, 15, 3], seed=3)
    f = 2**CFG.frac_bits
    real = {k: v / f if v.dtype == np.int16 else v for k, v in memory.items()}
    ref = attention.reference(attention.replace(attention.HW, dtype="float32"), real)
    outs = []
    for schedule in attention.SCHEDULES:
        got = interpret(attention.hardware(schedule), memory).memory
        assert np.abs(got["out"] / f - ref["out"]).max() < 0.01
        for cache in ("k_cache", "v_cache"):
            assert np.array_equal(got[cache] / f, ref[cache])
        outs.append(got["out"])
    assert all(np.array_equal(o, outs[0]) for o in outs)


def test_pad_mask_is_exact_where_a_bias_would_wrap():
    """Why the fixed-point graph masks after exp: MIN as a bias wraps negative scores."""
    fx = nm.functions(CFG)
    score = np.array([[-256]], dtype=np.int16)  # -1.0
    bias = np.array([[-(2**15)]], dtype=np.int16)
    wrapped = fx.add.apply(Tile(int16, 1, 1), score, bias)
    assert wrapped[0, 0] > 0 and fx.exp.apply(Tile(int16, 1, 1), wrapped)[0, 0] == 2**15 - 1
    e = fx.exp.apply(Tile(int16, 1, 1), score)
    one, zero = np.array([[256]], dtype=np.int16), np.array([[0]], dtype=np.int16)
    assert fx.mul.apply(Tile(int16, 1, 1), e, one)[0, 0] == e[0, 0]
    assert fx.mul.apply(Tile(int16, 1, 1), e, zero)[0, 0] == 0
