"""Simulator timing against hand-computed cycles, back-pressure, deadlocks, traces."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from lang_helpers import SCALAR, parse

from sim import MemoryConfig, PaperProfile, SimDeadlock, simulate, write_trace
from step_lang import (
    DONE,
    Accum,
    Bufferize,
    EagerMerge,
    Expand,
    FlatMap,
    Graph,
    LinearOffChipLoad,
    Map,
    Partition,
    Promote,
    RetileStreamify,
    Selector,
    Sink,
    Source,
    Streamify,
    StreamType,
    Tile,
    Zip,
    ragged,
)
from step_lang import functions as F
from step_lang.types import float32, int64


def load_graph(n_tiles: int) -> Graph:
    g = Graph("load")
    t = g.tensor("t", (16, 16 * n_tiles), "float32")
    Sink(LinearOffChipLoad(t, tile=(16, 16), name="load").out, name="sink")
    return g


# One 16x16 fp32 tile = 16 rows of one 64-byte request = 1024 bus bytes.
# dispatch 1: 16 cycles of issue, + latency 2, + start-up 14 (cold) = 32; the token is visible to
# the sink one cycle later (queue latency 1).
@pytest.mark.parametrize(
    ("dispatch", "tiles", "cycles"), [(1, 1, 33), (4, 1, 21), (1, 2, 33 + 18), (4, 3, 21 + 2 * 6)]
)
def test_offchip_load_dispatch_rate(dispatch, tiles, cycles):
    profile = PaperProfile(memory=MemoryConfig(dispatch=dispatch))
    r = simulate(load_graph(tiles), functional=False, profile=profile)
    assert r.cycles == cycles
    assert r.offchip_read_bytes == tiles * 1024
    assert r.nodes["load"].busy == cycles - 1


def test_memory_bandwidth_is_shared():
    """Two loads at 1 request/cycle each share 2 channels of 32 B/cycle: 64 B/cycle in total."""
    g = Graph("two")
    for i in range(2):
        t = g.tensor(f"t{i}", (16, 16), "float32")
        Sink(LinearOffChipLoad(t, tile=(16, 16), name=f"load{i}").out)
    mem = MemoryConfig(channels=2, dispatch=1)  # 64 B/cycle peak, each node may take 64
    r = simulate(g, functional=False, profile=PaperProfile(memory=mem))
    # 2048 bus bytes at 64 B/cycle = 32 cycles, + 2 latency + 14 start-up, + 1 to the sinks.
    assert r.cycles == 32 + 16 + 1


def tile_source_graph(fn, n: int, two: bool = True, from_memory: bool = False):
    g = Graph("roof")
    if from_memory:
        ins = [
            LinearOffChipLoad(
                g.tensor(f"t{i}", (16, 16 * n), "float32"), tile=(16, 16), name=f"in{i}"
            ).out
            for i in range(1 + two)
        ]
    else:
        ins = [
            Source(g, StreamType(Tile(float32, 16, 16), (1, n)), name=f"in{i}").out
            for i in range(1 + two)
        ]
    Sink(Map(*ins, fn=fn, name="op").out, name="sink")
    return g


def tile_tokens(n: int) -> list:
    return [[np.ones((16, 16), np.float32) for _ in range(n)]]


def test_roofline_compute_bound():
    # matmul 16x16x16: 8192 FLOPs at 1024 FLOPs/cycle = 8 cycles per element; inputs stream
    # between units (no memory-unit reads).
    g = tile_source_graph(F.matmul(), 4)
    p = PaperProfile(compute_bw_default=1024)
    r = simulate(g, inputs={"in0": tile_tokens(4), "in1": tile_tokens(4)}, profile=p)
    assert r.nodes["op"].busy == 4 * 8
    assert r.nodes["op"].flops == 4 * 8192
    assert r.compute_utilization == pytest.approx(4 * 8192 / (r.cycles * 1024))


def test_roofline_load_bound():
    # add of two 1 KiB tiles that sit in memory units: 16 + 16 cycles of 64-byte reads per
    # element (operand loads add up), against 1 cycle of compute.
    g = tile_source_graph(F.add, 3, from_memory=True)
    r = simulate(g, functional=False)
    assert r.nodes["op"].busy == 3 * 32


def test_loads_handing_tiles_to_queues_cost_their_consumers_no_read():
    # The same add with loads_in_memory=False (the generated hardware's loads write their
    # bursts into the consumer's queue): compute only, 1 cycle per element.
    g = tile_source_graph(F.add, 3, from_memory=True)
    r = simulate(g, functional=False, profile=PaperProfile(loads_in_memory=False))
    assert r.nodes["op"].busy == 3 * 1
    # a write-back node's tiles still sit in a memory unit for its consumers
    g = tile_source_graph(F.add, 3, from_memory=True)
    Sink(Map(g.nodes["op"].out, fn=F.exp, name="after").out, name="sink2")
    p = PaperProfile(loads_in_memory=False, write_back=frozenset({"op"}))
    r = simulate(g, functional=False, profile=p)
    assert r.nodes["after"].busy == 3 * 16  # 1 KiB read at 64 B/cycle, against 1 of compute


def test_streamified_operands_are_read_once_and_in_parallel():
    # The same add on operands replayed from two buffers: each Streamify is its buffer's
    # memory-unit read (16 cycles per 1 KiB tile at 64 B/cycle) and pays it; the add receives
    # the tiles without paying the read again, so the two operands are read in parallel: 16
    # cycles per element, not the 32 of operands read from memory units by the add itself.
    g = Graph("streamified")
    ins = []
    for i in range(2):
        src = Source(g, StreamType(Tile(float32, 16, 16), (1, 3)), name=f"in{i}").out
        buf = Bufferize(src, 1, name=f"buf{i}").out
        ins.append(Streamify(buf, name=f"read{i}").out)
    Sink(Map(*ins, fn=F.add, name="op").out, name="sink")
    r = simulate(g, inputs={"in0": tile_tokens(3), "in1": tile_tokens(3)})
    assert r.nodes["read0"].busy == r.nodes["read1"].busy == 3 * 16
    assert r.nodes["op"].busy == 3 * 1  # 256 FLOPs at 4096 FLOPs/cycle: compute only
    # The reads overlap: 3 tiles of 16 cycles each, plus the pipeline's fill.
    assert r.cycles < 3 * 32


def test_roofline_store_bound():
    # exp of a streamed tile: 4 FLOPs/element = 1024 FLOPs -> 1 cycle; writing the 1 KiB result
    # back to a memory unit takes 16 cycles.
    g = tile_source_graph(F.exp, 5, two=False)
    p = PaperProfile(write_back=frozenset({"op"}))
    r = simulate(g, inputs={"in0": tile_tokens(5)}, profile=p)
    assert r.nodes["op"].busy == 5 * 16


def test_router_switch_cycles():
    g = Graph("route")
    x = Source(g, StreamType(SCALAR, (6,)), name="x").out
    s = Source(g, StreamType(Selector(2), (6,)), name="s").out
    for i, o in enumerate(Partition(x, s, 0, name="part").outputs):
        Sink(o, name=f"sink{i}")
    p = PaperProfile(switch_cycles=3)
    r = simulate(
        g,
        inputs={"x": parse("1 2 3 4 5 6 D"), "s": parse("[10] [01] [11] [10] [01] [10] D")},
        profile=p,
    )
    assert r.nodes["part"].busy == 6 * 3
    assert [t for t in r.streams["part.out0"] if isinstance(t, np.ndarray)] != []


def test_back_pressure_through_a_slow_consumer():
    # A fast source feeds a 10-cycle-per-element consumer through a depth-2 queue: the source
    # spends its time stalled on output and the queue never holds more than 2 tokens.
    g = Graph("bp")
    x = Source(g, StreamType(Tile(float32, 16, 16), (1, 8)), name="x").out
    y = Map(x, fn=F.exp, name="slow").out
    Sink(y, name="sink")
    p = PaperProfile(compute_bw_default=103)  # 1024 FLOPs -> ceil(1024/103) = 10 cycles
    r = simulate(g, inputs={"x": tile_tokens(8)}, profile=p)
    assert r.nodes["slow"].busy == 80
    assert r.nodes["x"].stalled_out > 0
    assert r.queue_high_water["x.out"] == 2
    assert r.cycles == pytest.approx(80 + 3, abs=2)


def reconvergent_graph(n: int) -> Graph:
    """x - sum(x): the sum needs the whole vector while the direct path waits in a queue."""
    g = Graph("reconv")
    x = Source(g, StreamType(SCALAR, (1, n)), name="x").out
    total = Accum(x, fn=F.accum_add, rank=1, name="total").out
    spread = Expand(Promote(total, 0, name="lift").out, x, 1, name="spread").out
    Sink(Map(x, spread, fn=F.sub, name="center").out, name="sink")
    return g


def test_constructed_deadlock_names_nodes_and_queues():
    g = reconvergent_graph(8)
    with pytest.raises(SimDeadlock) as info:
        simulate(g, inputs={"x": parse("1 2 3 4 5 6 7 8 S1 D")})
    err = info.value
    # Broadcast outputs follow the readers: 0 -> total, 1 -> spread's reference, 2 -> center.
    assert err.blocked["x_out_bc"] == "room on x_out_bc.out1"
    assert err.blocked["spread"] == "a token on lift.out"
    assert err.blocked["total"] == "a token on x_out_bc.out0"
    assert err.queues["x_out_bc.out1"] == 2 and err.queues["x_out_bc.out0"] == 0
    assert "deadlocked at cycle" in str(err)
    assert (
        "likely cause (reconvergent paths):\n  queue x_out_bc.out1 is full while its consumer 'spread'"
        in str(err)
    )


def test_deep_enough_queue_resolves_the_deadlock():
    g = reconvergent_graph(8)
    depths = {"x_out_bc.out1": 8, "x_out_bc.out2": 8}
    r = simulate(g, inputs={"x": parse("1 2 3 4 5 6 7 8 S1 D")}, queue_depths=depths)
    vals = [int(t[0, 0]) for t in r.streams["center.out"] if isinstance(t, np.ndarray)]
    assert vals == [v - 36 for v in range(1, 9)]
    assert 2 < r.queue_high_water["x_out_bc.out2"] <= 8


def test_perfetto_trace(tmp_path):
    r = simulate(load_graph(2), functional=False, trace=True)
    path = write_trace(r, tmp_path / "t.json")
    data = json.loads(path.read_text())
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"load", "sink"}
    busy = [e for e in spans if e["name"] == "busy"]
    assert sum(e["dur"] for e in busy) == pytest.approx(r.nodes["load"].busy / 1000)


def test_trace_of_an_untraced_run_or_a_bad_clock_is_refused(tmp_path):
    from sim.trace import to_trace_events

    untraced = simulate(load_graph(2), functional=False)
    with pytest.raises(
        ValueError, match=r"^to_trace_events: the run has no spans; simulate it with trace=True$"
    ):
        write_trace(untraced, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
    traced = simulate(load_graph(2), functional=False, trace=True)
    for clock in (0, -5, float("inf"), True):
        with pytest.raises(
            ValueError,
            match=rf"^to_trace_events: clock_mhz must be a positive finite number, not {clock!r}$",
        ):
            to_trace_events(traced, clock_mhz=clock)


def test_elementwise_cycles_charge_one_cycle_per_tile_but_not_matmuls():
    """``elementwise_cycles`` replaces FLOPs over bandwidth for element-wise functions only."""
    tokens = {"in0": tile_tokens(4), "in1": tile_tokens(4)}
    p = PaperProfile(compute_bw_default=1024, elementwise_cycles=1)
    exp = simulate(tile_source_graph(F.exp, 4, two=False), inputs={"in0": tile_tokens(4)},
                   profile=PaperProfile(compute_bw_default=1, elementwise_cycles=3))  # fmt: skip
    assert exp.nodes["op"].busy == 4 * 3  # 256 FLOPs per tile at 1 FLOP/cycle would be 256
    mm = simulate(tile_source_graph(F.matmul(), 4), inputs=tokens, profile=p)
    assert mm.nodes["op"].busy == 4 * 8  # still 8192 FLOPs at 1024 FLOPs/cycle


def test_paper_profile_for_rtl_takes_the_hardware_rates():
    from step_hw.config import BF16_CONFIG
    from step_hw.memory_model import MemoryModel

    cfg = replace(BF16_CONFIG, lanes=64, axi_ports=2, axi_data_width=128, mem_port_elems=8,
                  queue_depth=4)  # fmt: skip
    mem = MemoryModel(latency=40, write_response=9, beat_interval=2, start_up=5)
    p = PaperProfile.for_rtl(cfg, mem)
    assert (p.compute_bw_default, p.elementwise_cycles, p.pmu_bw, p.channel_depth) == (
        128,
        1,
        16,
        4,
    )
    assert p.loads_in_memory is False  # the hardware's loads feed queues, not memory units
    assert p.memory == MemoryConfig(channels=2, request_bytes=16, interval=2, latency=40,
                                    startup=5, dispatch=1)  # fmt: skip
    assert p.memory.bandwidth == 2 * mem.peak_bytes_per_cycle(128)
    assert PaperProfile.for_rtl(replace(cfg, axi_ports=None), mem, channels=3).memory.channels == 3
    with pytest.raises(ValueError, match=r"give channels when config\.axi_ports is None"):
        PaperProfile.for_rtl(replace(cfg, axi_ports=None), mem)
    # a 16x16 matmul pair costs 8192 FLOPs / 128 = 64 cycles, the MAC array's 4096 / 64 lanes
    g = tile_source_graph(F.matmul(), 2)
    r = simulate(g, inputs={"in0": tile_tokens(2), "in1": tile_tokens(2)}, profile=p)
    assert r.nodes["op"].busy == 2 * 64


def test_elementwise_cycles_is_checked():
    with pytest.raises(ValueError, match="elementwise_cycles"):
        PaperProfile(elementwise_cycles=-1)


def test_element_flops_of_zipped_tiles_follow_each_tuples_shapes():
    """A Map of a Zip's tuples of dynamic tiles costs what each tuple's tiles hold: the FLOPs
    cache is keyed by the items' shapes, not by the tuple (which once kept the first shapes)."""
    from sim.profiles.base import ElementFlops
    from step_lang import Zip, ragged

    g = Graph("zipped")
    dyn = Tile(float32, ragged("R"), 4)
    a = Source(g, StreamType(dyn, (3,)), name="a").out
    b = Source(g, StreamType(dyn, (3,)), name="b").out
    node = Map(Zip(a, b).out, fn=F.mul, name="mul")
    flops = ElementFlops(node)
    tiles = [np.zeros((rows, 4), np.float32) for rows in (3, 1, 0)]
    assert [flops([(t, t)]) for t in tiles] == [12, 4, 0]
    two_inputs = ElementFlops(Map(a, b, fn=F.mul, name="mul2"))  # Map(a, b): the same
    assert [two_inputs([t, t]) for t in tiles] == [12, 4, 0]


