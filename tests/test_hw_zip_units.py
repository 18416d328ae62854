"""Units that read a Zip's tuples: ``Map(Zip(a, b), fn)``, ``Accum(Zip(a, w), matmul_acc)`` and
``FlatMap(Zip(idx, n), cache_read_addr)`` in hardware.

The elaborator feeds the tuple's items to the unit's ``in0`` and ``in1``
(``step_hw.tuple_format.connect_items``); a Zip read by several units is copied whole by a
Broadcast, and the routers steer tuples whole. Each graph runs in an Amaranth simulation of the
elaborated design (Sources offering a token every cycle, Sinks always ready): every Sink's tokens
must equal the interpreter's, bit for bit, and the cycle every token enters every queue, and the
total, the rtl profile's (``tests/test_sim_rtl_profile.amaranth_pushes``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from step_hw.checks import operand_ports
from step_hw.config import HwConfig
from step_hw.tuple_format import stream_format
from step_lang import (
    Accum,
    FlatMap,
    Graph,
    Map,
    Parallelize,
    Partition,
    Reassemble,
    Selector,
    Sink,
    Source,
    StreamType,
    Tile,
    Zip,
    interpret,
    numerics,
    ragged,
    to_tokens,
)
from step_lang.interpret import InterpretResult
from step_lang.types import DTYPES
from tests.hw_helpers import assert_same_tokens
from tests.oracle import nest_leaves
from tests.test_sim_rtl_profile import amaranth_pushes, sends

INT16 = HwConfig()
BF16 = HwConfig(elem_dtype="bfloat16", acc_dtype="float32")


def _values(config: HwConfig, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if config.is_float:
        return rng.normal(0, 2, shape).astype(DTYPES["bfloat16"].numpy)
    return rng.integers(-300, 300, shape).astype(np.int16)


def _agree(graph: Graph, inputs: dict, config: HwConfig) -> InterpretResult:
    """The Sinks' tokens and every queue's cycles of the elaborated ``graph`` against the
    interpreter and the rtl profile; the interpreter's result."""
    want = interpret(graph, inputs=inputs)
    payloads: dict[str, list[int]] = {}
    pushes, cycles = amaranth_pushes(graph, inputs, config, sink_payloads=payloads)
    sinks = [n for n in graph.nodes.values() if isinstance(n, Sink)]
    for sink in sinks:
        stream = sink.inputs[0]
        fmt = stream_format(stream.elem, config, where=sink.name)
        got = [fmt.unpack(p) for p in payloads[stream.name]]
        assert_same_tokens(got, want.tokens(stream))
    assert sends(graph, inputs, config) == (pushes, cycles)
    return want


def zipped_units(config: HwConfig, *, addresses: bool = False) -> tuple[Graph, dict]:
    """A graph whose units read a Zip's tuples, and its Source tokens: ``(a, b)`` pairs of 4x4
    tiles (``[2, 3]``) into an element-wise ``mul``, a ``matmul`` and a ``matmul_acc`` over each
    row of pairs (the tuples copied by a Broadcast); with ``addresses``, ``(row, tiles)`` pairs
    into a FlatMap of ``cache_read_addr(4)`` too (``row * 4 + j`` for ``j < tiles``)."""
    fx = numerics.functions(config)
    tile = Tile(DTYPES[config.elem_dtype], 4, 4)
    g = Graph("zipped")
    a = Source(g, StreamType(tile, (2, 3)), name="a").out
    b = Source(g, StreamType(tile, (2, 3)), name="b").out
    pairs = Zip(a, b, name="pairs").out
    Sink(Map(pairs, fn=fx.mul, name="mul").out, name="y_mul")
    Sink(Map(pairs, fn=fx.matmul, name="mm").out, name="y_mm")
    Sink(Accum(pairs, fn=fx.matmul_acc, rank=1, name="acc").out, name="y_acc")
    rng = np.random.default_rng(3)
    inputs = {k: nest_leaves((2, 3), lambda: _values(config, rng, (4, 4))) for k in "ab"}
    if addresses:
        scalar = Tile(DTYPES["int32"], 1, 1)
        idx = Source(g, StreamType(scalar, (4,)), name="idx").out
        n = Source(g, StreamType(scalar, (4,)), name="n").out
        req = Zip(idx, n, name="req").out
        Sink(FlatMap(req, fn=numerics.cache_read_addr(4), name="addr").out, name="y_addr")
        inputs["idx"] = [np.full((1, 1), v, np.int32) for v in (0, 3, 1, 2)]
        inputs["n"] = [np.full((1, 1), v, np.int32) for v in (2, 0, 4, 1)]
    return g, inputs


