# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors or `from_node` are never elaborated.)
"""Dynamically sized tiles in hardware (dynamic tiling, STEP_REFERENCE §7.2) and the
``expert_addr`` block of time-multiplexing (§7.3), in the Amaranth simulator.

Every block the dynamic MoE graph uses on a dynamic tile runs against the interpreter on a case
table and on hypothesis streams, 0-row and ``max_rows``-row tiles included, under the three
traffic patterns with protocol checkers; the matmul units' data-dependent initiation interval is
measured; misuse fails at construction or elaboration with the node named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from amaranth.hdl import Fragment
from hw_helpers import assert_same_tokens, run_unit
from hypothesis import given, settings
from hypothesis import strategies as st
from test_hw_memory import memory_with, simulate

from examples import moe
from step_hw import shape as hw_shape
from step_hw.addrgen import flatmap_unit
from step_hw.broadcast import Broadcast
from step_hw.compute import AccumUnit, MapUnit, MatmulUnit, RetileUnit, ScanUnit, compute_unit
from step_hw.config import HwConfig
from step_hw.elaborate import HARDWARE, ElaboratedGraph
from step_hw.expert_addr import ExpertAddr
from step_hw.memory import LinearLoad
from step_hw.payload import TokenFormat
from step_hw.queue import Queue
from step_hw.testing import PATTERNS, run_block
from step_lang import (
    DONE,
    Accum,
    FlatMap,
    Graph,
    LinearOffChipLoad,
    Map,
    Promote,
    RepeatStatic,
    RetileStreamify,
    Scan,
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
from step_lang.errors import StepRuntimeError
from step_lang.passes import lower
from step_lang.types import Selector, int16

MAX = 5  # dyn_tile_rows of the block tests: small, so n = 0..MAX is cheap to cover
CFG = HwConfig(dyn_tile_rows=MAX, lanes=4)
FX = nm.functions(CFG)
DYN = Tile(int16, ragged("R"), 4)  # a dynamic [n, 4] tile
W = Tile(int16, 4, 3)  # a static weight tile

# -- the payload --------------------------------------------------------------------------------


def dyn_format(max_rows: int = MAX, cols: int = 4, bits: int = 16) -> TokenFormat:
    return TokenFormat("tile", max_rows, cols, bits, dynamic=True)


def test_for_elem_gives_dynamic_rows_the_configured_bound():
    fmt = TokenFormat.for_elem(DYN, CFG)
    assert fmt == dyn_format()
    assert fmt.count_bits == 3 and fmt.data_bits == MAX * 4 * 16 + 3
    assert TokenFormat.for_elem(DYN, HwConfig()).rows == HwConfig().dyn_tile_rows == 8
    with pytest.raises(StepTypeError, match=r"^x: tile .* has dynamic columns"):
        TokenFormat.for_elem(Tile(int16, 2, ragged("C")), CFG, where="x")
    with pytest.raises(StepTypeError, match=r"^x: tile .* has more than the configured 4 columns"):
        TokenFormat.for_elem(Tile(int16, ragged("R"), 5), CFG, where="x")


@settings(max_examples=80, deadline=None)
@given(
    bits=st.sampled_from([8, 16, 32]),
    max_rows=st.integers(1, 9),
    cols=st.integers(1, 4),
    data=st.data(),
)
def test_pack_unpack_round_trip(bits: int, max_rows: int, cols: int, data):
    fmt = dyn_format(max_rows, cols, bits)
    n = data.draw(st.sampled_from([0, max_rows]) | st.integers(0, max_rows), label="n")
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    vals = data.draw(st.lists(st.integers(lo, hi), min_size=n * cols, max_size=n * cols))
    tile = np.array(vals, dtype=np.int64).reshape(n, cols)
    bits_ = fmt.pack(tile)
    assert bits_ < 2**fmt.width
    # the row count above the elements, rows n.. zero
    elems = bits_ >> (2 + fmt.level_bits)
    assert elems >> (max_rows * cols * bits) == n
    assert elems >> (n * cols * bits) == n << ((max_rows - n) * cols * bits)
    back = fmt.unpack(bits_)
    assert back.shape == (n, cols) and np.array_equal(back, tile)
    assert fmt.unpack(fmt.pack(Stop(2))) == Stop(2) and fmt.unpack(fmt.pack(DONE)) is DONE


def test_pack_and_unpack_reject_what_the_encoding_cannot_hold():
    fmt = dyn_format(2, 2, 8)
    with pytest.raises(
        ValueError, match=r"^tile of shape \(3, 2\), format is a dynamic tile of 0..2"
    ):
        fmt.pack(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"^tile of shape \(1, 3\)"):
        fmt.pack(np.zeros((1, 3)))
    shift = 2 + fmt.level_bits
    with pytest.raises(ValueError, match=r"^dynamic tile with 3 rows, format holds at most 2"):
        fmt.unpack(3 << (shift + 32))
    with pytest.raises(ValueError, match=r"^dynamic tile of 1 rows has non-zero rows beyond"):
        fmt.unpack((1 << (shift + 32)) | (0x7F << (shift + 16)))


@pytest.mark.parametrize("bad", [0, -1, True, 257, 2.0])
def test_config_validates_dyn_tile_rows(bad):
    with pytest.raises(ValueError, match=r"^HwConfig.dyn_tile_rows must be"):
        HwConfig(dyn_tile_rows=bad)


# -- compute units against the interpreter ------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A one-node graph on rank-1 streams: inputs' tiles, the node, and the group structure.

    ``same_rows``: every dynamic tile of a group has the same rows (matmul-accumulate), and
    every element the same rows across inputs (zipped operations). ``rows_per_element``:
    ``retile_row``'s input rows (group lengths are limited so a group fits ``MAX`` rows).
    """

    id: str
    tiles: tuple[Tile, ...]
    build: Callable[..., Any]
    same_rows: bool = False
    rows_per_element: int | None = None


