"""Bad input to the hardware generator: configurations, graphs without a hardware encoding, and
values that do not fit a token. Each case asserts the one-line message (naming the parameter,
operator or port and the value)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from examples import attention
from sim import simulate
from sim.profiles import RtlProfile
from step_hw.config import HwConfig
from step_hw.elaborate import convert
from step_hw.payload import TokenFormat
from step_lang import (
    Accum,
    Bufferize,
    FlatMap,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Partition,
    Promote,
    RandomOffChipLoad,
    Reshape,
    Selector,
    Sink,
    Source,
    Stop,
    Streamify,
    StreamType,
    Tile,
    Zip,
)
from step_lang import functions as F
from step_lang import numerics as nm
from step_lang.dims import ragged
from step_lang.types import float32, int16
from tests.oracle import nest_leaves

HW = HwConfig()
FNS = nm.functions(HW)
T = Tile(int16, 4, 4)
T_ZERO = np.zeros((4, 4), np.int16)


def expect(exc: type[BaseException], message: str):
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


CONFIGS = [
    ({"elem_dtype": "float64"}, "HwConfig.elem_dtype must be one of int8, int16, int32, bfloat16, float32, not 'float64'"),
    ({"elem_dtype": "float32"}, "HwConfig: floating point is elem_dtype 'bfloat16' with acc_dtype 'float32', not 'float32' with 'int32'"),
    ({"elem_dtype": "bfloat16", "acc_dtype": "float32", "frac_bits": 8}, "HwConfig.frac_bits applies to fixed point; bfloat16 has none, not 8"),
    ({"acc_dtype": "int8"}, "HwConfig.acc_dtype int8 is narrower than elem_dtype int16"),
    ({"elem_dtype": "int32", "acc_dtype": "int16"}, "HwConfig.acc_dtype int16 is narrower than elem_dtype int32"),
    ({"frac_bits": 16}, "HwConfig.frac_bits must be an integer in [0, 16), not 16"),
    ({"frac_bits": -1}, "HwConfig.frac_bits must be an integer in [0, 16), not -1"),
    ({"tile_rows": 0}, "HwConfig.tile_rows must be a positive integer, not 0"),
    ({"tile_rows": 2.0}, "HwConfig.tile_rows must be a positive integer, not 2.0"),
    ({"tile_cols": -2}, "HwConfig.tile_cols must be a positive integer, not -2"),
    ({"lanes": 0}, "HwConfig.lanes must be a positive integer, not 0"),
    ({"lanes": True}, "HwConfig.lanes must be a positive integer, not True"),
    ({"queue_depth": 0}, "HwConfig.queue_depth must be a positive integer, not 0"),
    ({"mem_port_elems": 0}, "HwConfig.mem_port_elems must be a positive integer, not 0"),
    ({"axi_data_width": 48}, "HwConfig.axi_data_width must be 32, 64, 128, 256 or 512, not 48"),
    ({"axi_data_width": 64.0}, "HwConfig.axi_data_width must be 32, 64, 128, 256 or 512, not 64.0"),
    ({"max_outstanding": 257}, "HwConfig.max_outstanding must be at most 256, not 257"),
    ({"axi_addr_width": 0}, "HwConfig.axi_addr_width must be a positive integer, not 0"),
    ({"axi_id_width": 0}, "HwConfig.axi_id_width must be a positive integer, not 0"),
    ({"max_outstanding": 0}, "HwConfig.max_outstanding must be a positive integer, not 0"),
    ({"level_bits": 0}, "HwConfig.level_bits must be a positive integer, not 0"),
    ({"axi_ports": 0}, "HwConfig.axi_ports must be a positive integer, not 0"),
    ({"dyn_tile_rows": 0}, "HwConfig.dyn_tile_rows must be a positive integer, not 0"),
    ({"dyn_tile_rows": 300}, "HwConfig.dyn_tile_rows must be at most 256, not 300"),
    ({"queue_capacity": 4}, "HwConfig.queue_capacity must map stream names to capacities, not 4"),
    ({"queue_capacity": {"x.out": 0}}, "HwConfig.queue_capacity['x.out'] must be a positive integer, not 0"),
    ({"queue_capacity": {"x.out": 2.0}}, "HwConfig.queue_capacity['x.out'] must be a positive integer, not 2.0"),
    ({"queue_capacity": {3: 2}}, "HwConfig.queue_capacity: stream names are strings, not 3"),
    ({"queue_capacity": [("s", 2), ("s", 5)]}, "HwConfig.queue_capacity names stream 's' twice (2, 5)"),
    ({"geometry_bounds": [("n", (2,)), ("n", (3,))]}, "HwConfig.geometry_bounds names node 'n' twice ((2,), (3,))"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "message"),
    CONFIGS,
    ids=[m.split(" must")[0] + str(i) for i, (_, m) in enumerate(CONFIGS)],
)
def test_bad_configuration(kwargs, message):
    with expect(ValueError, message):
        HwConfig(**kwargs)


def _source_sink(tile, build, shape=(2,)):
    g = Graph("g")
    x = Source(g, StreamType(tile, shape), name="x")
    Sink(build(x.out), name="y")
    return g


def _load_store(dtype):
    g = Graph("g")
    t, c = g.tensor("t", (8, 8), dtype), g.tensor("c", (8, 8), dtype)
    LinearOffChipStore(LinearOffChipLoad(t, tile=(4, 4), name="ld").out, c, name="st")
    return g


#: name -> (graph, message under ``HW``)
GRAPHS = {
    "big-tile": (
        lambda: _source_sink(Tile(int16, 8, 8), lambda s: Map(s, fn=FNS.exp, name="m").out),
        "Source 'x': tile Tile<int16, 8x8> does not fit the configured 4x4 tile",
    ),
    "float-stream": (
        lambda: _source_sink(Tile(float32, 4, 4), lambda s: Map(s, fn=F.exp, name="m").out),
        "Source 'x': dtype float32 is not supported by the hardware (int16/int32)",
    ),
    "float-tensor": (
        lambda: _load_store("float32"),
        "tensor 't': dtype float32 has no hardware encoding under int16 (floating point needs HwConfig(elem_dtype='bfloat16'))",
    ),
    "unsigned-tensor": (
        lambda: _load_store("uint8"),
        "tensor 't': dtype uint8 has no hardware encoding under int16 (the hardware's integers "
        "are signed: int8, int16 or int32)",
    ),
    "unsigned-stream": (
        lambda: _source_sink(Tile("uint8", 4, 4), lambda s: s),
        "Source 'x': dtype uint8 is not supported by the hardware (int16/int32) (the hardware's "
        "integers are signed: int8, int16 or int32)",
    ),
    "generic-accum": (
        lambda: _source_sink(T, lambda s: Accum(s, fn=F.accum_add, rank=1, name="a").out, (2, 2)),
        "Accum 'a': function 'accum_add' has no hardware arithmetic; build the graph with "
        "step_lang.numerics.functions(config)",
    ),
    "generic-map": (
        lambda: _source_sink(T, lambda s: Map(s, s, fn=F.add, name="m").out),
        "Map 'm': function 'add' has no hardware arithmetic; build the graph with "
        "step_lang.numerics.functions(config)",
    ),
    "flatmap-without-block": (
        lambda: _source_sink(
            T, lambda s: FlatMap(s, fn=replace(F.retile_rows, name="split_rows"), name="f").out
        ),
        "FlatMap 'f': function 'split_rows' has no hardware block (FlatMap blocks: "
        "cache_read_addr, last_tile_flags, block_row_offsets, pad_bias, pad_mask, retile_rows, "
        "retile_cols, retile_rows_masked, expert_addr)",
    ),
    "levels": (
        lambda: _source_sink(T, lambda s: Map(s, fn=FNS.exp, name="m").out, (1,) * 9),
        "Source 'x', port 'out': a stream of rank 8 has stop levels up to 8, but "
        "HwConfig.level_bits=3 holds at most 7",
    ),
}


@pytest.mark.parametrize(("make", "message"), GRAPHS.values(), ids=GRAPHS)
def test_graph_without_a_hardware_encoding(make, message):
    with expect(Exception, message):
        convert(make(), HW)


def _buffer_read_twice():
    g = Graph("g")
    bz = Bufferize(Source(g, StreamType(T, (2, 3)), name="x").out, 1, name="bz")
    for k in (1, 2):
        Sink(Streamify(bz.out, name=f"sf{k}").out, name=f"y{k}")
    return g


def _dynamic_tiles(g):
    """A stream of dynamically sized tiles of up to 2x4 (two 1x4 rows, routed by a selector and
    packed), as the MoE layer's dynamic tiling makes them."""
    x = Source(g, StreamType(Tile(int16, 1, 4), (2,)), name="x")
    sel = Source(g, StreamType(Selector(2), (2,)), name="sel")
    part = Partition(x.out, sel.out, 0, name="route")
    Sink(part.outputs[1], name="rest")
    return Accum(
        Promote(part.outputs[0], name="rows").out, fn=FNS.retile_row, rank=1, name="pack"
    ).out


