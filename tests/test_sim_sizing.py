# amaranth: UnusedElaboratable=no
# (The elaborated graph of the last test is inspected, never simulated.)
"""Queue sizing (sim/sizing.py): deadlock diagnosis, the path-balancing LP, simulator refinement
and the storage report, on reconvergent graphs whose needs can be counted by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from lang_helpers import centred, parse

from examples import moe, traces
from sim import PaperProfile, SimDeadlock, simulate
from sim.sizing import diagnose, plan_queue_sizes, queue_bits, size_queues, token_bits
from step_hw.config import HwConfig
from step_lang import Graph, Source, StreamType
from step_lang.passes import lower
from step_lang.types import Tile

TOKENS = "1 2 3 4 5 6 7 8 S1 D"


def tokens(n: int) -> str:
    return " ".join(str(i + 1) for i in range(n)) + " S1 D"


def test_diagnosis_names_the_queue_the_paths_and_a_depth():
    g = centred(8)
    deep = simulate(
        g,
        inputs={"x": parse(TOKENS)},
        queue_depths={s: 64 for s in ("x_out_bc.out1", "x_out_bc.out2")},
    )
    with pytest.raises(SimDeadlock) as info:  # every queue at the default depth 2
        simulate(g, inputs={"x": parse(TOKENS)})
    (d,) = diagnose(g, info.value, deep.queue_high_water)
    assert d.queue == "x_out_bc.out1" and d.consumer == "spread" and d.waits_for == "lift.out"
    assert d.ancestor == "x_out_bc"
    assert d.short_path == ["x_out_bc", "spread"]
    assert d.long_path == ["x_out_bc", "total", "lift", "spread"]
    assert d.suggested_depth == deep.queue_high_water["x_out_bc.out1"] == 8
    assert str(d).startswith(
        "queue x_out_bc.out1 is full while its consumer 'spread' waits for lift.out"
    )
    assert "likely cause" in str(info.value) and "x_out_bc.out1" in str(info.value)


@pytest.mark.parametrize("n", [3, 8, 13])
def test_the_lp_alone_sizes_the_two_short_paths_to_the_vector(n):
    g = centred(n)
    r = plan_queue_sizes(g, inputs={"x": parse(tokens(n))})
    # the direct paths to `spread` (Expand's reference) and `center` (Map's first operand) must
    # hold the whole vector while `total` reads it; the LP leaves everything else at the
    # profile's default depth (2), and shrinking finds that one slot is enough there
    long = {"x_out_bc.out1": n, "x_out_bc.out2": n}
    assert r.analytic == dict.fromkeys(r.depths, 2) | long
    assert all(step.startswith("shrink") for step in r.steps)  # the LP needed no growing
    short = {q: d for q, d in r.depths.items() if q not in long}
    assert short == dict.fromkeys(short, 1)
    assert r.depths["x_out_bc.out1"] == n and n - 1 <= r.depths["x_out_bc.out2"] <= n
    for q in long:  # minimal: one slot less deadlocks or slows down
        less = {**r.depths, q: r.depths[q] - 1}
        try:
            slower = simulate(g, inputs={"x": parse(tokens(n))}, queue_depths=less).cycles
        except SimDeadlock:
            continue
        assert slower > r.cycles_deep * 1.01
    assert r.cycles_sized == r.cycles_deep and r.deadlock_free
    assert r.cycles_default is None  # as built (depth 2 everywhere) it deadlocks
    assert r.uniform_depth == n and r.cycles_uniform == r.cycles_deep


def test_storage_is_counted_in_token_bits():
    g = centred(8)
    r = plan_queue_sizes(g, inputs={"x": parse(TOKENS)})
    per_slot = 32 + 2 + 3  # an int32 scalar, token kind and stop level
    assert set(r.bits.values()) == {per_slot}
    assert r.depths["x_out_bc.out1"] == 8 and r.depths["x_out_bc.out2"] == 7
    assert r.bits_sized == per_slot * (8 + 7 + 6)
    assert r.bits_uniform == per_slot * 8 * 8
    assert r.bits_default == per_slot * 2 * 8
    assert queue_bits(r.bits, r.depths) == r.bits_sized
    assert r.bits_sized < r.bits_uniform / 2


def test_hardware_token_widths_come_from_the_payload_format():
    g = centred(4)
    hw = HwConfig()
    x = g.nodes["x"].out
    fmt_width = token_bits(x, hw)
    from step_hw.payload import TokenFormat

    assert fmt_width == TokenFormat.for_elem(x.elem, hw).width
    with pytest.raises(Exception, match="dims"):
        token_bits(
            Source(Graph("d"), StreamType(Tile("int16", "n", 4), (2,)), name="dyn").out, None
        )


def test_size_queues_writes_the_depths_into_the_graph():
    g = centred(8)
    assert size_queues(g, inputs={"x": parse(TOKENS)}) is g
    assert g.queue_depths["x_out_bc.out1"] == 8 and g.sizing.deadlock_free
    r = simulate(g, inputs={"x": parse(TOKENS)})  # the graph now carries the depths
    assert r.cycles == g.sizing.cycles_sized


def test_refinement_fixes_what_the_lp_misses(monkeypatch):
    """With no LP (every estimate zero) the simulator loop alone must find the same depths."""
    import sim.sizing as sizing

    g = centred(8)
    monkeypatch.setattr(sizing, "_lp_depths", lambda *a, **k: {})
    r = plan_queue_sizes(g, inputs={"x": parse(TOKENS)})
    assert r.steps and r.steps[0].startswith("deadlock")
    assert r.depths["x_out_bc.out1"] == 8 and r.depths["x_out_bc.out2"] == 7
    assert r.cycles_sized == r.cycles_deep


def test_where_growing_stops_short_every_queue_goes_to_the_deep_runs_peak(monkeypatch):
    """With no LP and no round of growing, the first run deadlocks; every queue then goes to
    what the deep run held, and shrinking alone finds the depths growing finds (8 and 7)."""
    import sim.sizing as sizing

    g = centred(8)
    monkeypatch.setattr(sizing, "_lp_depths", lambda *a, **k: {})
    r = plan_queue_sizes(g, inputs={"x": parse(TOKENS)}, max_rounds=0)
    assert r.steps[0] == "growing by stalls ends at a deadlock: 4 queue(s) to the deep run's peak"
    assert r.depths["x_out_bc.out1"] == 8 and r.depths["x_out_bc.out2"] == 7
    assert r.cycles_sized == r.cycles_deep and r.deadlock_free


def test_data_dependent_graphs_get_the_margin_over_every_trace():
    cfg = moe.SMALL
    sched = moe.MoESchedule("static", tile_n=4, tile_f=cfg.intermediate)
    g = moe.build(cfg, sched, 16)
    images = [
        moe.routing_tensors(
            cfg, traces.synthetic_routing(16, cfg.experts, cfg.top_k, skew=s, seed=1)
        )
        for s in (0.0, 2.0)
    ]
    profile = PaperProfile(stops_take_slots=True)
    r = plan_queue_sizes(g, images, profile=profile, dims={}, margin=1.5)
    assert r.data_dependent and r.images == 2 and r.deadlock_free
    for image in images:  # sized graphs run every trace without deadlock, within tolerance
        run = simulate(g, image, profile=profile, functional=False, queue_depths=r.depths)
        assert run.cycles <= r.cycles_deep * 1.01
    assert r.bits_sized <= r.bits_uniform


def test_paper_profile_can_charge_stop_tokens_a_slot():
    g = centred(4)
    fused = simulate(g, inputs={"x": parse(tokens(4))}, queue_depths=dict.fromkeys(
        ("x_out_bc.out1", "x_out_bc.out2"), 4))  # fmt: skip
    assert fused.queue_high_water["x_out_bc.out1"] == 4  # data tokens only
    slots = dataclasses.replace(PaperProfile(), stops_take_slots=True)
    deep = simulate(g, inputs={"x": parse(tokens(4))}, profile=slots,
                    queue_depths=dict.fromkeys(("x_out_bc.out1", "x_out_bc.out2"), 64))  # fmt: skip
    assert deep.queue_high_water["x_out_bc.out1"] == 6  # four values, their stop and done
    assert np.isfinite(deep.cycles)


def test_the_elaborated_hardware_takes_the_sized_depths():
    """Both backends read Graph.queue_depths: the RTL queues are built at the sized depths."""
    from amaranth.hdl import Fragment

    from examples import swiglu
    from step_hw.elaborate import ElaboratedGraph
    from step_hw.queue import Queue

    g = swiglu.hardware()
    hw = HwConfig()
    size_queues(
        g, hw, [swiglu.inputs(swiglu.HW_CONFIG)], profile=PaperProfile(stops_take_slots=True)
    )
    top = ElaboratedGraph(g, hw)
    desc = top.description()["queues"]
    m = top.elaborate(None)
    Fragment.get(m, None)  # elaborates every block (and marks them used)
    built = {}
    for name, (sub, _) in m._named_submodules.items():
        q = getattr(sub, "_elaboratable_", sub)  # queues sit behind a ResetInserter
        if isinstance(q, Queue):
            built[name] = q.depth
    assert built and set(built) == set(desc)
    for name, info in desc.items():
        assert built[name] == g.queue_depths[info["stream"]] == g.sizing.depths[info["stream"]]
    lowered = lower(g)  # the sized streams are those of the graph the readers run
    assert g.sizing.bits == {
        s: token_bits(stream, hw) for s, stream in sim_streams(lowered).items()
    }


def test_sized_depths_hold_on_a_graph_built_again():
    """Depths sized on one graph (broadcasts inserted) apply to the same graph built afresh, as
    co-simulation and `step size-queues --verilog` use them: a broadcast output keeps its own
    depth rather than the read stream's."""
    from amaranth.hdl import Fragment

    from examples import swiglu
    from step_hw.elaborate import ElaboratedGraph

    sized = lower(swiglu.hardware())
    bcs = [n for n in sized.nodes.values() if n.kind == "Broadcast"]
    assert bcs
    depths = {s.name: 1 for s in sim_streams(sized).values()}
    for k, s in enumerate(bcs[0].outputs):
        depths[s.name] = 3 + k
    fresh = swiglu.hardware()
    fresh.queue_depths.update(depths)
    top = ElaboratedGraph(fresh, HwConfig())
    desc = top.description()["queues"]
    Fragment.get(top, None)  # elaborates every block (and marks them used)
    built = {info["stream"]: info["depth"] for info in desc.values()}
    assert {s.name: built[s.name] for s in bcs[0].outputs} == {
        s.name: 3 + k for k, s in enumerate(bcs[0].outputs)
    }
    assert built == {name: depths[name] for name in built}


