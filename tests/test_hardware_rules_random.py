"""The rtl profile refuses what the elaborator refuses, on random graphs and configurations.

The rtl timing profile checks a graph with ``step_hw.graph_rules.check_graph`` before it times
it, and the elaborator runs the same check first, so a graph the check refuses is refused by both
with one message. These tests cover the other direction: when elaborating a graph (building every
block, ``ElaboratedGraph``) fails, the check has already failed with the same message, so the
profile never predicts the cycles of hardware that cannot be built. Before ``step_hw.block_rules``
held the buffers' and the random loads' rules, 106 of 3,000 graphs drawn under the first eight
of these configurations were timed by the profile and refused by the elaborator (an unbounded or
twice-dynamic buffer, a fetch block not consecutive in its tensor).

The graphs are those of ``tests/test_random_graphs.py`` with the hardware's int16 arithmetic,
under one of nine configurations (narrow level fields, small tiles and memory words, one AXI
port, one dynamic row, a small address space, ...), most of which refuse some of the graphs: 60
graphs of each kind in ``make test`` (about 5 s each), 1,000 of each under ``make test-all``
(about 2 minutes each); the same graphs every run (``derandomize``).
"""

from __future__ import annotations

import gc
import re

import pytest
from amaranth._unused import MustUse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from step_hw.config import HwConfig
from step_hw.elaborate import ElaboratedGraph
from step_hw.graph_rules import check_graph
from step_lang import Tile, numerics
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
            ElaboratedGraph(graph, config)
        except (StepTypeError, ValueError) as exc:
            with pytest.raises(type(exc), match="^" + re.escape(str(exc)) + "$"):
                check_graph(lower(graph), config)
        else:
            check_graph(lower(graph), config)  # accepted by both
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
