# amaranth: UnusedElaboratable=no
# (Blocks built only to test their constructors or ports are never elaborated.)
"""Bufferize/Streamify with a dynamic buffer dim and permuted reads (``step_hw/memory/buffer.py``).

A buffer may have one dynamic dim: the hardware sizes its memory by the dim's bound and every
buffer reference carries the buffer's extent (0..bound), from which Streamify walks it in
``order`` (``Streamify.read_extents`` in step_lang). The blocks are compared with the
interpreter on a case table and on Hypothesis-generated buffers (extents 0..bound, both orders of
the MoE rewrite, static ``order`` reads, repeats and references) under the three traffic
patterns, then the rtl profile with an Amaranth simulation of the elaborated graph, cycle for
cycle (as ``tests/test_sim_rtl_profile.py`` does for static buffers).
"""

from __future__ import annotations

import itertools
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hw_memory import BufferPair as Pair
from test_hw_memory import norm
from test_sim_rtl_profile import amaranth_pushes, sends

import step_hw.block_rules as block_rules
import step_hw.dyntile as dyntile
from step_hw.config import BF16_CONFIG, HwConfig
from step_hw.graph_rules import check_graph
from step_hw.memory import Bufferize, Streamify
from step_hw.payload import TokenFormat
from step_hw.testing import PATTERNS, run_block
from step_lang import (
    DONE,
    Graph,
    Selector,
    StepTypeError,
    Stop,
    StreamType,
    Tile,
    interpret,
    numerics,
    ragged,
    regular,
)
from step_lang import ops as L
from step_lang.passes import lower
from step_lang.stoprules import grid_stop, grid_tokens
from step_lang.types import int16, int32

TILE = Tile(int16, 2, 2)
CFG = HwConfig(tile_rows=2, tile_cols=2)
N = ragged("n")  # the dynamic buffer dim of the block tests (its bound is the case's)


# -- the streams ----------------------------------------------------------------------------------


def buffer_tokens(outer, buf, d, extents, element) -> list:
    """The stream ``[*outer, *buf]`` whose buffer at outer position ``i`` (row-major) has
    ``extents[i]`` along buffer dim ``d`` (``buf[d]`` is ignored): canonical tokens, an empty
    buffer being its stops alone (``grid_tokens``: one per empty innermost vector, or none)."""
    b = len(buf)
    toks: list = []
    positions = itertools.product(*map(range, outer))
    for m, e in zip(positions, extents, strict=True):
        grid = tuple(e if j == d else n for j, n in enumerate(buf))
        body = grid_tokens(grid, lambda _: [element()])
        toks += body[:-1]  # its closing Stop(b), if any, merges with the outer stop
        toks.append(Stop(b + grid_stop(m[1:], tuple(outer[1:]))))
    return [*toks, DONE]


def _counter(elem, rng: np.random.Generator):
    """Elements with distinct values: tiles counting up, or random selectors."""
    count = itertools.count(1)
    if isinstance(elem, Selector):
        return lambda: rng.integers(0, 2, elem.n).astype(bool)
    if not isinstance(elem.rows, int):  # dynamic tiles of 0..3 rows
        return lambda: np.full((int(rng.integers(0, 4)), elem.cols), next(count), np.int16)
    return lambda: np.full((elem.rows, elem.cols), next(count), np.int16)


def _one_by_one(nested):
    if isinstance(nested, list):
        return [_one_by_one(x) for x in nested]
    return np.zeros((1, 1), np.int32)


@dataclass(frozen=True)
class DynCase:
    outer: tuple  # the buffer stream's dims (static)
    buf: tuple  # the buffer dims; buf[d] is the bound of the dynamic one
    d: int | None  # the dynamic buffer dim (None: a static buffer)
    extents: tuple = ()  # per buffer, its extent of dim d
    order: tuple | None = None
    repeat: tuple = ()
    ref: list | None = None  # nested reference data (contents ignored): [*outer, c ragged dims]
    elem: Any = TILE
    config: HwConfig = CFG
    slots: int = 2

    @property
    def extent_list(self) -> tuple:
        return self.extents or (self.buf[self.d] if self.d is not None else 0,) * int(
            np.prod(self.outer)
        )