def sim_streams(g):
    return {s.name: s for n in g.nodes.values() for s in n.outputs}


@pytest.mark.parametrize(("example", "schedule"), [("moe", "time-mux"), ("attention", "dynamic")])
def test_hardware_size_graphs_shrink_with_the_rtl_profile(example, schedule):
    """The rtl profile's sizing of a time-multiplexed / dynamically parallel graph. (Shrinking
    once exposed an EagerMerge that took a done token, arrived while it took another, for a
    chunk.)"""
    from stepcli.sizing import size_hardware

    r = size_hardware(example, schedule, images=3)
    assert r.deadlock_free and r.cycles_sized <= r.cycles_deep * 1.01
    assert r.bits_sized < r.bits_default and r.bits_sized <= r.bits_uniform


def test_hardware_sizing_leaves_buffer_references_alone():
    """A Bufferize hands its buffers to its Streamify through their shared memory: in hardware
    that stream has no queue (and its elements no token format), so sizing for hardware sizes
    every other stream and leaves it at its depth."""
    from step_hw.config import HwConfig
    from step_lang import Bufferize, Graph, Sink, Source, Streamify, StreamType, Tile
    from step_lang.types import int16

    g = Graph("buffered")
    x = Source(g, StreamType(Tile(int16, 4, 4), (2, 3)), name="x")
    bz = Bufferize(x.out, 1, name="bz")
    Sink(Streamify(bz.out, name="sf").out, name="out")
    inputs = {"x": [[np.ones((4, 4), np.int16)] * 3] * 2}
    r = plan_queue_sizes(g, hw_config=HwConfig(), inputs=inputs, functional=True)
    assert set(r.depths) == {"x.out", "sf.out"}
    assert r.deadlock_free and r.cycles_sized <= r.cycles_deep * 1.01