def _map(name: str) -> Callable[..., Any]:
    return lambda *xs: Map(*xs, fn=getattr(FX, name), name="unit")


CASES = [
    Case("silu", (DYN,), _map("silu")),
    Case("exp", (DYN,), _map("exp")),  # exp(0) = 1: padding rows must be zeroed, not computed
    Case("mul", (DYN, DYN), _map("mul")),
    Case("mul_row_bcast", (DYN, Tile(int16, 1, 4)), _map("mul")),
    Case("matmul", (DYN, W), _map("matmul")),
    Case("matmul_acc", (DYN, W), lambda a, b: Accum(a, b, fn=FX.matmul_acc, rank=1, name="unit"),
         same_rows=True),
    Case("retile_row", (Tile(int16, 1, 4),),
         lambda x: Accum(x, fn=nm.retile_row, rank=1, name="unit"), rows_per_element=1),
    Case("retile_row_2", (Tile(int16, 2, 3),),
         lambda x: Accum(x, fn=nm.retile_row, rank=1, name="unit"), rows_per_element=2),
    Case("retile_rows", (DYN,), lambda x: RetileStreamify(x, name="unit")),
]  # fmt: skip
CASE_IDS = [c.id for c in CASES]


def graph_of(case: Case) -> tuple[Graph, Any]:
    g = Graph(case.id)
    shape = (ragged("o"), ragged("m"))
    srcs = [Source(g, StreamType(t, shape), name=f"x{i}").out for i, t in enumerate(case.tiles)]
    node = case.build(*srcs)
    Sink(node.out)
    return g, node


def make_inputs(case: Case, groups: list[list[int]], value: Callable[[tuple], np.ndarray]):
    """Token lists of the case's inputs: ``groups`` gives each element's rows (dynamic tiles)."""
    out = []
    for t in case.tiles:
        if isinstance(t.rows, int):
            nested = [[value((t.rows, t.cols)) for _ in grp] for grp in groups]
        else:
            nested = [[value((n, t.cols)) for n in grp] for grp in groups]
        out.append(to_tokens(nested, 1))
    return out


