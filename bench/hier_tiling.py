"""Hierarchical tiling at paper size: the Fig. 8 SwiGLU on 16x16 BF16 hardware tiles.

For every point of the paper's sweep (``tile_b in {16, 32, 64}`` x ``tile_i in {16, ..., 256}``,
layer 64 x 256 x 512) this writes one row of ``build/bench/hier_tiling.json``:

* ``paper_cycles``: the paper profile (``PaperProfile.hdl_validation()``) on the user's graph
  (big tiles) and on its :func:`~step_lang.hier_tiling.hier_tile` form, and their difference;
* ``offchip_bytes`` and ``onchip_bytes`` before and after (``metrics``, paper convention);
* with ``--elaborate``: elaboration and Verilog conversion seconds, Verilog bytes, and the
  result of ``verilator --lint-only -Wall`` with the project's waivers (``lint_ok``).

The interpreter check (bit-exact outputs) is in ``tests/test_hier_tiling.py`` at smaller sizes;
``--check`` runs it here at paper size as well (slow: minutes per point).

``--attention`` adds decode attention at paper tile sizes (``ATTENTION_POINTS``: head dim 64,
KV tile 32, 16 requests of KV length 256 to 318, BF16, ``attention.PAPER_HW``) on 16x16
hardware tiles (``attention`` rows): bit-exactness of outputs and caches, off-chip bytes, the
paper profile's cycles before and after, and with ``--elaborate`` the hardware as above.

``--moe`` adds the MoE layer at 16 experts, hidden 256 (``MOE_LAYER``, BF16) on 16x16 hardware
tiles under the time-multiplexed schedules of ``MOE_POINTS``, static and dynamic tiles (``moe``
rows of the JSON): the rewritten graph's interpreter outputs against the original's
(bit-exact), off-chip bytes, paper-profile cycles before and after, and with ``--elaborate``
its elaboration, Verilog and lint as above. (The static schedule, one
pipeline per expert, is 16 such pipelines; its rewrite is checked in the tests.)

Usage::

    python -m bench.hier_tiling [--elaborate] [--check] [--only 64x256 ...] [--moe] [--attention]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import time

from examples import swiglu

OUT = pathlib.Path("build/bench/hier_tiling.json")
LAYER = swiglu.SwiGLUConfig(batch=64, hidden=256, intermediate=512, dtype="bfloat16")
HW_TILE = 16


def hw_config():
    """The hardware of the paper-size designs: BF16, 16x16 tiles, 16 MAC lanes."""
    from step_hw.config import BF16_CONFIG

    return dataclasses.replace(BF16_CONFIG, tile_rows=HW_TILE, tile_cols=HW_TILE)


def _cycles(graph) -> int:
    from sim import simulate
    from sim.profiles.paper import PaperProfile

    return simulate(graph, profile=PaperProfile.hdl_validation(), functional=False).cycles


def _check(graph, tiled) -> bool:
    import ml_dtypes
    import numpy as np

    from step_lang import interpret

    mem = swiglu.inputs(dataclasses.replace(LAYER, dtype="float32"))
    mem = {k: v.astype(ml_dtypes.bfloat16) for k, v in mem.items()}
    a = interpret(graph, dict(mem)).memory["out"]
    b = interpret(tiled, dict(mem)).memory["out"]
    return bool(np.array_equal(a.view(np.uint16), b.view(np.uint16)))


def _elaborate(tiled, config, folder: pathlib.Path) -> dict:
    from step_hw.cosim.verilator import lint
    from step_hw.elaborate import ElaboratedGraph
    from step_hw.verilog_backend import convert

    t0 = time.perf_counter()
    top = ElaboratedGraph(tiled, config)
    t1 = time.perf_counter()
    text = convert(top, name=tiled.name, emit_src=False)
    t2 = time.perf_counter()
    path = folder / f"{tiled.name}.v"
    path.write_text(text)
    result = lint([path], top=tiled.name)
    t3 = time.perf_counter()
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("%")]
    return {
        "elaborate_s": round(t1 - t0, 1),
        "verilog_s": round(t2 - t1, 1),
        "verilog_bytes": len(text),
        "lint_s": round(t3 - t2, 1),
        "lint_ok": result.returncode == 0,
        "lint_messages": errors[:5],
    }


def point(tile_b: int, tile_i: int, *, elaborate: bool, check: bool, folder: pathlib.Path) -> dict:
    """One row: cycles and costs before and after the pass (and the hardware, if asked)."""
    from step_lang.hier_tiling import hier_tile, tiling_report

    config = hw_config()
    graph = swiglu.hardware(tile_b, tile_i, hw=config, size=LAYER)
    t0 = time.perf_counter()
    tiled = hier_tile(graph, HW_TILE, HW_TILE)
    pass_s = time.perf_counter() - t0
    report = tiling_report(graph, tiled)
    before, after = _cycles(graph), _cycles(tiled)
    row = {
        "tile_b": tile_b,
        "tile_i": tile_i,
        "pass_s": round(pass_s, 3),
        "nodes": [len(graph.nodes), len(tiled.nodes)],
        "offchip_bytes": [int(report.offchip_before), int(report.offchip_after)],
        "onchip_bytes": [int(report.onchip_before), int(report.onchip_after)],
        "paper_cycles": [before, after],
        "paper_cycles_change": round((after - before) / before, 4),
    }
    if check:
        row["bit_exact"] = _check(graph, tiled)
    if elaborate:
        row.update(_elaborate(tiled, config, folder))
    return row


MOE_LAYER = ("hw16", 256, 64, 16, 2)  # MoEConfig: name, hidden, intermediate, experts, top-k
#: (label, MoESchedule arguments, batch)
MOE_POINTS = [
    ("timemux1_n16_b16", {"tiling": "static", "tile_n": 16, "tile_f": 16, "regions": 1}, 16),
    ("timemux2_n16_b32", {"tiling": "static", "tile_n": 16, "tile_f": 16, "regions": 2}, 32),
    ("dynamic_timemux1_b16", {"tiling": "dynamic", "tile_f": 16, "regions": 1}, 16),
]


def moe_point(label: str, schedule: dict, batch: int, *, elaborate: bool, folder) -> dict:
    """One MoE row: the rewrite, its bit-exactness and costs (and the hardware, if asked)."""
    import ml_dtypes
    import numpy as np

    from examples import moe, traces
    from sim import simulate
    from sim.profiles.paper import PaperProfile
    from step_lang import interpret, metrics
    from step_lang.hier_tiling import hier_tile

    config = hw_config()
    if schedule["tiling"] == "dynamic":  # an expert's tile holds up to every token of the batch
        config = dataclasses.replace(config, dyn_tile_rows=batch)
    layer = moe.MoEConfig(*MOE_LAYER, dtype="bfloat16")
    graph = moe.build(
        layer, moe.MoESchedule(**schedule), batch, elem_bytes=None, fns=moe.hardware_fns(config)
    )
    choices = traces.synthetic_routing(batch, layer.experts, layer.top_k, skew=1.5, seed=batch)
    memory = moe.inputs(moe.MoEConfig(*MOE_LAYER, dtype="float32"), choices, seed=1)
    memory = {
        k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in memory.items()
    }
    t0 = time.perf_counter()
    tiled = hier_tile(graph, HW_TILE, HW_TILE)
    pass_s = time.perf_counter() - t0
    runs = [interpret(g, {k: v.copy() for k, v in memory.items()}) for g in (graph, tiled)]
    # the costs depend on the routing: evaluated with the dims each run bound, a ragged dim (a
    # merged expert tile's rows) at its largest value (the storage must hold it)
    costs = [
        metrics(g, "paper").evaluate(
            {**{k: max(v) for k, v in r.bindings.ragged.items()}, **r.bindings.regular}
        )
        for g, r in zip((graph, tiled), runs, strict=True)
    ]
    a, b = (r.memory["out"] for r in runs)
    cycles = [
        simulate(
            g, {k: v.copy() for k, v in memory.items()}, profile=PaperProfile.hdl_validation()
        ).cycles
        for g in (graph, tiled)
    ]
    row = {
        "point": label,
        "schedule": schedule,
        "batch": batch,
        "pass_s": round(pass_s, 3),
        "nodes": [len(graph.nodes), len(tiled.nodes)],
        "offchip_bytes": [int(c.offchip_bytes) for c in costs],
        "onchip_bytes": [int(c.onchip_bytes) for c in costs],
        "paper_cycles": cycles,
        "bit_exact": bool(np.array_equal(a.view(np.uint16), b.view(np.uint16))),
    }
    if elaborate:
        row.update(_elaborate(tiled, config, folder))
    return row


#: (label, schedule, batch, regions)
ATTENTION_POINTS = [
    ("interleaved_b16_r2", "interleaved", 16, 2),
    ("dynamic_b16_r2", "dynamic", 16, 2),
]
ATTENTION_KV = (256, 319)  # KV lengths drawn from [256, 319)


def attention_point(
    label: str, schedule: str, batch: int, regions: int, *, elaborate: bool, folder
) -> dict:
    """One attention row: the rewrite, its bit-exactness, costs and paper-profile cycles (and
    the hardware, if asked)."""
    import numpy as np

    from examples import attention
    from sim import simulate
    from sim.profiles.paper import PaperProfile
    from step_lang import interpret, metrics
    from step_lang.hier_tiling import hier_tile

    config = hw_config()
    graph = attention.hardware(schedule, batch, regions, hw=config, config=attention.PAPER_HW)
    kv = np.random.default_rng(batch).integers(*ATTENTION_KV, size=batch)
    memory = attention.hardware_inputs(kv, seed=1, hw=config, config=attention.PAPER_HW)
    t0 = time.perf_counter()
    tiled = hier_tile(graph, HW_TILE, HW_TILE)
    pass_s = time.perf_counter() - t0
    runs = [interpret(g, {k: v.copy() for k, v in memory.items()}) for g in (graph, tiled)]
    costs = [
        metrics(g, "paper").evaluate(r.bindings.regular)
        for g, r in zip((graph, tiled), runs, strict=True)
    ]
    cycles = [
        simulate(
            g, {k: v.copy() for k, v in memory.items()}, profile=PaperProfile.hdl_validation()
        ).cycles
        for g in (graph, tiled)
    ]
    same = all(
        np.array_equal(runs[0].memory[t].view(np.uint16), runs[1].memory[t].view(np.uint16))
        for t in ("out", "k_cache", "v_cache")
    )
    row = {
        "point": label,
        "schedule": schedule,
        "batch": batch,
        "regions": regions,
        "kv_lengths": [int(v) for v in kv],
        "pass_s": round(pass_s, 3),
        "nodes": [len(graph.nodes), len(tiled.nodes)],
        "offchip_bytes": [int(c.offchip_bytes) for c in costs],
        "onchip_bytes": [int(c.onchip_bytes) for c in costs],
        "paper_cycles": cycles,
        "bit_exact": bool(same),
    }
    if elaborate:
        row.update(_elaborate(tiled, config, folder))
    return row


def _hardware_text(row: dict) -> str:
    if "elaborate_s" not in row:
        return ""
    return (
        f"  elaborate {row['elaborate_s']} s, Verilog {row['verilog_s']} s "
        f"{row['verilog_bytes'] / 1e6:.1f} MB, lint {'ok' if row['lint_ok'] else 'FAILED'}"
    )


def _merged(old: list[dict], new: list[dict]) -> list[dict]:
    """The rows of an earlier run not measured again, then this run's."""
    again = {r["point"] for r in new}
    return [r for r in old if r["point"] not in again] + new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hier_tiling", description=__doc__)
    parser.add_argument("--elaborate", action="store_true", help="also elaborate and lint")
    parser.add_argument("--check", action="store_true", help="also compare interpreter outputs")
    parser.add_argument("--only", action="append", default=[], metavar="BxI|LABEL",
                        help="one point, e.g. 64x256, or an MoE/attention label such as "
                             "dynamic_timemux1_b16 (repeatable)")  # fmt: skip
    parser.add_argument("--moe", action="store_true", help="also the 16-expert MoE layer")
    parser.add_argument("--attention", action="store_true", help="also decode attention")
    args = parser.parse_args(argv)
    points = swiglu.SWEEP
    sizes = [p for p in args.only if re.fullmatch(r"\d+x\d+", p)]
    labels = set(args.only) - set(sizes)
    unknown = sorted(set(sizes) - {f"{b}x{i}" for b, i in swiglu.SWEEP})
    known = {label for label, *_ in MOE_POINTS} | {label for label, *_ in ATTENTION_POINTS}
    unknown += sorted(labels - known)
    if unknown:
        parser.error(
            f"--only: no point {', '.join(unknown)}; points: "
            f"{', '.join(f'{b}x{i}' for b, i in swiglu.SWEEP)}, {', '.join(sorted(known))}"
        )
    for label in sorted(labels):
        family = "moe" if label in {lb for lb, *_ in MOE_POINTS} else "attention"
        if not getattr(args, family):
            parser.error(f"--only {label} is a point of --{family}, which is not given")
    if args.only:
        want = {tuple(int(v) for v in p.split("x")) for p in sizes}
        points = [p for p in points if p in want]
    folder = pathlib.Path("build/bench/hier_tiling")
    folder.mkdir(parents=True, exist_ok=True)
    rows = json.loads(OUT.read_text()).get("points", []) if OUT.exists() else []
    for tb, ti in points:
        row = point(tb, ti, elaborate=args.elaborate, check=args.check, folder=folder)
        rows = [r for r in rows if (r["tile_b"], r["tile_i"]) != (tb, ti)] + [row]
        OUT.write_text(json.dumps({"layer": dataclasses.asdict(LAYER), "hw_tile": HW_TILE,
                                   "points": rows}, indent=2) + "\n")  # fmt: skip
        print(
            f"{tb:>3} x {ti:<3} paper cycles {row['paper_cycles'][0]:>6} -> "
            f"{row['paper_cycles'][1]:>6} ({row['paper_cycles_change']:+.1%})  on-chip "
            f"{row['onchip_bytes'][0]} -> {row['onchip_bytes'][1]} B{_hardware_text(row)}",
            flush=True,
        )
    if args.attention:
        rows = []
        for label, schedule, batch, regions in ATTENTION_POINTS:
            if labels and label not in labels:
                continue
            row = attention_point(
                label, schedule, batch, regions, elaborate=args.elaborate, folder=folder
            )
            rows.append(row)
            data = json.loads(OUT.read_text()) if OUT.exists() else {}
            data["attention"] = _merged(data.get("attention", []), rows)
            OUT.write_text(json.dumps(data, indent=2) + "\n")
            print(
                f"attention {label}: bit-exact {row['bit_exact']}, off-chip "
                f"{row['offchip_bytes']}, paper cycles {row['paper_cycles']}, on-chip "
                f"{row['onchip_bytes']} B{_hardware_text(row)}",
                flush=True,
            )
    if args.moe:
        moe_rows = []
        for label, schedule, batch in MOE_POINTS:
            if labels and label not in labels:
                continue
            row = moe_point(label, schedule, batch, elaborate=args.elaborate, folder=folder)
            moe_rows.append(row)
            data = json.loads(OUT.read_text()) if OUT.exists() else {}
            data["moe"] = _merged(data.get("moe", []), moe_rows)
            OUT.write_text(json.dumps(data, indent=2) + "\n")
            print(
                f"moe {label}: bit-exact {row['bit_exact']}, off-chip {row['offchip_bytes']}, "
                f"paper cycles {row['paper_cycles']}, on-chip {row['onchip_bytes']} B"
                f"{_hardware_text(row)}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
