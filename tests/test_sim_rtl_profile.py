"""The simulator's ``rtl`` profile on hand-countable cases (``sim/profiles/rtl.py``).

The cycle numbers are those of the generated RTL (``step_hw.queue.Queue``, the MAC array, the
AXI load controller against cocotbext-axi's AxiRam), as measured in ``docs/validation.md``.

A run ends when the bench (``rtl_tests/cocotb_graph.py``) sees ``done``: a Sink's done token taken
in cycle *t* sets its "done seen" register at the edge that ends *t*, ``done`` (the AND of those
registers, the stores' ``done`` and ``running``: ``step_hw.elaborate``) is high in *t + 1*, and
the bench, which reads ``done`` after each edge with the value of the cycle that edge ends,
counts *t + 2* edges (``RtlProfile.sink_done``).

A Source's bench offers a token every cycle; the RTL holds its queues in reset in the ``start``
cycle 0 and keeps the Source's ``ready`` low there (``step_hw.elaborate``), so its first token
enters the queue in cycle 1, one per cycle after that. Every count below that has a Source was
checked against an Amaranth simulation of the elaborated graph with such a bench.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim import simulate
from sim.profiles import PROFILES, RtlProfile
from step_hw.config import HwConfig
from step_lang import (
    EagerMerge,
    Feedback,
    Graph,
    LinearOffChipLoad,
    Map,
    Sink,
    Source,
    StreamType,
    Tile,
    numerics,
)
from step_lang.types import DTYPES

INT16 = DTYPES["int16"]
FX = numerics.functions(HwConfig())


def _tiles(n: int) -> list[list[np.ndarray]]:
    """A ``[1, n]`` stream of 4x4 tiles: n data tokens, S1, done."""
    return [[np.full((4, 4), i, np.int16) for i in range(n)]]


def chain(depth: int | None, n: int) -> Graph:
    """Source -> queue -> Map (element-wise: latency 1, II 1) -> queue -> Sink."""
    g = Graph("chain")
    src = Source(g, StreamType(Tile(INT16, 4, 4), (1, n)), name="src").out
    y = Map(src, fn=FX.silu, name="silu").out
    if depth is not None:
        g.set_queue_depth(src, depth)
    Sink(y, name="sink")
    return g


def test_registered():
    assert PROFILES["rtl"] is RtlProfile
    assert RtlProfile().channel_depth == HwConfig().queue_depth


@pytest.mark.parametrize("n", [1, 5])
def test_queue_sustains_one_token_per_cycle_from_depth_3(n):
    # m = n data + S1 + done tokens, queued at 1 + i. The Map takes token i at 3 + i (queue
    # latency 2) and offers it at 4 + i; the sink takes it two cycles later, the done token
    # (i = m - 1) at m + 5, and the bench counts done at m + 7 (done-seen register, bench edge).
    m = n + 2
    r = simulate(chain(None, n), inputs={"src": _tiles(n)}, profile=RtlProfile())
    assert r.cycles == m + 7
    assert r.queue_high_water["src.out"] == 3


@pytest.mark.parametrize("n", [1, 5])
def test_queue_of_depth_1_moves_a_token_every_other_cycle(n):
    # A single register: latency 1, and a slot refills only the cycle after it was emptied, so
    # the Map takes token i at 2 + 2i; the last (done) leaves the Map at 2m + 1, the sink takes it
    # at 2m + 3 (its queue has depth 3) and the bench counts done at 2m + 5.
    m = n + 2
    r = simulate(chain(1, n), inputs={"src": _tiles(n)}, profile=RtlProfile())
    assert r.cycles == 2 * m + 5


@pytest.mark.parametrize(("lanes", "steps"), [(16, 4), (64, 1), (5, 13)])
def test_matmul_initiation_interval(lanes, steps):
    # 4x4 @ 4x4 = 64 products: ceil(64 / lanes) cycles per tile pair. Pair i is valid from
    # 3 + steps*i, taken in its last step and offered at 3 + steps*(i + 1); then S1 and done
    # take a cycle each, the sink takes done 2 cycles later and the bench counts it 2 after that.
    n = 3
    g = Graph("mm")
    t = StreamType(Tile(INT16, 4, 4), (1, n))
    a = Source(g, t, name="a").out
    b = Source(g, t, name="b").out
    Sink(Map(a, b, fn=FX.matmul_out("int16"), name="mm").out, name="sink")
    profile = RtlProfile(HwConfig(lanes=lanes))
    r = simulate(g, inputs={"a": _tiles(n), "b": _tiles(n)}, profile=profile)
    assert r.cycles == 3 + steps * n + 2 + 2 + 2


@pytest.mark.parametrize("n", [1, 5])
def test_feedback_is_a_wire(n):
    # The hardware aliases a Feedback's output to its input (step_hw.elaborate): the chain
    # Source -> Map -> Feedback -> Sink has one queue after the Map, as `chain` has, and takes
    # the same m + 7 cycles (a queue of its own on the Feedback's input would add 2).
    m = n + 2
    g = Graph("fb")
    t = StreamType(Tile(INT16, 4, 4), (1, n))
    fb = Feedback(g, t, name="fb")
    Sink(fb.out, name="sink")
    fb.bind(Map(Source(g, t, name="src").out, fn=FX.silu, name="silu").out)
    r = simulate(g, inputs={"src": _tiles(n)}, profile=RtlProfile())
    assert r.cycles == m + 7
    assert r.queue_curves["fb.out"].first_in == r.queue_curves["silu.out"].first_in == 4


def test_eager_merge_sends_the_selector_with_the_chunk():
    # EagerMerge (step_hw.router, latency 0) offers a chunk's selector and first token in the
    # same cycle. Five single-tile chunks queued at 1..5: the merge takes d0..d4 at 3..7, each
    # with its selector; the input's done (queued at 6) is taken at 8, both outputs' done tokens
    # leave at 9, the sinks take them at 11 and the bench counts done at 13. Measured on the
    # dynamic attention layer: the `merge_free` data and selector queues take every token in the
    # same cycle.
    g = Graph("merge")
    src = Source(g, StreamType(Tile(INT16, 4, 4), (5,)), name="src").out
    merge = EagerMerge([src], name="merge")
    Sink(merge.output("data"), name="data")
    Sink(merge.output("sel"), name="sel")
    tiles = [np.full((4, 4), i, np.int16) for i in range(5)]
    r = simulate(g, inputs={"src": tiles}, profile=RtlProfile())
    data, sel = r.queue_curves["merge.data"], r.queue_curves["merge.sel"]
    assert (data.first_in, data.last_in) == (sel.first_in, sel.last_in) == (3, 9)
    assert r.cycles == 13


def load(shape: tuple[int, int]) -> Graph:
    g = Graph("load")
    x = g.tensor("x", shape, "int16")
    Sink(LinearOffChipLoad(x, tile=(4, 4), name="load").out, name="sink")
    return g


def test_load_one_burst():
    # A 4x4 int16 tile spanning the tensor's width is one burst of four 64-bit beats: entry at
    # 2, AR at 5, R beats 7..10 (AxiRam answers 2 cycles after AR), the tile leaves 2 cycles
    # after its last beat (12), S2 at 13, done at 14; the sink takes done at 16 (AR, beats and
    # tile as on the co-simulated SwiGLU layer's `load_x`), `done` is high in 17 and the bench
    # counts 18.
    mem = {"x": np.arange(16, dtype=np.int16).reshape(4, 4)}
    r = simulate(load((4, 4)), mem, profile=RtlProfile())
    assert r.cycles == 18


def test_load_outstanding_bursts():
    # Tiles of a wider tensor are one 1-beat burst per row. Two bursts in flight: ARs at 5, 6,
    # 8, 9, ... (a slot is reused the cycle after its beat), beats at 7, 8, 10, 11, ...; tile 0
    # leaves at 13 and tile 1 at 19 (as measured on the SwiGLU layer's weight loads). With four
    # in flight the ARs follow one per cycle: beats 7..14, tiles at 12 and 16.
    mem = {"x": np.arange(32, dtype=np.int16).reshape(4, 8)}
    two = simulate(load((4, 8)), mem, profile=RtlProfile())
    four = simulate(load((4, 8)), mem, profile=RtlProfile(HwConfig(max_outstanding=4)))
    # tile 1, then S2 and done one per cycle; the sink takes done 2 cycles later, the bench
    # counts it 2 after that
    assert two.cycles == 19 + 2 + 2 + 2
    assert four.cycles == 16 + 2 + 2 + 2


def test_done_waits_for_the_last_sink():
    # `done` is the AND of every Sink's done-seen register (step_hw.elaborate): the run ends 2
    # cycles after the later Sink takes its done token. The loads (own AXI ports) are those of
    # the two tests above: `sa` takes done at 16, `sb` at 23; the bench counts done at 25.
    g = Graph("two")
    a, b = g.tensor("a", (4, 4), "int16"), g.tensor("b", (4, 8), "int16")
    Sink(LinearOffChipLoad(a, tile=(4, 4), name="la").out, name="sa")
    Sink(LinearOffChipLoad(b, tile=(4, 4), name="lb").out, name="sb")
    mem = {"a": np.zeros((4, 4), np.int16), "b": np.zeros((4, 8), np.int16)}
    r = simulate(g, mem, profile=RtlProfile())
    # each sink takes its done token 2 cycles (the queue) after it entered the sink's queue
    assert (r.queue_curves["la.out"].last_in + 2, r.queue_curves["lb.out"].last_in + 2) == (16, 23)
    assert r.cycles == 23 + RtlProfile().sink_done == 25


def test_load_counts_off_chip_bytes_per_tile():
    # Two 4x4 int16 tiles: 64 bytes read, as the paper profile (and the cost model) counts them.
    mem = {"x": np.arange(32, dtype=np.int16).reshape(4, 8)}
    r = simulate(load((4, 8)), mem, profile=RtlProfile())
    assert (r.offchip_read_bytes, r.offchip_write_bytes) == (64, 0)


@pytest.mark.parametrize(
    ("example", "schedule"), [("swiglu", "mn_mk"), ("moe", "dynamic"), ("attention", "dynamic")]
)
def test_off_chip_bytes_agree_with_the_paper_profile(example, schedule):
    from stepcli.sizing import hardware_case

    graph, (memory,) = hardware_case(example, schedule)
    rtl = simulate(graph, memory, profile=RtlProfile())
    paper = simulate(graph, memory)
    assert rtl.offchip_write_bytes > 0 and rtl.offchip_read_bytes > rtl.offchip_write_bytes
    assert (rtl.offchip_read_bytes, rtl.offchip_write_bytes) == (
        paper.offchip_read_bytes,
        paper.offchip_write_bytes,
    )
