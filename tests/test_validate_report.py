"""``make validate``'s report (``bench/validate_report.py``): the run's summary in tables."""

from __future__ import annotations

import json

import pytest

from bench import validate as V
from bench import validate_acceptance as A
from bench import validate_report as R


def _fig8(b, i, rtl, sim, paper, eff, depths="default", bound=True):
    return {
        "workload": "fig8",
        "params": {"tile_b": b, "tile_i": i, "depths": depths},
        "rtl_cycles": rtl,
        "sim_cycles": sim,
        "paper_cycles": paper,
        "outputs_match": True,
        "axi_efficiency": eff,
        "memory_floor_cycles": 100.0,
        "compute_floor_cycles": 50.0 if bound else 200.0,
    }


def _moe(routing, schedule, rtl, sim, paper, match=True):
    return {
        "workload": "moe_scale",
        "params": {"routing": routing, "schedule": schedule, "depths": "default"},
        "rtl_cycles": rtl,
        "sim_cycles": sim,
        "paper_cycles": paper,
        "outputs_match": match,
        "axi_efficiency": 0.25,
        "memory_floor_cycles": 10.0,
        "compute_floor_cycles": None,
    }


def _summary(points, missing=(), run=None):
    summary = {
        "tier": "fast",
        "points": points,
        "stats": {name: V.stats(points, field) for name, field in A.PROFILES.items()},
        "comparisons": V.comparisons(points),
        "missing": list(missing),
        "wall_s": 90.0,
        "run": run
        or {"only": ["fig8", "moe_scale"], "depths": ["default", "sized"], "complete": False},
    }
    if any(p["workload"] == "fig8" for p in points):
        summary["fig8_grid"] = V.fig8_grid(points)
    summary["acceptance"] = A.judge(summary, [])
    return summary


POINTS = [
    _fig8(16, 16, 1000, 1000, 1100, 0.90),
    _fig8(64, 256, 800, 800, 760, 0.43, bound=False),
    _fig8(16, 16, 990, 990, 1000, 0.91, depths="sized"),
    _moe("t16", "static", 300, 300, 120),
    _moe("t16", "dynamic", 100, 100, 150, match=False),
]


def _section(text, title):
    """The lines of the report's section ``title`` (up to the next heading of any level)."""
    lines = text.split("\n")
    start = lines.index(title) + 1
    end = next((k for k in range(start, len(lines)) if lines[k].startswith("#")), len(lines))
    return [line for line in lines[start:end] if line]


def test_the_verdict_is_the_acceptance_rows_marked():
    text = R.markdown(_summary(POINTS, missing=["moe_scale t32: NotCached: no cached sizing"]))
    rows = _section(text, "## Verdict (`bench/validate_acceptance.py`)")
    assert rows[0] == "| verdict | figure | scope | value | bar |"
    assert len(rows) == 2 + len(A.judge(_summary(POINTS), []))
    assert rows[2].startswith("| **NOT MET** | every selected point ran | the run | 1 failed")
    # the dynamic point's outputs differ: the bit-exact row names it
    assert "| **NOT MET** | outputs bit-exact | every point | 4 of 5 points; not: moe_scale" in text
    assert (
        "| reported | paper profile picks the RTL's fastest option | moe_scale | 0 of 1; missed: "
        "t16 (static for dynamic) | reported |"
    ) in text


def test_agreement_per_sweep_and_depth_setting_in_the_order_measured():
    rows = _section(R.markdown(_summary(POINTS)), "## Agreement per sweep")
    assert [r.split(" | ")[0] for r in rows[2:]] == [
        "| fig8",
        "| fig8 (sized depths)",
        "| moe_scale",
    ]
    moe = rows[4].split(" | ")
    assert moe[1] == "2"  # points
    assert moe[2] == "1.0000, 0.00%, 0.00%"  # the rtl profile is exact
    paper = A.PROFILES["paper"]
    st = V.stats(POINTS, paper)["moe_scale"]
    assert moe[3] == f"{st['pearson']:.4f}, {st['mare']:.2%}, {st['max_rel_error']:.2%}"
    assert moe[3] == "-1.0000, 55.00%, 60.00%"
    assert (moe[4], moe[5]) == ("1 of 1", "0 of 1 |")


