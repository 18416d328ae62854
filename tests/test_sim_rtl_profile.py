"""The simulator's ``rtl`` profile on hand-countable cases (``sim/profiles/rtl/``).

The cycle numbers are those of the generated RTL (``step_hw.queue.Queue``, the MAC array, the
AXI load controller against cocotbext-axi's AxiRam), as measured in ``docs/validation.md``.

A run ends when the bench (``step_hw/cosim/bench.py``) sees ``done``: a Sink's done token taken
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

import random

import numpy as np
import pytest

from sim import simulate
from sim.profiles import PROFILES, RtlProfile
from step_hw.config import HwConfig
from step_lang import (
    Accum,
    Bufferize,
    EagerMerge,
    Expand,
    Feedback,
    FlatMap,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Promote,
    RandomOffChipLoad,
    RepeatStatic,
    Sink,
    Source,
    Streamify,
    StreamType,
    Tile,
    functions,
    numerics,
)
from step_lang import interpret as interpret_graph
from step_lang.dims import ragged
from step_lang.errors import SimDeadlock
from step_lang.types import DTYPES
from tests.oracle import nest_leaves

INT16 = DTYPES["int16"]
INT32 = DTYPES["int32"]
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


# -- shared AXI ports (HwConfig.axi_ports) ------------------------------------------------------
#
# Loads on one read port are an AxiReadArbiter (step_hw/memory/arbiter.py: round-robin on AR from
# the manager granted last, combinational, a request not taken stays granted) in front of one
# cocotbext-axi AxiRamRead: R beats in AR order, one per cycle for the port, the first 2 cycles
# after its AR; the RAM's AR queue holds 2 requests and its process takes one burst at a time,
# so AR j is taken in cycle c only if the RAM took burst j - 2 by c - 2 (it takes a burst once the
# previous one's last beat is in its R queue of 2, i.e. two cycles before that beat's
# predecessor is offered). Stores on one write port likewise: W in AW order, one beat per cycle.
# The counts below were checked against Verilator co-simulations (docs/validation.md).


def loads(n: int) -> Graph:
    """``n`` loads of one 4x4 int16 tile (one 4-beat burst) each, into sinks."""
    g = Graph("loads")
    for i in range(n):
        t = g.tensor(f"t{i}", (4, 4), "int16")
        Sink(LinearOffChipLoad(t, tile=(4, 4), name=f"l{i}").out, name=f"s{i}")
    return g


def test_two_loads_share_a_read_port():
    # Own ports: both as test_load_one_burst (AR 5, beats 7..10, done taken at 16, 18 cycles).
    # One port: both ARs are valid at 5; l0 is granted first (AR 5, beats 7..10), l1 the cycle
    # after (AR 6); its beats wait for the R channel: 11..14. l1's tile leaves at 16, S2 at 17,
    # done at 18; its sink takes done at 20 and the bench counts 22.
    mem = {"t0": np.zeros((4, 4), np.int16), "t1": np.zeros((4, 4), np.int16)}
    own = simulate(loads(2), mem, profile=RtlProfile())
    profile = RtlProfile(HwConfig(axi_ports=1))
    shared = simulate(loads(2), mem, profile=profile)
    assert own.cycles == 18
    assert profile.shared_ports() == {"m_axi_rd0": ["l0", "l1"]}
    assert profile.axi_trace() == {"m_axi_rd0.ar": [5, 6], "m_axi_rd0.r": list(range(7, 15))}
    assert [shared.queue_curves[f"l{i}.out"].last_in for i in range(2)] == [14, 18]
    assert shared.cycles == 22


def test_the_ram_takes_two_waiting_reads():
    # Four loads, ARs valid at 5: granted in turn at 5, 6, 7; the fourth waits for room in the
    # RAM's AR queue. The RAM took burst 0 at 5 and burst 1 at 7, once burst 0's last beat (10)
    # was in its R queue, two cycles before beat 8 was offered: AR 3 in 9 = 7 + 2 (as the SwiGLU
    # layer's load_down on one port). Beats: 7..10, 11..14, 15..18, 19..22; the last tile leaves
    # at 24, its done token at 26, the bench counts 30.
    mem = {f"t{i}": np.zeros((4, 4), np.int16) for i in range(4)}
    profile = RtlProfile(HwConfig(axi_ports=1))
    r = simulate(loads(4), mem, profile=profile)
    assert profile.axi_trace() == {"m_axi_rd0.ar": [5, 6, 7, 9], "m_axi_rd0.r": list(range(7, 23))}
    assert [r.queue_curves[f"l{i}.out"].last_in for i in range(4)] == [14, 18, 22, 26]
    assert r.cycles == 30


def fanout() -> Graph:
    """One load of two 4x4 tiles (one 4-beat burst each), broadcast to four stores."""
    g = Graph("fanout")
    x = LinearOffChipLoad(g.tensor("a", (8, 4), "int16"), tile=(4, 4), name="la").out
    for i in range(4):
        LinearOffChipStore(x, g.tensor(f"o{i}", (8, 4), "int16"), name=f"s{i}")
    return g


def test_stores_share_a_write_port():
    # Measured on Verilator (58 cycles, every AW, W and B handshake as below). The load's
    # tiles leave at 12 and 16; the Broadcast passes each on at once and all four stores take
    # tile 0 at 16 and tile 1 at 20, so their AWs are valid from 19 and 23. AW: s0, s1, s2 at
    # 19, 20, 21; s3 waits for the RAM's AW queue: it took burst 1 at 24, after burst 0's last
    # W beat (W 21..24), so 26. W beats follow in AW order, 4 per burst, from 21 without a gap;
    # B 2 cycles after each burst's last beat. Tile 1's AWs wait for the RAM the same way (30,
    # 34, 38, 42: 2 cycles after the RAM took the burst two before). The last B (54) plus the
    # store's 4 cycles to `done`: 58.
    mem = {"a": np.arange(32, dtype=np.int16).reshape(8, 4)}
    profile = RtlProfile(HwConfig(axi_ports=1))
    r = simulate(fanout(), mem, profile=profile)
    assert profile.shared_ports() == {"m_axi_wr0": ["s0", "s1", "s2", "s3"]}
    trace = profile.axi_trace()
    assert trace["m_axi_wr0.aw"] == [19, 20, 21, 26, 30, 34, 38, 42]
    assert trace["m_axi_wr0.w"] == list(range(21, 53))
    assert trace["m_axi_wr0.b"] == [26, 30, 34, 38, 42, 46, 50, 54]
    assert all(np.array_equal(r.memory[f"o{i}"], mem["a"]) for i in range(4))
    assert r.cycles == 58
    assert simulate(fanout(), mem, profile=RtlProfile()).cycles == 34  # four write ports


@pytest.mark.parametrize(("ports", "cycles"), [(None, 66), (1, 106), (2, 80)])
def test_swiglu_on_shared_ports(ports, cycles):
    # The hardware-size SwiGLU layer against Verilator (docs/validation.md): 66 cycles with a
    # port per operator, 106 with its four loads on one read port, 80 on two; every AR and R
    # handshake on the shared ports as in the co-simulation.
    from examples import swiglu

    for seed in (1, 3):
        mem = swiglu.inputs(swiglu.HW_CONFIG, seed=seed)
        r = simulate(swiglu.hardware(), mem, profile=RtlProfile(HwConfig(axi_ports=ports)))
        assert r.cycles == cycles


def test_a_load_whose_consumer_stalls_does_not_block_a_shared_port():
    # The validation sweep's SwiGLU with 1x1 tiles on one read port: load_down reads ahead until
    # its output and tile queues are full, while the down-projection waits for gate and up,
    # whose loads share the port. A load requests a tile's last burst only once its tile queue
    # will have room (step_hw.memory.load.TileReader), so load_down stops requesting instead of
    # holding R with a beat it cannot take, and the loads behind it go on (before that rule: a
    # deadlock, on the RTL as here). rtl_tests/test_validate_verilator.py checks this design's
    # cycles and every AR and R handshake of the port against Verilator.
    from examples import swiglu

    size = swiglu.SwiGLUConfig(batch=16, hidden=4, intermediate=32, dtype="int16")
    hw = HwConfig(tile_rows=16, tile_cols=4)
    mem = swiglu.inputs(size, seed=0)
    want = interpret_graph(swiglu.hardware(1, 1, hw, size), mem).memory["out"]
    profile = RtlProfile(HwConfig(tile_rows=16, tile_cols=4, axi_ports=1))
    r = simulate(swiglu.hardware(1, 1, hw, size), mem, profile=profile)
    assert np.array_equal(r.memory["out"], want)
    assert r.cycles == 5153  # 3105 with a port per load
    # load_down's last bursts wait for its consumer: it has at most three tiles requested and
    # not yet taken (its tile queue's depth); the R channel never waits
    trace = profile.axi_trace()
    assert len(trace["m_axi_rd0.r"]) == len(set(trace["m_axi_rd0.r"]))


def test_a_load_may_wait_on_an_idle_port():
    # lb's reference comes out of two 64-cycle MAC-array steps (lanes=1): the shared port is idle
    # from cycle 11 (la's beats are 7..10) to 138 and, while lb waits for its tile, nothing else
    # is scheduled. That is not a deadlock: lb's AR (139: the reference enters its queue at 133,
    # is seen at 135, the walk starts at 136) and beats follow, as on a port of its own.
    g = Graph("late_ref")
    t = StreamType(Tile(INT16, 4, 4), (1, 1))
    a, b, c = (Source(g, t, name=n).out for n in "abc")
    mm = Map(a, b, fn=FX.matmul_out("int16"), name="mm").out
    ref = Map(mm, c, fn=FX.matmul_out("int16"), name="mm2").out
    x, y = g.tensor("x", (4, 4), "int16"), g.tensor("y", (4, 4), "int16")
    Sink(LinearOffChipLoad(x, tile=(4, 4), name="la").out, name="sa")
    Sink(LinearOffChipLoad(y, tile=(4, 4), ref=ref, name="lb").out, name="sb")
    inputs = {n: [[np.ones((4, 4), np.int16)]] for n in "abc"}
    mem = {"x": np.zeros((4, 4), np.int16), "y": np.zeros((4, 4), np.int16)}
    own = simulate(g, mem, inputs=inputs, profile=RtlProfile(HwConfig(lanes=1)))
    profile = RtlProfile(HwConfig(lanes=1, axi_ports=1))
    shared = simulate(g, mem, inputs=inputs, profile=profile)
    assert profile.axi_trace()["m_axi_rd0.ar"] == [5, 139]
    assert shared.cycles == own.cycles


@pytest.mark.parametrize(
    ("example", "schedule"),
    [("swiglu", "mn_mk"), ("moe", "static"), ("moe", "dynamic"), ("attention", "dynamic")],
)
@pytest.mark.parametrize("ports", [1, 2, 3])
def test_ports_are_the_elaborators(example, schedule, ports):
    # The profile takes the port assignment from step_hw.elaborate.axi_managers, as the
    # elaborator does: the same operators on the same ports, in arbiter (ID prefix) order.
    from step_hw.elaborate import ElaboratedGraph
    from stepcli.sizing import hardware_case

    graph, (memory,) = hardware_case(example, schedule)
    config = HwConfig(axi_ports=ports)
    top = ElaboratedGraph(graph, config)
    for block in [top, *top.blocks.values(), *top._arbiters.values()]:
        block._MustUse__silence = True  # built to inspect, never elaborated
    profile = RtlProfile(config)
    simulate(graph, memory, profile=profile)
    shared = {port: names for port, names in top.axi_managers.items() if len(names) > 1}
    assert shared and profile.shared_ports() == shared


@pytest.mark.parametrize(
    ("example", "schedule"),
    [("swiglu", "mn_mk"), ("moe", "static"), ("moe", "time-mux"), ("attention", "dynamic")],
)
def test_port_model_of_one_operator_is_the_per_operator_model(example, schedule, monkeypatch):
    # The cycle-by-cycle port model with one manager per port (loads with and without
    # references, random loads and stores) gives every stream the per-operator model's times.
    from stepcli.sizing import hardware_case

    graph, (memory,) = hardware_case(example, schedule)
    own = simulate(graph, memory, profile=RtlProfile())
    monkeypatch.setattr(RtlProfile, "_port_model_from", 1)
    graph, (memory,) = hardware_case(example, schedule)
    profile = RtlProfile()
    modelled = simulate(graph, memory, profile=profile)
    assert len(profile.shared_ports()) > 3
    assert modelled.cycles == own.cycles
    assert modelled.queue_curves == own.queue_curves


def test_a_profile_runs_twice():
    mem = {f"t{i}": np.zeros((4, 4), np.int16) for i in range(4)}
    profile = RtlProfile(HwConfig(axi_ports=1))
    graph = loads(4)
    assert simulate(graph, mem, profile=profile).cycles == 30
    assert simulate(graph, mem, profile=profile).cycles == 30
    assert profile.axi_trace()["m_axi_rd0.ar"] == [5, 6, 7, 9]


@pytest.mark.parametrize(
    ("example", "schedule"), [("swiglu", "mn_mk"), ("moe", "static"), ("attention", "dynamic")]
)
def test_shared_port_waits_skip_the_cycles_in_which_nothing_can_happen(
    example, schedule, monkeypatch
):
    """A load that waits for its tile on a shared port sleeps until the tile's last beat can
    have come (``ReadPort.earliest_last_beat``), and a port skips the cycles without a possible
    handshake (``Port._next``): every stream, node and handshake as when the loads look, and
    the port steps, every cycle, in a fraction of the engine events (HBM-like memory, where
    a read takes 64 cycles)."""
    import math

    from sim.profiles.rtl import loads, ports
    from step_hw.memory_model import MemoryModel
    from stepcli.sizing import hardware_case

    def run():
        graph, (memory,) = hardware_case(example, schedule)
        profile = RtlProfile.for_memory(MemoryModel.hbm(), HwConfig(axi_ports=1))
        return simulate(graph, memory, profile=profile), profile

    skipping, profile = run()
    trace = profile.axi_trace()
    assert profile.shared_ports()
    monkeypatch.setattr(loads._Load, "_tile_due", lambda self: -math.inf)
    for port in (ports.Port, ports.ReadPort):
        monkeypatch.setattr(port, "_next", lambda self, c: c)
    stepping, profile = run()
    assert skipping.cycles == stepping.cycles
    assert skipping.queue_curves == stepping.queue_curves
    assert skipping.nodes == stepping.nodes
    assert trace == profile.axi_trace()
    assert skipping.events * 2 < stepping.events


# -- on-chip buffers: Bufferize and Streamify (step_hw/memory/buffer.py) -------------------------
#
# Every count below is the generated RTL's, taken from an Amaranth simulation of the elaborated
# graph (`amaranth_pushes`, run by test_buffers_match_an_amaranth_simulation on these graphs and
# more). `sends[s]` lists the cycles tokens entered the queue of stream s (its input handshakes).
# An element is `words` memory words (HwConfig.mem_port_elems tile elements each): a 4x4 tile
# is 1 word with the default 16-element port, 4 with a 4-element one.


def buffered(shape, rank, *, consumer_lanes=None, ref=None, **read) -> tuple[Graph, dict]:
    """Source (4x4 int16 tiles) -> Bufferize(rank) -> Streamify(**read) -> Sink; with
    ``consumer_lanes`` a MAC array (matmul with a second Source) reads the Streamify first."""
    g = Graph("buffers")
    src = Source(g, StreamType(Tile(INT16, 4, 4), shape), name="src").out
    count = iter(range(1, 1 << 15))

    inputs = {"src": nest_leaves(shape, lambda: np.full((4, 4), next(count), np.int16))}
    if ref is not None:
        ref_data, ref_shape = ref
        read["ref"] = Source(g, StreamType(Tile(DTYPES["int32"], 1, 1), ref_shape), name="r").out
        zero = np.zeros((1, 1), np.int32)
        inputs["r"] = [[zero] * n for n in ref_data]
    y = Streamify(Bufferize(src, rank, name="bz").out, name="sf", **read).out
    if consumer_lanes is not None:
        w = Source(g, StreamType(Tile(INT16, 4, 4), y.type.shape), name="w").out
        inputs["w"] = nest_leaves(tuple(y.type.shape), lambda: np.ones((4, 4), np.int16))
        y = Map(y, w, fn=FX.matmul_out("int16"), name="mm").out
    Sink(y, name="sink")
    return g, inputs


def sends(graph: Graph, inputs: dict, config: HwConfig) -> tuple[dict[str, list[int]], int]:
    r = simulate(graph, inputs=inputs, profile=RtlProfile(config), trace=True)
    return {s: [int(t) for t in ts] for s, ts in r.sends.items()}, r.cycles


@pytest.mark.parametrize("words", [1, 4])
def test_streamify_reads_a_word_per_cycle(words):
    # Two buffers of 3 elements, each read twice: src d d d S1 d d d S2 D enters its queue at 1..9
    # and is visible 2 cycles later.
    #
    # words = 1. Bufferize takes an element per cycle (3, 4, 5), the closing S1 at 6 and offers
    # the reference at 7; buffer 1 follows (7..9, S2 at 10: reference at 11, then S1 at 12, the
    # stop after it, a cycle after the reference's take); done waits for the empty output
    # register (13) and leaves at 14. Streamify takes reference 0 (visible 9) at 9 and walks
    # from 10, one entry per cycle (10..15, the closing S2 held); an entry enters its output
    # queue a cycle after its read and is offered 2 later: the first element at 13, 3 + words
    # cycles after reference 0 was offered (contract.streamify_first_element). At 16 reference
    # 1 is there: the held S2 is an entry of its own (16), the take costs 17, the walk 18..23;
    # S1 of the buffer stream becomes S3 (24), done 25. Out of the queue one token per cycle,
    # an element and its stop two beats: 13..29.
    #
    # words = 4. Bufferize writes each element in 4 cycles (takes at 6, 10, 14; the source's
    # queue of 3 fills and refills one per take), S1 at 15: reference at 16. Streamify: reference
    # 0 visible at 18, taken at 18, elements read in 19..22 (commit 22, offered 25), 23..26 (29),
    # 27..30 (33, its S1 at 34), ...; the 4 read cycles per element are the bottleneck.
    config = HwConfig(mem_port_elems=16 // words)
    got, cycles = sends(*buffered((1, 2, 3), 1, repeat=(2,)), config)
    if words == 1:
        assert got == {
            "src.out": list(range(1, 10)),
            "bz.out": [7, 11, 12, 14],
            "sf.out": list(range(13, 30)),
        }
        assert cycles == 33  # the sink takes done at 29 + 2, the bench counts 2 more
    else:
        assert got == {
            "src.out": [1, 2, 3, 7, 11, 15, 16, 20, 24],
            "bz.out": [16, 29, 30, 32],
            "sf.out": [25, 29, 33, 34, 37, 41, 45, 46, 51, 55, 59, 60, 63, 67, 71, 72, 73],
        }
        assert cycles == 77


def test_bufferize_waits_for_a_released_slot():
    # Four buffers of 2 elements, each read 3 times (6 entries per buffer). Buffers 0 and 1 fill
    # at once (references at 6, 9). Buffer 2's first element waits until both slots are free
    # again: Streamify (reference 0 taken at 8, entries 9..14) releases slot 0 when it takes
    # the walk's last entry (14), and Bufferize writes the cycle after (BUFFER_RELEASE): elements
    # taken at 15 and 16 (the source's queue refills at 16, 17, 18), S1 at 17, reference 2 at 18.
    # Buffer 3 waits for slot 1's release: the held S2 (15), the take of reference 1 (16), the
    # walk 17..22; elements at 23, 24, S2 at 25: reference 3 at 26, its S1 at 27, done at 29.
    # Streamify keeps its one token per cycle throughout (12..48).
    got, cycles = sends(*buffered((1, 4, 2), 1, repeat=(3,)), HwConfig())
    assert got == {
        "src.out": [*range(1, 10), 16, 17, 18, 24],
        "bz.out": [6, 9, 18, 26, 27, 29],
        "sf.out": list(range(12, 49)),
    }
    assert cycles == 52


def test_streamify_affine_and_referenced_reads():
    # Affine: two 2x2 buffers read transposed (stride (1, 2)). The buffer stream has rank 0, so
    # each walk's closing stop leaves with its last element (eager). References at 9 and 15, done
    # at 17 (the output register held reference 1 until 15). Reference 0 is taken at 11, entries
    # 12..15 (offered 15..20: d d S1 d d S2); reference 1 (visible 17) is taken at 17, entries
    # 18..21 (21..26); the done entry at 22 leaves after them, at 27.
    got, cycles = sends(*buffered((2, 2, 2), 2, out_shape=(2, 2), stride=(1, 2)), HwConfig())
    assert got == {
        "src.out": list(range(1, 14)),
        "bz.out": [9, 15, 17],
        "sf.out": list(range(15, 28)),
    }
    assert cycles == 31
    # Referenced: one buffer of 2 elements, read once per element of r (r r r S1 D, c = 1).
    # Reference 0 (visible 8) is taken at 8; each r element is taken the cycle before its walk
    # (9, 13, 17), whose closing S1 is held and written as an entry of its own when the next
    # element comes (12, 16); r's S1 becomes S2 (20), done pairs both streams' done tokens (21).
    # r's queue of 3 refills the cycle after each take: S1 at 10, done at 14.
    got, cycles = sends(*buffered((1, 2), 1, ref=([3], (1, ragged("n")))), HwConfig())
    assert got == {
        "src.out": [1, 2, 3, 4],
        "bz.out": [6, 8],
        "r.out": [1, 2, 3, 10, 14],
        "sf.out": [13, 14, 15, 17, 18, 19, 21, 22, 23, 24],
    }
    assert cycles == 28


def test_streamify_output_back_pressure_delays_the_release():
    # test_bufferize_waits_for_a_released_slot behind a MAC array of 8 lanes (8 cycles per 4x4
    # tile pair): Streamify's output queue (STREAMIFY_QUEUE_DEPTH = 5) is credit-managed, so an
    # entry commits only once the entry 5 before it has left. Its beats: entry 0 at 12, entry
    # 1 (d, S1) at 13, 14, then as the MAC array takes them: 22, (30, 31), 39, 47, the held S2
    # at 48, 56, (64, 65), ... Entries 0..5 commit at 9..14 (release of slot 0 at 14, as without
    # back-pressure); the S2 entry at 15 (entry 1 left at 14), reference 1 is taken at 16, and
    # buffer 1's entries wait for credit: 23, 32, 40, 48, 49, 57 (entries 2..7 left at 22, 31,
    # 39, 47, 48, 56). Slot 1 is released at 57, so buffer 3's first element is written at 58
    # (the source's done token enters the queue it frees at 59); reference 3 at 61, its S1 at
    # 62. The buffer stream's queue (3) then holds reference 2, reference 3 and S1 until
    # Streamify takes reference 2 after the next held S2 (entry 13, credit at 66): at 67, so
    # Bufferize's done enters it at 68.
    got, cycles = sends(*buffered((1, 4, 2), 1, repeat=(3,), consumer_lanes=8), HwConfig(lanes=8))
    assert got["src.out"] == [*range(1, 10), 16, 17, 18, 59]
    assert got["bz.out"] == [6, 9, 18, 61, 62, 68]
    assert got["sf.out"][:13] == [12, 13, 14, 22, 30, 31, 39, 47, 48, 56, 64, 65, 73]
    assert cycles == 223


def _heap_scan(engine, waiting: set[int]) -> bool:
    """What ``Engine.only_waiting`` answers, by its definition: every event in the heap that is
    still live (its process not done, its epoch the process's) wakes a process in ``waiting``,
    and no memory event is pending."""
    for _, _, idx, epoch in engine.heap:
        if idx < 0:
            return False
        proc = engine.procs[idx]
        if not proc.done and proc.epoch == epoch and idx not in waiting:
            return False
    return True


def _referenced(buffers: int, reads: int, *, lanes: int | None = None, reconvergent=False):
    """Source -> Bufferize (``buffers`` buffers of two 4x4 tiles) -> Streamify reading each
    buffer ``reads`` times by a reference stream -> Sink; with ``lanes`` a MAC array of that
    many lanes reads the Streamify, with ``reconvergent`` the reconvergent paths of
    ``tests/test_sim_timing.py`` over a whole buffer's reads (a deadlock at these depths: the
    sum needs all of them while the direct path holds three)."""
    g = Graph("referenced")
    src = Source(g, StreamType(Tile(INT16, 4, 4), (1, buffers, 2)), name="src").out
    ref = Source(g, StreamType(Tile(INT32, 1, 1), (1, buffers, ragged("n"))), name="r").out
    y = Streamify(Bufferize(src, 1, name="bz").out, ref=ref, name="sf").out
    one, zero = np.ones((4, 4), np.int16), np.zeros((1, 1), np.int32)
    inputs = {
        "src": [[[np.full((4, 4), b, np.int16)] * 2 for b in range(buffers)]],
        "r": [[[zero] * reads for _ in range(buffers)]],
    }
    if lanes is not None:
        w = Source(g, StreamType(Tile(INT16, 4, 4), y.type.shape), name="w").out
        inputs["w"] = [[[[one] * 2 for _ in range(reads)] for _ in range(buffers)]]
        y = Map(y, w, fn=FX.matmul_out("int16"), name="mm").out
    if reconvergent:
        total = Accum(y, fn=FX.accum_add, rank=2, name="total").out
        lift = Promote(Promote(total, 0, name="lift").out, 0, name="lift2").out
        spread = Expand(lift, y, 2, name="spread").out
        y = Map(y, spread, fn=FX.sub, name="center").out
    Sink(y, name="sink")
    return g, inputs


def test_waiting_nodes_see_the_heap_the_engine_keeps(monkeypatch):
    """A Bufferize whose Streamify reads by a reference stream waits a cycle at a time for a
    release (its reader learns from a stream the Bufferize cannot watch) and asks the engine
    whether only waiting nodes are left (``Engine.only_waiting``, kept up to date as events
    come and go): its answer is the scan of the heap, on a long wait that ends (behind a
    1-lane MAC array) and on a deadlock that only such a waiting node can find."""
    from sim.engine import Engine

    answers = []
    kept = Engine.only_waiting

    def checked(engine, waiting):
        got = kept(engine, waiting)
        assert got == _heap_scan(engine, waiting), f"cycle {engine.now}"
        answers.append(got)
        return got

    monkeypatch.setattr(Engine, "only_waiting", checked)
    graph, inputs = _referenced(6, 3, lanes=1)
    assert simulate(graph, inputs=inputs, profile=RtlProfile(HwConfig(lanes=1))).cycles == 2342
    assert answers.count(False) > 100 and True not in answers
    graph, inputs = _referenced(4, 4, reconvergent=True)
    graph.tensor("t", (4, 8), "int16")  # a load beside it, done long before: memory events
    Sink(LinearOffChipLoad(graph.tensors["t"], tile=(4, 4), name="ld").out, name="s")
    with pytest.raises(SimDeadlock) as err:
        simulate(graph, {"t": np.zeros((4, 8), np.int16)}, inputs=inputs, profile=RtlProfile())
    assert answers.count(True) == 1
    assert err.value.blocked["bz"] == "the release of a buffer slot by its Streamify"
    assert err.value.blocked["sf"] == "room on sf.out"
    # A node that waits a cycle at a time names no queue it waits on: only the real
    # reconvergence is a likely cause, not Bufferize's last take from its input queue.
    assert [c.queue for c in err.value.causes] == ["sf_out_bc.out2"]


def test_buffer_waits_sleep_until_something_changes():
    """Streamify waiting for room (or for a take to become known) and Bufferize waiting for a
    release sleep until the cycle something they know of happens or a token moves, not a
    cycle at a time: behind a 1-lane MAC array (2,341 cycles, the same as when they looked
    every cycle) the run takes 477 engine events instead of 3,457."""
    graph, inputs = buffered((1, 6, 2), 1, repeat=(3,), consumer_lanes=1)
    r = simulate(graph, inputs=inputs, profile=RtlProfile(HwConfig(lanes=1)))
    assert r.cycles == 2341
    assert r.events < 600


def test_an_event_pushed_for_the_next_epoch_counts_once_the_process_reaches_it():
    """A node may register a waiter for the command it yields next (``epoch + 1``): should it be
    woken before it yields, the event is not live yet, and it is once the node's epoch gets
    there; an event of an epoch already passed never is."""
    from sim.engine import Engine

    graph, inputs = buffered((1, 1, 2), 1)
    engine = Engine(graph, RtlProfile(HwConfig()), None, functional=False, inputs=inputs)
    proc = engine.procs[0]
    engine.push(5.0, proc, proc.epoch + 1)
    assert engine.only_waiting(set()) and _heap_scan(engine, set())  # not live yet
    engine.push(6.0, proc, proc.epoch - 1)
    engine._next_epoch(proc)
    assert not engine.only_waiting(set()) and not _heap_scan(engine, set())
    assert engine.only_waiting({proc.idx}) and _heap_scan(engine, {proc.idx})
    engine._next_epoch(proc)
    assert engine.only_waiting(set()) and _heap_scan(engine, set())


def amaranth_pushes(
    graph: Graph,
    inputs: dict,
    config: HwConfig,
    tensors: dict | None = None,
    sink_payloads: dict | None = None,
    errors: list | None = None,
) -> tuple[dict, int]:
    """An Amaranth simulation of the elaborated graph, its Sources offering a token every cycle
    (from the cycle after ``start``) and its Sinks always ready, as the co-simulation bench does:
    the cycles every graph queue takes a token, keyed by stream name as ``SimResult.sends``, and
    the bench's cycle count (the first cycle ``done`` is high, plus one). ``tensors`` (off-chip
    tensors by name) puts a memory with ``MemoryModel.axi_ram()``'s timing on the graph's AXI
    ports, loaded with them. The simulation runs for at most twice the rtl profile's count (at
    least 2,000 cycles): the largest random buffers take longer than a fixed bound.
    ``sink_payloads`` (a dict) receives the payload of every token a Sink's queue takes, as an
    integer, by stream name; ``errors`` (a list) the cycles in which the design's ``error`` flag
    is high."""
    from amaranth.hdl import Value
    from amaranth.sim import Simulator

    import step_hw.elaborate as elaborate
    from step_lang.interpret import check_inputs, source_tokens
    from step_lang.ops import Sink as SinkOp
    from step_lang.ops import Source as SourceOp

    queues = []

    class Recorded(elaborate.Queue):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            queues.append(self)

    top = elaborate.ElaboratedGraph(graph, config)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(elaborate, "Queue", Recorded)
        sim = Simulator(top)  # elaborates: one queue per (non-Feedback) input, in this order
    g = top.graph
    names = [s.name for n in g.nodes.values() if not n.is_feedback for s in n.inputs]
    consumers = [n for n in g.nodes.values() if not n.is_feedback for _ in n.inputs]
    tokens = check_inputs(g, inputs)
    srcs = [
        (getattr(top, f"src_{n.name}"), top._formats[n.name], source_tokens(n, tokens))
        for n in g.nodes.values()
        if isinstance(n, SourceOp)
    ]
    sinks = [getattr(top, f"snk_{n.name}") for n in g.nodes.values() if isinstance(n, SinkOp)]
    pushes: dict[str, list[int]] = {name: [] for name in names}
    end = []
    expected = simulate(graph, tensors, inputs=inputs, profile=RtlProfile(config)).cycles
    limit = max(2000, 2 * expected)

    async def bench(ctx):
        ctx.set(top.start, 1)
        for port in sinks:
            ctx.set(port.ready, 1)
        signals = [x for q in queues for x in (q.i.valid, q.i.ready)]
        signals += [port.ready for port, _, _ in srcs] + [top.error, top.done]
        into_sinks = [k for k, c in enumerate(consumers) if isinstance(c, SinkOp)]
        signals += [Value.cast(queues[k].i.payload) for k in into_sinks]
        at = [0] * len(srcs)
        for cycle in range(limit):
            for k, (port, fmt, toks) in enumerate(srcs):
                ctx.set(port.valid, at[k] < len(toks))
                if at[k] < len(toks):
                    ctx.set(Value.cast(port.payload), fmt.pack(toks[at[k]]))
            values = (await ctx.tick().sample(*signals))[2:]
            payloads = values[len(values) - len(into_sinks) :]
            error, done = values[len(values) - len(into_sinks) - 2 : len(values) - len(into_sinks)]
            if errors is not None and error:
                errors.append(cycle)
            ctx.set(top.start, 0)
            for q, name in enumerate(names):
                if values[2 * q] and values[2 * q + 1]:
                    pushes[name].append(cycle)
            if sink_payloads is not None:
                for k, payload in zip(into_sinks, payloads, strict=True):
                    if values[2 * k] and values[2 * k + 1]:
                        sink_payloads.setdefault(names[k], []).append(int(payload))
            for k in range(len(srcs)):
                at[k] += bool(values[2 * len(queues) + k])
            if done:
                end.append(cycle + 1)
                return

    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    if tensors is None:
        sim.run()
    else:
        from test_hw_memory import AxiModel, memory_with

        from step_hw.memory_model import MemoryModel

        ram = MemoryModel.axi_ram()
        assert ram.latency == ram.write_response == 2  # the AxiModel answers latency + 1 after
        image = memory_with({top.memory_map[n]["addr"]: a for n, a in tensors.items()}, 1 << 16)
        model = AxiModel(image, config.axi_data_width // 8, "always", random.Random(0), latency=1)
        for port in top.axi_managers:
            axi = getattr(top, port)
            sim.add_testbench(model.reader(axi) if axi.signature.read else model.writer(axi))
        sim.run_until(limit * 1e-6)  # the memory's testbenches never return
    assert len(queues) == len(names) and end, f"the graph did not finish in {limit} cycles"
    return pushes, end[0]


W4 = HwConfig(mem_port_elems=4)


@pytest.mark.parametrize(
    ("shape", "rank", "read", "config"),
    [
        ((1, 2, 3), 1, {"repeat": (2,)}, HwConfig()),
        ((1, 2, 3), 1, {"repeat": (2,)}, W4),
        ((1, 4, 2), 1, {"repeat": (3,)}, HwConfig()),
        ((2, 2, 2), 2, {"out_shape": (2, 2), "stride": (1, 2)}, HwConfig()),
        ((2, 4), 1, {"out_shape": (2, 3), "stride": (0, 1), "base": 1}, W4),
        ((1, 2), 1, {"ref": ([3], (1, ragged("n")))}, HwConfig()),
        ((3, 2), 1, {"ref": ([1, 0, 2], (3, ragged("n")))}, HwConfig(mem_port_elems=8)),
        # the reads of a hardware-tiled matmul operand (step_lang.hier_tiling)
        ((1, 2, 2, 2, 2), 2, {"out_shape": (2, 2, 2), "stride": (0, 1, 2)}, HwConfig()),
        ((1, 4, 2), 1, {"repeat": (3,), "consumer_lanes": 8}, HwConfig(lanes=8)),
        ((1, 2, 2, 2, 2), 2, {"out_shape": (2, 2, 2), "stride": (0, 1, 2), "consumer_lanes": 16},
         HwConfig(mem_port_elems=8)),
    ],
)  # fmt: skip
def test_buffers_match_an_amaranth_simulation(shape, rank, read, config):
    graph, inputs = buffered(shape, rank, **read)
    want, cycles = amaranth_pushes(graph, inputs, config)
    assert sends(graph, inputs, config) == (want, cycles)


def test_buffer_contract():
    from step_hw import contract
    from step_hw.memory.buffer import Streamify as StreamifyBlock

    assert [contract.streamify_first_element(w) for w in (1, 4)] == [4, 7]  # 3 + words
    assert StreamifyBlock.QUEUE_DEPTH == contract.STREAMIFY_QUEUE_DEPTH == 5
    fmt = contract.TokenFormat.for_elem(Tile(INT16, 4, 4), W4)
    assert contract.buffer_words(fmt, W4.mem_port_elems) == 4


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_an_accum_folds_while_the_stop_after_its_result_waits(depth):
    """An Accum of rank 1 on [2, 2, 2] tiles closes each group with an S2: its result, then an
    S1 written into the output register as the result leaves it. The unit folds the next group
    from the next cycle on while that S1 waits for its queue (depth 1 or 2: a token every other
    cycle); the profile used to take the next group only once the S1 had left (24 cycles against
    the hardware's 23 at depth 1, 25 against 24 at depth 2; depth 3 never waits). Found by the
    random memory graphs (a Reshape and a Scan feeding an Accum, 1 to 4 cycles)."""
    g = Graph("accum_pending")
    x = Source(g, StreamType(Tile(INT16, 4, 4), (2, 2, 2)), name="x").out
    acc = Accum(x, fn=FX.accum_add, rank=1, name="acc")
    g.set_queue_depth(acc.out, depth)
    Sink(acc.out, name="sink")
    count = iter(range(1, 100))
    inputs = {"x": nest_leaves((2, 2, 2), lambda: np.full((4, 4), next(count), np.int16))}
    assert sends(g, inputs, HwConfig()) == amaranth_pushes(g, inputs, HwConfig())


def referenced_load(ref_shape, walk, *, feed=None, depth=1) -> tuple[Graph, dict, dict]:
    """Source (reference) [-> RepeatStatic ``feed``] -> LinearLoad(ref, ``walk``: out_shape,
    stride) of 2x2 int16 tiles -> Sink; every queue of depth ``depth``."""
    g = Graph("referenced_load")
    ref = Source(g, StreamType(Tile(INT32, 1, 1), ref_shape), name="ref").out
    if feed is not None:
        ref = RepeatStatic(ref, feed, name="again").out
    a = g.tensor("a", (4, 6), "int16")
    out_shape, stride = walk
    x = LinearOffChipLoad(a, tile=(2, 2), out_shape=out_shape, stride=stride, ref=ref, name="ld")
    Sink(x.out, name="sink")
    for node in g.nodes.values():
        for stream in node.outputs:
            g.set_queue_depth(stream, depth)
    memory = {"a": np.arange(24, dtype=np.int16).reshape(4, 6)}
    return g, memory, {"ref": nest_leaves(ref_shape, lambda: np.zeros((1, 1), np.int32))}


@pytest.mark.parametrize("port_model", [False, True])
@pytest.mark.parametrize(
    ("ref_shape", "walk", "feed"),
    [
        ((1, 2, 3), ((1,), (5,)), None),  # reference stops merge with the held S1
        ((2, 2), ((2, 3), (3, 1)), 2),  # stops inside the walk: two-beat entries
        ((4,), ((3,), (2,)), None),  # a rank-0 reference: the walk's S1 written at once
        ((1, 3), ((), ()), None),  # a walk of one tile and no stop of its own
    ],
)  # fmt: skip
def test_a_referenced_load_takes_its_references_at_the_hardwares_cycles(
    ref_shape, walk, feed, port_model, monkeypatch
):
    """The sequencer takes a reference token in the cycle after the previous walk's last entry
    (a cycle of its own) and a stop or done with its entry, while earlier tiles still wait to
    leave. The profile (on its own port and with the cycle-by-cycle port model alike) took each
    one only after the node had sent the walk before, and counted every stop as an entry of its
    own: 53 cycles against the hardware's 38, 185 against 161, 52 against 51 and 29 against 24
    on these four cases."""
    if port_model:
        monkeypatch.setattr(RtlProfile, "_port_model_from", 1)
    g, memory, inputs = referenced_load(ref_shape, walk, feed=feed)
    r = simulate(g, memory, inputs=inputs, profile=RtlProfile(HwConfig()), trace=True)
    got = ({s: [int(t) for t in ts] for s, ts in r.sends.items()}, r.cycles)
    assert got == amaranth_pushes(g, inputs, HwConfig(), tensors=memory)


@pytest.mark.parametrize("port_model", [False, True])
def test_a_block_load_takes_its_addresses_at_the_hardwares_cycles(port_model, monkeypatch):
    """A RandomLoad of 2 x 1 blocks, its addresses (a [1, 2, 2] stream, each repeated twice)
    taken as its sequencer gets to them. On the port model (a memory that shapes every port, or
    a port shared with other loads) the profile took each address only once its node had sent
    the block before, and counted every stop as a sequencer entry of its own: 72 cycles against
    the hardware's 51 (on a port of its own the load was exact already)."""
    if port_model:
        monkeypatch.setattr(RtlProfile, "_port_model_from", 1)
    g = Graph("block_load")
    addresses = Source(g, StreamType(Tile(INT32, 1, 1), (1, 2, 2)), name="raddr").out
    again = RepeatStatic(addresses, 2, name="again").out
    a = g.tensor("a", (8, 4), "int16")
    blocks = RandomOffChipLoad(again, a, tile=(2, 4), fetch=(2, 1), name="ld").out
    Sink(blocks, name="sink")
    g.set_queue_depth(again, 2)
    memory = {"a": np.arange(32, dtype=np.int16).reshape(8, 4)}
    inputs = {
        "raddr": [
            [[np.full((1, 1), k, np.int32) for k in (1, 0)], [np.zeros((1, 1), np.int32)] * 2]
        ]
    }
    r = simulate(g, memory, inputs=inputs, profile=RtlProfile(HwConfig()), trace=True)
    got = ({s: [int(t) for t in ts] for s, ts in r.sends.items()}, r.cycles)
    assert got == amaranth_pushes(g, inputs, HwConfig(), tensors=memory)


def _expand(elements, copies, *, out_depth, ref_depth=None, x_depth=None, slow=False):
    """An Expand of ``elements`` elements (distinct values), ``copies`` each, by a reference
    Source; ``slow`` puts a Map before its element input; the depths of the queues named."""
    g = Graph("expand")
    x = Source(g, StreamType(Tile(INT16, 1, 2), (elements, 1)), name="x").out
    if slow:
        x = Map(x, x, fn=FX.add, name="slow").out
    ref = Source(g, StreamType(Tile(INT16, 1, 2), (elements, copies)), name="ref").out
    for stream, depth in ((x, x_depth), (ref, ref_depth)):
        if depth is not None:
            g.set_queue_depth(stream, depth)
    y = Expand(x, ref, 1, name="ex").out
    g.set_queue_depth(y, out_depth)
    Sink(y, name="sink")
    count = iter(range(1, 100))
    inputs = {
        "x": nest_leaves((elements, 1), lambda: np.full((1, 2), next(count), np.int16)),
        "ref": nest_leaves((elements, copies), lambda: np.zeros((1, 2), np.int16)),
    }
    return g, inputs


@pytest.mark.parametrize(
    ("elements", "copies", "ref_depth", "out_depth"), [(1, 1, 3, 2), (2, 2, 1, 3), (3, 2, 2, 1)]
)
def test_an_expand_walks_the_reference_while_it_drops_the_elements_stop(
    elements, copies, ref_depth, out_depth
):
    """Expand loads an element, walks the reference from the next cycle while it drops the
    element's closing stop, and loads the next element in the walk's last cycle. The profile
    timed it as a registered block that took the closing stop, then each reference token, one
    take a cycle, and the next element after the walk's last token had left: 14 cycles against
    the hardware's 13, 23 against 21 and 29 against 26."""
    g, inputs = _expand(elements, copies, ref_depth=ref_depth, out_depth=out_depth)
    assert sends(g, inputs, HwConfig()) == amaranth_pushes(g, inputs, HwConfig())


@pytest.mark.parametrize(
    ("elements", "copies", "x_depth", "slow", "out_depth"),
    [(2, 1, 1, False, 1), (2, 2, 1, True, 2), (3, 3, 2, True, 1)],
)
def test_an_expand_walks_before_the_elements_stop_arrives(
    elements, copies, x_depth, slow, out_depth
):
    """Behind a queue of depth 1 or 2 (and a Map) the element's closing stop reaches Expand only
    after it loaded the element; the hardware walks the reference meanwhile. The interpreter's
    node took the stop before it walked, so the profile started the walk late: 16 cycles against
    the hardware's 15, 26 against 25 and 38 against 37."""
    g, inputs = _expand(elements, copies, x_depth=x_depth, slow=slow, out_depth=out_depth)
    assert sends(g, inputs, HwConfig()) == amaranth_pushes(g, inputs, HwConfig())


@pytest.mark.parametrize(
    ("counts", "copies"), [((3, 0, 0, 2), 3), ((1, 0, 2, 0, 0, 1), 2), ((3, 3, 0, 0, 2), 2)]
)
def test_a_flatmap_takes_elements_of_no_pieces_while_its_last_piece_waits(counts, copies):
    """A FlatMap (``last_tile_flags``) element of no pieces needs no output register: the
    generator takes it in the cycle it is offered after the take before, while the last piece
    before it still waits in the register for a slow RepeatStatic. The profile took it only once
    that piece had left: its count queue's handshakes 13 against the hardware's 10, 11 against
    9 and 20 against 18 (the cycle counts agreed)."""
    g = Graph("no_pieces")
    n = Source(g, StreamType(Tile(INT32, 1, 1), (len(counts),)), name="n").out
    flags = FlatMap(n, fn=functions.last_tile_flags, name="flags").out
    g.set_queue_depth(flags, 1)
    Sink(RepeatStatic(flags, copies, name="slow").out, name="sink")
    inputs = {"n": [np.full((1, 1), c, np.int32) for c in counts]}
    assert sends(g, inputs, HwConfig()) == amaranth_pushes(g, inputs, HwConfig())
