"""``make validate``'s verdict on its own run (``bench/validate_acceptance.py``): each acceptance
figure judged from the summary's points, statistics and comparisons."""

from __future__ import annotations

import json

import pytest

from bench import validate as V
from bench import validate_acceptance as A


def _fig8(b, i, rtl, *, eff, memory, compute, depths="default", match=True):
    return {"workload": "fig8", "params": {"tile_b": b, "tile_i": i, "depths": depths},
            "rtl_cycles": rtl, "sim_cycles": rtl, "paper_cycles": rtl, "outputs_match": match,
            "axi_efficiency": eff, "memory_floor_cycles": memory,
            "compute_floor_cycles": compute}  # fmt: skip


def _summary(points, *, complete=True, wall=60.0, missing=(), cold=False):
    return {
        "points": points,
        "stats": {name: V.stats(points, field) for name, field in V.PROFILES.items()},
        "comparisons": V.comparisons(points),
        "run": {"complete": complete, "cold": cold},
        "wall_s": wall,
        "missing": list(missing),
    }


def _rows(rows, criterion):
    return [r for r in rows if r["criterion"] == criterion]


def test_memory_bound_is_the_roofline_of_the_two_floors():
    assert A.memory_bound({"memory_floor_cycles": 100.0, "compute_floor_cycles": 100.0})
    assert A.memory_bound({"memory_floor_cycles": 99.0, "compute_floor_cycles": 100.0}) is False
    # FLOPs that depend on the data: no floor, no verdict
    assert A.memory_bound({"memory_floor_cycles": 99.0, "compute_floor_cycles": None}) is None


def test_axi_efficiency_is_judged_at_the_memory_bound_fig8_points_only():
    points = [
        _fig8(16, 16, 1000, eff=0.99, memory=990, compute=100),
        _fig8(64, 64, 1000, eff=0.80, memory=800, compute=800),  # on the ridge: memory-bound
        _fig8(64, 256, 1000, eff=0.40, memory=400, compute=900),  # compute-bound
    ]
    (row,) = _rows(A.judge(_summary(points), []), "AXI efficiency")
    assert row["met"] is False and row["scope"] == "fig8"
    assert row["value"] == (
        "1 of 2 memory-bound points (lowest 80%); below: fig8 64 x 64 80%; "
        "compute-bound: fig8 64 x 256 40%"
    )
    points[1]["axi_efficiency"] = 0.85
    (row,) = _rows(A.judge(_summary(points), []), "AXI efficiency")
    assert row["met"] is True and row["value"].startswith("2 of 2 memory-bound points")


def test_axi_efficiency_has_no_verdict_without_every_points_floor():
    points = [_fig8(16, 16, 1000, eff=0.99, memory=990, compute=100),
              _fig8(32, 16, 1000, eff=0.70, memory=700, compute=None)]  # fmt: skip
    (row,) = _rows(A.judge(_summary(points), []), "AXI efficiency")
    assert row["met"] is None


def test_each_depth_setting_is_its_own_scope():
    points = [
        _fig8(16, 16, 1000, eff=0.99, memory=990, compute=100),
        _fig8(16, 32, 900, eff=0.99, memory=890, compute=100),
        _fig8(16, 16, 1000, eff=0.70, memory=990, compute=100, depths="sized"),
        _fig8(16, 32, 950, eff=0.99, memory=890, compute=100, depths="sized"),
    ]
    points[2]["sim_cycles"] = 1100  # the rtl profile 10% slow at one sized point
    rows = A.judge(_summary(points), [])
    rtl = {r["scope"]: r["met"] for r in _rows(rows, "rtl profile against RTL")}
    assert rtl == {"fig8": True, "fig8 (sized depths)": False}
    axi = {r["scope"]: r["met"] for r in _rows(rows, "AXI efficiency")}
    assert axi == {"fig8": True, "fig8 (sized depths)": False}


