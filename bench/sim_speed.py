"""Simulator speed at full model size (timing-only mode): the paper profile on the paper's
layers, the rtl profile on ``make validate``'s paper-size designs (16-expert MoE on the first
recorded routing, Fig. 8 SwiGLU at 16 x 16 tiles, dynamic decode attention of 16 requests on
the first recorded KV batch; hardware-tiled onto 16 x 16 BF16 tiles, the HBM-like memory).

Writes ``build/bench/sim_speed.json``:
``{"cases": [{"name", "profile", "wall_s", "target_s", "events_per_s", "sim_cycles",
"race_watched"}]}``. Graph construction and input preparation are outside the timed region; the
simulation itself (engine set-up included) is inside. ``race_watched`` counts the loads and
stores the memory-race check (:mod:`step_lang.races`) follows; where it is not zero,
``race_check_cpu_s`` holds the CPU seconds of the fastest of three runs with the check and of
three without it.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

from examples import attention, moe, traces
from sim import PaperProfile, simulate
from step_lang import races
from step_lang.passes import lower


def _moe_case(cfg: moe.MoEConfig, batch: int, schedule: moe.MoESchedule):
    choices = traces.synthetic_routing(batch, cfg.experts, cfg.top_k, seed=0)
    return moe.build(cfg, schedule, batch), moe.routing_tensors(cfg, choices), PaperProfile()


def _attention_case(batch: int, regions: int):
    cfg = attention.QWEN
    lengths = traces.synthetic_kv_lengths(batch, mean=1000, sigma=0.8, high=cfg.max_len - 1, seed=0)
    graph = attention.build(cfg, "dynamic", batch, regions=regions)
    return graph, attention.control_inputs(cfg, lengths), PaperProfile()


def _validate_case(sweep: str, **params: Any):
    """The first point of ``make validate``'s ``sweep`` with ``params``, as that run simulates
    it with the rtl profile (timing-only, its integer tensors)."""
    from bench import validate
    from sim.profiles import RtlProfile

    point = next(
        p for p in validate.SWEEPS[sweep]() if all(p.params[k] == v for k, v in params.items())
    )
    graph = point.make()
    profile = RtlProfile.for_memory(point.memory_model, point.config)
    return graph, validate.timing_image(graph, point.memory), profile


CASES = [
    (
        "qwen3_moe_b64_static32",
        5.0,
        lambda: _moe_case(moe.QWEN, 64, moe.MoESchedule("static", tile_n=32)),
    ),
    (
        "mixtral_moe_b1024_dynamic",
        30.0,
        lambda: _moe_case(moe.MIXTRAL, 1024, moe.MoESchedule("dynamic")),
    ),
    ("attention_b64_dynamic_r4", 5.0, lambda: _attention_case(64, 4)),
    ("moe16_static_tm2_rtl", 10.0, lambda: _validate_case("moe_scale", schedule="static_tm2")),
    ("moe16_static_tm1_rtl", 10.0, lambda: _validate_case("moe_scale", schedule="static_tm1")),
    ("moe16_dynamic_tm2_rtl", 10.0, lambda: _validate_case("moe_scale", schedule="dynamic_tm2")),
    ("fig8_16x16_rtl", 60.0, lambda: _validate_case("fig8", tile_b=16, tile_i=16)),
    (
        "attention16_dynamic_rtl",
        5.0,
        lambda: _validate_case("attention_scale", schedule="dynamic"),
    ),
]


def _race_check_cost(graph, memory, profile, repeats: int = 3) -> tuple[float, float]:
    """The fastest of ``repeats`` runs with the memory-race check and of as many without it,
    alternating (a single pair is within this machine's run-to-run noise)."""
    check = races.RaceCheck.for_graph
    best = {True: float("inf"), False: float("inf")}
    try:
        for _ in range(repeats):
            for on in (False, True):
                races.RaceCheck.for_graph = check if on else classmethod(lambda cls, graph: None)
                t0 = time.process_time()
                simulate(graph, memory, functional=False, profile=profile)
                best[on] = min(best[on], time.process_time() - t0)
    finally:
        races.RaceCheck.for_graph = check
    return best[True], best[False]


def main() -> None:
    out = pathlib.Path("build/bench")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, target, make in CASES:
        graph, memory, profile = make()
        t0 = time.perf_counter()
        result = simulate(graph, memory, functional=False, profile=profile)
        wall = time.perf_counter() - t0
        check = races.RaceCheck.for_graph(lower(graph))
        watched = len(check.slot) if check is not None else 0
        row = {"name": name, "profile": profile.name, "wall_s": round(wall, 3), "target_s": target,
               "events_per_s": round(result.events / wall, 1), "sim_cycles": result.cycles,
               "race_watched": watched}  # fmt: skip
        note = ""
        if watched:
            checked, unchecked = _race_check_cost(graph, memory, profile)
            row["race_check_cpu_s"] = {"with": round(checked, 3), "without": round(unchecked, 3)}
            note = (
                f"  (race check of {watched} loads and stores: {checked:.2f} s CPU, "
                f"{unchecked:.2f} s without; fastest of 3 each)"
            )
        rows.append(row)
        print(
            f"{name:<28} {wall:7.2f} s (target {target:4.0f} s)  {result.cycles:>12} cycles  {result.events:>8} events{note}"
        )
    (out / "sim_speed.json").write_text(json.dumps({"cases": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