def run_case(case: Case, inputs: list[list], pattern: str, seed: int = 0):
    g, node = graph_of(case)
    return run_unit(g, node, inputs, CFG, pattern, seed)


def random_value(rng: np.random.Generator) -> Callable[[tuple], np.ndarray]:
    ext = np.array([-32768, 32767, 0, -1, 1, 256, -256])

    def value(shape: tuple) -> np.ndarray:
        v = rng.integers(-2000, 2000, shape)
        pick = rng.random(shape) < 0.2
        v[pick] = rng.choice(ext, shape)[pick]
        return v.astype(np.int16)

    return value


def case_groups(case: Case, rng: np.random.Generator) -> list[list[int]]:
    """Group structures with 0-row and MAX-row tiles and an empty group."""
    if case.rows_per_element is not None:  # group lengths: the packed tile's rows
        most = MAX // case.rows_per_element
        return [[0] * most, [], [0] * int(rng.integers(1, most + 1)), [0]]
    if case.same_rows:
        return [[MAX, MAX], [0, 0, 0], [int(rng.integers(1, MAX))] * 2]
    return [[0, MAX, int(rng.integers(1, MAX))], [], [MAX, 0]]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_unit_matches_interpreter(case: Case, pattern: str):
    rng = np.random.default_rng(abs(hash((case.id, pattern))) % 2**32)
    inputs = make_inputs(case, case_groups(case, rng), random_value(rng))
    run, want, _ = run_case(case, inputs, pattern, seed=int(rng.integers(2**31)))
    assert_same_tokens(run.outputs["out"], want)
    assert [len(run.transfers[f"in{i}"]) for i in range(len(inputs))] == [len(t) for t in inputs]


@st.composite
def case_streams(draw, case: Case) -> list[list]:
    if case.rows_per_element is not None:
        most = MAX // case.rows_per_element
        groups = draw(st.lists(st.lists(st.just(0), max_size=most), max_size=4))
    elif case.same_rows:
        groups = [
            [n] * k
            for n, k in draw(
                st.lists(st.tuples(st.integers(0, MAX), st.integers(1, 3)), max_size=3)
            )
        ]
    else:
        groups = draw(st.lists(st.lists(st.integers(0, MAX), max_size=3), max_size=3))
    elem = st.one_of(st.sampled_from([-32768, 32767, 0, -1, 1]), st.integers(-32768, 32767))

    def value(shape: tuple) -> np.ndarray:
        n = shape[0] * shape[1]
        vals = draw(st.lists(elem, min_size=n, max_size=n))
        return np.array(vals, dtype=np.int64).reshape(shape).astype(np.int16)

    return make_inputs(case, groups, value)


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_random_streams(data):
    case = data.draw(st.sampled_from(CASES), label="case")
    pattern = data.draw(st.sampled_from(PATTERNS), label="pattern")
    inputs = data.draw(case_streams(case), label="inputs")
    run, want, _ = run_case(case, inputs, pattern, seed=data.draw(st.integers(0, 2**16)))
    assert_same_tokens(run.outputs["out"], want)


# -- initiation intervals -----------------------------------------------------------------------


@pytest.mark.parametrize("case_id", ["matmul", "matmul_acc"])
def test_matmul_ii_follows_the_actual_rows(case_id: str):
    """A dynamic ``[n, 4] @ [4, 3]`` pair on 4 lanes takes ``max(1, ceil(n*12 / 4))`` cycles."""
    case = CASES[CASE_IDS.index(case_id)]
    rows = [0, 1, 2, 5, 3, 0, 4]
    groups = [[n] for n in rows]
    inputs = make_inputs(case, groups, random_value(np.random.default_rng(3)))
    run, want, unit = run_case(case, inputs, "always")
    assert_same_tokens(run.outputs["out"], want)
    taken = [t.cycle for t, tok in zip(run.transfers["in0"], inputs[0], strict=True)
             if isinstance(tok, np.ndarray)]  # fmt: skip
    given_ = [t.cycle for t in run.transfers["in0"]]
    steps = [max(1, math.ceil(n * 4 * 3 / 4)) for n in rows]
    assert steps == [1, 3, 6, 15, 9, 1, 12]
    # each pair is taken `steps` cycles after it is first valid: the next pair (behind one
    # stop, which takes a cycle) waits for that
    for k in range(len(rows) - 1):
        assert taken[k + 1] - taken[k] == steps[k + 1] + 1, (k, taken)
    assert given_[0] >= 0 and unit.initiation_interval == math.ceil(MAX * 4 * 3 / 4)