def build(case: DynCase, seed: int = 0):
    """The graph of a case, the interpreter's tokens, and the blocks built from its shapes."""
    rng = np.random.default_rng(seed)
    g = Graph("dynamic_buffers")
    buf_dims = tuple(N if j == case.d else n for j, n in enumerate(case.buf))
    src = L.Source(g, StreamType(case.elem, (*case.outer, *buf_dims)), name="x")
    bz = L.Bufferize(src.out, len(case.buf), name="bz")
    inputs = {
        "x": buffer_tokens(case.outer, case.buf, case.d, case.extent_list, _counter(case.elem, rng))
    }
    kwargs: dict[str, Any] = {"repeat": case.repeat, "order": case.order}
    ref = None
    if case.ref is not None:
        depth = _depth(case.ref) - len(case.outer)
        ref_shape = (*case.outer, *(ragged(f"q{i}") for i in range(depth)))
        ref = L.Source(g, StreamType(Tile(int32, 1, 1), ref_shape), name="r")
        inputs["r"] = _one_by_one(case.ref)
        kwargs["ref"] = ref.out
    sf = L.Streamify(bz.out, name="sf", **kwargs)
    L.Sink(sf.out)
    res = interpret(g, {}, inputs=inputs)
    fmt = TokenFormat.for_elem(case.elem, case.config)
    common = {"config": case.config, "elem_format": fmt, "buffer_shape": case.buf,
              "slots": case.slots, "dynamic_dim": case.d}  # fmt: skip
    read: dict[str, Any] = {"repeat": case.repeat, "order": case.order}
    if ref is not None:
        read.update(
            ref_format=TokenFormat.for_elem(ref.out.elem, case.config), ref_rank=ref.out.rank
        )
    dut = Pair(
        Bufferize(rank=len(case.buf), in_rank=src.out.rank, **common),
        Streamify(in_rank=bz.out.rank, **common, **read),
    )
    ins = {"i": (dut.i, fmt, res.tokens(src.out))}
    if ref is not None:
        ins["ref"] = (dut.ref, TokenFormat.for_elem(ref.out.elem, case.config), res.tokens(ref.out))
    return dut, ins, {"o": (dut.o, fmt)}, res.tokens(sf.out)


def _depth(nested) -> int:
    return 1 + max((_depth(x) for x in nested), default=0) if isinstance(nested, list) else 0


