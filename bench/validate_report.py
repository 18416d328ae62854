"""``make validate``'s report for reading: ``build/validate/report.md``, from ``summary.json``.

``summary.json`` is for programs and ``validate.png`` / ``fig8.png`` are for the eye. The report
is the run in tables:

* what the run measured;
* its verdict (:mod:`bench.validate_acceptance`);
* each sweep's agreement per profile and depth setting, and how often each profile picks the
  RTL's fastest option;
* the Fig. 8 grid per depth setting, with the AXI efficiency and the roofline's bound;
* the comparisons a profile got wrong, with every option's cycles;
* every point's cycles, RTL against each profile.

``make validate`` writes it beside the summary. ``python -m bench.validate_report [SUMMARY]
[-o REPORT]`` writes it again from any summary (default ``build/validate/summary.json``, the
report beside it). Pure Python on the summary's fields, as the verdict is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.validate_acceptance import PROFILES, memory_bound, picks, point_name, sweep_of
from step_hw.paths import write_atomically

__all__ = ["main", "markdown"]

_MARK = {True: "met", False: "**NOT MET**", None: "reported"}


def markdown(summary: dict[str, Any]) -> str:
    """The report of the run ``summary`` describes (``summary.json``'s fields), as Markdown."""
    parts = [
        "# `make validate`: the simulator against the RTL",
        _run(summary),
        _verdict(summary.get("acceptance", [])),
        _agreement(summary),
        _fig8(summary.get("fig8_grid")),
        _missed(summary.get("comparisons", [])),
        _points(summary["points"]),
        _missing(summary.get("missing", [])),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]], right: int = 0) -> str:
    """A Markdown table; the last ``right`` columns aligned right (numbers)."""
    align = ["---"] * (len(head) - right) + ["---:"] * right
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _vs(sim: int | None, rtl: int) -> str:
    """A profile's cycles against the RTL's: ``exact``, or the cycles and the relative error."""
    if sim is None:
        return "-"
    if sim == rtl:
        return "exact"
    return f"{sim:,} ({(sim - rtl) / rtl:+.1%})"


def _run(summary: dict[str, Any]) -> str:
    run = summary.get("run", {})
    points = summary["points"]
    lines = [
        f"* sweeps: {', '.join(run.get('only', [])) or '-'}; depth settings: "
        f"{', '.join(run.get('depths', [])) or '-'}",
        f"* co-simulation tier of the hardware-size sweeps: {summary.get('tier', '-')} (the "
        "paper-scale sweeps run on the fast tier with the HBM-like memory)",
        f"* points measured: {len(points)}, failed or skipped: {len(summary.get('missing', []))}",
        f"* complete (every point of every sweep at every depth setting): "
        f"{'yes' if run.get('complete') else 'no'}; started from an empty cache (cold): "
        f"{'yes' if run.get('cold') else 'no'}; RTL from the cache only: "
        f"{'yes' if run.get('cached_only') else 'no'}",
        f"* wall time: {summary.get('wall_s', 0) / 60:.1f} min",
    ]
    if run.get("where") or run.get("limit"):
        where = ", ".join(run.get("where") or []) or "-"
        lines.append(f"* filters: --where {where}; --limit {run.get('limit') or '-'} per sweep")
    return "## The run\n\n" + "\n".join(lines)


