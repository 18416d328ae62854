"""``make validate`` judges its own run: each acceptance figure of the validation, met or not.

The figures (docs/validation.md, "Acceptance: the run's own verdict"), each judged on the
points of the run:

* **every selected point ran**: none failed or was skipped (``summary.json``'s ``missing``);
* **bit-exact**: every point's RTL outputs equal the interpreter's bit for bit (and the rtl
  profile's, where it computes them);
* **rtl profile**, per sweep and depth setting: Pearson >= :data:`RTL_PEARSON`, mean absolute
  relative error <= :data:`RTL_MARE`, worst point <= :data:`RTL_WORST`;
* **paper profile**, per sweep and depth setting: Pearson >= :data:`PAPER_PEARSON` (the paper's
  own bar), its errors reported;
* **fastest option**: in every comparison (the tilings of a tile sweep, the schedules of a
  routing or KV batch) the rtl profile picks the RTL's fastest (a tie on the RTL counts as
  either); the paper profile's picks are reported;
* **AXI efficiency** >= :data:`AXI_EFFICIENCY` at the memory-bound Fig. 8 points, per depth
  setting. A point is memory-bound when moving its bytes at the memory's peak takes at least as
  long as its busiest compute node's FLOPs at the hardware's rate (:func:`memory_bound`; the
  roofline of the point's ``memory_floor_cycles`` and ``compute_floor_cycles``). A point below
  the bar says what its memory waits for once the reads end: the cycles left and the node that
  finishes last (the rtl profile's node statistics, ``reads_done_cycle`` and ``last_compute``);
* **time** of a complete run: warm <= :data:`WARM_S` seconds when every point's RTL and
  simulations came from the cache; cold <= :data:`COLD_S` when the run started with every cache
  empty (``summary.json``'s ``run.cold``, ``bench.validate.cold_start``: no RTL or simulator
  result, sizing, reference, Verilator build, conversion or Verilator runtime object to reuse,
  as on a machine without ``build/``); any other run's time is reported.

:func:`judge` gives one row per figure and scope (``criterion``, ``scope``, ``value``, ``bar``,
``met``: ``True``, ``False`` or ``None`` for reported only); ``summary.json`` keeps them under
``acceptance`` and :func:`table` prints them. Pure Python on the summary's fields.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AXI_EFFICIENCY",
    "COLD_S",
    "PAPER_PEARSON",
    "PROFILES",
    "RTL_MARE",
    "RTL_PEARSON",
    "RTL_WORST",
    "WARM_S",
    "judge",
    "memory_bound",
    "picks",
    "point_name",
    "sweep_of",
    "table",
]

#: The simulator profiles each point runs, by the summary field of their cycles.
PROFILES = {"rtl": "sim_cycles", "paper": "paper_cycles"}
RTL_PEARSON = 0.999
RTL_MARE = 0.02
RTL_WORST = 0.05
PAPER_PEARSON = 0.99
AXI_EFFICIENCY = 0.85
#: the Fig. 8 sweep, whose memory-bound points the AXI efficiency bar is about
AXI_SWEEP = "fig8"
WARM_S = 5 * 60
COLD_S = 60 * 60


def memory_bound(point: dict[str, Any]) -> bool | None:
    """Whether ``point`` is memory-bound: its bytes at the memory's peak
    (``memory_floor_cycles``) take at least its busiest compute node's FLOPs at the hardware's
    rate (``compute_floor_cycles``); ``None`` without a compute floor (a graph whose FLOPs
    depend on its data)."""
    compute = point.get("compute_floor_cycles")
    if compute is None:
        return None
    return point["memory_floor_cycles"] >= compute


def sweep_of(point: dict[str, Any]) -> str:
    """The sweep a point's statistics belong to: its workload, with its queue depths when they
    are not the default ones (``fig8``, ``fig8 (sized depths)``)."""
    depths = point["params"].get("depths")
    if depths in (None, "default"):
        return point["workload"]
    return f"{point['workload']} ({depths} depths)"


def _row(criterion: str, scope: str, value: str, bar: str, met: bool | None) -> dict[str, Any]:
    return {"criterion": criterion, "scope": scope, "value": value, "bar": bar, "met": met}


def _fit_text(st: dict[str, Any]) -> str:
    return (
        f"Pearson {st['pearson']:.4f}, mean {st['mare']:.2%}, worst {st['max_rel_error']:.2%} "
        f"({st['points']} points)"
    )


def _bit_exact(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    wrong = [p for p in points if not p["outputs_match"]]
    value = f"{len(points) - len(wrong)} of {len(points)} points"
    if wrong:
        value += "; not: " + ", ".join(point_name(p) for p in wrong[:5])
    return [_row("outputs bit-exact", "every point", value, "all", not wrong)]


def _profiles(stats: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for sweep, st in stats.get("rtl", {}).items():
        met = (
            st["pearson"] >= RTL_PEARSON
            and st["mare"] <= RTL_MARE
            and st["max_rel_error"] <= RTL_WORST
        )
        bar = f"Pearson >= {RTL_PEARSON}, mean <= {RTL_MARE:.0%}, worst <= {RTL_WORST:.0%}"
        rows.append(_row("rtl profile against RTL", sweep, _fit_text(st), bar, met))
    for sweep, st in stats.get("paper", {}).items():
        rows.append(
            _row("paper profile against RTL", sweep, _fit_text(st), f"Pearson >= {PAPER_PEARSON}",
                 st["pearson"] >= PAPER_PEARSON)
        )  # fmt: skip
    return rows


def picks(comparisons: list[dict[str, Any]], profile: str) -> dict[str, list[dict[str, Any]]]:
    """The comparisons ``profile`` ran every option of, by sweep, each with its own verdict
    ``<profile>_profile_agrees`` (``bench.validate.comparisons``)."""
    by_sweep: dict[str, list[dict[str, Any]]] = {}
    for c in comparisons:
        if f"{profile}_profile_agrees" in c:
            by_sweep.setdefault(c["workload"], []).append(c)
    return by_sweep


def _picks(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for profile, judged in (("rtl", True), ("paper", False)):
        for sweep, cs in picks(comparisons, profile).items():
            missed = [c for c in cs if not c[f"{profile}_profile_agrees"]]
            value = f"{len(cs) - len(missed)} of {len(cs)}"
            if missed:
                value += "; missed: " + ", ".join(
                    f"{c['case']} ({c[f'{profile}_profile_winner']} for {c['rtl_winner']})"
                    for c in missed[:3]
                )
            rows.append(
                _row(f"{profile} profile picks the RTL's fastest option", sweep, value,
                     "every comparison" if judged else "reported",
                     not missed if judged else None)
            )  # fmt: skip
    return rows


def point_name(p: dict[str, Any]) -> str:
    """A point as the verdict names it: its sweep, its tiling or its routing, KV batch and
    schedule, and its depths when not the default ones (``fig8 32 x 256 (sized)``)."""
    q = p["params"]
    if "tile_b" in q:
        what = f"{q['tile_b']} x {q['tile_i']}"
    else:
        what = " ".join(str(q[k]) for k in ("routing", "kv", "schedule") if k in q)
    depths = q.get("depths", "default")
    return f"{p['workload']} {what}" + ("" if depths == "default" else f" ({depths})")


def _axi(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    by_depths: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        if p["workload"] == AXI_SWEEP:
            by_depths.setdefault(p["params"].get("depths", "default"), []).append(p)
    for depths, pts in by_depths.items():
        bound = [p for p in pts if memory_bound(p)]
        unknown = [p for p in pts if memory_bound(p) is None]
        low = [p for p in bound if p["axi_efficiency"] < AXI_EFFICIENCY]
        value = f"{len(bound) - len(low)} of {len(bound)} memory-bound points"
        if bound:
            value += f" (lowest {min(p['axi_efficiency'] for p in bound):.0%})"
        if low:
            value += "; below: " + ", ".join(_held_back(p) for p in low)
        compute = [p for p in pts if memory_bound(p) is False]
        if compute:
            value += "; compute-bound: " + ", ".join(
                f"{point_name(p)} {p['axi_efficiency']:.0%}" for p in compute
            )
        scope = AXI_SWEEP if depths == "default" else f"{AXI_SWEEP} ({depths} depths)"
        met = None if unknown or not bound else not low
        rows.append(_row("AXI efficiency", scope, value,
                         f">= {AXI_EFFICIENCY:.0%} where memory-bound", met))  # fmt: skip
    return rows


def _held_back(p: dict[str, Any]) -> str:
    """A point below the AXI bar, with what its memory waits for after the reads end (the rtl
    profile's node statistics, ``reads_done_cycle`` and ``last_compute``, where recorded)."""
    text = f"{point_name(p)} {p['axi_efficiency']:.0%}"
    done, last = p.get("reads_done_cycle"), p.get("last_compute")
    if done is None or last is None:
        return text
    idle = p["rtl_cycles"] - done
    return (
        f"{text} (reads done at cycle {done:,}, then the memory idle {idle:,} cycles, "
        f"{idle / p['rtl_cycles']:.0%} of the run, while {last[0]} works to {last[1]:,})"
    )


def _time(run: dict[str, Any], wall_s: float, speed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    warm = bool(speed) and all(s.get("rtl_cached") and s.get("sim_cached") for s in speed)
    value = f"{wall_s / 60:.1f} min wall"
    if not run.get("complete"):
        return [_row("make validate's time", "this run (partial)", value, "a complete run", None)]
    if warm:
        return [_row("make validate's time", "warm (every result cached)", value,
                     f"<= {WARM_S // 60} min", wall_s <= WARM_S)]  # fmt: skip
    if run.get("cold"):
        return [_row("make validate's time", "cold (every cache empty at the start)", value,
                     f"<= {COLD_S // 60} min", wall_s <= COLD_S)]  # fmt: skip
    return [_row("make validate's time", "neither warm nor cold (some results cached)", value,
                 f"<= {COLD_S // 60} min cold, <= {WARM_S // 60} min warm", None)]  # fmt: skip


def judge(summary: dict[str, Any], speed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The acceptance rows of a run: ``summary`` as ``summary.json`` holds it (its points,
    ``stats``, ``comparisons``, ``run`` and ``wall_s``) and ``speed``, the points' records of
    ``validate_speed.json`` (whether each point's results came from the cache)."""
    points = summary["points"]
    missing = summary.get("missing", [])
    ran = _row("every selected point ran", "the run", f"{len(missing)} failed or skipped"
               + (f": {missing[0][:120]}" if missing else ""), "none", not missing)  # fmt: skip
    return [
        ran,
        *_bit_exact(points),
        *_profiles(summary["stats"]),
        *_picks(summary["comparisons"]),
        *_axi(points),
        *_time(summary["run"], summary["wall_s"], speed),
    ]


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as text, a line each: ``met``, ``NOT MET`` or ``reported``."""
    mark = {True: "met", False: "NOT MET", None: "reported"}
    return "\n".join(
        f"{mark[r['met']]:8s} {r['criterion']}, {r['scope']}: {r['value']} (bar: {r['bar']})"
        for r in rows
    )