# The MoE rewrite (step_lang/hier_tiling_routing.py) reads [n, 1, 16] with order (1, 2, 0) (the
# dynamic dim read innermost) and [16, n] with order (1, 0) (read outermost, an empty read when
# n = 0); small versions of both, and of every other placement.
CASES = {
    "pack: [n, 1, 3] read (1, 2, 0)": DynCase((1,), (4, 1, 3), 0, (2,), order=(1, 2, 0)),
    "pack, extents 2 0 4": DynCase((3,), (4, 1, 3), 0, (2, 0, 4), order=(1, 2, 0)),
    "unpack: [3, n] read (1, 0)": DynCase((3,), (3, 4), 1, (3, 0, 1), order=(1, 0)),
    "unpack, rank-1 buffer stream": DynCase((2, 2), (2, 3), 1, (3, 0, 0, 2), order=(1, 0)),
    "[n, 2] read (1, 0): stops alone": DynCase((2, 2), (3, 2), 0, (3, 0, 0, 2), order=(1, 0)),
    "[2, n] in stored order": DynCase((2, 2), (2, 3), 1, (3, 0, 0, 2), order=(0, 1)),
    "[n, 2] without order": DynCase((2, 3), (4, 2), 0, (2, 0, 1, 0, 0, 3)),
    "[n, 2] without order, repeated": DynCase((2, 3), (4, 2), 0, (2, 0, 1, 0, 0, 3), repeat=(2,)),
    "[n] repeated": DynCase((2, 3), (4,), 0, (2, 0, 1, 0, 0, 3), order=(0,), repeat=(2,)),
    "[2, n] repeated (2, 1)": DynCase((2, 2), (2, 3), 1, (3, 0, 0, 2), order=(0, 1), repeat=(2, 1)),
    "[2, n, 3] read (2, 0, 1)": DynCase((2, 2), (2, 3, 3), 1, (3, 0, 0, 2), order=(2, 0, 1)),
    "[2, n, 3] read (0, 2, 1)": DynCase((2, 2), (2, 3, 3), 1, (3, 0, 0, 2), order=(0, 2, 1)),
    "[2, n, 3] read (1, 2, 0)": DynCase((2, 2), (2, 3, 3), 1, (3, 0, 0, 2), order=(1, 2, 0)),
    "[2, n, 3] without order": DynCase((2, 2), (2, 3, 3), 1, (3, 0, 0, 2), repeat=(1, 2)),
    "every buffer empty": DynCase((4, 2), (2, 3, 3), 1, (0,) * 8, order=(1, 2, 0)),
    "every buffer full": DynCase((2, 2), (3, 2), 0, (3,) * 4, order=(1, 0)),
    "references, c = 1": DynCase((3,), (2, 3), 1, (3, 0, 1), order=(1, 0), ref=[[0, 0], [0, 0, 0], []]),
    "references, c = 0": DynCase((3,), (3, 2), 0, (3, 0, 1), order=(1, 0), ref=[0, 0, 0]),
    "references, c = 2": DynCase((2,), (2, 3), 1, (0, 2), order=(1, 0), ref=[[[0], [0, 0]], [[0], []]]),
    "selectors": DynCase((2, 2), (2, 3), 1, (3, 0, 0, 2), order=(1, 0), elem=Selector(5)),
    "one slot": DynCase((2, 2), (3, 2), 0, (1, 0, 3, 2), order=(1, 0), slots=1),
    "multi-word elements": DynCase((2, 2), (3, 2), 0, (1, 0, 3, 2), order=(1, 0),
                                   elem=Tile(int16, 4, 4), config=HwConfig(mem_port_elems=4)),
    # dynamic tiles (hardware tiling's packed expert tiles, buffered by RepeatStatic and the
    # matmul operands): each word carries the row count
    "dynamic tiles": DynCase((2, 2), (3, 2), 0, (1, 0, 3, 2), order=(1, 0),
                             elem=Tile(int16, ragged("r"), 2),
                             config=HwConfig(tile_rows=2, tile_cols=2, dyn_tile_rows=3)),
    "dynamic tiles, two words, static buffer": DynCase(
        (2,), (1, 3), None, repeat=(2,), elem=Tile(int16, ragged("r"), 2),
        config=HwConfig(tile_rows=2, tile_cols=2, dyn_tile_rows=3, mem_port_elems=4)),
    # static buffers read in a permuted order: the affine read of the permuted shape and strides
    "static, order (1, 0)": DynCase((2, 2), (2, 3), None, order=(1, 0)),
    "static, order (2, 0, 1), repeated": DynCase((2,), (2, 1, 3), None, order=(2, 0, 1), repeat=(2,)),
    "static, order (1, 0), references": DynCase((2,), (3, 2), None, order=(1, 0), ref=[[0, 0], [0]]),
}  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("name", CASES)
def test_dynamic_buffers_match_interpreter(name: str, pattern: str):
    dut, ins, outs, want = build(CASES[name])
    run = run_block(
        dut, ins, outs, pattern=pattern, seed=zlib.crc32(name.encode()), max_cycles=3000
    )
    assert norm(run.outputs["o"]) == norm(want)
    assert run.flags["error"] == 0


def test_repeating_an_empty_read_writes_its_closing_stops():
    # [2, n] read (1, 0) with n = 0 is an empty [0, 2] tensor, in the canonical form its
    # closing S2 alone (as the stored-order read of the buffer); repeated twice, S2 S3. Each
    # buffer is one element of the buffer stream, so its read is never nothing (it used to be,
    # and buffer 2's reads vanished from the stream). Written out, and the interpreter's.
    case = DynCase((2, 2), (2, 3), 1, (1, 0, 0, 2), order=(1, 0), repeat=(2,))
    g_tokens = buffer_tokens(case.outer, case.buf, case.d, case.extents, _counter(TILE, None))
    fmt = TokenFormat.for_elem(TILE, CFG)
    common = {"config": CFG, "elem_format": fmt, "buffer_shape": case.buf, "dynamic_dim": 1}
    dut = Pair(
        Bufferize(rank=2, in_rank=3, **common),
        Streamify(in_rank=1, repeat=(2,), order=(1, 0), **common),
    )
    run = run_block(dut, {"i": (dut.i, fmt, g_tokens)}, {"o": (dut.o, fmt)}, pattern="random")
    # buffer 0 is [[a] [b]], buffer 3 [[c0 c1] [c2 c3]]
    a, b, c0, c1, c2, c3 = [t for t in g_tokens if isinstance(t, np.ndarray)]
    want = [a, b, Stop(2), a, b, Stop(3), Stop(2), Stop(4),  # buffers 0 and 1 (empty): S3 + S1
            Stop(2), Stop(3),  # buffer 2 (empty)
            c0, c2, Stop(1), c1, c3, Stop(2), c0, c2, Stop(1), c1, c3, Stop(4), DONE]  # fmt: skip
    assert norm(run.outputs["o"]) == norm(want)
    assert norm(build(case)[3]) == norm(want)  # the interpreter's tokens