# -- residency through Zip and merges, write-back beyond compute nodes, retiling FlatMaps ---------


def test_a_zip_keeps_each_operand_resident():
    """Map over Zip(a, b) of loaded tiles pays both operand reads, as Map(a, b) does (16 + 16
    cycles per element); the Zip used to drop the residency (1 cycle per element)."""
    for zipped in (False, True):
        g = Graph("zipped")
        a, b = (
            LinearOffChipLoad(g.tensor(n, (16, 64), "float32"), tile=(16, 16), name=n).out
            for n in ("a", "b")
        )
        op = Map(Zip(a, b).out, fn=F.add, name="op") if zipped else Map(a, b, fn=F.add, name="op")
        Sink(op.out, name="sink")
        assert simulate(g, functional=False).nodes["op"].busy == 4 * 32


def _merged(load_on: int):
    """EagerMerge of 4 loaded (resident) tiles and 4 streamed ones on ``load_on``'s port, into
    exp."""
    g = Graph("merged")
    tensor = g.tensor("t", (16, 64), "float32")
    loaded = LinearOffChipLoad(tensor, tile=(16, 16), out_shape=(4,), name="ld").out
    streamed = Source(g, StreamType(Tile(float32, 16, 16), loaded.shape), name="s").out
    ins = [loaded, streamed] if load_on == 0 else [streamed, loaded]
    merge = EagerMerge(ins, name="mg")
    Sink(merge.outputs[1], name="sels")
    Sink(Map(merge.outputs[0], fn=F.exp, name="op").out, name="sink")
    return g


