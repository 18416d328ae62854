"""``make validate``'s bookkeeping (``bench/validate.py``, ``bench/validate_scale.py``): the
statistics, schedule comparisons, Fig. 8 grid, bit comparison and the trace-driven inputs of the
paper-scale sweeps. The co-simulations themselves are ``rtl_tests/test_validate_verilator.py``."""

from __future__ import annotations

import dataclasses
import json

import ml_dtypes
import numpy as np
import pytest

from bench import validate as V
from bench import validate_report
from bench import validate_scale as S


def _pt(workload, rtl, sim, paper=None, depths="default", **params):
    p = {"workload": workload, "params": {"depths": depths, **params}, "rtl_cycles": rtl,
         "sim_cycles": sim}  # fmt: skip
    if paper is not None:
        p["paper_cycles"] = paper
    return p


def test_stats_per_sweep_and_depth_setting():
    pts = [
        _pt("fig8", 100, 100, tile_b=16, tile_i=16),
        _pt("fig8", 200, 210, tile_b=16, tile_i=32),
        _pt("fig8", 100, 95, depths="sized", tile_b=16, tile_i=16),
        _pt("fig8", 300, 300, depths="sized", tile_b=16, tile_i=32),
    ]
    st = V.stats(pts)
    assert set(st) == {"fig8", "fig8 (sized depths)"}
    assert st["fig8"]["points"] == 2
    assert st["fig8"]["mare"] == pytest.approx(0.025)
    assert st["fig8"]["max_rel_error"] == pytest.approx(0.05)
    assert st["fig8 (sized depths)"]["max_rel_error"] == pytest.approx(0.05)
    assert st["fig8"]["pearson"] == pytest.approx(1.0)
    # a profile a point was not run with is left out, not counted as zero
    assert V.stats(pts, "paper_cycles") == {}


def test_comparisons_pick_each_profiles_fastest_option_and_accept_rtl_ties():
    pts = [
        _pt("moe_scale", 100, 120, 90, routing="r0", schedule="static"),
        _pt("moe_scale", 100, 110, 95, routing="r0", schedule="dynamic"),
        _pt("moe_scale", 150, 130, 80, routing="r0", schedule="timemux"),
        _pt("moe_scale", 50, 50, 50, routing="r1", schedule="static"),
    ]
    (c,) = V.comparisons(pts)  # r1 has one option: no comparison
    assert c["case"] == "r0" and c["workload"] == "moe_scale"
    # static and dynamic tie on the RTL (the first by name is named): either is right
    assert c["rtl_winner"] == "dynamic"
    assert (c["rtl_profile_winner"], c["rtl_profile_agrees"]) == ("dynamic", True)
    assert (c["paper_profile_winner"], c["paper_profile_agrees"]) == ("timemux", False)
    assert c["options"]["timemux"] == [150, 130, 80]


def test_fig8_tile_sweep_is_one_comparison_per_depth_setting():
    pts = [
        _pt("fig8", 300, 310, 290, tile_b=b, tile_i=i, depths=d)
        for b, i in ((16, 16), (64, 256))
        for d in ("default", "sized")
    ]
    pts[1]["rtl_cycles"] = 200  # (16, 16) sized wins on the RTL, (64, 256) in the simulator
    pts[3]["sim_cycles"] = 250
    comps = V.comparisons(pts)
    assert sorted(c["workload"] for c in comps) == ["fig8", "fig8 (sized depths)"]
    sized = next(c for c in comps if c["workload"] == "fig8 (sized depths)")
    assert sized["rtl_winner"] == "16x16"
    assert sized["rtl_profile_winner"] == "64x256"
    assert (sized["rtl_profile_agrees"], sized["paper_profile_agrees"]) == (False, True)


def test_fig8_grid_rows_are_tile_b_and_columns_tile_i():
    pts = [
        {**_pt("fig8", 1000 * b + i, 1, 2, tile_b=b, tile_i=i), "axi_efficiency": 0.5}
        for b, i in S.FIG8_TILES
        if (b, i) != (32, 64)
    ]
    grid = V.fig8_grid(pts)
    assert grid["tile_b"] == [16, 32, 64] and grid["tile_i"] == [16, 32, 64, 128, 256]
    rtl = grid["default"]["rtl_cycles"]
    assert rtl[2][4] == 64256 and rtl[0][1] == 16032
    assert rtl[1][2] is None  # the missing point
    assert grid["default"]["axi_efficiency"][0][0] == 0.5