# -- random buffers -------------------------------------------------------------------------------


@st.composite
def dyn_cases(draw) -> DynCase:
    b = draw(st.integers(1, 3))
    buf = tuple(draw(st.lists(st.integers(1, 3), min_size=b, max_size=b)))
    d = draw(st.sampled_from([None, *range(b)]))
    if d is not None:
        buf = (*buf[:d], draw(st.integers(1, 4)), *buf[d + 1 :])
    outer = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    count = int(np.prod(outer))
    extents = ()
    if d is not None:
        extents = tuple(draw(st.lists(st.integers(0, buf[d]), min_size=count, max_size=count)))
    order = draw(st.one_of(st.none(), st.permutations(range(b)).map(tuple)))
    if d is None and order is None:
        order = tuple(range(b))  # static stored-order reads are tests/test_hw_memory.py's
    slots = draw(st.integers(1, 3))
    if draw(st.booleans()):  # repeats
        repeat = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        if len(outer) + len(repeat) + b > 8:
            repeat = ()
        return DynCase(outer, buf, d, extents, order, repeat=repeat, slots=slots)
    c = draw(st.integers(0, 2))

    def ref_data(dims, extra):
        if dims:
            return [ref_data(dims[1:], extra) for _ in range(dims[0])]
        if extra == 0:
            return 0
        k = draw(st.integers(0 if extra == 1 else 1, 2))
        return [ref_data((), extra - 1) for _ in range(k)]

    if len(outer) + c + b > 8:
        c = 0
    return DynCase(outer, buf, d, extents, order, ref=ref_data(outer, c), slots=slots)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=dyn_cases(), pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 2**16))
def test_dynamic_buffers_match_interpreter_on_random_buffers(case: DynCase, pattern, seed):
    dut, ins, outs, want = build(case, seed)
    run = run_block(dut, ins, outs, pattern=pattern, seed=seed, max_cycles=6000)
    assert norm(run.outputs["o"]) == norm(want)
    assert run.flags["error"] == 0


# -- the error flag -------------------------------------------------------------------------------


def _flag(buf, d, body: list, order=(1, 0)) -> tuple[int, list]:
    """Bufferize ``body`` (one buffer's tokens, closing stop included, then done) and read it in
    ``order``: the error flag and the output."""
    fmt = TokenFormat.for_elem(TILE, CFG)
    common = {"config": CFG, "elem_format": fmt, "buffer_shape": buf, "dynamic_dim": d}
    dut = Pair(Bufferize(rank=len(buf), in_rank=len(buf), **common),
               Streamify(in_rank=0, order=order, **common))  # fmt: skip
    run = run_block(dut, {"i": (dut.i, fmt, [*body, DONE])}, {"o": (dut.o, fmt)})
    return run.flags["error"], norm(run.outputs["o"])


