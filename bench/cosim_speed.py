"""Co-simulation speed: the fast tier against the cocotbext-axi tier, on the same designs.

For each design this writes one entry of ``build/bench/cosim_speed.json``:

* ``cycles`` (equal on both tiers, or the entry says which differ) and whether the outputs are
  bit-exact with the interpreter on each tier;
* ``elaborate_s``: Amaranth to Verilog, once per design (when an earlier run left the design's
  key, the seconds recorded then, and ``elaborate_cached`` is true);
  ``interpret_s``: the interpreter's reference run;
* per tier: ``build_s`` (Verilator and the C++ compiler; for a cached build the seconds recorded
  in its folder, and ``build_cached`` is true),
  ``sim_s`` (inside the simulator, from ``start`` to ``done``), ``cycles_per_s`` (cycles over
  ``sim_s``: the speed per simulated cycle), ``run_s`` (the simulator process: cocotb start-up
  and reading results back included; ``cycles_per_run_s`` the cycles over it, which for short
  runs is mostly the process's fixed cost), and ``cached_wall_s``, the wall time of a second
  :func:`step_hw.cosim.run` of the same design (design key lookup, input files, the simulator,
  results) with ``wall_over_run`` its ratio to ``run_s``;
* ``speedup``: the fast tier's cycles per second over the axi tier's; ``run_speedup``: the axi
  tier's ``run_s`` over the fast tier's (whole runs, fixed costs included).

Designs: the SwiGLU validation point of ``make validate`` with the most cycles (16 x 4 x 32, int16,
tile 1 x 1), the MoE and decode-attention hardware examples, and (``fast`` tier only, the axi tier
would take minutes) the SwiGLU on 16 x 16 BF16 hardware tiles with 256 MAC lanes, 64 x 16 x 128.

Usage::

    python -m bench.cosim_speed [--only swiglu,moe,attention,swiglu16] [--opt "OPT_FAST=-O2 ..."]

``--opt`` overrides the fast tier's make flags (:data:`step_hw.cosim.harness.FAST_OPT`) to measure
another optimisation level (its builds get their own folders: the flags are in the key); its
results go to ``build/bench/cosim_speed_<level>.json`` (``O2`` for ``OPT_FAST=-O2 ...``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path("build/bench/cosim_speed.json")


def _designs() -> dict[str, tuple[Callable[[], Any], dict, Any, tuple[str, ...]]]:
    """name -> (graph factory, memory, HwConfig, tiers)."""
    from bench.validate import SWIGLU_HW, SWIGLU_SIZE
    from examples import attention, moe, swiglu
    from step_hw.config import BF16_CONFIG, HwConfig

    b = np.arange(8)
    skewed = np.stack([np.zeros(8, int), 1 + b % 2], axis=1)
    big = swiglu.SwiGLUConfig(batch=64, hidden=16, intermediate=128, dtype="bfloat16")
    big_hw = dataclasses.replace(BF16_CONFIG, tile_rows=16, tile_cols=16, lanes=256)
    both = ("fast", "axi")
    return {
        "swiglu": (
            lambda: swiglu.hardware(1, 1, hw=SWIGLU_HW, size=SWIGLU_SIZE),
            swiglu.inputs(SWIGLU_SIZE, seed=1),
            SWIGLU_HW,
            both,
        ),
        "moe": (moe.hardware, moe.inputs(moe.HW, skewed, seed=4), HwConfig(), both),
        "attention": (
            lambda: attention.hardware("dynamic"),
            attention.hardware_inputs([8, 12, 8, 2], seed=1),
            HwConfig(),
            both,
        ),
        "swiglu16": (
            lambda: swiglu.hardware(16, 16, hw=big_hw, size=big),
            swiglu.inputs(big, seed=2),
            big_hw,
            ("fast",),
        ),
    }


def measure(name: str, make, memory: dict, config, tiers: tuple[str, ...]) -> dict[str, Any]:
    from step_hw import cosim
    from step_lang import interpret

    t0 = time.perf_counter()
    want = interpret(make(), memory).memory
    entry: dict[str, Any] = {"design": name, "interpret_s": round(time.perf_counter() - t0, 2)}
    for tier in tiers:
        d = cosim.design(make(), config, tier=tier)
        entry.setdefault("elaborate_s", round(d.elaborate_s or d.recorded_elaborate_s, 2))
        entry.setdefault("elaborate_cached", d.elaborate_s == 0)
        first = cosim.run(make(), memory, config=config, tier=tier, tag=f"speed_{tier}")
        t0 = time.perf_counter()
        again = cosim.run(make(), memory, config=config, tier=tier, tag=f"speed_{tier}_cached")
        wall = time.perf_counter() - t0
        exact = all(np.array_equal(first.outputs[k], want[k]) for k in first.outputs)
        entry[tier] = {
            "cycles": first.cycles,
            "bit_exact": exact and again.cycles == first.cycles,
            "build_s": round(first.build_s or d.recorded_build_s, 1),
            "build_cached": first.build_s == 0,
            "sim_s": round(again.sim_s, 4),
            "run_s": round(again.run_s, 3),
            "cycles_per_s": round(again.cycles / again.sim_s),
            "cycles_per_run_s": round(again.cycles / again.run_s),
            "cached_wall_s": round(wall, 3),
            "wall_over_run": round(wall / again.run_s, 2),
        }
    if len(tiers) == 2:
        f, a = entry["fast"], entry["axi"]
        entry["cycles_equal"] = f["cycles"] == a["cycles"]
        entry["speedup"] = round(f["cycles_per_s"] / a["cycles_per_s"], 1)
        entry["run_speedup"] = round(a["run_s"] / f["run_s"], 1)
    return entry


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="swiglu,moe,attention,swiglu16")
    ap.add_argument("--opt", default=None, help="make flags of the fast tier's build")
    args = ap.parse_args(argv)
    if args.opt:
        from step_hw.cosim import harness

        harness.FAST_OPT = args.opt
    designs = _designs()
    unknown = [n for n in args.only.split(",") if n not in designs]
    if unknown:
        ap.error(f"--only: no design {', '.join(unknown)}; designs: {', '.join(designs)}")
    out = OUT
    if args.opt:  # another optimisation level: its own file beside the default's
        level = "".join(ch for ch in args.opt.split()[0].split("=")[-1] if ch.isalnum())
        out = OUT.with_name(f"cosim_speed_{level}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(out.read_text()) if out.is_file() else {}
    entries = {e["design"]: e for e in old.get("designs", [])}
    for name in args.only.split(","):
        make, memory, config, tiers = designs[name]
        entries[name] = measure(name, make, memory, config, tiers)
        print(json.dumps(entries[name]))
    from step_hw.cosim.harness import FAST_OPT

    result = {
        "fast_opt": args.opt or FAST_OPT,
        "cpus": os.cpu_count(),
        "designs": list(entries.values()),
    }
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