def test_retile_rows_takes_one_cycle_per_row():
    case = CASES[CASE_IDS.index("retile_rows")]
    rows = [3, 0, 5, 1]
    inputs = make_inputs(case, [rows], random_value(np.random.default_rng(4)))
    run, want, _ = run_case(case, inputs, "always")
    assert_same_tokens(run.outputs["out"], want)
    taken = [t.cycle for t in run.transfers["in0"]][: len(rows)]
    assert np.diff(taken).tolist() == [max(1, n) for n in rows[1:]]
    assert len(run.outputs["out"]) == sum(rows) + 2


# -- pass-through blocks ------------------------------------------------------------------------


def _pass_graph(build) -> tuple[Graph, Any, Any]:
    g = Graph("p")
    src = Source(g, StreamType(DYN, (ragged("o"), ragged("m"))), name="x")
    node = build(src.out)
    Sink(node.out)
    return g, src, node


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("kind", ["Promote", "RepeatStatic"])
def test_shape_blocks_carry_dynamic_tiles(kind: str, pattern: str):
    build = {
        "Promote": lambda x: Promote(x, name="blk"),
        "RepeatStatic": lambda x: RepeatStatic(x, 2, name="blk"),
    }[kind]
    g, _, node = _pass_graph(build)
    inputs = make_inputs(CASES[0], [[0, MAX], [], [2]], random_value(np.random.default_rng(5)))
    want = interpret(g, inputs={"x": inputs[0]}).tokens(node.out)
    blk = getattr(hw_shape, kind).from_node(node, CFG)
    fmt = TokenFormat.for_elem(DYN, CFG)
    run = run_block(blk, {"i": (blk.i, fmt, inputs[0])}, {"o": (blk.o, fmt)}, pattern=pattern)
    assert_same_tokens(run.outputs["o"], want)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_broadcast_and_queue_carry_dynamic_tiles(pattern: str):
    fmt = TokenFormat.for_elem(DYN, CFG)
    toks = make_inputs(CASES[0], [[0, MAX, 3]], random_value(np.random.default_rng(6)))[0]
    bc = Broadcast(fmt=fmt, n=2)
    run = run_block(bc, {"i": (bc.i, fmt, toks)},
                    {f"o{j}": (bc.o[j], fmt) for j in range(2)}, pattern=pattern)  # fmt: skip
    for j in range(2):
        assert_same_tokens(run.outputs[f"o{j}"], toks)
    q = Queue(shape=fmt.layout(), depth=3)
    run = run_block(q, {"i": (q.i, fmt, toks)}, {"o": (q.o, fmt)}, pattern=pattern)
    assert_same_tokens(run.outputs["o"], toks)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_linear_load_driven_by_dynamic_tiles(pattern: str):
    """Dynamic tiling's weight loads: one walk per dynamic tile (``on_demand``), 0-row tiles
    included; a stream without tiles reads nothing."""
    g = Graph("ld")
    t = g.tensor("w", (8, 4), "int16")
    src = Source(g, StreamType(DYN, (ragged("o"),)), name="r")
    node = LinearOffChipLoad(t, tile=(4, 4), ref=src.out, out_shape=(2,), stride=(1,),
                             on_demand=True, name="ld")  # fmt: skip
    Sink(node.out)
    rng = np.random.default_rng(7)
    arr = rng.integers(-1000, 1000, (8, 4)).astype(np.int16)
    ref = to_tokens([rng.integers(0, 9, (n, 4)).astype(np.int16) for n in (0, MAX, 2)], 0)
    want = interpret(g, {"w": arr}, inputs={"r": ref}).tokens(node.out)
    dut = LinearLoad.from_node(node, CFG, addr=0x100)
    fmt = TokenFormat.for_elem(node.tile_type, CFG)
    run = simulate(dut, inputs={"ref": (dut.ref, TokenFormat.for_elem(DYN, CFG), ref)},
                   outputs={"o": (dut.o, fmt)}, mem=memory_with({0x100: arr}), pattern=pattern)  # fmt: skip
    assert_same_tokens(run.outputs["o"], want)
    empty = simulate(dut := LinearLoad.from_node(node, CFG, addr=0x100),
                     inputs={"ref": (dut.ref, TokenFormat.for_elem(DYN, CFG), [DONE])},
                     outputs={"o": (dut.o, fmt)}, mem=memory_with({0x100: arr}), pattern=pattern)  # fmt: skip
    assert empty.outputs["o"] == [DONE] and not [e for e in empty.model.log if e[0] == "ar"]