def test_error_flags_a_buffer_that_is_not_a_grid():
    t = [np.full((2, 2), i, np.int16) for i in range(8)]
    # [2, n] (n <= 3): rows of 2 and 1 elements (the interpreter's permuted read raises)
    assert _flag((2, 3), 1, [t[0], t[1], Stop(1), t[2], Stop(2)])[0] == 1
    # ... a row of 4 elements, beyond the bound 3 (the extra one is dropped)
    assert _flag((2, 3), 1, [t[0], t[1], t[2], t[3], Stop(1), t[4], Stop(2)])[0] == 1
    # [n, 2] (n <= 2): a row of 1 element in a static dim of 2
    assert _flag((2, 2), 0, [t[0], t[1], Stop(1), t[2], Stop(2)])[0] == 1
    # ... 3 rows, beyond the bound 2
    assert _flag((2, 2), 0, [*t[0:2], Stop(1), *t[2:4], Stop(1), *t[4:6], Stop(2)])[0] == 1
    # [2, n]: 3 rows in a static dim of 2
    assert _flag((2, 3), 1, [t[0], Stop(1), t[1], Stop(1), t[2], Stop(2)])[0] == 1
    # Grids are fine, whatever their extent: [2, n] with n = 3, 1, 0; [n, 2] with n = 2.
    assert _flag((2, 3), 1, [*t[0:3], Stop(1), *t[3:6], Stop(2)]) == (
        0, norm([t[0], t[3], Stop(1), t[1], t[4], Stop(1), t[2], t[5], Stop(2), DONE]))  # fmt: skip
    assert _flag((2, 3), 1, [t[0], Stop(1), t[1], Stop(2)])[0] == 0
    assert _flag((2, 3), 1, [Stop(1), Stop(2)]) == (0, ["S2", "D"])  # read [0, 2]: canonical
    assert _flag((2, 2), 0, [*t[0:2], Stop(1), *t[2:4], Stop(2)])[0] == 0
    # A buffer without elements is empty (extent 0), whatever its inner stops, as in the
    # interpreter (Streamify.read_extents).
    # (Read [2, n]: an empty innermost vector per row.)
    assert _flag((2, 2), 0, [Stop(1), Stop(1), Stop(1), Stop(2)]) == (0, ["S1", "S2", "D"])


# -- blocks from nodes ----------------------------------------------------------------------------


def routed(buf_dims, rank: int, **read) -> tuple[Graph, Any, Any]:
    """A Partition mints ``route_n000`` (bound 4, the selector elements, as in the MoE layer);
    Promote -> Bufferize(rank) -> Streamify(**read) -> Sink reads a buffer of ``buf_dims``
    (``"n"`` for the routed rows)."""
    g = Graph("routed")
    x = L.Source(g, StreamType(TILE, (4, 3)), name="x").out
    sel = L.Source(g, StreamType(Selector(2), (4,)), name="s").out
    part = L.Partition(x, sel, 1, name="route")
    n = part.outputs[0].shape[0]
    L.Sink(part.outputs[1], name="k1")
    dims = tuple(n if extent == "n" else extent for extent in buf_dims)
    src = L.Source(g, StreamType(TILE, (2, *dims)), name="y")
    L.Sink(part.outputs[0], name="k0")
    bz = L.Bufferize(src.out, rank, name="bz")
    sf = L.Streamify(bz.out, name="sf", **read)
    L.Sink(sf.out)
    return g, bz, sf


def test_from_node_sizes_a_dynamic_buffer_by_its_bound():
    _, bz, sf = routed(("n", 1, 3), 3, order=(1, 2, 0))
    a, b = Bufferize.from_node(bz, CFG), Streamify.from_node(sf, CFG)
    assert a.geometry == b.geometry
    assert (a.geometry.shape, a.geometry.dynamic, a.geometry.size) == ((4, 1, 3), 0, 12)
    assert a.o.payload.extent.shape() == b.i.payload.extent.shape()  # 0..4: 3 bits
    wiring.connect(Module(), b.rd, a.rd)
    # a static buffer's references carry no extent
    _, bz, sf = routed((2, 3), 2, order=(1, 0))
    assert "extent" not in dict(Bufferize.from_node(bz, CFG).geometry.ref_layout().members)