def test_same_bits_compares_bf16_patterns():
    a = np.array([0.0, np.nan, 1.5], ml_dtypes.bfloat16)
    assert V._same_bits(a, a.copy())  # NaN equals itself bit for bit
    b = a.copy()
    b[0] = -0.0
    assert not V._same_bits(a, b)  # -0 is not +0
    assert not V._same_bits(a, a.astype(np.float32))
    assert V._same_bits(np.arange(3), np.arange(3)) and not V._same_bits(np.arange(3), np.ones(3))


def test_fold_routing_keeps_the_first_distinct_folded_experts_in_trace_order():
    choices = np.array([[3, 19, 35, 4], [17, 1, 2, 5], [30, 13, 46, 62]])
    assert S.fold_routing(choices, 16, 2).tolist() == [[3, 4], [1, 2], [14, 13]]
    top3 = np.array([[17, 1, 2, 5], [0, 16, 33, 50]])
    assert S.fold_routing(top3, 16, 3).tolist() == [[1, 2, 5], [0, 1, 2]]


def test_fold_routing_refuses_a_token_with_too_few_distinct_experts():
    choices = np.array([[3, 19, 35, 4], [30, 14, 46, 62]])  # token 1 folds to expert 14 only
    with pytest.raises(ValueError, match="token 1 has 1 distinct experts after folding onto 16"):
        S.fold_routing(choices, 16, 2)


def test_scale_kv_divides_rounds_and_refuses_what_does_not_fit():
    assert S.scale_kv(np.array([0, 12, 13, 7930, 50]), 320).tolist() == [1, 1, 1, 317, 2]
    with pytest.raises(ValueError, match="KV length 8000 / 25 does not fit a cache of 320 rows"):
        S.scale_kv(np.array([10, 8000]), 320)


def _write_traces(root, kv_batches, routing):
    kv = root / "kv_lengths" / "b16"
    kv.mkdir(parents=True)
    for i, lengths in enumerate(kv_batches):
        np.save(kv / f"conv_stdev{i:04d}_0000_0016.npy", np.array(lengths, np.int64))
    r = root / "expert_routing" / "qwen_b1024"
    r.mkdir(parents=True)
    np.savez(r / "000_001.npz", data=routing)


def test_trace_inputs_come_from_the_trace_folder(tmp_path):
    rng = np.random.default_rng(0)
    kv = [rng.integers(0, 7000, 16) for _ in range(21)]
    routing = np.stack([rng.permutation(128)[:8] for _ in range(1024)])
    _write_traces(tmp_path, kv, routing)
    batches = S.trace_kv_batches(tmp_path)
    assert len(batches) == S.ATTENTION_POINTS == 10
    names = list(batches)
    assert names[0] == "conv_stdev0000_0000_0016" and names[1] == "conv_stdev0002_0000_0016"
    assert batches[names[1]].tolist() == S.scale_kv(kv[2], 320).tolist()
    routings = S.trace_routings(tmp_path)
    assert len(routings) == S.MOE_POINTS
    first = routings["000_001_t16"]
    assert first.shape == (16, 2)
    assert first.tolist() == S.fold_routing(routing[16:32], 16, 2).tolist()


def test_trace_inputs_say_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no batch-16 KV-length traces under"):
        S.trace_kv_batches(tmp_path)
    with pytest.raises(FileNotFoundError, match="no qwen_b1024 routing trace under"):
        S.trace_routings(tmp_path)


def test_where_picks_points_by_their_parameters():
    def point(b, i):
        return V.Point("fig8", {"tile_b": b, "tile_i": i}, None, {}, None, f"fig8_b{b}_i{i}")

    pts = [point(b, i) for b, i in S.FIG8_TILES]
    assert [p.design for p in pts if V._matches(p, ["tile_b=64", "tile_i=256"])] == [
        "fig8_b64_i256"
    ]
    assert sum(V._matches(p, ["tile_b=32"]) for p in pts) == 5
    assert not any(V._matches(p, ["tile_b=8"]) for p in pts)
    assert all(V._matches(p, []) for p in pts)