# -- expert_addr -------------------------------------------------------------------------------


def _addr_graph(fn) -> tuple[Graph, Any, Any]:
    g = Graph("addr")
    src = Source(g, StreamType(Selector(3), (ragged("o"), ragged("m"))), name="s")
    node = FlatMap(src.out, fn=fn, name="addr")
    Sink(node.out)
    return g, src, node


def _one_hot(e: int, n: int = 3) -> np.ndarray:
    return np.arange(n) == e


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize(("tiles", "base"), [(2, 0), (3, 5), (1, 7)])
def test_expert_addr_matches_interpreter(tiles: int, base: int, pattern: str):
    g, _, node = _addr_graph(nm.expert_addr(tiles, base=base))
    sels = to_tokens([[_one_hot(0), _one_hot(2)], [], [_one_hot(1)]], 1)
    want = interpret(g, inputs={"s": sels}).tokens(node.out)
    blk = flatmap_unit(node, CFG)
    assert isinstance(blk, ExpertAddr) and (blk.n, blk.tiles, blk.base) == (3, tiles, base)
    run = run_block(blk, {"in0": (blk.in0, blk.in_formats[0], sels)},
                    {"out": (blk.out, blk.out_format)}, pattern=pattern)  # fmt: skip
    assert_same_tokens(run.outputs["out"], want)
    if pattern == "always":  # one address per cycle, `tiles` per selector
        taken = [t.cycle for t in run.transfers["in0"]]
        assert taken[1] - taken[0] == tiles


@settings(max_examples=30, deadline=None)
@given(
    groups=st.lists(st.lists(st.integers(0, 2), max_size=3), max_size=3),
    tiles=st.integers(1, 4),
    pattern=st.sampled_from(PATTERNS),
)
def test_expert_addr_random(groups, tiles, pattern):
    g, _, node = _addr_graph(nm.expert_addr(tiles, base=1))
    sels = to_tokens([[_one_hot(e) for e in grp] for grp in groups], 1)
    want = interpret(g, inputs={"s": sels}).tokens(node.out)
    blk = flatmap_unit(node, CFG)
    run = run_block(blk, {"in0": (blk.in0, blk.in_formats[0], sels)},
                    {"out": (blk.out, blk.out_format)}, pattern=pattern)  # fmt: skip
    assert_same_tokens(run.outputs["out"], want)


def test_expert_addr_flags_a_selector_that_is_not_one_hot():
    from amaranth.sim import Simulator

    blk = ExpertAddr(n=3, tiles=2, elem_bits=16)
    sel = blk.in_formats[0]
    seen = {}

    async def bench(ctx):
        ctx.set(blk.out.ready, 1)
        for bits, want_err in ((sel.pack(_one_hot(1)), 0), (sel.pack(np.array([1, 1, 0])), 1)):
            ctx.set(blk.in0.valid, 1)
            ctx.set(blk.in0.payload.as_value(), bits)
            while not (await ctx.tick().sample(blk.in0.ready))[2]:
                pass
            ctx.set(blk.in0.valid, 0)
            await ctx.tick()
            seen[want_err] = ctx.get(blk.error)

    sim = Simulator(blk)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {0: 0, 1: 1}