def test_a_merge_of_resident_and_streamed_tiles_does_not_depend_on_port_order():
    """A stream has one residency flag: a merge's output is resident if any merged input is,
    so every merged tile pays its read (16 cycles) whichever port the load is on (it used to
    follow port 0: 128 cycles one way, 8 the other)."""
    ones = [[np.ones((16, 16), np.float32)] * 4]
    busy = {
        port: simulate(_merged(port), inputs={"s": ones}, functional=False).nodes["op"].busy
        for port in (0, 1)
    }
    assert busy == {0: 8 * 16, 1: 8 * 16}


def test_a_partition_pays_its_write_back():
    """write_back on a Partition: per element its switch and the 1 KiB write (16 cycles); its
    consumers then read the routed tiles from the memory unit (16 each)."""
    g = Graph("route")
    x = Source(g, StreamType(Tile(float32, 16, 16), (4,)), name="x").out
    s = Source(g, StreamType(Selector(2), (4,)), name="s").out
    for i, o in enumerate(Partition(x, s, 0, name="part").outputs):
        Sink(Map(o, fn=F.exp, name=f"m{i}").out, name=f"sink{i}")
    inputs = {
        "x": [np.ones((16, 16), np.float32)] * 4 + [DONE],
        "s": parse("[10] [01] [10] [10] D"),
    }
    plain = simulate(g, inputs=inputs)
    back = simulate(g, inputs=inputs, profile=PaperProfile(write_back=frozenset({"part"})))
    assert plain.nodes["part"].busy == 4 and back.nodes["part"].busy == 4 * (1 + 16)
    assert (back.nodes["m0"].busy, back.nodes["m1"].busy) == (3 * 16, 1 * 16)


