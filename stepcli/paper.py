"""`step paper`: the paper's experiments with the simulator's paper profile, at full model sizes.

* dynamic tiling (Fig. 9 / 10): on-chip memory against cycles for static token tiles and dynamic
  tiling, Mixtral and Qwen at batch 64 and 1024, with the Pareto Improvement Distance (PID);
* configuration time-multiplexing (Fig. 12 / 13): compute utilisation against regions, Qwen,
  batch 64, static tile 32 and dynamic tiling, ``tile_f`` 48, 1024 FLOPs/cycle per compute node;
  the dynamic panel also with the authors' time-multiplexed graph
  (``MoESchedule(construction="artifact")``), with 64 and 128 B/cycle memory units;
* dynamic parallelization (Fig. 14 / 15 / 21): decode attention, dynamic against static
  interleaved and static coarse (blocks of 16 requests), by KV-length spread and batch size
  (16, 64 and the "64 + 16" batches of 80), and against the two static baselines as the
  artifact builds them (shared distributor with its queue depths; the B = 80 coarse layout);
* the decoder layer (Fig. 17, ``examples.decoder``): QKV generation, attention and MoE as one
  graph for Qwen3 and Mixtral, the STeP schedule against the memory- and performance-matched
  static baselines, and every combination of the three optimizations.

Traces come from ``--traces DIR`` (the layout of ``../shared/traces``) or synthetic generators.
Outputs: CSVs, PNG and PDF plots and ``summary.json`` with every headline next to the paper's.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from examples import moe, traces
from step_lang.functions import ELEMENT_FLOPS, matmul_flops

from .registry import UsageError, attention_profile, moe_choices, run_point

__all__ = ["artifact_attention_point", "decoder_point", "pid", "run_paper", "timemux_point"]


# -- helpers ----------------------------------------------------------------------------------


def pid(point: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """Pareto Improvement Distance of ``point`` (cycles, memory) against the Pareto-optimal
    subset of ``others``: ``min over q of max(cycles_q / cycles_p, mem_q / mem_p)``."""
    front = [q for q in others if not any(r[0] <= q[0] and r[1] <= q[1] and r != q for r in others)]
    return min(max(q[0] / point[0], q[1] / point[1]) for q in front)


def _run_all(jobs: list[tuple[str, dict]], workers: int) -> list[dict[str, Any]]:
    # Identical points (Fig. 15's batch 64 is a Fig. 14 trace) are simulated once.
    keys = [(name, tuple(sorted(p.items()))) for name, p in jobs]
    unique = list(dict.fromkeys(keys))
    if workers <= 1:
        rows = [run_point(name, dict(p)) for name, p in unique]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(run_point, [n for n, _ in unique], [dict(p) for _, p in unique]))
    done = dict(zip(unique, rows, strict=True))
    return [dict(done[k]) for k in keys]


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
    """The routing trace of ``model`` at ``batch`` under ``root``, read and checked (its experts,
    top_k and ``batch`` tokens), or ``""`` without a trace folder (a synthetic stand-in)."""
    if root is None:
        return ""
    files = traces.routing_files(root, model, batch)
    folder = root / "expert_routing" / f"{model}_b{batch}"
    if not files:
        raise UsageError(f"no routing trace for {model} batch {batch} under {folder}")
    if len(files) > 1:  # the layout holds one layer's trace per model and batch
        raise UsageError(
            f"{len(files)} routing traces for {model} batch {batch} under {folder} "
            f"({', '.join(p.name for p in files)}): expected one"
        )
    path = str(files[0])
    tokens = len(traces.load_routing(path))
    if tokens != batch:
        raise UsageError(
            f"routing trace {path} has {tokens} tokens; its folder {folder.name} is for batch "
            f"{batch}"
        )
    moe_choices({"model": model, "batch": batch, "trace": path})  # its experts and top_k
    return path


def _synthetic_skew(trace: str) -> dict[str, float]:
    """The routing skew of the synthetic stand-in for a missing routing trace (none with one)."""
    return {} if trace else {"skew": 1.2}


# -- Fig. 9 / 10 --------------------------------------------------------------------------------

TILES = {64: [8, 16, 32, 64], 1024: [16, 32, 64, 128, 256, 512, 1024]}
PAPER_PID = {
    ("mixtral", 64): 1.33,
    ("qwen", 64): 2.11,
    ("mixtral", 1024): 1.86,
    ("qwen", 1024): 1.87,
}


def dynamic_tiling_traces(root) -> dict[tuple[str, int], str]:
    return {(model, batch): _routing_trace(root, model, batch) for model, batch in PAPER_PID}


def dynamic_tiling(found, out, workers, headlines, plt) -> None:
    jobs = []
    for (model, batch), trace in found.items():
        base = {"model": model, "batch": batch, "trace": trace, **_synthetic_skew(trace), "seed": 1}
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
        # gate, up and down matmuls; SiLU and the multiply on [b, F]
        total += (
            3 * matmul_flops(b, cfg.hidden, cfg.intermediate)
            + ELEMENT_FLOPS["silu"] * b * cfg.intermediate
            + b * cfg.intermediate
        )
    return total


def time_multiplexing_traces(root) -> str:
    return _routing_trace(root, "qwen", 64)


def time_multiplexing(trace, out, workers, headlines, plt) -> None:
    base = {
        "model": "qwen",
        "batch": 64,
        "tile_f": 48,
        "compute_bw": 1024,
        "trace": trace,
        **_synthetic_skew(trace),
        "seed": 1,
    }
    variants = {"static": {"tiling": "static", "tile_n": 32}, "dynamic": {"tiling": "dynamic"}}
    jobs = [("moe", {**base, **v, "regions": r}) for v in variants.values() for r in REGIONS]
    rows = _run_all(jobs, workers)
    choices = moe_choices({**base, "model": "qwen"})
    for r in rows:
        tile = r["tile_n"] if r["tiling"] == "static" else None
        flops = _algorithmic_flops(choices, moe.QWEN, tile)
        allocated = base["compute_bw"] * (5 * r["regions"] + moe.QWEN.experts + 1)
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
        # The artifact's generate_fig12.py compares both panels at 32 regions (4 experts per
        # region), whatever that point's overhead; the paper calls it "<1%" and "~5%".
        at32 = next(r for r in sel if r["regions"] == 32)
        headlines.append({"name": f"time-multiplexing utilisation gain, {name} tiling, at 32 regions (the artifact's comparison point)",
                          "figure": fig_id, "paper": paper, "ours": round(at32["utilization"] / base_row["utilization"], 3),
                          "cycles_vs_baseline": round(at32["cycles"] / base_row["cycles"], 4)})  # fmt: skip
        ax.plot(
            [128 // r["regions"] for r in sel],
            [r["utilization"] for r in sel],
            "o-",
            label=f"{name} tiling",
        )
    for r in _artifact_timemux(base, choices, workers, headlines, out):
        ax.plot(
            [128 // x["regions"] for x in r],
            [x["utilization"] for x in r],
            "x--",
            label=f"dynamic tiling, artifact's construction{_PMU_NOTE[r[0]['pmu_bw']]}",
        )
    ax.set(
        xscale="log",
        xlabel="experts per region",
        ylabel="compute utilisation",
        title="Qwen3 MoE, batch 64",
    )
    ax.legend()
    _save(fig, out, "fig12_time_multiplexing")


_PMU_NOTE = {64: "", 128: ", 2-byte memory-unit reads"}
"""The variants of the artifact's construction: memory units at 64 B/cycle (the paper's
setting: a ``[2048, 48]`` fp32 weight tile takes 6144 cycles to read) and at 128 B/cycle (the
same tile read in the 2 bytes per element of the off-chip bf16 format, 3072 cycles)."""


def timemux_point(params: dict, construction: str, pmu_bw: int = 64) -> dict[str, Any]:
    """Simulate one Fig. 12 point (timing only) with the MoE built by ``construction``
    (``examples.moe.CONSTRUCTIONS``) and memory units of ``pmu_bw`` bytes per cycle."""
    from sim import PaperProfile, simulate

    p = {"trace_fit": "exact", **params}
    schedule = moe.MoESchedule(
        p["tiling"], tile_n=p.get("tile_n", 16), tile_f=p["tile_f"], regions=p["regions"],
        construction=construction,
    )  # fmt: skip
    g = moe.build(moe.QWEN, schedule, p["batch"])
    mem = moe.routing_tensors(moe.QWEN, moe_choices(p))
    prof = PaperProfile(compute_bw_default=p["compute_bw"], pmu_bw=pmu_bw)
    t0 = time.perf_counter()
    r = simulate(g, mem, profile=prof, functional=False)
    return {**params, "construction": construction, "pmu_bw": pmu_bw, "cycles": r.cycles,
            "offchip_bytes": r.offchip_bytes, "flops": r.flops,
            "sim_wall_s": round(time.perf_counter() - t0, 3)}  # fmt: skip


def _artifact_timemux(base, choices, workers, headlines, out) -> list[list[dict]]:
    """Fig. 12b with the authors' time-multiplexed dynamic graph (``construction="artifact"``):
    their baseline is the layer without multiplexing, and its allocated compute leaves out the
    final accumulation (5 x 128 + 128 nodes). Returns the rows by memory-unit bandwidth."""
    jobs = [({**base, "tiling": "dynamic", "regions": r}, "artifact", pmu)
            for pmu in _PMU_NOTE for r in REGIONS]  # fmt: skip
    if workers <= 1:
        rows = [timemux_point(*j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            rows = list(pool.map(timemux_point, *zip(*jobs, strict=True)))
    E = moe.QWEN.experts
    flops = _algorithmic_flops(choices, moe.QWEN, None)
    for r in rows:
        nodes = 5 * E + E if r["regions"] == E else 5 * r["regions"] + E + 1
        r["algorithmic_flops"] = flops
        r["utilization"] = flops / r["cycles"] / (base["compute_bw"] * nodes)
    _write_csv(out / "timemux_artifact.csv", rows)
    panels = []
    for pmu, note in _PMU_NOTE.items():
        sel = sorted((r for r in rows if r["pmu_bw"] == pmu), key=lambda r: -r["regions"])
        base_row = sel[0]
        ok = [r for r in sel if r["cycles"] <= 1.05 * base_row["cycles"]]
        gain = max(r["utilization"] for r in ok) / base_row["utilization"]
        at32 = next(r for r in sel if r["regions"] == 32)
        headlines.append({"name": f"time-multiplexing utilisation gain, dynamic tiling, the artifact's construction{note} (<= 5% cycles)",
                          "figure": "Fig. 12b", "paper": 2.51, "ours": round(gain, 3)})  # fmt: skip
        headlines.append({"name": f"time-multiplexing utilisation gain, dynamic tiling, the artifact's construction{note}, at 32 regions",
                          "figure": "Fig. 12b", "paper": 2.51, "ours": round(at32["utilization"] / base_row["utilization"], 3),
                          "cycles_vs_baseline": round(at32["cycles"] / base_row["cycles"], 4)})  # fmt: skip
        panels.append(sel)
    return panels


# -- Fig. 14 / 15 / 21 --------------------------------------------------------------------------

LOW, MED, HIGH = (477, 484, 508), (995, 996), (1370, 1374, 1457)
B16 = {"low": (479, 480), "med": (986, 987), "high": (1454, 1455, 1456)}


def _kv_traces(root, batch: int, stdevs) -> list[str]:
    """The KV-length traces of ``batch`` whose stdev is one of ``stdevs`` under ``root``, each
    read and checked to hold ``batch`` lengths (none without a trace folder: the experiment's
    synthetic stand-ins); every stdev the experiment takes must have a trace there, so that a
    run said to be on ``root``'s traces is."""
    if root is None:
        return []
    found = traces.kv_length_files(root, batch)
    missing = sorted(set(stdevs) - {s for s, _ in found})
    if missing:
        names = ", ".join(f"conv_stdev{s:04d}_<start>_<end>.npy" for s in missing)
        raise UsageError(
            f"no KV-length trace of stdev {', '.join(map(str, missing))} at batch {batch} under "
            f"{root / 'kv_lengths' / f'b{batch}'} (expected {names})"
        )
    files = [str(p) for s, p in found if s in stdevs]
    for f in files:
        requests = len(traces.load_kv_lengths(f))
        if requests != batch:
            raise UsageError(
                f"KV-length trace {f} has {requests} requests; its folder b{batch} is for batch "
                f"{batch}"
            )
    return files