def _verdict(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    table = _table(
        ["verdict", "figure", "scope", "value", "bar"],
        [[_MARK[r["met"]], r["criterion"], r["scope"], r["value"], r["bar"]] for r in rows],
    )
    return "## Verdict (`bench/validate_acceptance.py`)\n\n" + table


def _sweeps(points: list[dict[str, Any]]) -> list[str]:
    """The sweeps (with their depth settings) in the order the run measured them."""
    return list(dict.fromkeys(sweep_of(p) for p in points))


def _fit(st: dict[str, Any] | None) -> str:
    if not st:
        return "-"
    return f"{st['pearson']:.4f}, {st['mare']:.2%}, {st['max_rel_error']:.2%}"


def _picks(comparisons: list[dict[str, Any]], sweep: str, profile: str) -> str:
    judged = picks(comparisons, profile).get(sweep)
    if not judged:
        return "-"
    return f"{sum(c[f'{profile}_profile_agrees'] for c in judged)} of {len(judged)}"


def _agreement(summary: dict[str, Any]) -> str:
    stats, comps = summary.get("stats", {}), summary.get("comparisons", [])
    rows = []
    for sweep in _sweeps(summary["points"]):
        n = sum(1 for p in summary["points"] if sweep_of(p) == sweep)
        row: list[Any] = [sweep, n]
        row += [_fit(stats.get(profile, {}).get(sweep)) for profile in PROFILES]
        row += [_picks(comps, sweep, profile) for profile in PROFILES]
        rows.append(row)
    head = ["sweep", "points"]
    head += [f"{profile} profile: Pearson, mean error, worst" for profile in PROFILES]
    head += [f"fastest option picked ({profile} profile)" for profile in PROFILES]
    return "## Agreement per sweep\n\n" + _table(head, rows)


def _fig8(grid: dict[str, Any] | None) -> str:
    if not grid:
        return ""
    out = ["## Fig. 8 on our RTL"]
    for depths in (d for d in grid if d not in ("tile_b", "tile_i")):
        g = grid[depths]
        rows = []
        for r, b in enumerate(grid["tile_b"]):
            for c, i in enumerate(grid["tile_i"]):
                rtl = g["rtl_cycles"][r][c]
                if rtl is None:
                    continue
                bound = {True: "memory", False: "compute", None: "-"}[g["memory_bound"][r][c]]
                row: list[Any] = [f"{b} x {i}", bound, f"{rtl:,}"]
                row += [_vs(g[field][r][c], rtl) for field in PROFILES.values()]
                row.append(f"{g['axi_efficiency'][r][c]:.0%}")
                rows.append(row)
        head = ["tile_b x tile_i", "bound", "RTL cycles"]
        head += [f"{profile} profile" for profile in PROFILES]
        head.append("AXI efficiency")
        table = _table(head, rows, right=len(PROFILES) + 2)
        out.append(f"{depths.capitalize()} queue depths:\n\n{table}")
    return "\n\n".join(out)


def _missed(comparisons: list[dict[str, Any]]) -> str:
    lines = []
    for c in comparisons:
        wrong = [
            f"{profile} profile picks {c[f'{profile}_profile_winner']}"
            for profile in PROFILES
            if c.get(f"{profile}_profile_agrees") is False
        ]
        if wrong:
            options = ", ".join(
                f"{name} {' / '.join('-' if v is None else f'{v:,}' for v in cycles)}"
                for name, cycles in c["options"].items()
            )
            lines.append(
                f"* {c['workload']} {c['case']}: the RTL's fastest is {c['rtl_winner']}; "
                f"{'; '.join(wrong)} (cycles RTL / {' / '.join(PROFILES)} profile: {options})"
            )
    title = "## Comparisons a profile got wrong"
    return f"{title}\n\n" + ("\n".join(lines) if lines else "None.")


def _points(points: list[dict[str, Any]]) -> str:
    out = ["## Every point"]
    for sweep in _sweeps(points):
        rows = []
        for p in (p for p in points if sweep_of(p) == sweep):
            name = point_name(p).removeprefix(f"{p['workload']} ")
            row: list[Any] = [name, "yes" if p["outputs_match"] else "**no**"]
            row.append(f"{p['rtl_cycles']:,}")
            row += [_vs(p.get(field), p["rtl_cycles"]) for field in PROFILES.values()]
            eff = p.get("axi_efficiency")
            if eff is None:
                row.append("-")
            else:
                row.append(f"{eff:.0%}" + (" (compute-bound)" if memory_bound(p) is False else ""))
            rows.append(row)
        head = ["point", "bit-exact", "RTL cycles"]
        head += [f"{profile} profile" for profile in PROFILES]
        head.append("AXI efficiency")
        out.append(f"### {sweep}\n\n" + _table(head, rows, right=len(PROFILES) + 2))
    return "\n\n".join(out)


def _missing(missing: list[str]) -> str:
    if not missing:
        return ""
    return "## Failed or skipped\n\n" + "\n".join(f"* `{_cell(m)}`" for m in missing)


def main(argv: list[str] | None = None) -> Path:
    """Write the report of a ``summary.json`` (``python -m bench.validate_report``)."""
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("summary", nargs="?", type=Path,
                    default=root / "build" / "validate" / "summary.json")  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, help="default: report.md beside the summary")
    args = ap.parse_args(argv)
    try:
        summary = json.loads(args.summary.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"validate_report: cannot read {args.summary}: {exc}") from None
    out = args.output or args.summary.with_name("report.md")
    write_atomically(out, markdown(summary))
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