@pytest.mark.parametrize("config", [INT16, BF16], ids=["int16", "bf16"])
def test_units_read_a_zips_tuples(config):
    g, inputs = zipped_units(config)
    units = [g.nodes[name] for name in ("mul", "mm", "acc")]
    for unit in units:
        assert unit.unpacks_tuple and operand_ports(unit) == ["in0", "in0"]
    want = _agree(g, inputs, config)
    assert len(want.tokens(units[2].out)) == 2 + 1  # a sum per row of pairs, done


def test_a_flatmap_reads_a_zips_tuples():
    """``cache_read_addr`` of ``(row, tiles)`` pairs: the KV-cache addresses of each request."""
    g, inputs = zipped_units(INT16, addresses=True)
    want = _agree(g, inputs, INT16)
    addresses = [int(t[0, 0]) for t in want.tokens(g.nodes["addr"].out)[:-1]]
    assert addresses == [0, 1, 4, 5, 6, 7, 8]


def routed_pairs(config: HwConfig) -> tuple[Graph, dict]:
    """A graph whose routers move a Zip's tuples, and its Source tokens: ``(a, b)`` pairs of 4x4
    tiles (``[3, 2]``) through a Partition by selectors (``sum`` and ``product`` branches, the
    second row of pairs both ways) and a Reassemble by the same selectors, dealt by a
    Parallelize to two ``sub`` units, and whole to a Sink."""
    fx = numerics.functions(config)
    tile = Tile(DTYPES[config.elem_dtype], 4, 4)
    g = Graph("routed")
    a = Source(g, StreamType(tile, (3, 2)), name="a").out
    b = Source(g, StreamType(tile, (3, 2)), name="b").out
    sel = Source(g, StreamType(Selector(2), (3,)), name="sel").out
    parts = Partition(Zip(a, b, name="pairs").out, sel, rank=1, name="part").outputs
    sums = Map(parts[0], fn=fx.add, name="sum").out
    products = Map(parts[1], fn=fx.mul, name="product").out
    Sink(Reassemble([sums, products], sel, name="gather").out, name="y")
    dealt = Parallelize(Zip(a, b, name="again").out, 2, 1, name="deal").outputs
    for k, part in enumerate(dealt):
        Sink(Map(part, fn=fx.sub, name=f"diff{k}").out, name=f"y_diff{k}")
    Sink(Zip(a, b, name="pairs_out").out, name="y_pairs")  # the tuples whole, at a top-level port
    rng = np.random.default_rng(5)
    inputs = {k: nest_leaves((3, 2), lambda: _values(config, rng, (4, 4))) for k in "ab"}
    inputs["sel"] = [np.array(s, bool) for s in ((1, 0), (1, 1), (0, 1))]
    return g, inputs


def test_routers_steer_a_zips_tuples():
    """A Partition and a Reassemble by selectors, and a Parallelize, move ``(a, b)`` pairs
    whole; the Map on each branch takes them apart."""
    g, inputs = routed_pairs(INT16)
    want = _agree(g, inputs, INT16)
    got = [t for t in want.tokens(g.nodes["gather"].out) if isinstance(t, np.ndarray)]
    assert len(got) == 2 + 2 * 2 + 2  # the second row of pairs goes both ways
    assert np.array_equal(got[0], inputs["a"][0][0] + inputs["b"][0][0])


@st.composite
def zipped_graphs(draw):
    """``Map(Zip(a, b), fn)`` on ragged streams of one or two dims, empty ones included, with
    one of the element-wise functions or a matmul."""
    fx = numerics.functions(INT16)
    dims = draw(st.integers(1, 2))
    shape = tuple(ragged(f"d{k}") for k in range(dims))
    g = Graph("zip_map")
    tile = Tile(DTYPES["int16"], 4, 4)
    a = Source(g, StreamType(tile, shape), name="a").out
    b = Source(g, StreamType(tile, shape), name="b").out
    fn = draw(st.sampled_from(["add", "sub", "mul", "maximum", "matmul"]))
    Sink(Map(Zip(a, b, name="pair").out, fn=getattr(fx, fn), name="f").out, name="y")
    lengths = st.integers(0, 3)
    structure = draw(lengths if dims == 1 else st.lists(lengths, max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))

    def leaves(node):
        if isinstance(node, int):
            return [_values(INT16, rng, (4, 4)) for _ in range(node)]
        return [leaves(x) for x in node]

    inputs = {k: to_tokens(leaves(structure), dims - 1) for k in "ab"}
    return g, inputs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zipped_graphs())
def test_random_zipped_streams(case):
    graph, inputs = case
    _agree(graph, inputs, INT16)