def test_from_node_errors():
    m = regular("m")
    g = Graph()
    src = L.Source(g, StreamType(TILE, (2, m, ragged("k"))), name="x")
    bz = L.Bufferize(src.out, 2, name="bz")
    sf = L.Streamify(bz.out, name="sf")
    L.Sink(sf.out)
    with pytest.raises(
        StepTypeError,
        match=r"^Bufferize 'bz', port 'out': buffer shape \['m', 'k'\] has 2 dynamic dims; "
        r"hardware buffers have at most one \(sized by its bound\)$",
    ):
        Bufferize.from_node(bz, CFG)
    with pytest.raises(
        StepTypeError,
        match=r"^Streamify 'sf', port 'in': buffer shape \['m', 'k'\] has 2 dynamic dims",
    ):
        Streamify.from_node(sf, CFG)
    # A Source's symbol has no bound: nothing sizes the memory.
    g = Graph()
    src = L.Source(g, StreamType(TILE, (2, 3, m)), name="x")
    bz = L.Bufferize(src.out, 2, name="bz")
    sf = L.Streamify(bz.out, order=(1, 0), name="sf")
    L.Sink(sf.out)
    for block, name, port in (
        (Bufferize, "Bufferize 'bz'", "out"),
        (Streamify, "Streamify 'sf'", "in"),
    ):
        with pytest.raises(
            StepTypeError,
            match=rf"^{name}, port '{port}': buffer shape \['3', 'm'\] is dynamic; hardware buffers "
            r"are statically sized$",
        ):
            block.from_node(bz if block is Bufferize else sf, CFG)
    # A stored-order read replays a ragged row exactly; the hardware reads grids, so give order.
    r = ragged("r")
    with bounded(r, 3):
        g = Graph()
        src = L.Source(g, StreamType(TILE, (2, 3, r)), name="x")
        sf = L.Streamify(L.Bufferize(src.out, 2, name="bz").out, name="sf")
        L.Sink(sf.out)
        for refuse in (
            lambda: Streamify.from_node(sf, CFG),
            lambda: check_graph(lower(g), CFG),  # the rtl profile's rules: the same refusal
        ):
            with pytest.raises(
                StepTypeError,
                match=r"^Streamify 'sf', port 'in': buffer shape \['3', 'r'\] has a ragged inner "
                r"dim; hardware reads it as a full grid only with order$",
            ):
                refuse()
    # ... an outermost ragged dim is always read as a grid
    with bounded(r, 3):
        g = Graph()
        src = L.Source(g, StreamType(TILE, (2, r, 3)), name="x")
        sf = L.Streamify(L.Bufferize(src.out, 2, name="bz").out, name="sf")
        L.Sink(sf.out)
        assert Streamify.from_node(sf, CFG).geometry.shape == (3, 3)


FMT = TokenFormat.for_elem(TILE, CFG)


@pytest.mark.parametrize(
    ("build_block", "message"),
    [
        (lambda: Streamify(config=CFG, elem_format=FMT, buffer_shape=(2, 3), in_rank=0, order=(0, 0)),
         r"^Streamify order must be a permutation of range\(2\), not \(0, 0\)$"),
        (lambda: Streamify(config=CFG, elem_format=FMT, buffer_shape=(2, 3), in_rank=0, order=(1, True)),
         r"^Streamify order must be a permutation of range\(2\), not \(1, True\)$"),
        (lambda: Streamify(config=CFG, elem_format=FMT, buffer_shape=(2, 3), in_rank=0, order=(1, 0),
                           read_shape=(2,), read_stride=(1,)),
         r"^Streamify takes order or an affine read, not both$"),
        (lambda: Streamify(config=CFG, elem_format=FMT, buffer_shape=(2, 3), in_rank=0, dynamic_dim=1,
                           read_shape=(2,), read_stride=(1,)),
         r"^Streamify takes a buffer with a dynamic dim or an affine read, not both$"),
        (lambda: Streamify(config=CFG, elem_format=FMT, buffer_shape=(2, 3), in_rank=0, order=(1, 0), base=1),
         r"^Streamify base needs an affine read \(read_shape and read_stride\)$"),
        (lambda: Bufferize(config=CFG, elem_format=FMT, rank=2, in_rank=2, buffer_shape=(2, 3), dynamic_dim=2),
         r"^Bufferize dynamic_dim must be an integer in \[0, 1\], not 2$"),
    ],
)  # fmt: skip
def test_validation(build_block, message):
    with pytest.raises(ValueError, match=message):
        build_block()


def test_the_dynamic_moe_layer_builds():
    """The rewritten dynamic-tiling MoE layer (SMALL, 8x8 hardware tiles) has a block for every
    node: its [route_n, 1, 3] and [3, route_n] buffers are sized by the batch bound."""
    from hw_helpers import built_not_elaborated
    from test_hier_tiling_routing import SMALL, _moe

    from examples import moe
    from step_lang.hier_tiling import hier_tile

    g, _ = _moe(SMALL, moe.MoESchedule("dynamic", tile_f=8), 10, used=3, seed=1)
    h = hier_tile(g, 8, 8)
    top = built_not_elaborated(h, replace(BF16_CONFIG, tile_rows=8, tile_cols=8, dyn_tile_rows=16))
    dynamic = {
        name: (block.geometry.shape, block.geometry.dynamic)
        for name, block in top.blocks.items()
        if isinstance(block, (Bufferize, Streamify)) and block.geometry.dynamic is not None
    }
    assert dynamic["pack0_buf"] == dynamic["pack0_read"] == ((10, 1, 3), 0)
    assert dynamic["unpack0_buf"] == dynamic["unpack0_read"] == ((3, 10), 1)
    assert len(dynamic) == 16  # pack and unpack, buffer and read, of 4 experts