def test_expert_addr_misuse():
    with pytest.raises(ValueError, match=r"^ExpertAddr addresses up to 130 do not fit 8-bit"):
        ExpertAddr(n=3, tiles=43, base=2, elem_bits=8)
    with pytest.raises(
        ValueError, match=r"^ExpertAddr base must be a non-negative integer, not -1"
    ):
        ExpertAddr(n=3, tiles=2, base=-1, elem_bits=16)
    with pytest.raises(TypeError, match=r"^ExpertAddr tiles must be a positive integer, not True"):
        ExpertAddr(n=3, tiles=True, elem_bits=16)
    _, _, node = _addr_graph(functions.expert_addr(2))  # int64 addresses: no hardware encoding
    with pytest.raises(StepTypeError, match=r"^FlatMap 'addr', port 'out': dtype int64"):
        flatmap_unit(node, CFG)
    with pytest.raises(ValueError, match=r"^expert_addr tiles_per_expert must be a positive"):
        nm.expert_addr(0)
    g, _, node = _addr_graph(nm.expert_addr(2, base=124, out_dtype="int8"))
    got = interpret(g, inputs={"s": to_tokens([[_one_hot(1)]], 1)}).tokens(node.out)[:2]
    assert [(t.dtype, int(t[0, 0])) for t in got] == [(np.int8, 126), (np.int8, 127)]
    with pytest.raises(
        StepRuntimeError,
        match=r"^FlatMap 'addr': function 'expert_addr': addresses 128\.\.129 do not fit int8",
    ):
        interpret(g, inputs={"s": to_tokens([[_one_hot(2)]], 1)})