def test_profile_bars_are_per_sweep():
    # rtl profile: every one of Pearson, mean and worst error must hold
    good = [_fig8(16, i, 1000 + 100 * i, eff=1, memory=1, compute=0) for i in (1, 2, 3, 4)]
    rows = A.judge(_summary(good), [])
    assert [r["met"] for r in _rows(rows, "rtl profile against RTL")] == [True]
    # one small point 6% off among large ones: Pearson and the mean hold, the worst does not
    worst = [_fig8(16, i, 10**i, eff=1, memory=1, compute=0) for i in (3, 4, 5, 6)]
    worst[0]["sim_cycles"] = 1060
    (row,) = _rows(A.judge(_summary(worst), []), "rtl profile against RTL")
    assert row["met"] is False
    assert row["value"] == "Pearson 1.0000, mean 1.50%, worst 6.00% (4 points)"
    # and one a little off everywhere: the mean does not hold
    mean = [dict(p, sim_cycles=round(p["rtl_cycles"] * 1.03)) for p in worst]
    (row,) = _rows(A.judge(_summary(mean), []), "rtl profile against RTL")
    assert row["met"] is False and "mean 3.00%" in row["value"]
    # the paper profile: Pearson only, its errors reported
    paper = [dict(p) for p in good]
    for p, off in zip(paper, (1.3, 1.0, 0.8, 1.0), strict=True):
        p["paper_cycles"] = round(p["rtl_cycles"] * off)
    (row,) = _rows(A.judge(_summary(paper), []), "paper profile against RTL")
    assert row["met"] is False and row["bar"] == "Pearson >= 0.99"


def test_the_rtl_profiles_picks_are_judged_and_the_paper_profiles_reported():
    def moe(routing, schedule, rtl, sim, paper):
        return {"workload": "moe_scale", "params": {"routing": routing, "schedule": schedule,
                "depths": "default"}, "rtl_cycles": rtl, "sim_cycles": sim,
                "paper_cycles": paper, "outputs_match": True}  # fmt: skip

    points = [moe("r0", "static", 100, 100, 90), moe("r0", "dynamic", 120, 120, 80),
              moe("r1", "static", 100, 130, 100), moe("r1", "dynamic", 120, 120, 130)]  # fmt: skip
    rows = A.judge(_summary(points), [])
    (rtl,) = _rows(rows, "rtl profile picks the RTL's fastest option")
    assert rtl["met"] is False
    assert rtl["value"] == "1 of 2; missed: r1 (dynamic for static)"
    (paper,) = _rows(rows, "paper profile picks the RTL's fastest option")
    assert paper["met"] is None and paper["value"] == "1 of 2; missed: r0 (dynamic for static)"


def test_bit_exactness_and_failed_points_are_judged():
    points = [_fig8(16, 16, 1000, eff=0.99, memory=990, compute=100),
              _fig8(16, 32, 900, eff=0.99, memory=890, compute=100, match=False)]  # fmt: skip
    rows = A.judge(_summary(points, missing=["fig8_b32: CosimError: deadlock"]), [])
    assert rows[0]["criterion"] == "every selected point ran" and rows[0]["met"] is False
    assert rows[0]["value"] == "1 failed or skipped: fig8_b32: CosimError: deadlock"
    (exact,) = _rows(rows, "outputs bit-exact")
    assert exact["met"] is False and exact["value"] == "1 of 2 points; not: fig8 16 x 32"


@pytest.mark.parametrize(
    ("complete", "cached", "cold", "wall", "scope", "met"),
    [
        (True, True, False, 280.0, "warm (every result cached)", True),
        (True, True, False, 320.0, "warm (every result cached)", False),
        (True, False, True, 2800.0, "cold (every cache empty at the start)", True),
        (True, False, True, 3700.0, "cold (every cache empty at the start)", False),
        (True, False, False, 280.0, "neither warm nor cold (some results cached)", None),
        (False, False, True, 10.0, "this run (partial)", None),
        (False, True, False, 10.0, "this run (partial)", None),
    ],
)
def test_the_time_is_judged_for_a_complete_warm_or_cold_run(
    complete, cached, cold, wall, scope, met
):
    points = [_fig8(16, 16, 1000, eff=0.99, memory=990, compute=100)]
    speed = [{"rtl_cached": cached, "sim_cached": cached}]
    (row,) = _rows(A.judge(_summary(points, complete=complete, wall=wall, cold=cold), speed),
                   "make validate's time")  # fmt: skip
    assert (row["scope"], row["met"]) == (scope, met)
    assert row["value"] == f"{wall / 60:.1f} min wall"


