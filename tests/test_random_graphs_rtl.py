"""Random multi-operator graphs on the RTL: the interpreter, both timing profiles and a Verilator
co-simulation agree on every token (``step_hw.cosim.validate``), and the rtl profile's cycle
count is the RTL's to the cycle.

The graphs are those of ``tests/test_random_graphs.py`` drawn with the hardware's int16
arithmetic (``numerics.functions(HwConfig())``): ``graphs`` (a Source of 1x2 tiles, an optional
route: Partition and Reassemble, or Partition or Parallelize into an EagerMerge whose order
``validate`` replays for each reader; a chain of shape, buffer and higher-order operators, a Sink), kept
when they elaborate and hold at least two operators besides Sources and Sinks; and
``memory_graphs`` (linear loads, once or per element of a reference stream, random loads at
addresses from a list or from the address generators of KV-cache rows and expert selectors,
random stores around the same stages, stores back into the loaded tensor, the graph's own
queue depths on half of them), kept by the same rule when the interpreter finds no memory race
in them, on the cocotbext-axi tier, on the
fast tier with the HBM-like memory (``MemoryModel.hbm()``, 64 cycles of latency), and on the
fast tier with the paper's memory and every memory operator on one AXI port. Each graph is
one Verilator build (3 to 20 s, cached by Verilog hash under ``build/cosim/``): 3 fixed graphs
of each kind and tier in ``make test``, 20 under ``make test-all`` (``derandomize``: the same
graphs every run). ``dispatch_graphs`` (requests dealt to the region that frees up first, a
loop closed by a Feedback, three EagerMerges at most): 2 in ``make test``, 10 under
``make test-all``.
"""

from __future__ import annotations

import gc

import pytest
from hypothesis import HealthCheck, given, settings

from step_hw.config import HwConfig
from step_hw.cosim import validate
from step_hw.memory_model import MemoryModel
from step_lang import Sink, Source, Tile, interpret, numerics
from step_lang.errors import StepRaceError, StepTypeError
from tests.test_random_graphs import dispatch_graphs, graphs, memory_graphs

CONFIG = HwConfig()
HW_ELEM = Tile(CONFIG.elem_dtype, 1, 2)


def _elaborates(g) -> bool:
    from amaranth._unused import MustUse

    from step_hw.elaborate import ElaboratedGraph

    # Blocks built only to see whether the graph elaborates are never elaborated; silence
    # Amaranth's UnusedElaboratable for them (an error under pytest's filterwarnings) while they
    # are collected, as tests/test_hw_arbiter.py does per block.
    MustUse._MustUse__silence = True
    try:
        try:
            ElaboratedGraph(g, CONFIG)
            fits = True
        except StepTypeError:  # e.g. a Bufferize of a ragged (dynamic) shape
            fits = False
        gc.collect()
    finally:
        MustUse._MustUse__silence = False
    return fits


def _fits_hardware(case) -> bool:
    """At least two operators besides Sources and Sinks, and the graph elaborates."""
    g = case[0]
    return sum(not isinstance(n, (Source, Sink)) for n in g.nodes.values()) >= 2 and _elaborates(g)


def _race_free(case) -> bool:
    """The interpreter finds no memory race (a store back into the loaded tensor that the
    streams do not order after the reads: no reader's values are the reference then)."""
    g, memory, inputs = case
    try:
        interpret(g, memory, inputs=inputs)
    except StepRaceError:
        return False
    return True


HARDWARE_GRAPHS = graphs(elem=HW_ELEM, fns=numerics.functions(CONFIG)).filter(_fits_hardware)
DISPATCH_GRAPHS = dispatch_graphs(elem=HW_ELEM, fns=numerics.functions(CONFIG)).filter(
    _fits_hardware
)
MEMORY_GRAPHS = (
    memory_graphs(CONFIG.elem_dtype, numerics.functions(CONFIG))
    .filter(_fits_hardware)
    .filter(_race_free)
)
_SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}


def _check(g, memory=None, inputs=None, config=CONFIG, **tier) -> None:
    report = validate(g, memory, inputs=inputs, config=config, tag="random", quiet=True, **tier)
    kinds = sorted(n.kind for n in g.nodes.values())
    assert report.rtl_error is None, f"{kinds}\n{report}"
    assert report.mismatch is None, f"{kinds}\n{report}"
    assert report.ok and report.rtl_cycles > 0, f"{kinds}\n{report}"
    assert report.rtl_profile_cycles == report.rtl_cycles, f"{kinds}\n{report}"


# Where the memory graphs run: the cocotbext-axi tier; the fast tier with the HBM-like memory;
# the fast tier with the paper's memory (a beat every other cycle, 14 cycles of start-up, which
# puts every port on the rtl profile's cycle-by-cycle port model) and every memory operator on
# one AXI port.
MEMORY_SETTINGS = {
    "axi": {},
    "fast_hbm": {"tier": "fast", "memory_model": MemoryModel.hbm()},
    "fast_paper_one_port": {
        "tier": "fast",
        "memory_model": MemoryModel.paper(),
        "config": HwConfig(axi_ports=1),
    },
}


@settings(max_examples=3, **_SETTINGS)
@given(HARDWARE_GRAPHS)
def test_random_graphs_agree_on_the_rtl(case):
    _check(case[0], inputs=case[1])


@pytest.mark.slow
@settings(max_examples=20, **_SETTINGS)
@given(HARDWARE_GRAPHS)
def test_more_random_graphs_agree_on_the_rtl(case):
    _check(case[0], inputs=case[1])


@settings(max_examples=2, **_SETTINGS)
@given(DISPATCH_GRAPHS)
def test_random_dispatch_loops_agree_on_the_rtl(case):
    _check(case[0], inputs=case[1])


@pytest.mark.slow
@settings(max_examples=10, **_SETTINGS)
@given(DISPATCH_GRAPHS)
def test_more_random_dispatch_loops_agree_on_the_rtl(case):
    _check(case[0], inputs=case[1])


@pytest.mark.parametrize("setting", MEMORY_SETTINGS)
@settings(max_examples=3, **_SETTINGS)
@given(case=MEMORY_GRAPHS)
def test_random_graphs_with_memory_agree_on_the_rtl(setting, case):
    _check(*case, **MEMORY_SETTINGS[setting])


@pytest.mark.slow
@pytest.mark.parametrize("setting", MEMORY_SETTINGS)
@settings(max_examples=20, **_SETTINGS)
@given(case=MEMORY_GRAPHS)
def test_more_random_graphs_with_memory_agree_on_the_rtl(setting, case):
    _check(*case, **MEMORY_SETTINGS[setting])