def test_points_take_turns_among_their_builds():
    # a sized point runs on its design's build: it waits for the same sizing, elaboration and
    # build as the default point, so the order alternates between builds, not between settings
    def point(design):
        return V.Point("moe_scale", {}, None, {}, None, design)

    designs = ["a", "a", "a", "b", "c", "c", "a_sized", "a_sized", "b_sized"]
    pts = [point(d) for d in designs]
    order = V.interleaved(list(range(len(pts))), [V._build_of(q) for q in pts])
    assert order == [0, 3, 4, 1, 8, 5, 2, 6, 7]
    assert sorted(order) == list(range(len(pts)))
    assert V.interleaved([], []) == []


def test_one_pool_keeps_each_result_with_its_point_and_times_each_sweep(monkeypatch):
    calls = []

    def fake(name, index, options):
        calls.append((name, index))
        return {"error": f"{name} {index}", "fatal": False}

    monkeypatch.setattr(V, "_run_indexed", fake)
    tasks = [("fig8", 2), ("fig8", 0), ("moe_scale", 1)]
    results, walls = V._run_all(tasks, {}, jobs=1)
    assert calls == tasks
    assert [r["error"] for r in results] == ["fig8 2", "fig8 0", "moe_scale 1"]
    assert set(walls) == {"fig8", "moe_scale"} and all(w >= 0 for w in walls.values())
    ordered = sorted(zip(tasks, results, strict=True), key=V._task_order(tasks))
    assert [t for t, _ in ordered] == [("fig8", 0), ("fig8", 2), ("moe_scale", 1)]


def test_a_measured_points_speed_record_gets_the_whole_points_seconds(monkeypatch):
    import time

    def measured(name, index, options):
        time.sleep(0.05)
        return {"_speed": {"rtl_run_s": 0.01}}

    monkeypatch.setattr(V, "_run_indexed", measured)
    r, start, end = V._timed("fig8", 0, {})
    assert r["_speed"]["point_s"] == end - start >= 0.05
    assert r["_speed"]["rtl_run_s"] == 0.01
    monkeypatch.setattr(V, "_run_indexed", lambda *a: {"error": "x", "fatal": False})
    assert V._timed("fig8", 0, {})[0] == {"error": "x", "fatal": False}  # nothing to time


def test_cached_only_raises_before_making_the_graph(monkeypatch, tmp_path):
    # a sized point's graph sizes its design when made (minutes of simulation): --cached-only
    # must give up on a point whose sizing is not cached before that
    monkeypatch.setattr(V, "OUT", tmp_path)
    made = []
    p = V.Point(
        "fig8", {"tile_b": 16, "tile_i": 16, "depths": "sized"},
        lambda: made.append(1), {}, S.FIG8_HW, "fig8_b16_i16_sized", tier="fast",
        memory_model=S.SCALE_MEMORY, functional_sim=False, sizing=tmp_path / "sizing.json",
    )  # fmt: skip
    with pytest.raises(V.NotCached, match="no cached sizing"):
        V.run_point(p, fresh=False, trace=False, cached_only=True)
    assert made == []


def test_a_cached_rtl_result_belongs_to_its_design(monkeypatch, tmp_path):
    # the RTL cache is keyed by the design too: the same point with another queue depth (as a
    # new sizing would pick) is another design and does not read the first one's result
    monkeypatch.setattr(V, "OUT", tmp_path)
    p = V.swiglu_points()[0]

    def deeper():
        g = p.make()
        stream = next(s for n in g.nodes.values() for s in n.outputs)
        g.set_queue_depth(stream, 5)
        return g

    q = dataclasses.replace(p, make=deeper)
    assert V._design(p) != V._design(q)
    cached = {"rtl_cycles": 3105, "outputs_match": True, "rtl_build_s": 0, "rtl_run_s": 0}
    (tmp_path / "points").mkdir()
    (tmp_path / "points" / f"swiglu_{V._key(p)}_{V._design(p)}.json").write_text(json.dumps(cached))
    assert V.run_point(p, fresh=False, trace=False, cached_only=True)["rtl_cycles"] == 3105
    with pytest.raises(V.NotCached, match="no cached RTL result"):
        V.run_point(q, fresh=False, trace=False, cached_only=True)