@pytest.mark.parametrize("node", ["sink", "mg", "ld"])
def test_write_back_names_a_node_that_writes_results(node):
    g = _merged(0)
    with pytest.raises(ValueError, match=f"^PaperProfile: write_back names '{node}', a "):
        simulate(g, inputs={"s": [[np.ones((16, 16), np.float32)] * 4]}, functional=False,
                 profile=PaperProfile(write_back=frozenset({node})))  # fmt: skip


def test_each_result_of_a_held_accum_pays_its_store():
    """Accum with one held dim of 4 emits 4 tiles after its last element: the element's cycles
    cover the first tile's store (16 cycles at 64 B/cycle), the other three pay 16 each (the
    element's credit was subtracted from every store). An empty group's result pays its whole
    store."""
    g = Graph("held")
    x = Source(g, StreamType(Tile(float32, 16, 16), (1, 2, 4)), name="x").out
    Sink(Accum(x, fn=F.accum_add, rank=1, held=1, name="acc").out, name="sink")
    p = PaperProfile(compute_bw_default=64, write_back=frozenset({"acc"}))
    r = simulate(g, inputs={"x": [[[np.ones((16, 16), np.float32)] * 4] * 2]}, profile=p)
    # 8 elements of 4 cycles (256 FLOPs at 64/cycle), then the last element's 4 results: 16 - 4
    # and three of 16
    assert r.nodes["acc"].busy == 8 * 4 + 12 + 3 * 16
    g = Graph("groups")
    x = Source(g, StreamType(Tile(float32, 16, 16), (3, ragged("n"))), name="x").out
    Sink(Accum(x, fn=F.accum_add, rank=1, name="acc").out, name="sink")
    one = np.ones((16, 16), np.float32)
    r = simulate(g, inputs={"x": [[one, one], [], [one, one]]}, profile=p)
    assert r.nodes["acc"].busy == (4 + 16) + 16 + (4 + 16)


def test_a_retiling_flat_map_is_free_as_retile_streamify_is():
    """FlatMap(fn=retile_rows) moves data; only address generators cost a cycle per output."""
    busy = {}
    for name, split in (
        ("flatmap", lambda x: FlatMap(x, fn=F.retile_rows, name="split").out),
        ("retile", lambda x: RetileStreamify(x, name="split").out),
        ("address", lambda x: FlatMap(x, fn=F.last_tile_flags, name="split").out),
    ):
        g = Graph(name)
        t = Tile(float32, 16, 16) if name != "address" else Tile(int64, 1, 1)
        x = Source(g, StreamType(t, (3,)), name="x").out
        Sink(split(x), name="sink")
        tok = np.ones((16, 16), np.float32) if name != "address" else np.array([[2]], np.int64)
        busy[name] = simulate(g, inputs={"x": [tok] * 3 + [DONE]}).nodes["split"].busy
    assert busy == {"flatmap": 0, "retile": 0, "address": 3 * 2}