def _synthetic_kv(label: str, batch: int, index: int) -> dict:
    sigma = {"low": 0.45, "med": 0.8, "high": 1.2}[label]
    return {"trace": "", "mean": 900, "sigma": sigma, "seed": 10 + index, "batch": batch}


def _attn_jobs(kv: dict, schedules=("dynamic", "interleaved", "coarse")) -> list[tuple[str, dict]]:
    jobs = []
    for s in schedules:
        regions = max(1, kv["batch"] // 16) if s == "coarse" else 4
        jobs.append(("attention", {**kv, "schedule": s, "regions": regions}))
    return jobs


def dynamic_parallelization_traces(root) -> dict[str, Any]:
    """The KV-length traces per batch (16, 64 and Fig. 21's "64 + 16" batches of 80) and class,
    and Fig. 15's (none without a trace folder)."""
    classes = {64: {"low": LOW, "high": HIGH, "med": MED}, 16: B16, 80: B80}
    return {
        "by_batch": {
            batch: {label: _kv_traces(root, batch, s) for label, s in by_class.items()}
            for batch, by_class in classes.items()
        },
        "fig15": _kv_traces(root, 64, (996,)),
    }


def dynamic_parallelization(found, out, workers, headlines, plt) -> None:
    cases: list[tuple[str, int, dict]] = []  # (label, batch, kv params)
    for batch, classes in found["by_batch"].items():
        for label, files in classes.items():
            kvs = [{"trace": f, "batch": batch} for f in files]
            if not files and batch != 80:  # synthetic stand-ins; Fig. 21's B = 80 only on traces
                kvs = [_synthetic_kv(label, batch, i) for i in range(3)]
            cases += [(label, batch, kv) for kv in kvs]
    fig15 = found["fig15"]
    for b in (16, 32, 48, 64):
        kv = (
            {"trace": fig15[0], "batch": b, **({"trace_fit": "cut"} if b < 64 else {})}
            if fig15
            else {**_synthetic_kv("med", b, 7)}
        )
        cases.append(("fig15", b, kv))
    jobs = [job for _, _, kv in cases for job in _attn_jobs(kv)]
    rows = _run_all(jobs, workers)
    by_case = [rows[3 * i : 3 * i + 3] for i in range(len(cases))]
    table = []
    for (label, batch, kv), (dyn, inter, coarse) in zip(cases, by_case, strict=True):
        table.append({"class": label, "batch": batch, "trace": kv.get("trace", ""), "dynamic": dyn["cycles"],
                      "interleaved": inter["cycles"], "coarse": coarse["cycles"],
                      "vs_interleaved": inter["cycles"] / dyn["cycles"], "vs_coarse": coarse["cycles"] / dyn["cycles"]})  # fmt: skip
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
    # The artifact's constructions of the two static baselines on the same traces.
    art_cases = [(i, c) for i, c in enumerate(cases) if c[0] != "fig15" and c[2].get("trace")]
    # Coarse differs from ours only at B = 80 (four regions, region 0 with two blocks); below,
    # the artifact's blocks of 16 are ours.
    art_jobs = [(kv["trace"], batch, v) for _, (_, batch, kv) in art_cases
                for v in ("interleaved_shared", "coarse_artifact") if v != "coarse_artifact" or batch == 80]  # fmt: skip
    art_rows = iter(_run_artifact(art_jobs, workers))
    for i, (_, batch, _) in art_cases:
        t = table[i]
        t["interleaved_artifact"] = next(art_rows)["cycles"]
        t["coarse_artifact"] = next(art_rows)["cycles"] if batch == 80 else t["coarse"]
        t["vs_interleaved_artifact"] = t["interleaved_artifact"] / t["dynamic"]
        t["vs_coarse_artifact"] = t["coarse_artifact"] / t["dynamic"]
    _write_csv(out / "dynpar.csv", table)
    art = [t for t in table if "interleaved_artifact" in t]
    for label, paper_lo, paper_hi in (("low", 1.14, 1.26), ("high", 1.47, 1.57)):
        vals = [
            t["vs_interleaved_artifact"] for t in art if t["class"] == label and t["batch"] == 64
        ]
        if vals:
            for which, v, paper in (("min", min(vals), paper_lo), ("max", max(vals), paper_hi)):
                headlines.append({"name": f"dynamic vs interleaved as the artifact builds it, {label} KV variation, {which}",
                                  "figure": "Fig. 14", "paper": paper, "ours": round(v, 3)})  # fmt: skip
    for key, paper in (("vs_interleaved", 1.36), ("vs_coarse", 1.85)):
        for batches, label in (((16, 64, 80), "batch 16, 64 and 80"),):
            sel = [t for t in table if t["class"] != "fig15" and t["batch"] in batches]
            for suffix, note in (("", ""), ("_artifact", ", baseline as the artifact builds it")):
                vals = [t[key + suffix] for t in sel if key + suffix in t]
                if vals and len(vals) == len(sel):
                    gm = math.exp(sum(math.log(v) for v in vals) / len(vals))
                    headlines.append({"name": f"dynamic {key.replace('_', ' ')}{note}, geomean ({label})",
                                      "figure": "Fig. 21", "paper": paper, "ours": round(gm, 3)})  # fmt: skip
    fig21 = [t for t in table if t["class"] != "fig15" and t["batch"] in (16, 64)]
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
    _plot_fig21(table, out, plt)


def _plot_fig21(table: list[dict], out: pathlib.Path, plt) -> None:
    """Fig. 21: per batch and KV-variation class, the geomean of each static schedule's cycles
    over dynamic's, ours and as the artifact builds it."""
    keys = ("vs_interleaved", "vs_interleaved_artifact", "vs_coarse", "vs_coarse_artifact")
    groups = [(b, c) for b in (16, 64, 80) for c in ("low", "med", "high")]
    fig, ax = plt.subplots(figsize=(11, 4))
    for k, key in enumerate(keys):
        ys = []
        for b, c in groups:
            vals = [t[key] for t in table if t["batch"] == b and t["class"] == c and key in t]
            ys.append(math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan"))
        ax.bar([i + 0.2 * (k - 1.5) for i in range(len(groups))], ys, 0.2, label=key[3:])
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xticks(range(len(groups)), [f"B={b}\n{c}" for b, c in groups])
    ax.set(ylabel="cycles / dynamic (geomean)", title="Fig. 21: static schedules against dynamic")
    ax.legend(fontsize=8)
    _save(fig, out, "fig21_dynamic_parallelization")


# -- the artifact's baselines as built (Fig. 14 / 21 with B = 16, 64, 80) ------------------------

B80 = {"low": (529, 531, 562), "med": (986, 987), "high": (1310, 1334, 1413)}


def artifact_attention_point(trace: str, batch: int, variant: str) -> dict[str, Any]:
    """Simulate the artifact's construction of a static baseline (timing only):
    ``interleaved_shared`` (shared distributor, metadata queues of 16, write-back queues of 4) or
    ``coarse_artifact`` (blocks of 16 requests; at B = 80 four regions, region 0 taking requests
    0-15 and 64-79)."""
    from examples import attention
    from sim import simulate

    kv = traces.load_kv_lengths(trace)
    if len(kv) != batch:  # a trace is never cut to fit
        raise UsageError(f"KV-length trace {trace} has {len(kv)} requests, batch is {batch}")
    cfg = attention.fit_cache(attention.QWEN, kv)
    mem = attention.control_inputs(cfg, kv)
    if variant == "interleaved_shared":
        g = attention.build(cfg, "interleaved", batch, 4, distributor="shared")
    elif variant == "coarse_artifact":
        if batch == 80:
            g = attention.build(cfg, "coarse", batch, 4, blocks=(32, 16, 16, 16))
            mem["req_idx"] = attention.artifact_b80_queue(batch)
        else:
            g = attention.build(cfg, "coarse", batch, max(1, batch // 16))
    else:
        raise UsageError(
            f"variant must be 'interleaved_shared' or 'coarse_artifact', not {variant!r}"
        )
    r = simulate(g, mem, profile=attention_profile(), functional=False)
    return {"trace": trace, "batch": batch, "variant": variant, "cycles": r.cycles}


def _run_artifact(jobs: list[tuple], workers: int) -> list[dict[str, Any]]:
    if workers <= 1:
        return [artifact_attention_point(*j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(artifact_attention_point, *zip(*jobs, strict=True)))


# -- Fig. 17 and the combination study: the decoder layer -----------------------------------------

TM_REGIONS = {"qwen": 32, "mixtral": 4}
"""Time-multiplexed regions of the MoE (Qwen: 4 experts per region, Fig. 13's point; Mixtral,
which the paper does not multiplex, 2 experts per region for the combination study)."""
FIG9_TILES = {
    "qwen": {"memory": 8, "performance": 64},
    "mixtral": {"memory": 16, "performance": 32},
}
"""Static token tiles of the baselines: memory-matched and performance-matched in Fig. 9."""
PAPER_FIG17 = {
    ("mixtral", "memory", "speedup"): 1.27,
    ("qwen", "memory", "speedup"): 1.15,
    ("qwen", "memory", "memory_saved"): 0.69,
    ("qwen", "memory", "compute_saved"): 0.54,
    ("mixtral", "performance", "speedup"): 1.05,
    ("qwen", "performance", "speedup"): 1.14,
    ("mixtral", "performance", "memory_saved"): 0.20,
    ("qwen", "performance", "memory_saved"): 0.88,
    # Implied: memory-matched means the same memory; Mixtral is not time-multiplexed.
    ("mixtral", "memory", "memory_saved"): 0.0,
    ("mixtral", "memory", "compute_saved"): 0.0,
}


def decoder_point(model: str, sched: dict, kv_trace: str, routing_trace: str) -> dict[str, Any]:
    """Simulate one decoder layer (timing only); the row holds cycles, memory and compute."""
    from examples import attention, decoder
    from sim import simulate
    from step_lang import metrics

    models = {"qwen": decoder.QWEN, "mixtral": decoder.MIXTRAL}
    if model not in models:
        raise UsageError(f"decoder_point: model must be one of {', '.join(models)}, not {model!r}")
    cfg = models[model]
    if kv_trace:
        kv = traces.load_kv_lengths(kv_trace)
    else:
        kv = traces.synthetic_kv_lengths(64, mean=900, sigma=0.8, seed=11)
    if routing_trace:
        choices = traces.load_routing(routing_trace, cfg.moe.experts)
        if len(choices) != len(kv):  # one token per request: a trace is never cut to fit
            raise UsageError(
                f"routing trace {routing_trace} has {len(choices)} tokens, the decoder layer "
                f"{len(kv)} requests ({kv_trace or 'synthetic KV lengths'})"
            )
    else:
        choices = traces.synthetic_routing(
            len(kv), cfg.moe.experts, cfg.moe.top_k, skew=1.2, seed=1
        )
    s = decoder.DecoderSchedule(**sched)
    cfg = attention.fit_cache(cfg, kv)
    g = decoder.build(cfg, s, len(kv))
    prof = decoder.profile(g)
    t0 = time.perf_counter()
    r = simulate(g, decoder.control_inputs(cfg, kv, choices), profile=prof, functional=False)
    wall = time.perf_counter() - t0
    dims = decoder.dim_values(cfg, choices, s.moe_regions)
    onchip = metrics(g, "artifact").evaluate(dims).onchip_bytes
    return {"model": model, "schedule": s.label, **sched, "cycles": r.cycles, **decoder.stage_cycles(g, r),
            "onchip_bytes": int(onchip) if isinstance(onchip, int) else float("nan"),
            "allocated_flops_per_cycle": decoder.allocated_compute(g, prof),
            "offchip_bytes": r.offchip_bytes, "sim_wall_s": round(wall, 3)}  # fmt: skip


def _run_decoders(jobs: list[tuple], workers: int) -> list[dict[str, Any]]:
    if workers <= 1:
        return [decoder_point(*j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(decoder_point, *zip(*jobs, strict=True)))


def _combo(model: str, dp: bool, dt: bool, tm: bool) -> dict:
    return {
        "attention": "dynamic" if dp else "interleaved",
        "tiling": "dynamic" if dt else "static",
        "tile_n": FIG9_TILES[model]["memory"],
        "moe_regions": TM_REGIONS[model] if tm else None,
    }


COMBOS = [(dp, dt, tm) for dp in (False, True) for dt in (False, True) for tm in (False, True)]


def decoder_layer_traces(root) -> tuple[str, dict[str, str]]:
    """The KV-length trace and each model's routing trace (``""``: a synthetic stand-in)."""
    kv_files = _kv_traces(root, 64, (995,))
    routing = {model: _routing_trace(root, model, 64) for model in ("qwen", "mixtral")}
    return (kv_files[0] if kv_files else ""), routing


def decoder_layer(found, out, workers, headlines, plt) -> None:
    """Fig. 17 (STeP schedule against the two static baselines) and every combination of the
    three optimizations on both decoder layers."""
    kv, routings = found
    jobs, keys = [], []
    for model, routing in routings.items():
        for combo in COMBOS:
            jobs.append((model, _combo(model, *combo), kv, routing))
            keys.append((model, "combo", combo))
        perf = {
            "attention": "interleaved",
            "tiling": "static",
            "tile_n": FIG9_TILES[model]["performance"],
        }
        jobs.append((model, perf, kv, routing))
        keys.append((model, "performance", None))
    rows = _run_decoders(jobs, workers)
    for (_, kind, combo), r in zip(keys, rows, strict=True):
        r["dynamic_parallelization"], r["dynamic_tiling"], r["time_multiplexing"] = combo or (
            False,
            False,
            False,
        )
        r["role"] = "combination" if kind == "combo" else "performance-matched baseline"
    _write_csv(out / "decoder_layer.csv", rows)
    table, interactions = [], []
    for model in ("qwen", "mixtral"):
        by = {k[2]: r for k, r in zip(keys, rows, strict=True) if k[0] == model and k[1] == "combo"}
        base = by[(False, False, False)]
        perf = next(
            r for k, r in zip(keys, rows, strict=True) if k[0] == model and k[1] == "performance"
        )
        step = by[(True, True, model == "qwen")]
        for kind, ref in (("memory", base), ("performance", perf)):
            vals = {
                "speedup": ref["cycles"] / step["cycles"],
                "memory_saved": 1 - step["onchip_bytes"] / ref["onchip_bytes"],
                "compute_saved": 1
                - step["allocated_flops_per_cycle"] / ref["allocated_flops_per_cycle"],
            }
            for metric, v in vals.items():
                paper = PAPER_FIG17.get((model, kind, metric))
                if paper is None:
                    continue
                headlines.append({"name": f"decoder layer {model}, STeP vs {kind}-matched static (tile {ref['tile_n']}): {metric.replace('_', ' ')}",
                                  "figure": "Fig. 17", "paper": paper, "ours": round(v, 3)})  # fmt: skip
        for combo, r in by.items():
            table.append({"model": model, "dynamic_parallelization": combo[0], "dynamic_tiling": combo[1],
                          "time_multiplexing": combo[2], "cycles": r["cycles"], "speedup": base["cycles"] / r["cycles"],
                          "onchip_bytes": r["onchip_bytes"], "memory_vs_base": r["onchip_bytes"] / base["onchip_bytes"],
                          "allocated_flops_per_cycle": r["allocated_flops_per_cycle"],
                          "compute_vs_base": r["allocated_flops_per_cycle"] / base["allocated_flops_per_cycle"]})  # fmt: skip
        # Interactions: each pair's effect together over the product of its effects alone (1 when
        # the two multiply; the paper never ran the pairs).
        names = ("dynamic parallelization", "dynamic tiling", "time-multiplexing")
        for i in range(3):
            for j in range(i + 1, 3):
                a = tuple(k == i for k in range(3))
                b = tuple(k == j for k in range(3))
                ab = tuple(k in (i, j) for k in range(3))
                row = {"model": model, "pair": f"{names[i]} + {names[j]}"}
                for metric, key, inv in (("speedup", "cycles", True), ("memory", "onchip_bytes", False),
                                         ("compute", "allocated_flops_per_cycle", False)):  # fmt: skip
                    f = {
                        c: (base[key] / by[c][key]) if inv else (by[c][key] / base[key])
                        for c in (a, b, ab)
                    }
                    row[f"{metric}_first"], row[f"{metric}_second"] = round(f[a], 4), round(f[b], 4)
                    row[f"{metric}_together"] = round(f[ab], 4)
                    row[f"{metric}_interaction"] = round(f[ab] / (f[a] * f[b]), 4)
                row["multiplicative"] = all(
                    abs(row[f"{m}_interaction"] - 1) <= 0.05
                    for m in ("speedup", "memory", "compute")
                )
                interactions.append(row)
    _write_csv(out / "decoder_combinations.csv", table)
    _write_csv(out / "decoder_interactions.csv", interactions)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, model in zip(axes, ("qwen", "mixtral"), strict=True):
        sel = [t for t in table if t["model"] == model]
        labels = ["".join(c for c, on in zip("PTM", (t["dynamic_parallelization"], t["dynamic_tiling"], t["time_multiplexing"]), strict=True) if on) or "-" for t in sel]  # fmt: skip
        xs = range(len(sel))
        ax.bar([x - 0.2 for x in xs], [t["speedup"] for t in sel], 0.4, label="speed-up")
        ax.bar(
            [x + 0.2 for x in xs], [t["memory_vs_base"] for t in sel], 0.4, label="on-chip memory"
        )
        ax.plot(list(xs), [t["compute_vs_base"] for t in sel], "k^", label="allocated compute")
        ax.set_xticks(list(xs), labels)
        ax.set(
            title=f"{model} decoder layer, batch 64 (vs none: P=dyn. par., T=dyn. tiling, M=time-mux)",
            ylabel="relative to no optimization",
        )
        ax.title.set_fontsize(8)
        ax.legend(fontsize=7)
    _save(fig, out, "fig17_decoder_combinations")


#: Each experiment: the function that finds and checks the traces it runs on under a
#: ``--traces`` folder (synthetic stand-ins without one), and the function that runs it on them.
EXPERIMENTS: dict[str, tuple[Callable, Callable]] = {
    "dynamic_tiling": (dynamic_tiling_traces, dynamic_tiling),
    "time_multiplexing": (time_multiplexing_traces, time_multiplexing),
    "dynamic_parallelization": (dynamic_parallelization_traces, dynamic_parallelization),
    "decoder_layer": (decoder_layer_traces, decoder_layer),
}


def run_paper(
    traces_dir: str | None,
    out: str | pathlib.Path,
    *,
    workers: int = 2,
    only: list[str] | None = None,
) -> dict:
    """Run the experiments; write CSVs, plots and ``summary.json`` under ``out``.

    Each headline names its experiment. With ``only``, the headlines of the other experiments
    that a ``summary.json`` already in ``out`` holds from a run on the same traces are kept
    (their CSVs and plots are there too), listed under ``kept``; this run's wall times are
    ``wall_s`` and ``experiment_wall_s``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root = None
    if traces_dir:
        root = pathlib.Path(traces_dir)
        if not root.is_dir():
            why = "is not a directory" if root.exists() else "does not exist"
            raise UsageError(f"traces directory {root} {why}")
    t0 = time.perf_counter()
    # Every experiment's traces are found and read before any runs: a bad or missing one fails
    # the command before it has spent minutes on the experiments before it.
    found = {
        name: find(root) for name, (find, _) in EXPERIMENTS.items() if not only or name in only
    }
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    headlines: list[dict[str, Any]] = []
    walls: dict[str, float] = {}
    for name, files in found.items():
        t1 = time.perf_counter()
        first = len(headlines)
        EXPERIMENTS[name][1](files, out, workers, headlines, plt)
        plt.close("all")
        for h in headlines[first:]:
            h["experiment"] = name
        walls[name] = round(time.perf_counter() - t1, 1)
    traces_name = str(root) if root else "synthetic"
    kept = _kept_headlines(out / "summary.json", traces_name, walls) if only else []
    order = list(EXPERIMENTS)
    summary = {
        "wall_s": round(time.perf_counter() - t0, 1),
        "experiment_wall_s": walls,
        "traces": traces_name,
        "headlines": sorted(headlines + kept, key=lambda h: order.index(h["experiment"])),
        "kept": sorted({h["experiment"] for h in kept}, key=order.index),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _kept_headlines(path: pathlib.Path, traces: str, ran: Mapping[str, float]) -> list[dict]:
    """The headlines of the experiments this run did not run from an earlier ``summary.json``
    at ``path`` on the same ``traces`` (none from a summary of other traces, or of a version
    whose headlines do not name their experiment)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(old, dict) or old.get("traces") != traces:
        return []
    return [
        h
        for h in old.get("headlines", [])
        if isinstance(h, dict) and h.get("experiment") in EXPERIMENTS and h["experiment"] not in ran
    ]