def _on_dynamic_tiles(build):
    g = Graph("g")
    Sink(build(g, _dynamic_tiles(g)), name="y")
    return g


#: a matmul's a operand of 4x2 tiles, for b operands of 2 rows
W = Tile(int16, 4, 2)
#: the Source tokens of the graphs of _on_dynamic_tiles
DYNAMIC_TOKENS = {
    "x": [np.zeros((1, 4), np.int16)] * 2,
    "sel": [np.array([1, 0], bool)] * 2,  # both rows to the packed stream: a 2x4 tile
}


def _random_load_of_blocks(fetch):
    """Tile indices into a RandomOffChipLoad of 4x4 tiles of an 8x8 tensor, ``fetch`` tiles each."""
    g = Graph("g")
    t = g.tensor("t", (8, 8), "int16")
    idx = Source(g, StreamType(Tile(int16, 1, 1), (2,)), name="idx")
    Sink(RandomOffChipLoad(idx.out, t, tile=(4, 4), fetch=fetch, name="rld").out, name="y")
    return g


def _over_capacity():
    g = _source_sink(T, lambda s: Map(s, fn=FNS.exp, name="m").out)
    g.set_queue_depth(g.nodes["x"].out, 3)
    return g


#: The graph-level rules (``step_hw.graph_rules``): the elaborator's and the rtl profile's.
#: name -> (graph, configuration, message)
GRAPH_RULES = {
    **{name: (make, HW, message) for name, (make, message) in GRAPHS.items()},
    "capacity": (
        _over_capacity,
        HwConfig(queue_capacity={"x.out": 2}),
        "queue of stream 'x.out' into 'm': depth 3 exceeds its capacity 2 "
        "(HwConfig.queue_capacity)",
    ),
    "numerics": (
        lambda: _source_sink(T, lambda s: Map(s, fn=FNS.exp, name="m").out),
        HwConfig(elem_dtype="bfloat16", acc_dtype="float32"),
        "Map 'm': function 'exp' computes in int16, the hardware in bfloat16; build the graph "
        "with step_lang.numerics.functions(config)",
    ),
    "fraction-bits": (
        lambda: _source_sink(T, lambda s: Map(s, fn=FNS.exp, name="m").out),
        HwConfig(frac_bits=4),
        f"Map 'm': function 'exp' computes with {FNS.exp.numerics.frac_bits} fraction bits, "
        "the hardware with 4",
    ),
    "address-space": (
        lambda: _load_store("int16"),
        HwConfig(axi_addr_width=12),
        "tensor 't': 128 bytes at address 0x1000 do not fit the 12-bit AXI address space "
        "(HwConfig.axi_addr_width)",
    ),
    # the blocks' own rules (step_hw.block_rules)
    "reshape-dynamic-without-pad": (
        lambda: _source_sink(T, lambda s: Reshape(s, 2, name="r").out, (2, ragged("x"))),
        HW,
        "Reshape 'r', port 'in': no hardware block: the innermost dim x is dynamic and no pad "
        "is given; hardware cannot report a short vector at run time, give pad=",
    ),
    "zip-of-a-tuple": (
        lambda: _source_sink(T, lambda s: Zip(Zip(s, s, name="z0").out, s, name="z1").out),
        HW,
        "Zip 'z1', port 'in0': no hardware block: nested tuples have no hardware encoding",
    ),
    "buffer-of-a-zip": (
        lambda: _source_sink(
            T,
            lambda s: Streamify(Bufferize(Zip(s, s, name="z").out, 1, name="bz").out).out,
            (2, 2),
        ),
        HW,
        "Bufferize 'bz', port 'in': element (Tile<int16, 4x4>, Tile<int16, 4x4>) has no hardware "
        "encoding (only shape blocks, a Broadcast, the routers and a Sink move a Zip's tuples, and "
        "only a function of their items, e.g. Map(Zip(a, b), fn=add), reads them)",
    ),
    "buffer-without-a-bound": (
        lambda: _source_sink(
            T,
            lambda s: Streamify(Bufferize(s, 1, name="bz").out, name="sf").out,
            (2, ragged("x")),
        ),
        HW,
        "Bufferize 'bz', port 'out': buffer shape ['x'] is dynamic; hardware buffers are "
        "statically sized",
    ),
    # the parameters of blocks built from a function's params (step_hw.function_params)
    "region-id-beyond-its-element": (
        lambda: _source_sink(
            T, lambda s: Map(s, fn=attention.region_id(40000, "int16"), name="m").out
        ),
        HW,
        "Map 'm': RegionIdUnit region must be a non-negative integer below 32768, not 40000",
    ),
    "expert-addresses-beyond-their-element": (
        lambda: _source_sink(
            Selector(4),
            lambda s: FlatMap(s, fn=nm.expert_addr(10000, out_dtype="int16"), name="ea").out,
        ),
        HW,
        "FlatMap 'ea': ExpertAddr addresses up to 39999 do not fit 16-bit elements (n=4, "
        "tiles=10000, base=0)",
    ),
    # dynamic tiles where a compute unit has no hardware for them (block_rules.unit_tiles_rule)
    "matmul-of-a-dynamic-b": (
        lambda: _on_dynamic_tiles(
            lambda g, d: (
                Map(Source(g, StreamType(W, (1,)), name="w").out, d, fn=FNS.matmul, name="mm").out
            )
        ),
        HW,
        "Map 'mm', port 'in1': MatmulUnit operand b has no hardware for dynamically sized tiles",
    ),
    "accum-of-dynamic-tiles": (
        lambda: _on_dynamic_tiles(
            lambda g, d: Accum(Promote(d, name="p").out, fn=FNS.accum_add, rank=1, name="a").out
        ),
        HW,
        "Accum 'a', port 'in0': AccumUnit has no hardware for dynamically sized tiles",
    ),
    "retile-columns-of-dynamic-tiles": (
        lambda: _on_dynamic_tiles(lambda g, d: FlatMap(d, fn=F.retile_cols, name="cols").out),
        HW,
        "FlatMap 'cols', port 'in0': function 'retile_cols' has no hardware for dynamically "
        "sized tiles",
    ),
    "buffer-read-twice": (
        _buffer_read_twice,
        HW,
        "Bufferize 'bz', port 'out': read by 2 nodes (sf1, sf2); in hardware one Streamify reads "
        "a Bufferize's buffers (Bufferize once per reader)",
    ),
    "fetch-block-not-consecutive": (
        lambda: _random_load_of_blocks((2, 1)),
        HW,
        "RandomOffChipLoad 'rld': RandomLoad fetch block of 2x1 tiles of 4x4 is not consecutive "
        "in tensor [8, 8]: it needs one row of tiles or the tensor's full width",
    ),
}
#: Source tokens of a graph whose shape is not static (the others: zero tiles of its shape)
SOURCE_TOKENS = {
    "reshape-dynamic-without-pad": {"x": [[T_ZERO] * 3, [T_ZERO]]},
    "buffer-without-a-bound": {"x": [[T_ZERO] * 3, [T_ZERO]]},
    "expert-addresses-beyond-their-element": {"x": [np.array([1, 0, 0, 0], bool)] * 2},
    "matmul-of-a-dynamic-b": {**DYNAMIC_TOKENS, "w": [np.zeros((4, 2), np.int16)]},
    "accum-of-dynamic-tiles": DYNAMIC_TOKENS,
    "retile-columns-of-dynamic-tiles": DYNAMIC_TOKENS,
}