def test_the_fig8_grid_per_depth_setting_with_each_profiles_error_and_the_bound():
    text = R.markdown(_summary(POINTS))
    rows = _section(text, "## Fig. 8 on our RTL")
    assert rows[0] == "Default queue depths:"
    assert rows[1].startswith("| tile_b x tile_i | bound | RTL cycles | rtl profile |")
    assert rows[3] == "| 16 x 16 | memory | 1,000 | exact | 1,100 (+10.0%) | 90% |"
    assert rows[4] == "| 64 x 256 | compute | 800 | exact | 760 (-5.0%) | 43% |"
    assert rows[5] == "Sized queue depths:"
    assert rows[8] == "| 16 x 16 | memory | 990 | exact | 1,000 (+1.0%) | 91% |"
    assert len(rows) == 9  # the missing tilings are left out, not shown empty


def test_a_wrong_pick_lists_every_options_cycles():
    rows = _section(R.markdown(_summary(POINTS)), "## Comparisons a profile got wrong")
    assert rows == [
        "* moe_scale t16: the RTL's fastest is dynamic; paper profile picks static (cycles RTL "
        "/ rtl / paper profile: static 300 / 300 / 120, dynamic 100 / 100 / 150)"
    ]
    right = [_moe("t16", "static", 300, 300, 200), _moe("t16", "dynamic", 100, 100, 90)]
    assert _section(R.markdown(_summary(right)), "## Comparisons a profile got wrong") == ["None."]


def test_every_point_per_sweep():
    text = R.markdown(_summary(POINTS))
    fig8 = _section(text, "### fig8")
    assert fig8[2] == "| 16 x 16 | yes | 1,000 | exact | 1,100 (+10.0%) | 90% |"
    assert fig8[3] == "| 64 x 256 | yes | 800 | exact | 760 (-5.0%) | 43% (compute-bound) |"
    assert _section(text, "### fig8 (sized depths)")[2].startswith("| 16 x 16 (sized) | yes | 990")
    moe = _section(text, "### moe_scale")
    assert moe[3] == "| t16 dynamic | **no** | 100 | exact | 150 (+50.0%) | 25% |"


def test_a_summary_without_a_grid_verdict_or_paper_profile():
    p = _moe("t16", "static", 300, 301, 200)
    del p["paper_cycles"]
    summary = {"points": [p], "run": {}, "wall_s": 3.0}
    text = R.markdown(summary)
    assert "## Verdict" not in text and "## Fig. 8" not in text and "## Failed" not in text
    assert "| t16 static | yes | 300 | 301 (+0.3%) | - | 25% |" in text


def test_the_run_says_what_it_measured():
    run = {"only": ["fig8"], "depths": ["sized"], "where": ["tile_b=32", "tile_i=64"], "limit": 2,
           "complete": False, "cold": True, "cached_only": False}  # fmt: skip
    rows = _section(R.markdown(_summary(POINTS[:1], run=run)), "## The run")
    assert rows[0] == "* sweeps: fig8; depth settings: sized"
    assert rows[2] == "* points measured: 1, failed or skipped: 0"
    assert rows[3].startswith("* complete (every point of every sweep at every depth setting): no;")
    assert "started from an empty cache (cold): yes" in rows[3]
    assert rows[4] == "* wall time: 1.5 min"
    assert rows[5] == "* filters: --where tile_b=32, tile_i=64; --limit 2 per sweep"
    # an unfiltered run says nothing of filters
    assert not any("filters" in r for r in _section(R.markdown(_summary(POINTS)), "## The run"))


def test_the_missing_points_are_listed():
    text = R.markdown(_summary(POINTS, missing=["fig8_b32_i32 {...}: NotCached: a | b"]))
    assert _section(text, "## Failed or skipped") == ["* `fig8_b32_i32 {...}: NotCached: a \\| b`"]


def test_the_command_writes_the_report_beside_the_summary(tmp_path, capsys):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_summary(POINTS)))
    out = R.main([str(path)])
    assert out == tmp_path / "report.md"
    assert out.read_text() == R.markdown(_summary(POINTS))
    assert capsys.readouterr().out == f"wrote {out}\n"
    other = R.main([str(path), "-o", str(tmp_path / "r.md")])
    assert other.read_text() == out.read_text()


@pytest.mark.parametrize("content", [None, '{"points": [', "not json"])
def test_an_unreadable_summary_is_one_line(tmp_path, content):
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as err:
        R.main([str(path)])
    assert str(err.value).startswith(f"validate_report: cannot read {path}: ")
    assert "\n" not in str(err.value)
