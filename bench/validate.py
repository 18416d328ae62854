"""Simulator-vs-RTL validation (``make validate``).

Every point runs the graph three ways: the interpreter (reference outputs), the Verilated RTL
(``step_hw.cosim``: cycles from ``start`` to ``done``, outputs read back from memory) and the
simulator with :class:`sim.profiles.RtlProfile`. Sweeps:

* SwiGLU: 15 ``tile_b x tile_i`` points (as the paper's Fig. 8) of a ``16 x 4 x 32`` layer
  (batch x hidden x intermediate) on hardware with tiles up to 16x4; one build per point;
* MoE: routing patterns from balanced to one-sided (experts without tokens included) under
  static tiling with two token tiles, dynamic tiling and time-multiplexing (2 regions; one build
  each; a schedule comparison per pattern); a schedule whose hardware does not elaborate is
  recorded as missing;
* attention: KV-length batches of different spread under the interleaved, coarse and dynamic
  schedules.

Writes ``build/validate/summary.json`` (points, per-sweep Pearson and mean absolute relative
error, schedule comparisons), ``build/validate/validate.png`` and
``build/bench/validate_speed.json``. RTL results are cached per point and design in
``build/validate/points/`` so that re-running after a profile change costs only the simulator;
``--fresh`` ignores the cache. ``--only swiglu,moe`` picks sweeps.

``--tier fast`` co-simulates on the fast tier (``docs/cosim.md``) and ``--memory hbm`` gives it
(and the rtl profile) the HBM-like memory model; their summary goes to
``build/validate/fast_<memory>/`` and their speed to ``build/bench/validate_speed_fast_<memory>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from examples import moe, swiglu
from sim import simulate
from sim.profiles import RtlProfile
from step_hw.config import HwConfig
from step_hw.memory_model import PRESETS, MemoryModel
from step_lang import interpret

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "validate"
SPEED = ROOT / "build" / "bench" / "validate_speed.json"

SWIGLU_SIZE = swiglu.SwiGLUConfig(batch=16, hidden=4, intermediate=32, dtype="int16")
# Tiles up to 16x4: tile_b in 1..16 rows of x, tile_i in 1..4 (columns of the weight tiles and
# rows of w_down's); the hidden size 4 is the weight tiles' row count.
SWIGLU_HW = HwConfig(tile_rows=16, tile_cols=4)
SWIGLU_TILES = sorted(
    [(b, i) for b in (1, 2, 4, 8, 16) for i in (1, 2, 4)], key=lambda t: t[0] * t[1]
)
MOE_BATCH = 8
MOE_TILES = (4, 2)
ATTENTION_SCHEDULES = ("interleaved", "coarse", "dynamic")
ATTENTION_BATCH = 4


@dataclass
class Point:
    workload: str
    params: dict[str, Any]
    make: Callable[[], Any]  # -> Graph (built fresh: passes mutate graphs)
    memory: dict[str, np.ndarray]
    config: HwConfig
    design: str  # points with the same design share a Verilator build
    optional: bool = False  # hardware that may not exist yet: a failure is recorded, not raised


def swiglu_points() -> list[Point]:
    pts = []
    mem = swiglu.inputs(SWIGLU_SIZE, seed=1)
    for b, i in SWIGLU_TILES:
        pts.append(
            Point(
                "swiglu",
                {"tile_b": b, "tile_i": i, **_size(SWIGLU_SIZE)},
                lambda b=b, i=i: swiglu.hardware(b, i, hw=SWIGLU_HW, size=SWIGLU_SIZE),
                mem,
                SWIGLU_HW,
                f"swiglu_b{b}_i{i}",
            )
        )
    return pts


def _size(c: swiglu.SwiGLUConfig) -> dict[str, int]:
    return {"batch": c.batch, "hidden": c.hidden, "intermediate": c.intermediate}


def routing_patterns(batch: int, experts: int, k: int) -> dict[str, np.ndarray]:
    """Routing choices ``[batch, k]`` from balanced to one-sided (some experts get no token)."""
    b = np.arange(batch)
    pats = {
        "balanced": np.stack([(b + j) % experts for j in range(k)], axis=1),
    }
    for skew in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0):
        pats[f"zipf{skew:g}"] = moe.synthetic_routing(batch, experts, k, skew=skew, seed=7)
    pats["hot_one"] = np.stack([np.zeros(batch, int), 1 + b % (experts - 1)], axis=1)
    pats["two_experts"] = np.stack([np.zeros(batch, int), np.ones(batch, int)], axis=1)
    pats["two_experts_last"] = np.stack(
        [np.full(batch, experts - 2), np.full(batch, experts - 1)], axis=1
    )
    pats["three_experts"] = np.stack([b % 3, (b + 1) % 3], axis=1)
    return pats


def expert_counts(choices: np.ndarray, experts: int) -> list[int]:
    return np.bincount(choices.reshape(-1), minlength=experts).tolist()


def moe_points() -> list[Point]:
    pts = []
    c = moe.HW
    # (tiling, token tile, time-multiplexed regions)
    schedules = [("static", tn, None) for tn in MOE_TILES] + [
        ("dynamic", None, None),
        ("static", MOE_TILES[0], 2),
    ]
    for name, choices in routing_patterns(MOE_BATCH, c.experts, c.top_k).items():
        mem = moe.inputs(c, choices, seed=3)
        for tiling, tn, regions in schedules:
            sched = moe.MoESchedule(tiling, tile_n=tn, tile_f=4, regions=regions)
            label = f"{tiling}{tn or ''}" + (f"_tm{regions}" if regions else "")
            pts.append(
                Point(
                    "moe",
                    {
                        "routing": name,
                        "schedule": label,
                        "tiling": tiling,
                        "tile_n": tn,
                        "regions": regions,
                        "tokens_per_expert": expert_counts(choices, c.experts),
                        "batch": MOE_BATCH,
                    },
                    lambda sched=sched: moe.hardware(MOE_BATCH, sched),
                    mem,
                    HwConfig(),
                    f"moe_{label}",
                    optional=tiling == "dynamic" or bool(regions),  # newest hardware
                )
            )
    return pts


def attention_points() -> list[Point]:
    from examples import attention, traces

    if not hasattr(attention, "hardware"):
        print("attention: examples.attention has no hardware() yet; sweep skipped")
        return []
    cfg = attention.HW
    batches = []
    for sigma in (0.0, 0.3, 0.6, 0.9, 1.2):
        for mean in (4.0, 10.0):
            kv = traces.synthetic_kv_lengths(
                ATTENTION_BATCH, mean=mean, sigma=sigma, low=1, high=cfg.max_len - 1, seed=11
            )
            batches.append((f"mean{mean:g}_sigma{sigma:g}", kv))
    pts = []
    for name, kv in batches:
        mem = attention.hardware_inputs(kv, seed=5)
        for sched in ATTENTION_SCHEDULES:
            pts.append(
                Point(
                    "attention",
                    {"kv": name, "kv_lengths": [int(x) for x in kv], "schedule": sched},
                    lambda sched=sched: attention.hardware(sched, ATTENTION_BATCH),
                    mem,
                    HwConfig(),
                    f"attention_{sched}",
                    optional=True,
                )
            )
    return pts


def _key(p: Point) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([p.workload, p.params], sort_keys=True).encode())
    for k in sorted(p.memory):
        h.update(k.encode())
        h.update(np.ascontiguousarray(p.memory[k]).tobytes())
    return h.hexdigest()[:16]


def run_point(
    p: Point, *, fresh: bool, trace: bool, tier: str = "axi", memory: MemoryModel | None = None
) -> dict[str, Any]:
    from step_hw import cosim

    memory = memory or MemoryModel.axi_ram()
    # the axi tier's points keep their cache names; the fast tier's carry the tier and memory
    suffix = "" if tier == "axi" else f"_{tier}_{memory.tag}"
    cache = OUT / "points" / f"{p.workload}_{_key(p)}{suffix}.json"
    want = interpret(p.make(), p.memory).memory
    outputs = cosim.output_tensors(p.make())
    t0 = time.perf_counter()
    s = simulate(p.make(), p.memory, profile=RtlProfile.for_memory(memory, p.config))
    sim_wall = time.perf_counter() - t0
    sim_match = all(np.array_equal(s.memory[o], want[o]) for o in outputs)
    if cache.is_file() and not fresh and not trace:
        rtl = json.loads(cache.read_text())
    else:
        r = cosim.run(p.make(), p.memory, config=p.config, trace=trace, tag=_key(p) + suffix, tier=tier,
                      memory_model=None if tier == "axi" else memory)  # fmt: skip
        rtl = {
            "rtl_cycles": r.cycles,
            "outputs_match": all(np.array_equal(r.outputs[o], want[o]) for o in outputs),
            "rtl_build_s": r.build_s,
            "rtl_run_s": r.run_s,
        }
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(rtl))
    return {
        "workload": p.workload,
        "params": p.params,
        "rtl_cycles": rtl["rtl_cycles"],
        "sim_cycles": s.cycles,
        "outputs_match": bool(rtl["outputs_match"] and sim_match),
        "_speed": {
            "sim_wall_s": sim_wall,
            "rtl_build_s": rtl["rtl_build_s"],
            "rtl_run_s": rtl["rtl_run_s"],
        },
    }


def stats(points: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for w in sorted({p["workload"] for p in points}):
        rtl = np.array([p["rtl_cycles"] for p in points if p["workload"] == w], float)
        sim = np.array([p["sim_cycles"] for p in points if p["workload"] == w], float)
        pearson = (
            float(np.corrcoef(rtl, sim)[0, 1]) if len(rtl) > 1 and rtl.std() and sim.std() else 1.0
        )
        rel = np.abs(sim - rtl) / rtl
        out[w] = {
            "points": len(rtl),
            "pearson": pearson,
            "mare": float(rel.mean()),
            "max_rel_error": float(rel.max()),
        }
    return out


def comparisons(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per MoE routing pattern (attention KV batch): the fastest schedule on the simulator and
    on the RTL."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in points:
        case = {"moe": "routing", "attention": "kv"}.get(p["workload"])
        if case:
            groups.setdefault((p["workload"], p["params"][case]), []).append(p)
    out = []
    for (workload, case), group in groups.items():
        if len(group) < 2:
            continue
        rtl = sorted(group, key=lambda p: p["rtl_cycles"])
        sim_win = min(group, key=lambda p: p["sim_cycles"])["params"]["schedule"]
        out.append(
            {
                "workload": workload,
                "case": case,
                "schedules": {
                    p["params"]["schedule"]: [p["rtl_cycles"], p["sim_cycles"]] for p in group
                },
                "rtl_winner": rtl[0]["params"]["schedule"],
                "sim_winner": sim_win,
                # a tie on the RTL: either is right
                "agree": any(
                    p["params"]["schedule"] == sim_win
                    for p in rtl
                    if p["rtl_cycles"] == rtl[0]["rtl_cycles"]
                ),
            }
        )
    return out


def plot(points: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for w, marker in (("swiglu", "o"), ("moe", "s"), ("attention", "^")):
        xs = [p["rtl_cycles"] for p in points if p["workload"] == w]
        ys = [p["sim_cycles"] for p in points if p["workload"] == w]
        if xs:
            ax.scatter(xs, ys, marker=marker, label=f"{w} ({len(xs)})", alpha=0.8)
    lo = min(min(p["rtl_cycles"], p["sim_cycles"]) for p in points)
    hi = max(max(p["rtl_cycles"], p["sim_cycles"]) for p in points)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="sim = RTL")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("RTL cycles (Verilator, start to done)")
    ax.set_ylabel("simulator cycles (rtl profile)")
    ax.set_title("Simulator vs generated RTL")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="swiglu,moe,attention")
    ap.add_argument("--fresh", action="store_true", help="re-run the RTL of every point")
    ap.add_argument("--trace", action="store_true", help="record queue traces (slow)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many points per sweep")
    ap.add_argument(
        "--tier", choices=("axi", "fast"), default="axi", help="co-simulation tier (docs/cosim.md)"
    )
    ap.add_argument("--memory", choices=PRESETS, default="axi_ram",
                    help="memory model of the fast tier (and of the rtl profile)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.memory != "axi_ram" and args.tier != "fast":
        ap.error("--memory hbm needs --tier fast")
    memory = getattr(MemoryModel, args.memory)()
    # the fast tier's summaries beside the axi tier's: build/validate/fast_<memory>/
    out = OUT if args.tier == "axi" else OUT / f"fast_{memory.tag}"
    out.mkdir(parents=True, exist_ok=True)
    sweeps = {"swiglu": swiglu_points, "moe": moe_points, "attention": attention_points}
    OUT.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    points, walls, missing = [], {}, []
    for name in args.only.split(","):
        t0 = time.perf_counter()
        try:
            pts = sweeps[name]()
        except Exception as exc:  # a workload whose hardware is not there yet
            print(f"{name}: sweep skipped ({type(exc).__name__}: {exc})")
            missing.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if args.limit:
            pts = pts[: args.limit]
        failed: set[str] = set()
        for p in pts:
            if p.design in failed:
                continue
            try:
                r = run_point(p, fresh=args.fresh, trace=args.trace, tier=args.tier, memory=memory)
            except Exception as exc:
                if not p.optional:
                    raise
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                note = f"{p.design}: {type(exc).__name__}: {first[:300]}"
                print(f"{name}: skipped {note}")
                missing.append(note)
                failed.add(p.design)
                continue
            err = (r["sim_cycles"] - r["rtl_cycles"]) / r["rtl_cycles"]
            print(
                f"{name:9s} {json.dumps(p.params):90.90s} rtl {r['rtl_cycles']:6d} "
                f"sim {r['sim_cycles']:6d} ({err:+.1%}) match {r['outputs_match']}",
                flush=True,
            )
            points.append(r)
        walls[name] = time.perf_counter() - t0
    speed = [{"workload": p["workload"], "params": p["params"], **p.pop("_speed")} for p in points]
    summary = {
        "tier": args.tier,
        "memory": dataclasses.asdict(memory),
        "points": points,
        "stats": stats(points),
        "comparisons": comparisons(points),
        "missing": missing,
        "sweep_wall_s": walls,
        "wall_s": time.perf_counter() - t_start,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    SPEED.parent.mkdir(parents=True, exist_ok=True)
    (
        SPEED if args.tier == "axi" else SPEED.with_name(f"validate_speed_fast_{memory.tag}.json")
    ).write_text(json.dumps({"points": speed}, indent=1) + "\n")
    if points:
        plot(points, out / "validate.png")
    for w, st in summary["stats"].items():
        print(
            f"{w}: {st['points']} points, Pearson {st['pearson']:.4f}, "
            f"MARE {st['mare']:.2%} (max {st['max_rel_error']:.2%})"
        )
    comps = summary["comparisons"]
    if comps:
        agree = sum(c["agree"] for c in comps)
        print(f"schedule comparisons: simulator picks the RTL's winner in {agree}/{len(comps)}")
    print(f"wrote {OUT / 'summary.json'}, {OUT / 'validate.png'}, {SPEED}")


if __name__ == "__main__":
    main()