def test_a_cached_rtl_result_belongs_to_its_run_time_depths():
    # a design sized again may set a run-time queue (HwConfig.queue_capacity) to another depth
    # within the same capacity: the same build, another run, whose result is not the first's
    from step_hw.cosim.harness import TOP
    from step_hw.design_key import design_key
    from step_hw.run_time_depths import shared_capacities

    p = V.swiglu_points()[0]

    def at(depth: int):
        g = p.make()
        g.queue_depths["load_x.out"] = depth
        return g

    config = dataclasses.replace(
        p.config, queue_capacity=shared_capacities([at(1), at(5)], p.config)
    )
    one, two = (
        dataclasses.replace(p, make=lambda d=d: at(d), rtl_config=lambda: config) for d in (1, 2)
    )
    assert design_key(one.make(), config, TOP) == design_key(two.make(), config, TOP)
    assert V._design(one) != V._design(two)


def test_a_design_is_sized_again_when_the_code_that_sizes_it_changes(monkeypatch):
    # the sizing cache is named by the points and the simulator's sources: a change to a
    # profile or the contract does not read depths another version picked
    group = V.swiglu_points()[:2]
    memory = V.MemoryModel.axi_ram()
    first = V.sizing_file(group, memory)
    assert V.sizing_file(group, memory) == first
    assert V.sizing_file(group[:1], memory) != first
    monkeypatch.setattr(V, "_source_digest", lambda: "another version")
    assert V.sizing_file(group, memory) != first


@pytest.mark.parametrize("schedule", ["interleaved", "dynamic"])
def test_timing_image_keeps_the_routing_tensors_and_the_cycles(schedule):
    from examples import attention
    from sim import simulate
    from sim.profiles.paper import PaperProfile
    from sim.profiles.rtl import RtlProfile
    from step_hw.config import BF16_CONFIG
    from step_hw.memory_model import MemoryModel

    memory = attention.hardware_inputs([0, 15, 5, 10], seed=6, hw=BF16_CONFIG)
    graph = attention.hardware(schedule, hw=BF16_CONFIG)
    lean = V.timing_image(graph, memory)
    floats = {k for k in memory if graph.tensors[k].dtype.is_float}
    assert floats and set(lean) == set(memory) - floats  # the KV lengths and ids stay
    assert all(lean[k] is memory[k] for k in lean)
    hbm = MemoryModel.hbm()
    for profile in (RtlProfile.for_memory(hbm, BF16_CONFIG),
                    PaperProfile.for_rtl(BF16_CONFIG, hbm, channels=4)):  # fmt: skip
        full, shape_only = (
            simulate(graph, m, profile=profile, functional=False) for m in (memory, lean)
        )
        assert shape_only.cycles == full.cycles > 0
        assert shape_only.offchip_bytes == full.offchip_bytes > 0


def test_a_designs_default_and_sized_points_share_one_interpretation(monkeypatch, tmp_path):
    # the interpreter's outputs do not depend on queue depths: the sized twin of a point reads
    # the default point's, bit for bit and with its dtype (BF16 included), and never interprets
    from examples import attention
    from step_hw.config import BF16_CONFIG

    monkeypatch.setattr(V, "OUT", tmp_path)
    memory = attention.hardware_inputs([3, 15, 5, 1], seed=2, hw=BF16_CONFIG)
    p = V.Point("attention", {"schedule": "coarse", "depths": "default"},
                lambda: attention.hardware("coarse", hw=BF16_CONFIG), memory, BF16_CONFIG,
                "attention_coarse")  # fmt: skip
    from step_hw.cosim import output_tensors

    outputs = output_tensors(p.make())
    first = V.reference_outputs(p, outputs)
    assert any(a.dtype == ml_dtypes.bfloat16 for a in first.values())
    calls, real = [], V.interpret
    monkeypatch.setattr(V, "interpret", lambda *a: calls.append(a) or real(*a))
    sized = dataclasses.replace(p, params={**p.params, "depths": "sized"}, design="x_sized")
    again = V.reference_outputs(sized, outputs)
    assert calls == []  # read back, not interpreted
    assert set(again) == set(first) == set(outputs)
    assert all(V._same_bits(again[o], first[o]) for o in outputs)
    other = dataclasses.replace(p, params={**p.params, "schedule": "dynamic"})
    V.reference_outputs(other, outputs)
    assert len(calls) == 1  # another point is interpreted