@pytest.mark.parametrize("n", [3, 8])
def test_each_run_is_simulated_once_and_the_uniform_search_is_optional(n, monkeypatch):
    import sim

    runs: list[tuple[tuple[str, int], ...]] = []
    real = sim.simulate

    def counting(graph, memory=None, **kw):
        runs.append(tuple(sorted(kw["queue_depths"].items())))
        return real(graph, memory, **kw)

    monkeypatch.setattr(sim, "simulate", counting)
    g = centred(n)
    full = plan_queue_sizes(g, inputs={"x": parse(tokens(n))})
    assert len(runs) == len(set(runs))  # no depths simulated twice (one image)
    assert full.simulations == len(runs)
    assert f"simulator runs    {len(runs)} over 1 image(s)" in full.summary()
    searched = len(runs)
    runs.clear()
    lean = plan_queue_sizes(g, inputs={"x": parse(tokens(n))}, uniform=False)
    assert len(runs) == len(set(runs))
    # the same plan from fewer runs: the search tried uniform depths the plan never did
    assert lean.depths == full.depths and lean.cycles_sized == full.cycles_sized
    assert lean.cycles_default == full.cycles_default is None
    assert lean.uniform_depth is lean.cycles_uniform is lean.bits_uniform is None
    assert lean.simulations == len(runs) == lean.to_json()["simulations"]
    assert full.uniform_depth == n and len(runs) < searched
    assert "uniform" not in lean.summary() and "uniform" in full.summary()
    assert lean.to_json()["uniform_depth"] is None


