"""`step paper`: the paper's experiments with the simulator's paper profile, at full model sizes.

* dynamic tiling (Fig. 9 / 10): on-chip memory against cycles for static token tiles and dynamic
  tiling, Mixtral and Qwen at batch 64 and 1024, with the Pareto Improvement Distance (PID);
* configuration time-multiplexing (Fig. 12 / 13): compute utilisation against regions, Qwen,
  batch 64, static tile 32 and dynamic tiling, ``tile_f`` 48, 1024 FLOPs/cycle per compute node;
* dynamic parallelization (Fig. 14 / 15 / 21): decode attention, dynamic against static
  interleaved and static coarse (blocks of 16 requests), by KV-length spread and batch size.

Traces come from ``--traces DIR`` (the layout of ``../shared/traces``) or synthetic generators.
Outputs: CSVs, PNG and PDF plots and ``summary.json`` with every headline next to the paper's.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from examples import moe, traces

from .registry import UsageError, moe_choices, run_point

__all__ = ["pid", "run_paper"]


# -- helpers ----------------------------------------------------------------------------------


def pid(point: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """Pareto Improvement Distance of ``point`` (cycles, memory) against the Pareto-optimal
    subset of ``others``: ``min over q of max(cycles_q / cycles_p, mem_q / mem_p)``."""
    front = [q for q in others if not any(r[0] <= q[0] and r[1] <= q[1] and r != q for r in others)]
    return min(max(q[0] / point[0], q[1] / point[1]) for q in front)


def _run_all(jobs: list[tuple[str, dict]], workers: int) -> list[dict[str, Any]]:
    if workers <= 1:
        return [run_point(name, p) for name, p in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_point, [n for n, _ in jobs], [p for _, p in jobs]))


def _write_csv(path: pathlib.Path, rows: list[dict[str, Any]]) -> None:
    import csv

    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _save(fig, out: pathlib.Path, stem: str) -> None:
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"{stem}.{ext}", dpi=120)


def _routing_trace(root: pathlib.Path | None, model: str, batch: int) -> str:
    if root is None:
        return ""
    files = traces.routing_files(root, model, batch)
    if not files:
        raise UsageError(f"no routing trace for {model} batch {batch} under {root}/expert_routing")
    return str(files[0])


# -- Fig. 9 / 10 --------------------------------------------------------------------------------

TILES = {64: [8, 16, 32, 64], 1024: [16, 32, 64, 128, 256, 512, 1024]}
PAPER_PID = {
    ("mixtral", 64): 1.33,
    ("qwen", 64): 2.11,
    ("mixtral", 1024): 1.86,
    ("qwen", 1024): 1.87,
}


def dynamic_tiling(root, out, workers, headlines, plt) -> None:
    jobs = []
    for (model, batch), _ in PAPER_PID.items():
        trace = _routing_trace(root, model, batch)
        base = {"model": model, "batch": batch, "trace": trace, "skew": 1.2, "seed": 1}
        # The artifact gives dynamic-tiling nodes 6400 FLOPs/cycle against 4096 for static tiling
        # (STEP_REFERENCE §11.7); we run both, the paper's setting and an equalised one.
        jobs.append(("moe", {**base, "tiling": "dynamic", "compute_bw": 6400}))
        jobs.append(("moe", {**base, "tiling": "dynamic", "compute_bw": 4096}))
        jobs += [("moe", {**base, "tiling": "static", "tile_n": t}) for t in TILES[batch]]
    rows = _run_all(jobs, workers)
    _write_csv(out / "dyn_tiling.csv", rows)
    fig, axes = plt.subplots(2, 2, figsize=(10, 8))
    for ax, ((model, batch), paper) in zip(axes.flat, PAPER_PID.items(), strict=True):
        sel = [r for r in rows if r["model"] == model and r["batch"] == batch]
        static = [r for r in sel if r["tiling"] == "static"]
        figure = "Fig. 9" if batch == 64 else "Fig. 10"
        for bw, note in (
            (6400, "artifact compute (dynamic 6400, static 4096 FLOPs/cycle)"),
            (4096, "equal compute (4096 FLOPs/cycle)"),
        ):
            d = next(r for r in sel if r["tiling"] == "dynamic" and r["compute_bw"] == bw)
            v = pid(
                (d["cycles"], d["onchip_bytes"]), [(r["cycles"], r["onchip_bytes"]) for r in static]
            )
            headlines.append(
                {
                    "name": f"PID dynamic tiling, {model}, batch {batch}, {note}",
                    "figure": figure,
                    "paper": paper,
                    "ours": round(v, 3),
                }
            )
            if bw == 6400:
                dyn, value = d, v
        ax.plot(
            [r["onchip_bytes"] / 2**20 for r in static],
            [r["cycles"] / 1e6 for r in static],
            "o-",
            label="static tile_n",
        )
        for r in static:
            ax.annotate(
                str(r["tile_n"]), (r["onchip_bytes"] / 2**20, r["cycles"] / 1e6), fontsize=8
            )
        ax.plot(
            [dyn["onchip_bytes"] / 2**20],
            [dyn["cycles"] / 1e6],
            "r*",
            markersize=12,
            label=f"dynamic (PID {value:.2f})",
        )
        ax.set(title=f"{model}, batch {batch}", xlabel="on-chip memory (MiB)", ylabel="cycles (M)")
        ax.legend()
    _save(fig, out, "fig9_10_dynamic_tiling")


# -- Fig. 12 / 13 ------------------------------------------------------------------------------

REGIONS = [128, 64, 32, 16, 8, 4]


def _algorithmic_flops(choices: np.ndarray, cfg: moe.MoEConfig, tile_n: int | None) -> int:
    counts = np.bincount(choices.reshape(-1), minlength=cfg.experts)
    total = 0
    for n in counts:
        b = int(n) if tile_n is None else math.ceil(int(n) / tile_n) * tile_n
        # gate, up and down matmuls; SiLU (8 per element) and the multiply on [b, F]
        total += (
            2 * b * cfg.hidden * cfg.intermediate * 3
            + 8 * b * cfg.intermediate
            + b * cfg.intermediate
        )
    return total


def time_multiplexing(root, out, workers, headlines, plt) -> None:
    trace = _routing_trace(root, "qwen", 64)
    base = {
        "model": "qwen",
        "batch": 64,
        "tile_f": 48,
        "compute_bw": 1024,
        "trace": trace,
        "skew": 1.2,
        "seed": 1,
    }
    variants = {"static": {"tiling": "static", "tile_n": 32}, "dynamic": {"tiling": "dynamic"}}
    jobs = [("moe", {**base, **v, "regions": r}) for v in variants.values() for r in REGIONS]
    rows = _run_all(jobs, workers)
    choices = moe_choices({**base, "model": "qwen"})
    for r in rows:
        tile = r["tile_n"] if r["tiling"] == "static" else None
        flops = _algorithmic_flops(choices, moe.QWEN, tile)
        allocated = 1024 * (5 * r["regions"] + moe.QWEN.experts + 1)
        r["algorithmic_flops"] = flops
        r["utilization"] = flops / r["cycles"] / allocated
    _write_csv(out / "timemux.csv", rows)
    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, spec), overhead, paper, fig_id in (
        (("static", variants["static"]), 1.01, 2.64, "Fig. 12a"),
        (("dynamic", variants["dynamic"]), 1.05, 2.51, "Fig. 12b"),
    ):
        sel = sorted(
            (r for r in rows if r["tiling"] == spec["tiling"]), key=lambda r: -r["regions"]
        )
        base_row = sel[0]
        ok = [r for r in sel if r["cycles"] <= overhead * base_row["cycles"]]
        gain = max(r["utilization"] for r in ok) / base_row["utilization"]
        headlines.append({"name": f"time-multiplexing utilisation gain, {name} tiling (<= {round((overhead - 1) * 100)}% cycles)",
                          "figure": fig_id, "paper": paper, "ours": round(gain, 3)})  # fmt: skip
        ax.plot(
            [128 // r["regions"] for r in sel],
            [r["utilization"] for r in sel],
            "o-",
            label=f"{name} tiling",
        )
    ax.set(
        xscale="log",
        xlabel="experts per region",
        ylabel="compute utilisation",
        title="Qwen3 MoE, batch 64",
    )
    ax.legend()
    _save(fig, out, "fig12_time_multiplexing")


# -- Fig. 14 / 15 / 21 --------------------------------------------------------------------------

LOW, MED, HIGH = (477, 484, 508), (995, 996), (1370, 1374, 1457)
B16 = {"low": (479, 480), "med": (986, 987), "high": (1454, 1455, 1456)}


def _kv_traces(root, batch: int, stdevs) -> list[str]:
    if root is None:
        return []
    files = [p for s, p in traces.kv_length_files(root, batch) if s in stdevs]
    return [str(p) for p in files]


def _synthetic_kv(label: str, batch: int, index: int) -> dict:
    sigma = {"low": 0.45, "med": 0.8, "high": 1.2}[label]
    return {"trace": "", "mean": 900, "sigma": sigma, "seed": 10 + index, "batch": batch}


def _attn_jobs(kv: dict, schedules=("dynamic", "interleaved", "coarse")) -> list[tuple[str, dict]]:
    jobs = []
    for s in schedules:
        regions = max(1, kv["batch"] // 16) if s == "coarse" else 4
        jobs.append(("attention", {**kv, "schedule": s, "regions": regions}))
    return jobs


def dynamic_parallelization(root, out, workers, headlines, plt) -> None:
    cases: list[tuple[str, int, dict]] = []  # (label, batch, kv params)
    for label, stdevs in (("low", LOW), ("high", HIGH), ("med", MED)):
        files = _kv_traces(root, 64, stdevs)
        kvs = [{"trace": f, "batch": 64} for f in files] or [
            _synthetic_kv(label, 64, i) for i in range(3)
        ]
        cases += [(label, 64, kv) for kv in kvs]
    for label, stdevs in B16.items():
        files = _kv_traces(root, 16, stdevs)
        kvs = [{"trace": f, "batch": 16} for f in files] or [
            _synthetic_kv(label, 16, i) for i in range(3)
        ]
        cases += [(label, 16, kv) for kv in kvs]
    fig15 = _kv_traces(root, 64, (996,))
    for b in (16, 32, 48, 64):
        kv = {"trace": fig15[0], "batch": b} if fig15 else {**_synthetic_kv("med", b, 7)}
        cases.append(("fig15", b, kv))
    jobs = [job for _, _, kv in cases for job in _attn_jobs(kv)]
    rows = _run_all(jobs, workers)
    by_case = [rows[3 * i : 3 * i + 3] for i in range(len(cases))]
    table = []
    for (label, batch, kv), (dyn, inter, coarse) in zip(cases, by_case, strict=True):
        table.append({"class": label, "batch": batch, "trace": kv.get("trace", ""), "dynamic": dyn["cycles"],
                      "interleaved": inter["cycles"], "coarse": coarse["cycles"],
                      "vs_interleaved": inter["cycles"] / dyn["cycles"], "vs_coarse": coarse["cycles"] / dyn["cycles"]})  # fmt: skip
    _write_csv(out / "dynpar.csv", table)
    for label, paper_lo, paper_hi in (("low", 1.14, 1.26), ("high", 1.47, 1.57)):
        vals = [t["vs_interleaved"] for t in table if t["class"] == label and t["batch"] == 64]
        headlines.append(
            {
                "name": f"dynamic vs interleaved, {label} KV variation, min",
                "figure": "Fig. 14",
                "paper": paper_lo,
                "ours": round(min(vals), 3),
            }
        )
        headlines.append(
            {
                "name": f"dynamic vs interleaved, {label} KV variation, max",
                "figure": "Fig. 14",
                "paper": paper_hi,
                "ours": round(max(vals), 3),
            }
        )
    for b, paper in ((16, 2.72), (64, 1.43)):
        v = next(t["vs_coarse"] for t in table if t["class"] == "fig15" and t["batch"] == b)
        headlines.append(
            {
                "name": f"dynamic vs coarse, batch {b}",
                "figure": "Fig. 15",
                "paper": paper,
                "ours": round(v, 3),
            }
        )
    fig21 = [t for t in table if t["class"] != "fig15"]
    for key, paper in (("vs_interleaved", 1.36), ("vs_coarse", 1.85)):
        g = math.exp(sum(math.log(t[key]) for t in fig21) / len(fig21))
        headlines.append(
            {
                "name": f"dynamic {key.replace('_', ' ')}, geomean (batch 16 and 64)",
                "figure": "Fig. 21",
                "paper": paper,
                "ours": round(g, 3),
            }
        )
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for label in ("low", "med", "high"):
        sel = [t for t in table if t["class"] == label and t["batch"] == 64]
        a1.plot([label] * len(sel), [t["vs_interleaved"] for t in sel], "o")
    a1.set(title="batch 64: dynamic vs interleaved", ylabel="speed-up")
    f15 = [t for t in table if t["class"] == "fig15"]
    a2.plot([t["batch"] for t in f15], [t["vs_coarse"] for t in f15], "o-")
    a2.set(title="dynamic vs coarse (blocks of 16)", xlabel="batch", ylabel="speed-up")
    _save(fig, out, "fig14_15_dynamic_parallelization")


EXPERIMENTS: dict[str, Callable] = {
    "dynamic_tiling": dynamic_tiling,
    "time_multiplexing": time_multiplexing,
    "dynamic_parallelization": dynamic_parallelization,
}


def run_paper(
    traces_dir: str | None,
    out: str | pathlib.Path,
    *,
    workers: int = 2,
    only: list[str] | None = None,
) -> dict:
    """Run the experiments; write CSVs, plots and ``summary.json`` under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root = None
    if traces_dir:
        root = pathlib.Path(traces_dir)
        if not root.is_dir():
            raise UsageError(f"traces directory {root} does not exist")
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    headlines: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for name, fn in EXPERIMENTS.items():
        if only and name not in only:
            continue
        fn(root, out, workers, headlines, plt)
        plt.close("all")
    summary = {
        "wall_s": round(time.perf_counter() - t0, 1),
        "traces": str(root) if root else "synthetic",
        "headlines": headlines,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