def _fake_sweeps(monkeypatch, tmp_path, run):
    """``main`` over two fake sweeps of one point per depth setting, ``run(name, index)`` giving
    each point's result, writing into ``tmp_path``."""
    monkeypatch.setattr(V, "OUT", tmp_path)
    monkeypatch.setattr(V, "SPEED", tmp_path / "validate_speed.json")
    monkeypatch.setattr(V, "SWEEPS", {"first": None, "second": None})

    def points(name, depths, memory):
        return [V.Point(name, {"depths": d}, None, {}, None, f"{name}_{d}") for d in depths]

    monkeypatch.setattr(V, "_sweep_points", points)
    monkeypatch.setattr(
        V, "_run_all", lambda tasks, options, jobs: ([run(*t) for t in tasks], {"first": 1.0})
    )
    monkeypatch.setattr(V, "plot", lambda points, path: None)


def _measured(name, index):
    depths = ("default", "sized")[index]
    sizing = None if index == 0 else {"images": 3, "held_out": 2, "held_out_added": [1],
                                      "held_out_worst": 1.004, "held_out_deadlocked": 0,
                                      "bits_sized": 10}  # fmt: skip
    return {"workload": name, "params": {"depths": depths}, "design": f"{name}_{depths}",
            "rtl_cycles": 100, "sim_cycles": 100, "paper_cycles": 90, "outputs_match": True,
            "sizing": sizing, "_speed": {"sim_wall_s": 0.1}}  # fmt: skip


def test_the_run_prints_how_its_designs_were_sized(monkeypatch, tmp_path, capsys):
    _fake_sweeps(monkeypatch, tmp_path, _measured)
    V.main([])
    assert (
        "sized depths: 2 designs, 6 images sized on (2 of them held out and added), 4 held-out "
        "images checked, worst held-out 1.0040 x its reference\n" in capsys.readouterr().out
    )


def test_a_run_that_measures_nothing_keeps_the_last_summary(monkeypatch, tmp_path):
    # e.g. --cached-only after the simulator changed (no sizing cached): an error naming the
    # first skipped point, and the last run's summary and speed file stay
    def uncached(name, index):
        return {"error": f"{name}_{index}: NotCached: no cached sizing", "fatal": False}

    _fake_sweeps(monkeypatch, tmp_path, uncached)
    (tmp_path / "summary.json").write_text("last run\n")
    with pytest.raises(SystemExit, match=r"none of 4 points ran: first_0: NotCached: no cached"):
        V.main(["--cached-only"])
    assert (tmp_path / "summary.json").read_text() == "last run\n"
    assert not (tmp_path / "validate_speed.json").exists()
    assert not (tmp_path / "report.md").exists()
    with pytest.raises(SystemExit, match="no point matches --only, --where and --depths"):
        V.main(["--where", "tile_b=7"])


def test_the_speed_file_says_whether_the_run_measured_every_point(monkeypatch, tmp_path):
    _fake_sweeps(monkeypatch, tmp_path, _measured)
    V.main([])
    speed = json.loads((tmp_path / "validate_speed.json").read_text())
    assert speed["run"]["complete"] is True and speed["run"]["cached_only"] is False
    assert [p["workload"] for p in speed["points"]] == ["first", "first", "second", "second"]
    assert speed["totals"]["sim_wall_s"] == 0.4 and speed["totals"]["rtl_build_s"] == 0.0
    # each sweep's own parts, which add up to the run's
    assert list(speed["sweep_totals"]) == ["first", "second"]
    assert [t["sim_wall_s"] for t in speed["sweep_totals"].values()] == [0.2, 0.2]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["run"] == speed["run"]
    # the report for reading is written with the summary, from it
    assert (tmp_path / "report.md").read_text() == validate_report.markdown(summary)
    for partial in (["--only", "second"], ["--depths", "default"], ["--limit", "1"]):
        V.main(partial)
        run = json.loads((tmp_path / "validate_speed.json").read_text())["run"]
        assert run["complete"] is False, partial
    V.main(["--cached-only"])  # every point from the cache: a warm run, complete
    run = json.loads((tmp_path / "validate_speed.json").read_text())["run"]
    assert run == {**speed["run"], "cached_only": True}


