"""The rtl profile refuses what the elaborator refuses: on random graphs under nine
configurations, on the numerics functions (elementwise, matmul, Accum, Scan, retile) over
dynamically sized tiles, and (``make test-all``) on every example under 13 configurations.

The rtl timing profile checks a graph with ``step_hw.graph_rules.check_graph`` before it times
it, and the elaborator runs the same check first, so a graph the check refuses is refused by both
with one message. These tests cover the other direction: when elaborating a graph (building every
block, ``ElaboratedGraph``) fails, the check has already failed with the same message, so the
profile never predicts the cycles of hardware that cannot be built. Before ``step_hw.block_rules``
held the buffers' and the random loads' rules, 106 of 3,000 graphs drawn under the first eight
of these configurations were timed by the profile and refused by the elaborator (an unbounded or
twice-dynamic buffer, a fetch block not consecutive in its tensor); before
``block_rules.unit_tiles_rule``, 7 of the 22 functions over dynamic tiles were, under either
numerics; before the address-space rule, every example with a 12-bit address space was.

The random graphs are those of ``tests/test_random_graphs.py`` with the hardware's int16
arithmetic, under one of nine configurations (narrow level fields, small tiles and memory
words, one AXI port, one dynamic row, a small address space, ...), most of which refuse some
of the graphs: 60 graphs of each kind in ``make test`` (about 5 s each), 1,000 of each under
``make test-all`` (about 2 minutes each); the same graphs every run (``derandomize``).
"""

from __future__ import annotations

import gc
import re
from dataclasses import replace

import pytest
from amaranth._unused import MustUse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from step_hw.config import BF16_CONFIG, HwConfig
from step_hw.elaborate import ElaboratedGraph
from step_hw.graph_rules import check_graph
from step_hw.rtl import EXAMPLES, example_config
from step_lang import Graph, Selector, StreamType, Tile, numerics
from step_lang import functions as F
from step_lang import ops as L
from step_lang.errors import StepTypeError
from step_lang.passes import lower
from tests.test_random_graphs import graphs, memory_graphs

CONFIGS = [
    HwConfig(),
    HwConfig(level_bits=1),
    HwConfig(level_bits=2),
    HwConfig(tile_rows=1, tile_cols=2),
    HwConfig(mem_port_elems=2),
    HwConfig(axi_data_width=32),
    HwConfig(dyn_tile_rows=1),
    HwConfig(max_outstanding=1, axi_ports=1),
    HwConfig(axi_addr_width=13),  # the first tensor fits (at 0x1000), the second does not
]
FNS = numerics.functions(HwConfig())
SETTINGS = {
    "max_examples": 60,
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow],
}


def _check_refuses_what_elaboration_refuses(graph, config) -> None:
    # Blocks are built here only to see whether they build, never elaborated: silence Amaranth's
    # UnusedElaboratable for them (an error under pytest's filterwarnings) while they are
    # collected, as tests/test_random_graphs_rtl.py does.
    MustUse._MustUse__silence = True
    try:
        try:
            ElaboratedGraph(graph, config)  # runs check_graph first: what it accepts, so do we
        except (StepTypeError, ValueError) as exc:
            with pytest.raises(type(exc), match="^" + re.escape(str(exc)) + "$"):
                check_graph(lower(graph), config)
        gc.collect()
    finally:
        MustUse._MustUse__silence = False


@settings(**SETTINGS)
@given(graphs(elem=Tile("int16", 1, 2), fns=FNS), st.sampled_from(CONFIGS))
def test_the_rules_refuse_every_stream_graph_the_elaborator_refuses(case, config):
    _check_refuses_what_elaboration_refuses(case[0], config)


@settings(**SETTINGS)
@given(memory_graphs("int16", FNS), st.sampled_from(CONFIGS))
def test_the_rules_refuse_every_memory_graph_the_elaborator_refuses(case, config):
    _check_refuses_what_elaboration_refuses(case[0], config)


@pytest.mark.slow
@settings(**{**SETTINGS, "max_examples": 1000})
@given(graphs(elem=Tile("int16", 1, 2), fns=FNS), st.sampled_from(CONFIGS))
def test_the_rules_refuse_every_stream_graph_the_elaborator_refuses_more(case, config):
    _check_refuses_what_elaboration_refuses(case[0], config)