def test_the_table_marks_each_row():
    rows = [A._row("a", "s", "v", "b", True), A._row("c", "t", "w", "d", False),
            A._row("e", "u", "x", "f", None)]  # fmt: skip
    assert A.table(rows).splitlines() == [
        "met      a, s: v (bar: b)",
        "NOT MET  c, t: w (bar: d)",
        "reported e, u: x (bar: f)",
    ]


def test_compute_floor_is_the_busiest_nodes_flops_at_the_rate():
    from bench import validate_scale as S

    # each of gate, up and down: 64 x 256 x 512 multiply-adds, 2 FLOPs each
    assert V.compute_floor_cycles(S.fig8_graph(64, 64), 128) == 64 * 256 * 512 * 2 / 128
    # FLOPs that depend on routing: no floor
    moe = V.moe_points()[0].make()
    assert V.compute_floor_cycles(moe, 128) is None


def _fake(monkeypatch, tmp_path, result):
    """``main`` over one fake Fig. 8 sweep of two points, ``result(index)`` giving each point's
    result, writing into ``tmp_path``."""
    monkeypatch.setattr(V, "OUT", tmp_path)
    monkeypatch.setattr(V, "SPEED", tmp_path / "validate_speed.json")
    monkeypatch.setattr(V, "SWEEPS", {"fig8": None})
    point = V.Point("fig8", {}, None, {}, None, "d")
    monkeypatch.setattr(V, "_sweep_points", lambda name, depths, memory: [point, point])
    monkeypatch.setattr(
        V, "_run_all", lambda tasks, options, jobs: ([result(i) for _, i in tasks], {"fig8": 1.0})
    )
    monkeypatch.setattr(V, "plot", lambda points, path: None)
    monkeypatch.setattr(V, "plot_fig8", lambda grid, path: None)


def test_summary_keeps_the_verdict_and_strict_exits_on_a_figure_not_met(monkeypatch, tmp_path):
    def result(index):
        p = _fig8(16, 16 * (index + 1), 1000, eff=0.99 - 0.3 * index, memory=900, compute=100)
        return {**p, "_speed": {"rtl_cached": False, "sim_cached": False}}

    _fake(monkeypatch, tmp_path, result)
    V.main(["--depths", "default"])  # a figure not met is reported, not an error
    summary = json.loads((tmp_path / "summary.json").read_text())
    axi = _rows(summary["acceptance"], "AXI efficiency")
    assert [r["met"] for r in axi] == [False]
    with pytest.raises(
        SystemExit, match=r"1 acceptance figure\(s\) not met .*AXI efficiency, fig8"
    ):
        V.main(["--depths", "default", "--strict"])


def test_memory_tail_is_the_last_reads_end_and_the_last_node_that_is_not_memory():
    from types import SimpleNamespace

    from bench import validate_scale as S
    from sim.result import NodeStats

    graph = S.fig8_graph(64, 64)
    finish = {name: 10 for name in graph.nodes}
    finish.update(load_x=90, load_down=120, down=150, gate=140, store=170)
    result = SimpleNamespace(nodes={n: NodeStats(n, "", finish=f) for n, f in finish.items()})
    # the store ends last, but it is memory: the memory waits for down
    assert V.memory_tail(result, graph) == {"reads_done_cycle": 120, "last_compute": ["down", 150]}


def test_a_point_below_the_axi_bar_says_what_its_memory_waits_for():
    p = _fig8(32, 256, 272_865, eff=0.77, memory=209_000, compute=131_072)
    p.update(reads_done_cycle=204_872, last_compute=["down", 270_591])
    (row,) = _rows(A.judge(_summary([p]), []), "AXI efficiency")
    assert row["value"] == (
        "0 of 1 memory-bound points (lowest 77%); below: fig8 32 x 256 77% (reads done at "
        "cycle 204,872, then the memory idle 67,993 cycles, 25% of the run, while down works "
        "to 270,591)"
    )


def test_the_fig8_grid_marks_each_tiling_memory_or_compute_bound():
    points = [
        _fig8(16, 16, 1000, eff=0.99, memory=990, compute=100),
        _fig8(64, 256, 1000, eff=0.43, memory=430, compute=900),
    ]
    grid = V.fig8_grid(points)["default"]["memory_bound"]
    assert grid[0][0] is True  # tile_b 16, tile_i 16
    assert grid[2][4] is False  # tile_b 64, tile_i 256
    assert grid[1][2] is None  # not run
