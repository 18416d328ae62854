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
error, schedule comparisons), ``build/validate/report.md`` (the same in tables,
:mod:`bench.validate_report`), ``build/validate/validate.png`` and
``build/bench/validate_speed.json``. RTL results are cached per point and design key
(``step_hw.design_key``: the lowered graph, its built-in queue depths, the hardware
configuration and the generator's source) with the depths of its run-time queues in
``build/validate/points/``, so that re-running after a profile change costs only the simulator,
and a change to the hardware runs the RTL again; ``--fresh`` ignores the cache.
``--only swiglu,moe`` picks sweeps.

``--tier fast`` co-simulates on the fast tier (``docs/cosim.md``) and ``--memory hbm`` gives it
(and the rtl profile) the HBM-like memory model; their summary goes to
``build/validate/fast_<memory>/`` and their speed to ``build/bench/validate_speed_fast_<memory>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench import validate_acceptance as acceptance
from bench import validate_report as report
from bench import validate_scale as scale
from examples import moe, swiglu
from sim import simulate
from sim.profiles import RtlProfile
from sim.profiles.paper import PaperProfile
from step_hw.config import HwConfig
from step_hw.contract import is_load, is_memory_operator, read_ports
from step_hw.cosim.arguments import TIERS
from step_hw.memory_model import PRESETS, MemoryModel
from step_hw.paths import write_atomically
from step_lang import interpret
from step_lang.metrics import metrics
from step_lang.passes import lower

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "validate"
#: The recorded traces of the paper-scale sweeps (``--traces``).
TRACES = scale.DEFAULT_TRACES
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
    # the sweep's own co-simulation tier and memory (None: the command line's)
    tier: str | None = None
    memory_model: MemoryModel | None = None
    # compare the simulator's outputs too (paper-size sweeps: the RTL's against the
    # interpreter's only, the simulators in timing mode)
    functional_sim: bool = True
    # the file the sizing of the point's design is cached in (``sized_depths``): both depth
    # settings of a design run on one build whose queues hold the larger depth of the two
    sizing: Path | None = None
    # -> the HwConfig the RTL is built with: ``config`` with run-time queue depths up to the
    # capacities of both depth settings (``shared_build``); None: ``config``
    rtl_config: Callable[[], HwConfig] | None = None
    # points of several designs (tilings) that run on one build, their geometry a run-time
    # setting (``HwConfig.geometry_bounds``) where their graphs have the same nodes
    family: str | None = None

    def hardware(self) -> HwConfig:
        """The configuration the point's RTL is built with (:func:`shared_build`)."""
        return self.rtl_config() if self.rtl_config is not None else self.config


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


def fig8_points() -> list[Point]:
    """Fig. 8 at the paper's size: 15 ``tile_b x tile_i`` tilings, on two builds: the 14 that
    have the same nodes on one (their geometry a run-time setting), ``16 x 16`` on its own."""
    mem = scale.fig8_inputs()
    return [
        Point(
            "fig8",
            {"tile_b": b, "tile_i": i, **_size(scale.FIG8_LAYER)},
            lambda b=b, i=i: scale.fig8_graph(b, i),
            mem,
            scale.FIG8_HW,
            f"fig8_b{b}_i{i}",
            tier="fast",
            memory_model=scale.SCALE_MEMORY,
            functional_sim=False,
            family="fig8",
        )
        for b, i in scale.FIG8_TILES
    ]


def moe_scale_points() -> list[Point]:
    """16 experts, 10 routings of 16 tokens from the recorded Qwen3 trace, three schedules
    (one build each; a schedule comparison per routing)."""
    pts = []
    for name, choices in scale.trace_routings(TRACES).items():
        mem = scale.moe_inputs(choices)
        for label, sched in scale.MOE_SCHEDULES.items():
            pts.append(
                Point(
                    "moe_scale",
                    {
                        "routing": name,
                        "schedule": label,
                        **sched,
                        "tokens_per_expert": expert_counts(choices, scale.MOE_LAYER[3]),
                        "batch": scale.MOE_BATCH,
                    },
                    lambda sched=sched: scale.moe_graph(sched),
                    mem,
                    scale.moe_config(sched),
                    f"moe_scale_{label}",
                    tier="fast",
                    memory_model=scale.SCALE_MEMORY,
                    functional_sim=False,
                )
            )
    return pts


def attention_scale_points() -> list[Point]:
    """16 requests, 10 KV-length batches from the recorded Azure traces (scaled), three
    schedules (one build each; a schedule comparison per batch)."""
    pts = []
    for name, kv in scale.trace_kv_batches(TRACES).items():
        mem = scale.attention_inputs(kv)
        for sched in scale.ATTENTION_SCHEDULES:
            pts.append(
                Point(
                    "attention_scale",
                    {"kv": name, "kv_lengths": [int(x) for x in kv], "schedule": sched},
                    lambda sched=sched: scale.attention_graph(sched),
                    mem,
                    scale.SCALE_HW,
                    f"attention_scale_{sched}",
                    tier="fast",
                    memory_model=scale.SCALE_MEMORY,
                    functional_sim=False,
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


def cached_json(path: Path) -> dict[str, Any] | None:
    """The JSON object cached at ``path``, or ``None`` when there is none or it cannot be read
    (cut short by a run killed while writing it, or damaged): the caller computes the entry
    again and replaces it (``write_atomically``: a reader sees a whole entry or none)."""
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


class NotCached(Exception):
    """``--cached-only``: a point whose RTL result is not in the cache (not run)."""


def run_point(
    p: Point,
    *,
    fresh: bool,
    trace: bool,
    tier: str = "axi",
    memory: MemoryModel | None = None,
    cached_only: bool = False,
) -> dict[str, Any]:
    """Run ``p`` on the RTL (cached in ``build/validate/points/``), the rtl profile and the
    paper profile configured with the same hardware and memory (``PaperProfile.for_rtl``);
    ``cached_only`` raises :class:`NotCached` instead of building and running the RTL."""
    from step_hw import cosim

    tier = p.tier or tier
    memory = p.memory_model or memory or MemoryModel.axi_ram()
    if cached_only and p.sizing is not None and cached_json(p.sizing) is None:
        # a sized point's graph would size its design first
        raise NotCached("no cached sizing (--cached-only)")
    # the axi tier's points keep their cache names; the fast tier's carry the tier and memory
    suffix = "" if tier == "axi" else f"_{tier}_{memory.tag}"
    cache = OUT / "points" / f"{p.workload}_{_key(p)}{suffix}_{_design(p)}.json"
    rtl = None if fresh or trace else cached_json(cache)
    cached = rtl is not None
    if not cached and cached_only:
        raise NotCached("no cached RTL result (--cached-only)")
    outputs = cosim.output_tensors(p.make())
    reference_s = 0.0
    if not cached:
        t0 = time.perf_counter()
        want = reference_outputs(p, outputs)
        reference_s = time.perf_counter() - t0
        r = cosim.run(p.make(), p.memory, config=p.hardware(), trace=trace, tag=_key(p) + suffix, tier=tier,
                      memory_model=None if tier == "axi" else memory)  # fmt: skip
        rtl = {
            "rtl_cycles": r.cycles,
            "outputs_match": all(_same_bits(r.outputs[o], want[o]) for o in outputs),
            "rtl_elaborate_s": r.elaborate_s,
            "rtl_build_s": r.build_s,
            "rtl_run_s": r.run_s,
        }
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(cache, json.dumps(rtl))
    # after the RTL (cached first: the expensive half)
    sims = _simulate(p, memory, outputs, suffix, fresh=fresh)
    peak = sims["channels"] * memory.peak_bytes_per_cycle(p.config.axi_data_width)
    rate = PaperProfile.for_rtl(p.config, memory, channels=sims["channels"]).compute_bw_default
    return {
        "workload": p.workload,
        "params": p.params,
        "design": p.design,
        "rtl_cycles": rtl["rtl_cycles"],
        "sim_cycles": sims["sim_cycles"],
        "paper_cycles": sims["paper_cycles"],
        "outputs_match": bool(rtl["outputs_match"] and sims["sim_match"]),
        "offchip_bytes": sims["offchip_bytes"],
        "peak_bytes_per_cycle": peak,
        # bytes moved over cycles times the memory's peak (reads and writes together, as the
        # paper's shared channels count them)
        "axi_efficiency": sum(sims["offchip_bytes"]) / (rtl["rtl_cycles"] * peak),
        # the roofline (bench.validate_acceptance.memory_bound): the bytes at the peak, and
        # the busiest compute node's FLOPs at the hardware's rate
        "memory_floor_cycles": sum(sims["offchip_bytes"]) / peak,
        "compute_floor_cycles": compute_floor_cycles(p.make(), rate),
        # what the memory waits for once the reads end (the rtl profile's node statistics)
        "reads_done_cycle": sims["reads_done_cycle"],
        "last_compute": sims["last_compute"],
        "sizing": sizing_record(p),
        "_speed": {
            "sim_wall_s": sims["sim_wall_s"],
            "paper_wall_s": sims["paper_wall_s"],
            "sim_cached": sims["cached"],
            # the elaboration and build of the point's design where this point did them (the
            # times recorded with a cached result), and its sizing where this run did it
            "rtl_elaborate_s": rtl.get("rtl_elaborate_s", 0.0),
            "rtl_build_s": rtl["rtl_build_s"],
            "rtl_run_s": rtl["rtl_run_s"],
            "rtl_cached": cached,
            "sizing_s": _sizing_done_here(p),
            # the interpreter's reference outputs, where this point computed them (not read
            # from build/validate/reference/)
            "reference_s": reference_s,
        },
    }


def compute_floor_cycles(graph: Any, flops_per_cycle: float) -> float | None:
    """The cycles of ``graph``'s busiest compute node at ``flops_per_cycle`` (its FLOPs by the
    cost model, ``step_lang.metrics``): the compute side of a point's roofline; ``None`` where
    a node's FLOPs depend on the data (a dynamic dim)."""
    flops = [n.flops for n in metrics(graph).nodes]
    if not all(isinstance(f, int) for f in flops):
        return None
    return max(flops, default=0) / flops_per_cycle


def sizing_record(p: Point) -> dict[str, Any] | None:
    """How ``p``'s sized depths were found (``None`` at the default depths): the images sized
    on, and the held-out images (the design's other points) checked, sized on too, and the
    worst of their sized cycles over their reference (:func:`sized_depths`)."""
    if p.sizing is None or p.params.get("depths") != "sized":  # a default point shares the file
        return None
    cached = cached_json(p.sizing) or {}
    held = cached.get("held_out_cycles", [])
    return {
        "images": cached.get("images"),
        "held_out": len(held),
        "held_out_added": cached.get("held_out_added", []),
        "held_out_worst": max((c / ref for c, ref in held if c is not None), default=None),
        "held_out_deadlocked": sum(c is None for c, _ in held),
        "bits_sized": cached.get("bits_sized"),
    }


def _sizing_done_here(p: Point) -> float:
    """The seconds this process spent sizing ``p``'s design, reported once (by the first point of
    the design that ends, measured or failed); 0 where the sizing was read from the cache."""
    return _sized_here.pop(p.sizing, 0.0) if p.sizing is not None else 0.0


def reference_outputs(p: Point, outputs: list[str]) -> dict[str, np.ndarray]:
    """The interpreter's tensors ``outputs`` of ``p``, cached in ``build/validate/reference/``
    under the point without its queue depths (depths do not change what a graph computes: a
    design's default and sized points compare with one interpretation; a Fig. 8 point's takes 8
    s) and the digest of :data:`SIM_SOURCES`. Stored as bit patterns with their dtypes, so a
    BF16 tensor reads back bit for bit."""
    import ml_dtypes  # noqa: F401  (registers the bfloat16 dtype name)

    params = {k: v for k, v in p.params.items() if k != "depths"}
    key = _key(dataclasses.replace(p, params=params))
    cache = OUT / "reference" / f"{p.workload}_{key}_{_source_digest()}.npz"
    try:
        with open(cache, "rb") as raw, np.load(raw) as f:
            return {o: f[o].view(np.dtype(str(f[f"dtype:{o}"]))) for o in outputs}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        pass  # not cached, or unreadable: computed again and replaced
    got = interpret(p.make(), p.memory).memory
    fields: dict[str, np.ndarray] = {}
    for o in outputs:
        a = np.ascontiguousarray(got[o])
        fields[o] = a.view(f"u{a.dtype.itemsize}")
        fields[f"dtype:{o}"] = np.array(a.dtype.name)
    cache.parent.mkdir(parents=True, exist_ok=True)
    data = io.BytesIO()
    np.savez(data, **fields)
    write_atomically(cache, data.getvalue())
    return {o: got[o] for o in outputs}


def _design(p: Point) -> str:
    """What the RTL of ``p`` is and runs with: its design key (``step_hw.design_key``: the
    lowered graph with its built-in queue depths, the hardware configuration and the sources of
    ``step_lang`` and ``step_hw``) and the depths of its run-time queues
    (``HwConfig.queue_capacity``), so that a cached RTL result is never read for another design,
    generator or depth (a design sized again to other depths within the same capacities)."""
    from step_hw.cosim.harness import TOP
    from step_hw.design_key import design_key, source_version
    from step_hw.run_time_depths import run_time_depths

    graph, config = p.make(), p.hardware()
    key = design_key(graph, config, TOP) or f"uncacheable{source_version()}"
    run_time = sorted(run_time_depths(lower(graph), config).items())
    return hashlib.sha256(json.dumps([key, run_time]).encode()).hexdigest()[:16]


#: The packages whose code decides a simulation's result: a change to any file in them
#: invalidates the cached simulator results of ``build/validate/sims/``.
SIM_SOURCES = ("sim", "step_lang", "step_hw", "examples", "bench/validate_scale.py")


@cache
def _source_digest() -> str:
    """The digest of :data:`SIM_SOURCES` as this process first read them (the code it runs, not
    an edit made since; ``main`` reads them at start)."""
    from step_hw.design_key import code_memo, source_digest

    return source_digest([ROOT / top for top in SIM_SOURCES], ROOT, memo=code_memo())


def _simulate(
    p: Point, memory: MemoryModel, outputs: list[str], suffix: str, *, fresh: bool
) -> dict[str, Any]:
    """The rtl and paper profiles' results of ``p`` (the rtl profile's outputs compared with the
    interpreter's when ``p.functional_sim``), cached in ``build/validate/sims/`` under the point
    and the digest of :data:`SIM_SOURCES`."""
    cache = OUT / "sims" / f"{p.workload}_{_key(p)}{suffix}_{_source_digest()}{SIMS_FORMAT}.json"
    cached = None if fresh else cached_json(cache)
    if cached is not None:
        return {**cached, "cached": True}
    shape_only = timing_image(p.make(), p.memory)
    t0 = time.perf_counter()
    image = p.memory if p.functional_sim else shape_only
    s = simulate(p.make(), image, profile=RtlProfile.for_memory(memory, p.config),
                 functional=p.functional_sim)  # fmt: skip
    sim_wall = time.perf_counter() - t0
    sim_match = True
    if p.functional_sim:
        want = interpret(p.make(), p.memory).memory
        sim_match = all(_same_bits(s.memory[o], want[o]) for o in outputs)
    channels = read_ports(p.make(), p.config)
    t0 = time.perf_counter()
    paper = simulate(
        p.make(), shape_only, profile=PaperProfile.for_rtl(p.config, memory, channels=channels),
        functional=False,
    )  # fmt: skip
    out = {
        "sim_cycles": s.cycles,
        "paper_cycles": paper.cycles,
        **memory_tail(s, p.make()),
        "sim_match": sim_match,
        "offchip_bytes": [s.offchip_read_bytes, s.offchip_write_bytes],
        "channels": channels,
        "sim_wall_s": sim_wall,
        "paper_wall_s": time.perf_counter() - t0,
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(cache, json.dumps(out))
    return {**out, "cached": False}


#: The fields of a cached simulator result (``build/validate/sims/``): a result cached with
#: other fields is simulated again.
SIMS_FORMAT = "-v2"


def memory_tail(result: Any, graph: Any) -> dict[str, Any]:
    """When the reads end in the rtl profile's ``result`` of ``graph`` (its loads' last cycle,
    ``reads_done_cycle``) and the node other than a load or store that finishes last
    (``last_compute``: name and cycle): what a point's memory waits for once its bytes are in
    (``bench.validate_acceptance``)."""
    memory = {n.name for n in graph.nodes.values() if is_memory_operator(n)}
    loads = {n.name for n in graph.nodes.values() if is_load(n)}
    reads = [result.nodes[n].finish for n in loads if n in result.nodes]
    others = [(st.finish, name) for name, st in result.nodes.items() if name not in memory]
    last = max(others) if others else None
    return {
        "reads_done_cycle": max(reads) if reads else None,
        "last_compute": [last[1], last[0]] if last else None,
    }


def timing_image(graph: Any, memory: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The part of ``memory`` a timing-only simulation of ``graph`` reads: its integer and bool
    tensors, which steer routing. Float tensors are left out, so the simulator moves shape-only
    tiles for them instead of computing BF16 arithmetic whose results no cycle depends on (a
    function that needed their values would raise, not guess); cycles and traffic are the same
    either way (docs/validation.md has the measured speed-up)."""
    return {k: a for k, a in memory.items() if not graph.tensors[k].dtype.is_float}


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (BF16 tensors compare as their 16-bit patterns: NaN equals itself)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "iub":
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")))


#: The simulator profiles each point runs, by their cycles field.
PROFILES = acceptance.PROFILES


def _fit(rtl: np.ndarray, sim: np.ndarray) -> dict[str, Any]:
    pearson = (
        float(np.corrcoef(rtl, sim)[0, 1]) if len(rtl) > 1 and rtl.std() and sim.std() else 1.0
    )
    rel = np.abs(sim - rtl) / rtl
    return {
        "points": len(rtl),
        "pearson": pearson,
        "mare": float(rel.mean()),
        "max_rel_error": float(rel.max()),
    }


def stats(points: list[dict[str, Any]], field: str = "sim_cycles") -> dict[str, Any]:
    """Per sweep (workload, and queue depths when a sweep has several): Pearson correlation,
    mean absolute relative error and the worst point of ``field`` against the RTL's cycles."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        if field in p:
            groups.setdefault(acceptance.sweep_of(p), []).append(p)
    return {
        w: _fit(
            np.array([p["rtl_cycles"] for p in g], float), np.array([p[field] for p in g], float)
        )
        for w, g in sorted(groups.items())
    }


def _choice(p: dict[str, Any]) -> tuple[str, str] | None:
    """(case, option) of a point in a comparison: the schedules of one MoE routing or one
    attention KV batch, the tile configurations of a SwiGLU sweep."""
    q = p["params"]
    if p["workload"] in ("moe", "moe_scale"):
        return q["routing"], q["schedule"]
    if p["workload"] in ("attention", "attention_scale"):
        return q["kv"], q["schedule"]
    if p["workload"] in ("swiglu", "fig8"):
        return "tiles", f"{q['tile_b']}x{q['tile_i']}"
    return None


def comparisons(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per comparison (a MoE routing pattern, an attention KV batch, a SwiGLU tile sweep): the
    fastest option on the RTL and on each simulator profile."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in points:
        choice = _choice(p)
        if choice:
            groups.setdefault((acceptance.sweep_of(p), choice[0]), []).append(p)
    out = []
    for (sweep, case), group in groups.items():
        if len(group) < 2:
            continue
        best = min(p["rtl_cycles"] for p in group)
        # a tie on the RTL: either is right
        rtl_best = {_choice(p)[1] for p in group if p["rtl_cycles"] == best}
        entry: dict[str, Any] = {
            "workload": sweep,
            "case": case,
            "options": {
                _choice(p)[1]: [p["rtl_cycles"], *(p.get(f) for f in PROFILES.values())]
                for p in group
            },
            "rtl_winner": sorted(rtl_best)[0],
        }
        for name, field in PROFILES.items():
            if all(field in p for p in group):
                win = _choice(min(group, key=lambda p: p[field]))[1]
                entry[f"{name}_profile_winner"] = win
                entry[f"{name}_profile_agrees"] = win in rtl_best
        out.append(entry)
    return out


MARKERS = {"swiglu": "o", "fig8": "D", "moe": "s", "moe_scale": "P", "attention": "^",
           "attention_scale": "v"}  # fmt: skip


def plot(points: list[dict[str, Any]], path: Path) -> None:
    """Simulator against RTL cycles, one panel per profile, one series per sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PROFILES), figsize=(5.5 * len(PROFILES), 5), squeeze=False)
    for ax, (name, field) in zip(axes[0], PROFILES.items(), strict=True):
        shown = [p for p in points if field in p]
        for sweep in sorted({acceptance.sweep_of(p) for p in shown}):
            mine = [p for p in shown if acceptance.sweep_of(p) == sweep]
            ax.scatter([p["rtl_cycles"] for p in mine], [p[field] for p in mine],
                       marker=MARKERS.get(mine[0]["workload"], "x"),
                       label=f"{sweep} ({len(mine)})", alpha=0.7)  # fmt: skip
        if shown:
            lo = min(min(p["rtl_cycles"], p[field]) for p in shown)
            hi = max(max(p["rtl_cycles"], p[field]) for p in shown)
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="sim = RTL")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("RTL cycles (Verilator, start to done)")
        ax.set_ylabel(f"simulator cycles ({name} profile)")
        ax.set_title(f"{name} profile vs generated RTL")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fig8_grid(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The Fig. 8 points as ``tile_b x tile_i`` grids: RTL cycles, each profile's cycles, the
    AXI efficiency and whether the point is memory-bound (``bench.validate_acceptance``'s
    roofline; rows ``tile_b``, columns ``tile_i``; None where a point is missing)."""
    bs = sorted({b for b, _ in scale.FIG8_TILES})
    ts = sorted({i for _, i in scale.FIG8_TILES})
    grids: dict[str, Any] = {"tile_b": bs, "tile_i": ts}
    for depths in sorted(
        {p["params"].get("depths", "default") for p in points if p["workload"] == "fig8"}
    ):
        at = {
            (p["params"]["tile_b"], p["params"]["tile_i"]): p
            for p in points
            if p["workload"] == "fig8" and p["params"].get("depths", "default") == depths
        }
        grids[depths] = {
            field: [[at[b, i][field] if (b, i) in at else None for i in ts] for b in bs]
            for field in ("rtl_cycles", *PROFILES.values(), "axi_efficiency")
        }
        grids[depths]["memory_bound"] = [
            [acceptance.memory_bound(at[b, i]) if (b, i) in at else None for i in ts] for b in bs
        ]
    return grids


def plot_fig8(grid: dict[str, Any], path: Path) -> None:
    """Fig. 8 style: cycles against tile_i, one line per tile_b, RTL solid, the rtl profile
    dashed and the paper profile dotted; the AXI efficiency below, with the bar of the
    memory-bound points (compute-bound points hollow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depths = [k for k in grid if k not in ("tile_b", "tile_i")]
    fig, axes = plt.subplots(2, len(depths), figsize=(6 * len(depths), 8), squeeze=False)
    for col, d in enumerate(depths):
        g = grid[d]
        top, bottom = axes[0][col], axes[1][col]
        for r, b in enumerate(grid["tile_b"]):
            line = top.plot(grid["tile_i"], g["rtl_cycles"][r], "o-", label=f"RTL, tile_b {b}")
            color = line[0].get_color()
            top.plot(grid["tile_i"], g["sim_cycles"][r], "x--", color=color,
                     label=f"rtl profile, tile_b {b}")  # fmt: skip
            top.plot(grid["tile_i"], g["paper_cycles"][r], "+:", color=color,
                     label=f"paper profile, tile_b {b}")  # fmt: skip
            bottom.plot(grid["tile_i"], g["axi_efficiency"][r], "o-", color=color,
                        label=f"tile_b {b}")  # fmt: skip
            compute = [(i, e) for i, e, m in zip(grid["tile_i"], g["axi_efficiency"][r],
                       g["memory_bound"][r], strict=True) if m is False]  # fmt: skip
            if compute:
                bottom.plot(*zip(*compute, strict=True), "o", color=color, mfc="white")
        bottom.axhline(acceptance.AXI_EFFICIENCY, ls="--", lw=0.8, color="grey",
                       label="bar (memory-bound; hollow: compute-bound)")  # fmt: skip
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tile_i")
            ax.legend(fontsize=6)
        top.set_ylabel("cycles")
        top.set_title(f"Fig. 8 on our RTL (SwiGLU 64x256x512 BF16, {d} queue depths)", fontsize=9)
        bottom.set_ylabel("AXI efficiency")
        bottom.set_ylim(0, 1.05)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


SWEEPS: dict[str, Callable[[], list[Point]]] = {}


DEPTHS = ("default", "sized")
#: What a sized point adds to its design's name (:func:`with_sized_depths`); it runs on that
#: design's build (:func:`_build_of`).
SIZED = "_sized"
SIZING = OUT / "sizing"
#: Memory images a design is sized on: the first of its points (as ``make bench``'s sizing
#: takes three representative images). The depths are then checked on the images of the
#: design's other points (held out); the ones they miss by more than the tolerance are sized on too
#: (``plan_queue_sizes(held_out=...)``), so every point's sized depths hold their 1%.
SIZING_IMAGES = 3


#: Sizing file -> seconds this process spent sizing its design (taken by the first point that
#: reports it in ``validate_speed.json``).
_sized_here: dict[Path, float] = {}


def sized_depths(group: list[Point], memory: MemoryModel) -> dict[str, int]:
    """The queue depths :func:`sim.sizing.plan_queue_sizes` picks for the design of ``group``
    (points that share it) over the first :data:`SIZING_IMAGES` memory images of the group,
    checked on the others' images (held out: the ones they miss are sized on too), with the rtl
    profile of its hardware and memory, without the uniform-depth search (only the storage
    comparison of ``step size-queues`` needs it); cached in ``build/validate/sizing/``
    with the cycles at deep, sized and default depths (one process sizes a design, the others
    wait for its result)."""
    import fcntl

    from sim.sizing import plan_queue_sizes

    p = group[0]
    cache = sizing_file(group, memory)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sized = cached_json(cache)
        if sized is not None and "depths" in sized:
            return sized["depths"]
        t0 = time.perf_counter()
        images = [timing_image(p.make(), q.memory) for q in group]
        report = plan_queue_sizes(
            p.make(), images[:SIZING_IMAGES], held_out=images[SIZING_IMAGES:], hw_config=p.config,
            profile=RtlProfile.for_memory(memory, p.config), functional=False, uniform=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        _sized_here[cache] = wall
        write_atomically(cache, json.dumps({
            "depths": report.depths, "wall_s": wall,
            "images": report.images, "cycles_deep": report.cycles_deep,
            "cycles_sized": report.cycles_sized, "cycles_default": report.cycles_default,
            "simulations": report.simulations,
            # by index among the group's points after the first SIZING_IMAGES
            "held_out_added": report.held_out_added,
            "held_out_cycles": report.held_out_cycles, "bits_sized": report.bits_sized,
        }))  # fmt: skip
    return report.depths


def sizing_file(group: list[Point], memory: MemoryModel) -> Path:
    """Where :func:`sized_depths` caches the sizing of ``group``'s design on ``memory``: named by
    the group's points and the code that sizes them (:func:`_source_digest`), so that a change
    to the simulator or the hardware contract sizes the design again."""
    keys = [_source_digest(), *(_key(q) for q in group)]
    h = hashlib.sha256(" ".join(keys).encode()).hexdigest()[:16]
    return SIZING / f"{group[0].design}_{h}_{memory.tag}.json"


def with_sized_depths(p: Point, group: list[Point], memory: MemoryModel) -> Point:
    """``p`` with the queue depths the sizing pass picks for its design over ``group``'s
    images (sized when first built)."""
    depths: dict[str, int] = {}

    def make():
        if not depths:
            depths.update(sized_depths(group, p.memory_model or memory))
        g = p.make()
        g.queue_depths.update(depths)
        return g

    return dataclasses.replace(
        p, params={**p.params, "depths": "sized"}, make=make, design=p.design + SIZED,
        sizing=sizing_file(group, p.memory_model or memory),
    )  # fmt: skip


def shared_build(groups: list[list[Point]], memory: MemoryModel) -> Callable[[], HwConfig]:
    """-> the configuration one build runs the designs of ``groups`` (each the points of one
    design) with, at both depth settings: their ``config`` with run-time queue depths
    (``HwConfig.queue_capacity``), each queue built for the largest of its default and sized
    depths (``step_hw.run_time_depths.shared_capacities``), and, for several designs (the
    tilings of a ``family``), their differing geometry as a run-time setting
    (``HwConfig.geometry_bounds``, ``step_hw.run_time_geometry.shared_bounds``). Sizes the
    designs when first called."""
    from step_hw.run_time_depths import shared_capacities
    from step_hw.run_time_geometry import shared_bounds

    made: list[HwConfig] = []

    def config() -> HwConfig:
        if not made:
            graphs = []
            for group in groups:
                p = group[0]
                sized = p.make()
                sized.queue_depths.update(sized_depths(group, p.memory_model or memory))
                graphs += [p.make(), sized]
            base = groups[0][0].config
            bounds = shared_bounds(graphs, base) if len(groups) > 1 else {}
            made.append(dataclasses.replace(
                base, queue_capacity=shared_capacities(graphs, base), geometry_bounds=bounds
            ))  # fmt: skip
        return made[0]

    return config


def _builds(groups: dict[str, list[Point]], memory: MemoryModel) -> dict[str, Callable]:
    """Design -> its :func:`shared_build`: one per design, or one per ``family`` for the
    designs of a family whose lowered graphs have the same nodes (a tiling with other nodes,
    such as Fig. 8's ``16 x 16`` with two more Promotes, keeps a build of its own)."""
    builds_of: dict[tuple, list[str]] = {}
    for design, group in groups.items():
        p = group[0]
        key = (p.family, tuple(sorted(lower(p.make()).nodes))) if p.family else (design,)
        builds_of.setdefault(key, []).append(design)
    out = {}
    for designs in builds_of.values():
        config = shared_build([groups[d] for d in designs], memory)
        out.update(dict.fromkeys(designs, config))
    return out


def _sweep_points(name: str, depths: tuple[str, ...], memory: MemoryModel) -> list[Point]:
    """The points of sweep ``name`` at each queue-depth setting (built once per process:
    workers rebuild them and run one by index). Both settings of a design run on one build
    (:func:`shared_build`), whichever are asked for."""
    key = (name, depths, memory, TRACES)
    if key not in _POINTS:
        base = SWEEPS[name]()
        groups: dict[str, list[Point]] = {}
        for p in base:
            groups.setdefault(p.design, []).append(p)
        builds = _builds(groups, memory)
        pts = [
            dataclasses.replace(
                p,
                params={**p.params, "depths": "default"},
                rtl_config=builds[p.design],
                sizing=sizing_file(groups[p.design], p.memory_model or memory),
            )
            for p in base
        ]
        _POINTS[key] = (pts if "default" in depths else []) + (
            [
                dataclasses.replace(
                    with_sized_depths(p, groups[p.design], memory), rtl_config=builds[p.design]
                )
                for p in base
            ]
            if "sized" in depths
            else []
        )
    return _POINTS[key]


_POINTS: dict[tuple, list[Point]] = {}


def _run_indexed(name: str, index: int, options: dict[str, Any]) -> dict[str, Any]:
    """Run point ``index`` of sweep ``name`` (in a worker process): its result, or the error
    of an optional point."""
    global TRACES
    options = dict(options)
    TRACES = options.pop("traces")
    p = _sweep_points(name, options.pop("depths"), options["memory"])[index]
    try:
        return run_point(p, **options)
    except Exception as exc:  # recorded in summary.json's "missing"; fatal ones fail the run
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {
            "error": f"{p.design} {json.dumps(p.params)[:200]}: {type(exc).__name__}: {first[:300]}",
            "fatal": not p.optional and not isinstance(exc, NotCached),
            # the sizing of its design, where this point did it before it failed: spent all
            # the same (the points after it read the sizing from the cache)
            "_speed": {"sizing_s": _sizing_done_here(p)},
        }


def main(argv: list[str] | None = None) -> None:
    global TRACES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SWEEPS))
    ap.add_argument("--traces", type=Path, default=scale.DEFAULT_TRACES,
                    help="recorded traces of the moe_scale and attention_scale sweeps")  # fmt: skip
    ap.add_argument("--fresh", action="store_true", help="re-run the RTL of every point")
    ap.add_argument("--trace", action="store_true", help="record queue traces (slow)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many points per sweep")
    ap.add_argument("--cached-only", action="store_true",
                    help="only points whose RTL result is cached (re-evaluate the simulators)")  # fmt: skip
    ap.add_argument("--where", action="append", default=[], metavar="PARAM=VALUE",
                    help="only points whose parameter has this value (repeatable), e.g. tile_b=64")  # fmt: skip
    ap.add_argument(
        "--tier", choices=TIERS, default="axi", help="co-simulation tier (docs/cosim.md)"
    )
    ap.add_argument("--memory", choices=PRESETS, default="axi_ram",
                    help="memory model of the fast tier (and of the rtl profile)")  # fmt: skip
    ap.add_argument("--depths", default="default,sized",
                    help="queue depths: the defaults and/or those the sizing pass picks")  # fmt: skip
    ap.add_argument("--strict", action="store_true",
                    help="exit with status 1 when an acceptance figure is not met")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=2,
                    help="points run at once (Verilator builds still one at a time)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.limit < 0:
        ap.error(f"--limit: at least 0 (0: every point), not {args.limit}")
    if args.jobs < 1:
        ap.error(f"--jobs: at least 1, not {args.jobs}")
    for cond in args.where:
        if not cond.partition("=")[0] or "=" not in cond:
            ap.error(f"--where: PARAM=VALUE, not {cond!r}")
    sweeps = args.only.split(",")
    twice = sorted({n for n in sweeps if sweeps.count(n) > 1})
    if twice:
        ap.error(f"--only: {', '.join(twice)} given twice")
    _source_digest()
    cold = cold_start()  # before this run fills a cache
    if args.memory != "axi_ram" and args.tier != "fast":
        ap.error("--memory hbm needs --tier fast")
    memory = getattr(MemoryModel, args.memory)()
    # the fast tier's summaries beside the axi tier's: build/validate/fast_<memory>/
    out = OUT if args.tier == "axi" else OUT / f"fast_{memory.tag}"
    out.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    depths = tuple(args.depths.split(","))
    if set(depths) - set(DEPTHS) or not depths:
        ap.error(f"--depths: a list of {', '.join(DEPTHS)}, not {args.depths!r}")
    options = {"fresh": args.fresh, "trace": args.trace, "tier": args.tier, "memory": memory,
               "depths": depths, "traces": args.traces, "cached_only": args.cached_only}  # fmt: skip
    t_start = time.perf_counter()
    points, missing = [], []
    fatal = False
    tasks: list[tuple[str, int]] = []
    for name in sweeps:
        if name not in SWEEPS:
            ap.error(f"--only: no sweep {name!r}; there are {', '.join(SWEEPS)}")
        try:
            TRACES = args.traces
            pts = _sweep_points(name, depths, memory)
        except Exception as exc:  # a workload whose hardware is not there yet
            print(f"{name}: sweep skipped ({type(exc).__name__}: {exc})")
            missing.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        chosen = [i for i, p in enumerate(pts) if _matches(p, args.where)]
        if args.limit:
            chosen = chosen[: args.limit]
        tasks += [(name, i) for i in interleaved(chosen, [_build_of(pts[i]) for i in chosen])]
    results, walls = _run_all(tasks, options, args.jobs)
    failed: set[str] = set()
    failed_speed: list[dict[str, Any]] = []
    for (name, index), r in sorted(zip(tasks, results, strict=True), key=_task_order(tasks)):
        p = _sweep_points(name, depths, memory)[index]
        if "error" in r:
            failed_speed.append(
                {"workload": p.workload, "params": p.params, "error": True, **r.get("_speed", {})}
            )
            fatal |= r["fatal"]
            if p.design not in failed or r["fatal"]:  # said once per design
                print(f"{name}: {'FAILED' if r['fatal'] else 'skipped'} {r['error']}")
                failed.add(p.design)
            missing.append(r["error"])  # and counted per point
            continue
        points.append(r)
    if not points:
        # nothing measured (every point uncached under --cached-only, or failed): the last
        # run's summary and speed file stay as they are rather than be replaced by empty ones
        why = missing[0] if missing else "no point matches --only, --where and --depths"
        raise SystemExit(f"validate: none of {len(tasks)} points ran: {why[:300]}")
    run = selection(args, complete=not missing and _unfiltered(args), cold=cold)
    rows = write_summary(
        points, missing, walls, time.perf_counter() - t_start, args.tier, memory, out, run,
        failed_speed,
    )  # fmt: skip
    if fatal:
        raise SystemExit("validate: some points failed (summary.json's missing)")
    if args.strict and (unmet := [r for r in rows if r["met"] is False]):
        raise SystemExit(
            f"validate: {len(unmet)} acceptance figure(s) not met (--strict): "
            + "; ".join(f"{r['criterion']}, {r['scope']}" for r in unmet)
        )


def cache_folders() -> list[Path]:
    """The folders whose entries a run reuses: its RTL results, simulator results, sizings and
    the interpreter's references, the Verilator builds, the conversions to Verilog and
    Verilator's runtime objects."""
    from step_hw import conversions
    from step_hw.cosim.harness import BUILD
    from step_hw.cosim.verilator import runtime_cache

    folders = [OUT / "points", OUT / "sims", SIZING, OUT / "reference"]
    return [*folders, BUILD, conversions.cache_root(), runtime_cache()]


def cold_start() -> bool:
    """Every one of :func:`cache_folders` is missing or empty: the run computes everything, as
    on a machine without ``build/`` (the acceptance's cold run)."""
    return not any(f.is_dir() and any(f.iterdir()) for f in cache_folders())


def selection(args: argparse.Namespace, complete: bool, cold: bool = False) -> dict[str, Any]:
    """What a run measured, kept in summary.json and the speed file: its sweeps, filters and
    depth settings, whether the RTL came from the cache only, ``complete`` (every point of
    every sweep at both depth settings ran), so that a partial or cached run's wall time is not
    read as ``make validate``'s, and ``cold`` (it started with every cache empty,
    :func:`cold_start`)."""
    return {
        "only": args.only.split(","),
        "where": args.where,
        "limit": args.limit,
        "depths": args.depths.split(","),
        "cached_only": args.cached_only,
        "fresh": args.fresh,
        "jobs": args.jobs,
        "complete": complete,
        "cold": cold,
    }


def _unfiltered(args: argparse.Namespace) -> bool:
    """``args`` select every point of ``make validate``: all sweeps, both depth settings, no
    ``--where`` or ``--limit``."""
    return (
        set(args.only.split(",")) == set(SWEEPS)
        and set(args.depths.split(",")) == set(DEPTHS)
        and not args.where
        and not args.limit
    )


def _matches(p: Point, where: list[str]) -> bool:
    """``p``'s parameters have every ``PARAM=VALUE`` of ``where`` (compared as text)."""
    for cond in where:
        key, _, value = cond.partition("=")
        if str(p.params.get(key)) != value:
            return False
    return True


def _build_of(p: Point) -> str:
    """The design whose build ``p`` runs on: a sized point shares its design's build."""
    return p.design.removesuffix(SIZED)


def interleaved(indices: list[int], designs: list[str]) -> list[int]:
    """``indices`` reordered so that consecutive points take turns among their designs (each
    design's points in their order): two workers then size, elaborate and build two designs at
    once, or run one design's points while another builds, instead of both waiting for the
    design they share."""
    queues: dict[str, list[int]] = {}
    for i, d in zip(indices, designs, strict=True):
        queues.setdefault(d, []).append(i)
    order: list[int] = []
    while any(queues.values()):
        for q in queues.values():
            if q:
                order.append(q.pop(0))
    return order


def _task_order(tasks: list[tuple[str, int]]) -> Callable[[tuple], tuple[int, int]]:
    """Sort key putting results back in sweep order, each sweep's points by index."""
    sweeps = list(dict.fromkeys(name for name, _ in tasks))
    return lambda pair: (sweeps.index(pair[0][0]), pair[0][1])


#: In a worker of :func:`_run_all`'s pool: the event the run sets when it is interrupted.
_stopping: Any = None


def _stop_with(event: Any) -> None:
    """The pool's worker initializer: remember the run's stop event (:data:`_stopping`)."""
    global _stopping
    _stopping = event


def _timed(name: str, index: int, options: dict[str, Any]) -> tuple[dict[str, Any], float, float]:
    """:func:`_run_indexed` with its start and end (wall clock); a measured point's speed record
    gets the whole point's seconds (``point_s``: its parts and whatever lies between them). In an
    interrupted run's pool (:data:`_stopping` set) it returns at once, without running the point."""
    t0 = time.time()
    if _stopping is not None and _stopping.is_set():
        return {"error": "interrupted", "fatal": True}, t0, t0
    r = _run_indexed(name, index, options)
    t1 = time.time()
    if "_speed" in r:
        r["_speed"]["point_s"] = t1 - t0
    return r, t0, t1


def _run_all(
    tasks: list[tuple[str, int]], options: dict[str, Any], jobs: int
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Points ``tasks`` (sweep name, index), ``jobs`` at a time in one pool (a sweep's first
    points start while the last sweep's last points run), each printed as it ends; -> their
    results in ``tasks``' order and each sweep's wall time, from its first point's start to its
    last point's end. Each measured point's line starts with how many points have ended and
    the minutes and seconds since the first began (``[ 12/328 03:41]``).

    Interrupted (Ctrl-C: ``KeyboardInterrupt``), it starts no other point and exits with status
    130 and a line saying how many points ended; their results are cached, so the next run goes
    on from there. (The pool's own exit waited for every queued point: the run went on, silent,
    for as long as the points left took.)"""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    began = time.perf_counter()
    ended = 0

    def show(name: str, r: dict[str, Any]) -> None:
        """Count the point as ended; a measured one gets a line: how many points have ended of
        the run's and the minutes since it began, then its cycles on each side."""
        nonlocal ended
        ended += 1
        if "error" in r:
            return  # said at the end, once per design (main)
        err = (r["sim_cycles"] - r["rtl_cycles"]) / r["rtl_cycles"]
        perr = (r["paper_cycles"] - r["rtl_cycles"]) / r["rtl_cycles"]
        minutes, seconds = divmod(int(time.perf_counter() - began), 60)
        print(
            f"[{ended:{len(str(len(tasks)))}d}/{len(tasks)} {minutes:02d}:{seconds:02d}] "
            f"{name:9s} {json.dumps(r['params']):80.80s} rtl {r['rtl_cycles']:7d} "
            f"sim {r['sim_cycles']:7d} ({err:+.1%}) paper {r['paper_cycles']:7d} ({perr:+.0%}) "
            f"axi {r['axi_efficiency']:.0%} match {r['outputs_match']}",
            flush=True,
        )

    timed: list[tuple[dict[str, Any], float, float]] = []
    if jobs <= 1 or len(tasks) <= 1:
        try:
            for name, i in tasks:
                timed.append(_timed(name, i, options))
                show(name, timed[-1][0])
        except KeyboardInterrupt:
            _interrupted(ended, len(tasks))
    else:
        stop = multiprocessing.Event()
        pool = ProcessPoolExecutor(max_workers=jobs, initializer=_stop_with, initargs=(stop,))
        try:
            futures = {pool.submit(_timed, name, i, options): (name, i) for name, i in tasks}
            for f in as_completed(futures):
                show(futures[f][0], f.result()[0])
            timed = [f.result() for f in futures]
        except KeyboardInterrupt:
            stop.set()  # a point a worker has already taken returns at once
            _interrupted(ended, len(tasks))
        finally:
            # the queued points cancelled; the ones in flight end (Ctrl-C reached them too)
            pool.shutdown(cancel_futures=True)
    spans: dict[str, list[float]] = {}
    for (name, _), (_, start, end) in zip(tasks, timed, strict=True):
        span = spans.setdefault(name, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    return [r for r, _, _ in timed], {n: end - start for n, (start, end) in spans.items()}


def _interrupted(ended: int, total: int) -> None:
    """Leave an interrupted run: exit status 130 (128 + SIGINT), the points that ended said."""
    print(
        f"validate: interrupted after {ended} of {total} points; their results are cached "
        "(a run with the same options goes on from there); no summary written",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(130)


#: The seconds of ``validate_speed.json``'s points that :func:`speed_totals` adds up.
SPEED_PARTS = ("sizing_s", "rtl_elaborate_s", "rtl_build_s", "rtl_run_s", "sim_wall_s",
               "paper_wall_s", "reference_s")  # fmt: skip


def speed_totals(speed: list[dict[str, Any]]) -> dict[str, float]:
    """Each part of this run's time summed over its points (:data:`SPEED_PARTS`; a build's time
    includes its wait for the machine's build lock): where a cold run's minutes went. A point's
    cached RTL result (``rtl_cached``) or simulations (``sim_cached``) keep the seconds they
    took when measured, which this run did not spend: they are left out. ``points_s`` sums the
    points' whole seconds (``point_s``, this run's), ``other_s`` what of it no part names."""

    def spent(p: dict[str, Any], part: str) -> float:
        if p.get("rtl_cached") and part.startswith("rtl_"):
            return 0.0
        if p.get("sim_cached") and part in ("sim_wall_s", "paper_wall_s"):
            return 0.0
        return p.get(part, 0.0)

    totals = {k: round(sum(spent(p, k) for p in speed), 1) for k in SPEED_PARTS}
    # the points' own seconds, and what of them no part names (building the graphs, the design
    # key, the workers' imports)
    whole = round(sum(p.get("point_s", 0.0) for p in speed), 1)
    return {**totals, "points_s": whole, "other_s": round(whole - sum(totals.values()), 1)}


def sizing_line(points: list[dict]) -> str:
    """One line on the sized designs of ``points``: images sized on, held-out images checked and
    sized on too, and the worst held-out image's sized cycles over its reference (rtl profile)."""
    designs = {p["design"]: p["sizing"] for p in points if p.get("sizing")}
    if not designs:
        return "sized depths: none in this run"
    rows = designs.values()
    worst = [r["held_out_worst"] for r in rows if r["held_out_worst"] is not None]
    text = (
        f"sized depths: {len(designs)} designs, {sum(r['images'] or 0 for r in rows)} images "
        f"sized on ({sum(len(r['held_out_added']) for r in rows)} of them held out and added), "
        f"{sum(r['held_out'] for r in rows)} held-out images checked"
    )
    if worst:
        text += f", worst held-out {max(worst):.4f} x its reference"
    deadlocked = sum(r["held_out_deadlocked"] for r in rows)
    return text + (f", {deadlocked} deadlocked" if deadlocked else "")


def write_summary(points, missing, walls, wall, tier, memory, out, run, failed=()) -> list:
    """summary.json, report.md, the scatter, the Fig. 8 grid and the speed file; print the
    statistics and the acceptance rows (:mod:`bench.validate_acceptance`), which it returns.
    ``run`` (:func:`selection`) says what the run measured; ``failed``: the speed records of the
    points that failed (``"error": true``; the seconds they spent, their design's sizing
    included), kept in the speed file and its totals."""
    speed = [{"workload": p["workload"], "params": p["params"], **p.pop("_speed")} for p in points]
    speed += list(failed)
    summary = {
        "tier": tier,
        "memory": dataclasses.asdict(memory),
        "fig8": {
            "scale": scale.FIG8_SCALE,
            "hw": dataclasses.asdict(scale.FIG8_HW),
            "memory": dataclasses.asdict(scale.SCALE_MEMORY),
        },
        "points": points,
        "stats": {name: stats(points, field) for name, field in PROFILES.items()},
        "comparisons": comparisons(points),
        "missing": missing,
        "sweep_wall_s": walls,
        "wall_s": wall,
        "run": run,
    }
    summary["acceptance"] = acceptance.judge(summary, speed)
    if any(p["workload"] == "fig8" for p in points):
        summary["fig8_grid"] = fig8_grid(points)
        plot_fig8(summary["fig8_grid"], out / "fig8.png")
    write_atomically(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_atomically(out / "report.md", report.markdown(summary))
    SPEED.parent.mkdir(parents=True, exist_ok=True)
    sweeps = dict.fromkeys(s["workload"] for s in speed)
    timing = {"run": run, "wall_s": wall, "sweep_wall_s": walls, "totals": speed_totals(speed),
              "sweep_totals": {w: speed_totals([s for s in speed if s["workload"] == w])
                               for w in sweeps},
              "points": speed}  # fmt: skip
    write_atomically(
        SPEED if tier == "axi" else SPEED.with_name(f"validate_speed_fast_{memory.tag}.json"),
        json.dumps(timing, indent=1) + "\n",
    )
    if points:
        plot(points, out / "validate.png")
    for name, per in summary["stats"].items():
        for w, st in per.items():
            print(
                f"{name} profile, {w}: {st['points']} points, Pearson {st['pearson']:.4f}, "
                f"MARE {st['mare']:.2%} (max {st['max_rel_error']:.2%})"
            )
    comps = summary["comparisons"]
    for name in PROFILES:
        judged = [c for cs in acceptance.picks(comps, name).values() for c in cs]
        if judged:
            agree = sum(c[f"{name}_profile_agrees"] for c in judged)
            print(
                f"{name} profile picks the RTL's fastest option in {agree}/{len(judged)} comparisons"
            )
    print(sizing_line(points))
    print("acceptance (docs/validation.md):")
    print(acceptance.table(summary["acceptance"]))
    print(
        f"wrote {out / 'summary.json'}, {out / 'report.md'}, {out / 'validate.png'}, {SPEED} "
        f"({wall:.0f} s)"
    )
    return summary["acceptance"]


SWEEPS.update(
    fig8=fig8_points,
    moe_scale=moe_scale_points,
    attention_scale=attention_scale_points,
    swiglu=swiglu_points,
    moe=moe_points,
    attention=attention_points,
)


if __name__ == "__main__":
    main()