def _swiglu_on_two_ports():
    """The hardware-size SwiGLU with 4 x 2 tiles on two shared read ports, its hardware and its
    memory image (deeper queues are slower there)."""
    from examples import swiglu

    size = swiglu.SwiGLUConfig(batch=16, hidden=4, intermediate=32, dtype="int16")
    hw = HwConfig(tile_rows=16, tile_cols=4, axi_ports=2)
    return swiglu.hardware(4, 2, hw=hw, size=size), hw, [swiglu.inputs(size, seed=1)]


def test_sizing_never_returns_depths_slower_than_the_graphs_own():
    """Deeper queues can be slower: on two shared read ports the hardware-size SwiGLU with 4 x 2
    tiles runs 620 cycles at the default depth 3 and 644 with every queue 1024 deep (it was
    sized to 644). Sizing holds each image to the faster of the two runs, so the sized and the
    uniform depths are within the tolerance of the graph's own depths, not of the slower deep
    run."""
    g, hw, image = _swiglu_on_two_ports()
    r = plan_queue_sizes(g, image, hw_config=hw)
    assert r.cycles_deep > r.cycles_default * 1.01  # the premise: deep is slower
    assert r.deadlock_free and r.cycles_sized <= r.cycles_default * 1.01
    assert r.cycles_uniform is not None and r.cycles_uniform <= r.cycles_default * 1.01


def test_sizing_keeps_the_graphs_own_depths_when_growing_ends_slower():
    """Refinement grows the queues that stall, which can make a run slower. The hardware-size
    SwiGLU 4 x 2 with its own depths set to the sized ones (615 cycles) and no tolerance: growing
    from the profile's default depth ends at 644, which sizing returned before; now it keeps
    the graph's own depths, 615. No uniform depth matches them (the smallest within 1% was
    depth 2 at 619), so the uniform search reports none."""
    g, hw, image = _swiglu_on_two_ports()
    g.queue_depths.update(plan_queue_sizes(g, image, hw_config=hw).depths)
    r = plan_queue_sizes(g, image, hw_config=hw, tolerance=0.0)
    assert r.cycles_default < r.cycles_deep  # the premise: the graph's own depths are faster
    assert r.deadlock_free and r.cycles_sized <= r.cycles_default
    assert r.depths == r.default_depths
    assert any("keeping the graph's own" in s for s in r.steps)
    assert r.uniform_depth is None and r.cycles_uniform is None


def test_hardware_sizing_skips_full_buffer_references():
    """A Bufferize's buffer references wait for a free buffer slot (they have no queue in
    hardware, so sizing leaves them out): a run where they do must not stop refinement. A
    dynamically tiled MoE (8 experts on 2 regions, 8 tokens, hidden 128, 16x16 BF16 tiles on the
    HBM-like memory) whose gate and up operand buffers wait 388 cycles each at depth 3 raised
    ``KeyError: 'gate_r0_a_buf.out'`` here; now it is sized within 1% of its deep run."""
    from bench.validate import timing_image
    from bench.validate_scale import SCALE_HW, SCALE_MEMORY
    from sim.profiles.rtl import RtlProfile
    from step_lang.hier_tiling import hier_tile

    layer = moe.MoEConfig("buffered", 128, 16, 8, 2, dtype="bfloat16")
    hw = dataclasses.replace(SCALE_HW, dyn_tile_rows=8)
    schedule = moe.MoESchedule(tiling="dynamic", tile_f=16, regions=2)
    g = hier_tile(moe.build(layer, schedule, 8, elem_bytes=None, fns=moe.hardware_fns(hw)), 16, 16)
    choices = np.array([[3, 1], [3, 1], [3, 7], [7, 5], [6, 7], [3, 7], [7, 3], [6, 2]])
    image = timing_image(g, moe.inputs(dataclasses.replace(layer, dtype="float32"), choices))
    profile = RtlProfile.for_memory(SCALE_MEMORY, hw)
    r = plan_queue_sizes(g, [image], hw_config=hw, profile=profile, functional=False, uniform=False)
    assert not any(name.endswith("_buf.out") for name in r.depths)
    assert r.deadlock_free and r.cycles_sized <= r.cycles_deep * 1.01