def test_a_failed_points_seconds_and_its_designs_sizing_stay_in_the_speed_file(
    monkeypatch, tmp_path
):
    # a point that sized its design and then failed: the sizing was spent all the same
    def second_fails(name, index):
        if name == "second" and index == 0:
            return {"error": "second_default: CosimError: deadlock", "fatal": False,
                    "_speed": {"sizing_s": 30.0, "point_s": 31.0}}  # fmt: skip
        return {**_measured(name, index), "_speed": {"sim_wall_s": 0.1, "point_s": 1.0}}

    _fake_sweeps(monkeypatch, tmp_path, second_fails)
    V.main([])
    speed = json.loads((tmp_path / "validate_speed.json").read_text())
    failed = [p for p in speed["points"] if p.get("error")]
    assert failed == [{"workload": "second", "params": {"depths": "default"}, "error": True,
                       "sizing_s": 30.0, "point_s": 31.0}]  # fmt: skip
    assert speed["totals"]["sizing_s"] == 30.0 and speed["totals"]["points_s"] == 34.0
    assert speed["run"]["complete"] is False
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["points"]) == 3
    assert summary["missing"] == ["second_default: CosimError: deadlock"]


def test_every_failed_point_is_missing_and_said_once_per_design(monkeypatch, tmp_path, capsys):
    # two points of one design skipped for the same reason: the acceptance line counts both
    # ("2 failed or skipped"), the run prints the reason once
    _fake_sweeps(monkeypatch, tmp_path, None)

    def points(name, depths, memory):
        return [V.Point(name, {"depths": d}, None, {}, None, "shared") for d in depths]

    def run(name, index):
        if name == "second":
            return {"error": f"shared {index}: NotCached: no cached sizing", "fatal": False}
        return {**_measured(name, index), "_speed": {"sim_wall_s": 0.1, "point_s": 1.0}}

    monkeypatch.setattr(V, "_sweep_points", points)
    monkeypatch.setattr(
        V, "_run_all", lambda tasks, options, jobs: ([run(*t) for t in tasks], {"first": 1.0})
    )
    V.main([])
    assert capsys.readouterr().out.count("second: skipped shared") == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["missing"] == [f"shared {i}: NotCached: no cached sizing" for i in (0, 1)]
    (ran,) = [a for a in summary["acceptance"] if a["criterion"] == "every selected point ran"]
    assert ran["value"].startswith("2 failed or skipped") and ran["met"] is False


def test_a_failed_point_reports_the_sizing_it_did(monkeypatch, tmp_path):
    sizing = tmp_path / "design.json"
    monkeypatch.setattr(V, "_sized_here", {sizing: 12.5})
    point = V.Point("first", {"depths": "sized"}, None, {}, None, "first_sized", optional=True,
                    sizing=sizing)  # fmt: skip
    monkeypatch.setattr(V, "_sweep_points", lambda *a: [point])

    def fail(p, **options):
        raise RuntimeError("no build")

    monkeypatch.setattr(V, "run_point", fail)
    # _run_indexed sets the module's TRACES (in a worker process); restored after this test,
    # or the sweeps built later in this pytest worker would read traces from None
    monkeypatch.setattr(V, "TRACES", V.TRACES)
    r = V._run_indexed("first", 0, {"traces": V.TRACES, "depths": ("sized",), "memory": None})
    assert r["error"].endswith("RuntimeError: no build") and r["fatal"] is False
    assert r["_speed"] == {"sizing_s": 12.5} and V._sized_here == {}