# -- misuse ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: MapUnit(op="silu", in_shapes=[(None, 4)], elem_bits=16), ValueError,
         r"^MapUnit max_rows is required for dynamic-row \(None\) in_shapes$"),
        (lambda: MapUnit(op="silu", in_shapes=[(2, 4)], elem_bits=16, max_rows=4), ValueError,
         r"^MapUnit max_rows applies to dynamic-row \(None\) in_shapes only$"),
        (lambda: MapUnit(op="mul", in_shapes=[(None, 4), (2, 4)], elem_bits=16, max_rows=4),
         ValueError, r"^MapUnit in_shapes: a static 2-row tile does not broadcast"),
        (lambda: MapUnit(op="silu", in_shapes=[(None, 4)], elem_bits=16, max_rows=0), ValueError,
         r"^MapUnit max_rows must be a positive integer, not 0$"),
        (lambda: MatmulUnit(in_shapes=[(4, 4), (None, 4)], elem_bits=16, max_rows=4), ValueError,
         r"^MatmulUnit b must be a static tile; only a's rows may be dynamic$"),
        (lambda: AccumUnit(op="add", rank=1, in_shapes=[(None, 4)], elem_bits=16, max_rows=4),
         ValueError, r"^AccumUnit max_rows applies to op='matmul' and op='retile_row' only$"),
        (lambda: AccumUnit(op="retile_row", rank=1, in_shapes=[(1, 4)], elem_bits=16,
                           out_rows=4, max_rows=4),
         ValueError, r"^AccumUnit out_rows \(a static result\) and max_rows"),
        (lambda: AccumUnit(op="retile_row", rank=1, in_shapes=[(3, 4)], elem_bits=16, max_rows=2),
         ValueError, r"^AccumUnit max_rows must be at least the input's 3 rows, not 2$"),
        (lambda: RetileUnit(rows=None, cols=4, elem_bits=16), ValueError,
         r"^RetileUnit max_rows is required for a dynamic tile \(rows=None\)$"),
        (lambda: RetileUnit(rows=None, cols=4, elem_bits=16, split="cols", max_rows=4),
         ValueError, r"^RetileUnit splits a dynamic tile into rows only, unmasked"),
        (lambda: ScanUnit(op="add", rank=1, in_shapes=[(None, 4)], elem_bits=16), ValueError,
         r"^ScanUnit in_shapes\[0\] must be a pair of positive integers, not \(None, 4\)$"),
    ],
)  # fmt: skip
def test_constructors_reject_misuse(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_from_node_names_the_node_for_unsupported_dynamic_tiles():
    g = Graph("bad")
    x = Source(g, StreamType(DYN, (ragged("o"), ragged("m"))), name="x").out
    scan = Scan(x, fn=FX.accum_add, rank=1, name="running")
    Sink(scan.out)
    with pytest.raises(
        StepTypeError,
        match=r"^Scan 'running', port 'in0': ScanUnit has no hardware for dynamically sized tiles$",
    ):
        compute_unit(scan, CFG)
    g = Graph("bad2")
    x = Source(g, StreamType(DYN, (ragged("o"),)), name="x").out
    w = Source(g, StreamType(DYN, (ragged("o"),)), name="w").out
    mm = Map(x, w, fn=FX.matmul_t, name="qk")
    Sink(mm.out)
    with pytest.raises(StepTypeError, match=r"^Map 'qk', port 'out': tile .* has dynamic columns"):
        compute_unit(mm, CFG)


def test_memory_operators_reject_dynamic_tiles():
    with pytest.raises(ValueError, match=r"^LinearLoad tile_format is a dynamic tile"):
        LinearLoad(config=CFG, tensor_shape=(8, 4), tile_format=dyn_format())


def test_elaboration_rejects_a_dynamic_tile_beyond_dyn_tile_rows():
    graph = moe.hardware(schedule=moe.MoESchedule("dynamic"))  # up to 8 tokens per expert
    with pytest.raises(
        StepTypeError,
        match=r"^Accum 'pack0', port 'out': dynamic tile Tile<int16, route_n000x4> has up to 8 "
        r"rows; the hardware holds HwConfig.dyn_tile_rows=4$",
    ):
        ElaboratedGraph(graph, HwConfig(dyn_tile_rows=4))
    g = Graph("unbounded")
    Sink(Source(g, StreamType(DYN, (ragged("o"),)), name="x").out)
    with pytest.raises(StepTypeError, match=r"^Source 'x', port 'out': dynamic tile .* no known"):
        ElaboratedGraph(g, CFG)


def test_a_merged_dynamic_tile_is_bounded_by_its_inputs_not_by_a_later_partition():
    """``symbol_bounds``: an EagerMerge of dynamic tiles bounds its tiles' rows by its inputs'
    (8 tokens), and the Partition after it bounds only the symbols it mints (its chunk counts,
    2 merged tiles), not the merged rows it passes on (once taken as 2: a buffer of those
    rows would have been sized for 2)."""
    from step_hw.dyntile import symbol_bounds

    graph = moe.hardware(schedule=moe.MoESchedule("dynamic", regions=2))
    bounds = {str(k): v for k, v in symbol_bounds(graph).items()}
    assert bounds["route_n000"] == bounds["merge0_rows"] == 8
    assert bounds["unmerge0_n000"] == 2


# -- the MoE schedules -------------------------------------------------------------------------

SCHEDULES = {
    "dynamic": moe.MoESchedule("dynamic"),
    "timemux": moe.MoESchedule("static", tile_n=4, tile_f=4, regions=2),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_moe_schedules_elaborate(name: str):
    graph = lower(moe.hardware(schedule=SCHEDULES[name]))
    blocks = [n for n in graph.nodes.values() if n.kind not in ("Source", "Sink", "Feedback")]
    assert all(callable(HARDWARE.entry(n)) for n in blocks)
    top = ElaboratedGraph(graph)
    Fragment.get(top, None)  # elaborates every block (and marks them used)
    assert set(top.blocks) == {
        n.name for n in graph.nodes.values() if n.kind not in ("Source", "Sink")
    }
    if name == "dynamic":
        fmts = [
            b.out_format for n, b in top.blocks.items() if n.startswith(("gate", "silu", "down"))
        ]
        assert fmts and all(f.dynamic and f.rows == 8 for f in fmts)
    else:
        assert isinstance(top.blocks["addr0"], ExpertAddr)