@pytest.mark.slow
def test_sizing_reaches_the_deep_run_where_growing_by_stalls_does_not():
    """The 16-expert dynamically tiled MoE of ``make validate`` (``moe_scale``), sized on its
    first three recorded routings: its own depths run 38,259 cycles at worst, every queue deep
    36,728. Growing the queues that wait for room ends at 39,097 cycles on the first image, and
    sizing kept the graph's own depths (before: it returned depths 1.3% slower than those,
    38,758). Now every queue goes to the deep run's peak, shrinking takes back what the runs do
    not need, and the sized depths run 36,834 cycles, within 1% of the deep run."""
    from bench.validate import SIZING_IMAGES, SWEEPS, timing_image
    from sim.profiles.rtl import RtlProfile
    from step_hw.memory_model import MemoryModel

    points = [p for p in SWEEPS["moe_scale"]() if p.design == "moe_scale_dynamic_tm2"]
    p = points[0]
    images = [timing_image(p.make(), q.memory) for q in points[:SIZING_IMAGES]]
    profile = RtlProfile.for_memory(p.memory_model or MemoryModel.axi_ram(), p.config)
    r = plan_queue_sizes(
        p.make(), images, hw_config=p.config, profile=profile, functional=False, uniform=False
    )
    assert r.cycles_deep * 1.01 < r.cycles_default  # the premise: its own depths miss the deep run
    assert r.deadlock_free and r.cycles_sized <= r.cycles_deep * 1.01
    assert any("to the deep run's peak" in s for s in r.steps)
    assert not any("keeping the graph's own" in s for s in r.steps)


def _small_moe_routings():
    """The small static MoE and eight synthetic routings, from even to skewed (skew 0 to 4)."""
    cfg = moe.SMALL
    g = moe.build(cfg, moe.MoESchedule("static", tile_n=4, tile_f=cfg.intermediate), 16)
    images = [
        moe.routing_tensors(
            cfg, traces.synthetic_routing(16, cfg.experts, cfg.top_k, skew=s, seed=seed)
        )
        for s in (0.0, 1.0, 2.0, 4.0)
        for seed in (1, 2)
    ]
    return g, images


def test_held_out_images_the_depths_miss_are_sized_on_too():
    """Sized on the even routing alone (no margin), the small MoE's depths run some skewed
    routings about 30% slower than their references; checked on them as held-out images, the
    worst is sized on too until every one is within the tolerance, and the report's cycles are
    what the simulator gives at the returned depths."""
    g, images = _small_moe_routings()
    profile = PaperProfile(stops_take_slots=True)
    options = dict(profile=profile, dims={}, margin=1.0, uniform=False)
    alone = plan_queue_sizes(g, images[:1], **options)

    def run(image, depths):
        return simulate(g, image, profile=profile, functional=False, queue_depths=depths).cycles

    deep = dict.fromkeys(alone.depths, 1024)
    refs = [min(run(m, deep), run(m, alone.default_depths)) for m in images[1:]]
    slow = [run(m, alone.depths) / ref for m, ref in zip(images[1:], refs, strict=True)]
    assert max(slow) > 1.2  # the premise: one image's depths miss others

    r = plan_queue_sizes(g, images[:1], held_out=images[1:], **options)
    assert r.held_out_added and r.images == 1 + len(r.held_out_added)
    assert r.held_out_added[0] == max(range(len(slow)), key=slow.__getitem__)  # worst first
    assert r.held_out_missed == [] and r.deadlock_free
    got = [run(m, r.depths) for m in images[1:]]
    assert [c for c, _ in r.held_out_cycles] == got
    assert [ref for _, ref in r.held_out_cycles] == refs
    assert all(c <= ref * 1.01 for c, ref in zip(got, refs, strict=True))
    assert run(images[0], r.depths) <= r.cycles_sized
    assert any(s.startswith(f"held-out image {r.held_out_added[0]}: ") for s in r.steps)
    assert r.to_json()["held_out_added"] == r.held_out_added
    assert "held out          7 image(s)" in r.summary()