def test_the_speed_file_counts_a_designs_sizing_once_and_sums_each_part(monkeypatch, tmp_path):
    # the sizing's seconds go to the first point that reports them, and only when this run
    # sized the design (a cached sizing costs nothing)
    import types

    import sim.sizing

    monkeypatch.setattr(V, "SIZING", tmp_path / "sizing")
    monkeypatch.setattr(V, "_sized_here", {})
    report = types.SimpleNamespace(depths={"x": 1}, cycles_deep=1, cycles_sized=2,
                                   cycles_default=3, simulations=4, images=1, held_out_added=[],
                                   held_out_cycles=[], bits_sized=5)  # fmt: skip
    monkeypatch.setattr(sim.sizing, "plan_queue_sizes", lambda *a, **k: report)
    group = V.swiglu_points()[:1]
    memory = V.MemoryModel.axi_ram()
    assert V.sized_depths(group, memory) == {"x": 1}
    path = V.sizing_file(group, memory)
    recorded = json.loads(path.read_text())["wall_s"]
    assert V._sized_here == {path: recorded} and recorded > 0
    V._sized_here.clear()
    assert V.sized_depths(group, memory) == {"x": 1}  # read back: not sized again
    assert V._sized_here == {}
    speed = [{"sizing_s": 2.0, "rtl_build_s": 10.0, "rtl_run_s": 1.5, "reference_s": 0.5,
              "point_s": 15.0},
             {"rtl_elaborate_s": 3.0, "rtl_run_s": 1.5, "sim_wall_s": 0.3, "point_s": 6.0}]  # fmt: skip
    assert V.speed_totals(speed) == {"sizing_s": 2.0, "rtl_elaborate_s": 3.0, "rtl_build_s": 10.0,
                                     "rtl_run_s": 3.0, "sim_wall_s": 0.3, "paper_wall_s": 0.0,
                                     "reference_s": 0.5, "points_s": 21.0, "other_s": 2.2}  # fmt: skip
    # a warm run's points keep the seconds their cached results took: not this run's
    # (a cached point computes no reference; the first one sized its design in this run)
    warm = [{**p, "rtl_cached": True, "sim_cached": True, "reference_s": 0.0, "point_s": s}
            for p, s in zip(speed, (2.5, 0.1), strict=True)]  # fmt: skip
    assert V.speed_totals(warm) == dict.fromkeys(V.SPEED_PARTS, 0.0) | {
        "sizing_s": 2.0,
        "points_s": 2.6,
        "other_s": 0.6,
    }


def test_sized_depths_hold_on_the_designs_other_points(monkeypatch, tmp_path):
    """A design is sized on its first SIZING_IMAGES points' images and checked on the others'
    (held out): the hardware-size interleaved attention's depths miss one held-out KV batch,
    which is sized on too; every held-out image ends within 1% of its reference, and the sized
    points and the run's summary line say so."""
    monkeypatch.setattr(V, "SIZING", tmp_path / "sizing")
    group = [p for p in V.attention_points() if p.design == "attention_interleaved"]
    assert len(group) > V.SIZING_IMAGES
    memory = V.MemoryModel.axi_ram()
    depths = V.sized_depths(group, memory)
    cached = json.loads(V.sizing_file(group, memory).read_text())
    assert cached["depths"] == depths
    held = cached["held_out_cycles"]
    assert len(held) == len(group) - V.SIZING_IMAGES
    assert all(c is not None and c <= ref * 1.01 for c, ref in held)
    assert cached["images"] == V.SIZING_IMAGES + len(cached["held_out_added"])
    assert cached["held_out_added"]  # this design's first three KV batches do not cover all
    record = V.sizing_record(V.with_sized_depths(group[0], group, memory))
    assert record["held_out"] == len(held) and record["held_out_deadlocked"] == 0
    assert record["held_out_worst"] == max(c / ref for c, ref in held) <= 1.01
    assert V.sizing_record(group[0]) is None  # the default depths
    # a default point of a design with sized points shares its sizing file, not its depths
    shared = dataclasses.replace(group[0], sizing=V.sizing_file(group, memory))
    assert V.sizing_record(shared) is None
    line = V.sizing_line([{"design": "a", "sizing": record}, {"design": "b", "sizing": None}])
    added = len(cached["held_out_added"])
    assert line.startswith(
        f"sized depths: 1 designs, {cached['images']} images sized on ({added} of them held out "
        f"and added), {len(held)} held-out images checked, worst held-out "
    )
    assert V.sizing_line([{"design": "b", "sizing": None}]) == "sized depths: none in this run"