# -- the rtl profile against an Amaranth simulation -----------------------------------------------

INT16 = int16
FX = numerics.functions(HwConfig())


@contextmanager
def bounded(symbol, bound: int):
    """``symbol`` (a Source's dim, which no rule of step_hw.dyntile bounds) bounded by ``bound``
    for the buffers' rule (``step_hw.block_rules.buffer_extent``: the blocks' ``from_node`` and,
    with the bounds ``check_graph`` computes, the rtl profile's check): a graph can then feed
    buffers of any extents from a Source, where a minted symbol (a Partition's regular
    ``route_n``) has one extent per run."""
    real = dyntile.symbol_bounds
    with pytest.MonkeyPatch.context() as mp:
        for module in (dyntile, block_rules):  # the rules' bounds, and a block's own
            mp.setattr(module, "symbol_bounds", lambda graph: {**real(graph), symbol: bound})
        yield


def dyn_buffered(outer, buf, d, extents, *, consumer_lanes=None, ref=None, **read):
    """As test_sim_rtl_profile's ``buffered`` (4x4 int16 tiles: Source -> Bufferize ->
    Streamify(**read) -> [matmul] -> Sink), the buffer dim ``d`` being ``N`` with ``extents``."""
    g = Graph("dynamic_buffers")
    dims = tuple(N if j == d else n for j, n in enumerate(buf))
    src = L.Source(g, StreamType(Tile(INT16, 4, 4), (*outer, *dims)), name="src").out
    count = itertools.count(1)
    element = lambda: np.full((4, 4), next(count), np.int16)  # noqa: E731
    inputs = {"src": buffer_tokens(outer, buf, d, extents, element)}
    streams = {}
    if ref is not None:
        ref_data, ref_shape = ref
        streams["ref"] = L.Source(g, StreamType(Tile(int32, 1, 1), ref_shape), name="r").out
        inputs["r"] = _one_by_one(ref_data)
    y = L.Streamify(L.Bufferize(src, len(buf), name="bz").out, name="sf", **read, **streams).out
    if consumer_lanes is not None:
        w = L.Source(g, StreamType(Tile(INT16, 4, 4), y.type.shape), name="w").out
        alone, _ = dyn_buffered(outer, buf, d, extents, ref=ref, **read)  # the Streamify's tokens
        tokens = interpret(alone, {}, inputs=dict(inputs)).tokens("sf.out")
        ones = np.ones((4, 4), np.int16)
        inputs["w"] = [ones if isinstance(t, np.ndarray) else t for t in tokens]
        y = L.Map(y, w, fn=FX.matmul_out("int16"), name="mm").out
    L.Sink(y, name="sink")
    return g, inputs


W4 = HwConfig(mem_port_elems=4)


@pytest.mark.parametrize(
    ("outer", "buf", "d", "extents", "read", "config"),
    [
        # the MoE's two reads: the dynamic dim read innermost (an empty buffer: stops alone) and
        # outermost (an empty buffer: the read's closing stop alone)
        ((3,), (4, 1, 3), 0, (2, 0, 4), {"order": (1, 2, 0)}, HwConfig()),
        ((2, 2), (3, 4), 1, (3, 0, 0, 4), {"order": (1, 0)}, HwConfig()),
        ((2, 2), (3, 4), 1, (3, 0, 0, 4), {"order": (1, 0)}, W4),
        ((2, 2), (4, 2), 0, (3, 0, 4, 1), {"order": (1, 0)}, HwConfig()),
        ((2, 3), (4, 2), 0, (2, 0, 1, 0, 0, 3), {"repeat": (2,)}, HwConfig()),
        ((2, 2), (2, 3), 1, (3, 0, 0, 2), {"order": (0, 1), "repeat": (2, 1)}, HwConfig()),
        ((2, 2), (2, 3, 3), 1, (3, 0, 1, 2), {"order": (2, 0, 1)}, W4),
        ((3,), (2, 3), 1, (3, 0, 1), {"order": (1, 0), "ref": ([[0, 0], [0, 0, 0], []], (3, ragged("q")))}, HwConfig()),
        ((3,), (3, 2), 0, (3, 0, 1), {"order": (1, 0), "ref": ([0, 0, 0], (3,))}, HwConfig(mem_port_elems=8)),
        ((1, 4), (4, 2), 0, (2, 0, 4, 1), {"order": (1, 0), "consumer_lanes": 8}, HwConfig(lanes=8)),
        # a static buffer read in a permuted order
        ((1, 2), (2, 3), None, (), {"order": (1, 0)}, HwConfig()),
    ],
)  # fmt: skip
def test_buffers_match_an_amaranth_simulation(outer, buf, d, extents, read, config):
    extents = extents or (0,) * int(np.prod(outer))
    graph, inputs = dyn_buffered(outer, buf, d, extents, **read)
    with bounded(N, buf[d] if d is not None else 1):  # for the rtl profile's rules too
        want, cycles = amaranth_pushes(graph, inputs, config)
        assert sends(graph, inputs, config) == (want, cycles)