def test_the_uniform_depth_holds_on_the_held_out_images_too():
    """Sized on one skewed routing, the small MoE's depths miss five of the seven others (sized
    on too) and hold on two; the smallest uniform depth reported also holds on those two, and
    its cycles are the worst over the images sized on, as the sized depths' are. (A property,
    not a regression test: on this MoE the depth below the uniform one already misses an image
    sized on, so the uniform search gave the same depth before it checked held-out images; no
    sizing of it on one routing, 16 tried, tells the two apart, nor of the six hardware-size
    MoE and attention schedules on four; the next test does.)"""
    g, images = _small_moe_routings()
    profile = PaperProfile(stops_take_slots=True)
    r = plan_queue_sizes(g, images[6:7], held_out=images[:6] + images[7:], profile=profile,
                         dims={}, margin=1.0)  # fmt: skip
    kept = [k for k in range(7) if k not in r.held_out_added]
    assert kept and r.uniform_depth is not None

    def run(image, depth):
        uniform = dict.fromkeys(r.depths, depth)
        return simulate(g, image, profile=profile, functional=False, queue_depths=uniform).cycles

    for k in kept:
        ref = r.held_out_cycles[k][1]
        assert run((images[:6] + images[7:])[k], r.uniform_depth) <= ref * 1.01
    sized_on = [images[6]] + [(images[:6] + images[7:])[k] for k in r.held_out_added]
    assert r.cycles_uniform == max(run(m, r.uniform_depth) for m in sized_on)


def test_held_out_images_the_depths_hold_on_add_nothing():
    """Held-out images that the depths already hold on (copies of images sized on) change
    nothing: the same depths, and three runs per held-out image beyond the sizing (its deep
    run, its run at the graph's own depths, its run at the sized depths)."""
    g, images = _small_moe_routings()
    options = dict(profile=PaperProfile(stops_take_slots=True), dims={}, uniform=False)
    sized = plan_queue_sizes(g, images, **options)
    copies = [{k: np.array(v, copy=True) for k, v in m.items()} for m in images[:2]]
    r = plan_queue_sizes(g, images, held_out=copies, **options)
    assert r.depths == sized.depths and r.held_out_added == [] and r.held_out_missed == []
    assert r.simulations == sized.simulations + 3 * len(copies)
    profile = options["profile"]
    for (c, ref), image in zip(r.held_out_cycles, images[:2], strict=True):
        assert c == simulate(g, image, profile=profile, functional=False,
                             queue_depths=r.depths).cycles  # fmt: skip
        assert c <= ref * 1.01


def test_the_uniform_depth_is_held_to_a_held_out_image_the_margin_covers(monkeypatch):
    """A held-out image the sized depths hold on only thanks to the margin still sets the
    uniform depth. A stand-in timing model on ``centred(8)``: a run is slow (200 cycles
    against 100) while one queue is shallower than what its image needs. Sized on two images
    that need 4 slots, that queue gets 4, and 5 with the margin of 1.25; the held-out image
    needs 5, so the sized depths hold on it and it is not sized on, but uniform depth 4 misses
    it. The smallest uniform depth is then 5; checked on the images sized on alone, 4."""
    import sim
    import sim.sizing as sizing
    from sim.result import SimResult

    queue = "x_out_bc.out1"

    def model(graph, memory=None, *, queue_depths, **kw):
        need, depth = int(memory["need"]), queue_depths[queue]
        return SimResult(
            cycles=200 if depth < need else 100,
            nodes={},
            offchip_read_bytes=0,
            offchip_write_bytes=0,
            queue_high_water={queue: min(depth, need)},
            memory={},
            streams={},
            queue_full_cycles={queue: 50} if depth < need else {},
        )

    monkeypatch.setattr(sim, "simulate", model)
    monkeypatch.setattr(sizing, "_lp_depths", lambda *a, **k: {})
    images = [{"need": np.array(4)}, {"need": np.array(4)}]
    held = [{"need": np.array(5)}]
    r = plan_queue_sizes(centred(8), images, held_out=held, margin=1.25)
    assert r.depths[queue] == 5 and r.held_out_added == []
    assert r.held_out_cycles == [(100, 100)]
    assert r.uniform_depth == 5 and r.cycles_uniform == 100
    alone = plan_queue_sizes(centred(8), images, margin=1.25)
    assert alone.depths == r.depths and alone.uniform_depth == 4