@pytest.mark.parametrize("case", GRAPH_RULES)
def test_the_rtl_profile_refuses_what_the_hardware_cannot_build(case):
    """The rtl profile predicts the cycles of hardware that exists: a graph the elaborator
    refuses for a rule of the whole graph or of a node's function, the profile refuses with the
    same message. Given tokens and memory, it used to simulate every one of these graphs to the
    end (the function cases since ``step_hw.unit_functions``, the others since
    ``step_hw.graph_rules``, the blocks' own rules since ``step_hw.block_rules``)."""
    make, config, message = GRAPH_RULES[case]
    with expect(Exception, message):
        convert(make(), config)
    graph = make()
    memory = {name: np.zeros(t.shape, t.dtype.numpy) for name, t in graph.tensors.items()}
    inputs = SOURCE_TOKENS.get(case) or {
        n.name: nest_leaves(
            tuple(n.out.type.shape),
            lambda e=n.out.elem: np.zeros((e.rows, e.cols), e.dtype.numpy),
        )
        for n in graph.nodes.values()
        if isinstance(n, Source)
    }
    with expect(Exception, message):
        simulate(graph, memory, inputs=inputs, profile=RtlProfile(config))


def test_bad_config_object():
    with expect(TypeError, "config must be a HwConfig, not 'int16'"):
        convert(_load_store("int16"), "int16")


PACKS = [
    (TokenFormat("tile", 2, 2, 8), np.full((2, 2), 200), "value 200 does not fit a 8-bit element"),
    (TokenFormat("tile", 2, 2, 8), np.zeros((2, 3), int), "tile of shape (2, 3), format is 2x2"),
    (TokenFormat("selector", n=3), np.zeros(4, bool), "selector of shape (4,), format has 3 bits"),
    (TokenFormat("tile", 2, 2, 8, level_bits=2), Stop(4), "stop level 4 does not fit 2 level bits"),
    (
        TokenFormat("tile", 4, 2, 8, dynamic=True),
        np.zeros((5, 2), int),
        "tile of shape (5, 2), format is a dynamic tile of 0..4 rows x 2",
    ),
]


@pytest.mark.parametrize(
    ("fmt", "token", "message"), PACKS, ids=["range", "shape", "selector", "level", "dynamic"]
)
def test_tokens_that_do_not_fit_their_format(fmt, token, message):
    with expect(ValueError, message):
        fmt.pack(token)