def test_a_partition_bounds_the_buffer_in_an_amaranth_simulation():
    """No monkeypatching: Partition's ``route_n000`` (a regular symbol, one extent per run)
    bounds the buffers (4 rows); the 3 rows it routes, fed by a Source of that type, are
    buffered, read transposed and read back (both reads of the MoE rewrite). The Partition sits
    on a path of its own: the rtl profile's router timing is not what is compared here."""
    g = Graph("routed")
    x = L.Source(g, StreamType(Tile(INT16, 4, 4), (4, 1)), name="x").out
    sel = L.Source(g, StreamType(Selector(2), (4,)), name="s").out
    part = L.Partition(x, sel, 1, name="route")
    L.Sink(part.outputs[0], name="routed")
    L.Sink(part.outputs[1], name="other")
    n = part.outputs[0].shape[0]
    y = L.Source(g, StreamType(Tile(INT16, 4, 4), (2, n, 2)), name="y").out
    t = L.Streamify(L.Bufferize(y, 2, name="bz").out, order=(1, 0), name="sf").out  # [2, 2, n]
    back = L.Streamify(L.Bufferize(t, 2, name="bz2").out, order=(1, 0), name="sf2").out
    L.Sink(back, name="sink")
    tile = np.zeros((4, 4), np.int16)
    rows = [[1, 0], [1, 0], [0, 1], [1, 0]]
    count = itertools.count(1)
    inputs = {
        "x": [[tile] for _ in rows],
        "s": [np.array(r, bool) for r in rows],
        "y": [[[np.full((4, 4), next(count), np.int16) for _ in range(2)] for _ in range(3)]
              for _ in range(2)],
    }  # fmt: skip
    want, _ = amaranth_pushes(g, inputs, HwConfig())
    got, _ = sends(g, inputs, HwConfig())
    buffers = ("y.out", "bz.out", "sf.out", "bz2.out", "sf2.out")
    assert {s: got[s] for s in buffers} == {s: want[s] for s in buffers}
    assert len(want["sf2.out"]) == 2 * (3 * 2 + 3) + 1  # 2 buffers of 3 rows of 2 tiles, done


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=dyn_cases(), words=st.sampled_from([1, 4]), lanes=st.sampled_from([None, 8]))
def test_buffers_match_an_amaranth_simulation_on_random_buffers(case: DynCase, words, lanes):
    order, extents = case.order, case.extents or (0,) * int(np.prod(case.outer))
    if order is None and case.d not in (None, 0):  # `N` is ragged: from_node wants an order
        order = tuple(range(len(case.buf)))
    read: dict[str, Any] = {"order": order, "repeat": case.repeat}
    if case.ref is not None:
        depth = _depth(case.ref) - len(case.outer)
        read["ref"] = (case.ref, (*case.outer, *(ragged(f"q{i}") for i in range(depth))))
    config = HwConfig(mem_port_elems=16 // words)
    # A MAC array of `lanes` (2 cycles per tile pair) reads the Streamify; its second operand
    # comes from a Source fed the Streamify's tokens.
    if lanes is not None:
        config = replace(config, lanes=lanes)
        read["consumer_lanes"] = lanes
    graph, inputs = dyn_buffered(case.outer, case.buf, case.d, extents, **read)
    with bounded(
        N, case.buf[case.d] if case.d is not None else 1
    ):  # for the rtl profile's rules too
        want, cycles = amaranth_pushes(graph, inputs, config)
        assert sends(graph, inputs, config) == (want, cycles)