@pytest.mark.slow
@settings(**{**SETTINGS, "max_examples": 1000})
@given(memory_graphs("int16", FNS), st.sampled_from(CONFIGS))
def test_the_rules_refuse_every_memory_graph_the_elaborator_refuses_more(case, config):
    _check_refuses_what_elaboration_refuses(case[0], config)


# -- every numerics function on dynamically sized tiles ------------------------------------------


def _dynamic_tiles(g, config):
    """Dynamically sized tiles of up to 2x4 (1x4 rows routed by a selector and packed), as the
    MoE layer's dynamic tiling makes them."""
    dt = config.elem_dtype
    x = L.Source(g, StreamType(Tile(dt, 1, 4), (2,)), name="x")
    sel = L.Source(g, StreamType(Selector(2), (2,)), name="sel")
    part = L.Partition(x.out, sel.out, 0, name="route")
    L.Sink(part.outputs[1], name="rest")
    rows = L.Promote(part.outputs[0], name="rows").out
    return L.Accum(rows, fn=numerics.functions(config).retile_row, rank=1, name="pack").out


def _static(g, config, rows=4):
    return L.Source(g, StreamType(Tile(config.elem_dtype, rows, 4), (1,)), name="w").out


def _over(d, name):
    return L.Promote(d, name=name).out


#: name -> (graph, dynamic tiles, functions) -> the node on them
ON_DYNAMIC_TILES = {
    **{
        f"map-{f}": lambda g, d, fx, c, f=f: L.Map(d, fn=getattr(fx, f), name="m").out
        for f in ("exp", "silu", "recip")
    },
    **{
        f"map-{f}": lambda g, d, fx, c, f=f: L.Map(d, d, fn=getattr(fx, f), name="m").out
        for f in ("add", "sub", "mul", "div", "maximum")
    },
    **{
        f"map-{f}-with-a-row": lambda g, d, fx, c, f=f: (
            L.Map(d, _static(g, c, 1), fn=getattr(fx, f), name="m").out
        )
        for f in ("add", "mul")
    },
    **{
        f"{f}-{side}": lambda g, d, fx, c, f=f, side=side: (
            L.Map(
                *((d, _static(g, c)) if side == "a" else (_static(g, c), d)),
                fn=getattr(fx, f),
                name="m",
            ).out
        )
        for f in ("matmul", "matmul_t")
        for side in ("a", "b")
    },
    **{
        f"{op.__name__.lower()}-{f}": lambda g, d, fx, c, f=f, op=op: (
            op(_over(d, "over"), fn=getattr(fx, f), rank=1, name="a").out
        )
        for f in ("accum_add", "accum_max", "retile_row")
        for op in (L.Accum, L.Scan)
        if (op, f) != (L.Scan, "retile_row")  # refused by the language: its tiles would grow
    },
    **{
        f"flatmap-{f}": lambda g, d, fx, c, f=f: L.FlatMap(d, fn=getattr(F, f), name="fm").out
        for f in ("retile_rows", "retile_cols")
    },
}


@pytest.mark.parametrize("config", [HwConfig(), BF16_CONFIG], ids=["int16", "bf16"])
@pytest.mark.parametrize("case", ON_DYNAMIC_TILES)
def test_the_rules_refuse_every_unit_on_dynamic_tiles_the_elaborator_refuses(case, config):
    g = Graph("g")
    d = _dynamic_tiles(g, config)
    L.Sink(ON_DYNAMIC_TILES[case](g, d, numerics.functions(config), config), name="y")
    _check_refuses_what_elaboration_refuses(g, config)


# -- every example under other configurations ----------------------------------------------------

#: changes to an example's own configuration (``step_hw.rtl.example_config``)
VARIANTS = [
    {},
    {"level_bits": 2},
    {"level_bits": 4},
    {"dyn_tile_rows": 1},
    {"dyn_tile_rows": 4},
    {"mem_port_elems": 2},
    {"axi_data_width": 32},
    {"max_outstanding": 1, "axi_ports": 1},
    {"axi_ports": 2},
    {"tile_rows": 2, "tile_cols": 2},
    {"axi_addr_width": 12},
    {"lanes": 1},
    {"queue_depth": 1},
]


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_rules_refuse_every_example_the_elaborator_refuses(example):
    graph = EXAMPLES[example]()
    for variant in VARIANTS:
        _check_refuses_what_elaboration_refuses(graph, replace(example_config(graph), **variant))
