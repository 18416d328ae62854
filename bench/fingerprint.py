"""Behaviour fingerprint: every reader's results on every example, for before/after comparison.

A refactoring that must not change behaviour (``docs/architecture.md``) is checked by running
this on the old and the new tree and comparing the two JSON files (``--compare OLD NEW``):

* every ``make validate`` point (SwiGLU tile sweep, MoE routing patterns x schedules, attention
  KV batches x schedules): a hash of the interpreter's output tensors, and the cycles and output
  hash of the simulator under the ``rtl`` profile and the ``paper`` profile;
* the Verilog text (SHA-256) of every design those points build and of every ``make rtl``
  example: identical Verilog means identical RTL cycles;
* queue sizing of every hardware-size case (``stepcli.sizing.HARDWARE``, 3 images, or the one
  ``stepcli.sizing.image_counts`` allows where every seed gives one timing image) and of the
  paper-size schedules (``stepcli.sizing.SCHEDULES``): the depths chosen and the cycles;
* the paper-size examples of the ``step`` command at their defaults (timing-only, ``paper``
  profile): cycles, off-chip bytes, FLOPs and on-chip bytes.

Usage: ``python -m bench.fingerprint --out build/bench/fingerprint.json`` (add ``--no-verilog``
to skip elaboration), then ``python -m bench.fingerprint --compare old.json new.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["compare", "fingerprint"]


def _hash_arrays(arrays: dict[str, np.ndarray], names: list[str]) -> str:
    h = hashlib.sha256()
    for name in sorted(names):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(str(a.dtype).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _outputs(graph) -> list[str]:
    """Tensors some store writes (as ``step_hw.cosim.output_tensors``, without Verilator)."""
    from step_lang.ops import LinearOffChipStore, RandomOffChipStore

    stores = (LinearOffChipStore, RandomOffChipStore)
    return sorted({n.tensor.name for n in graph.nodes.values() if isinstance(n, stores)})


def _points(out: dict[str, Any], verilog: bool) -> None:
    from bench import validate
    from sim import simulate
    from sim.profiles import PaperProfile, RtlProfile
    from step_lang import interpret

    designs: dict[str, Any] = {}
    rows = {}
    pts = validate.swiglu_points() + validate.moe_points() + validate.attention_points()
    for p in pts:
        key = f"{p.workload}:{json.dumps(p.params, sort_keys=True)}"
        names = _outputs(p.make())
        row: dict[str, Any] = {}
        try:
            row["interp"] = _hash_arrays(interpret(p.make(), p.memory).memory, names)
            r = simulate(p.make(), p.memory, profile=RtlProfile(p.config))
            row["rtl_cycles"], row["rtl_out"] = r.cycles, _hash_arrays(r.memory, names)
            r = simulate(p.make(), p.memory, profile=PaperProfile())
            row["paper_cycles"], row["paper_out"] = r.cycles, _hash_arrays(r.memory, names)
        except Exception as exc:  # recorded: an error must stay the same error
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows[key] = row
        if verilog and p.design not in designs:
            designs[p.design] = (p.make, p.config)
    out["points"] = rows
    if verilog:
        out["designs"] = {name: _verilog_hash(*designs[name]) for name in sorted(designs)}


def _verilog_hash(make, config) -> str:
    from step_hw.config import config_for
    from step_hw.elaborate import convert

    try:
        graph = make()
        text, desc = convert(graph, config or config_for(graph))
    except Exception as exc:
        return f"error {type(exc).__name__}: {str(exc)[:200]}"
    h = hashlib.sha256(text.encode())
    h.update(json.dumps(desc, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _rtl_examples(out: dict[str, Any]) -> None:
    from step_hw.rtl import EXAMPLES

    out["rtl_examples"] = {name: _verilog_hash(make, None) for name, make in EXAMPLES.items()}


def _sizing(out: dict[str, Any]) -> None:
    from stepcli.sizing import (
        HARDWARE,
        IMAGES,
        SCHEDULES,
        image_counts,
        size_example,
        size_hardware,
    )

    def row(r: Any) -> dict[str, Any]:
        return {
            "depths": dict(sorted(r.depths.items())),
            "cycles_sized": r.cycles_sized,
            "cycles_deep": r.cycles_deep,
            "bits_sized": r.bits_sized,
        }

    res = {}
    for name, schedules in HARDWARE.items():
        for sched in schedules:
            images, _ = image_counts(name, {}, IMAGES, 0)
            res[f"hw:{name}:{sched}"] = row(size_hardware(name, sched, images=images))
    for name, schedules in SCHEDULES.items():
        for sched, params in schedules.items():
            images, _ = image_counts(name, params, IMAGES, 0)
            res[f"paper:{name}:{sched}"] = row(size_example(name, params, images=images))
    out["sizing"] = res


def _paper_examples(out: dict[str, Any]) -> None:
    from stepcli.registry import run_point
    from stepcli.sizing import SCHEDULES

    res = {}
    for name, schedules in SCHEDULES.items():
        for sched, params in schedules.items():
            row = run_point(name, params)
            res[f"{name}:{sched}"] = {
                k: row[k] for k in ("cycles", "offchip_bytes", "onchip_bytes", "flops")
            }
    out["paper_examples"] = res


def fingerprint(*, verilog: bool = True, sizing: bool = True) -> dict[str, Any]:
    """The fingerprint of the current tree (see the module docstring)."""
    out: dict[str, Any] = {}
    walls = {}
    steps = [("points", lambda: _points(out, verilog)), ("paper", lambda: _paper_examples(out))]
    if verilog:
        steps.append(("rtl", lambda: _rtl_examples(out)))
    if sizing:
        steps.append(("sizing", lambda: _sizing(out)))
    for name, step in steps:
        t0 = time.perf_counter()
        step()
        walls[name] = round(time.perf_counter() - t0, 1)
        print(f"fingerprint: {name} in {walls[name]} s", flush=True)
    out["wall_s"] = walls
    return out


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every difference between two fingerprints (wall times aside), one line each."""
    diffs = []

    def walk(a: Any, b: Any, path: str) -> None:
        if path == "wall_s":
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                if k not in a or k not in b:
                    diffs.append(f"{path}/{k}: only in {'new' if k not in a else 'old'}")
                else:
                    walk(a[k], b[k], f"{path}/{k}" if path else k)
        elif a != b:
            diffs.append(f"{path}: {a!r} -> {b!r}")

    walk(old, new, "")
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/bench/fingerprint.json")
    ap.add_argument("--no-verilog", action="store_true", help="skip elaboration")
    ap.add_argument("--no-sizing", action="store_true", help="skip queue sizing")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two fingerprints")
    args = ap.parse_args(argv)
    if args.compare:
        old, new = (json.loads(Path(p).read_text()) for p in args.compare)
        diffs = compare(old, new)
        for line in diffs:
            print(line)
        counts = {k: len(v) for k, v in new.items() if isinstance(v, dict) and k != "wall_s"}
        print(f"{len(diffs)} difference(s); compared {counts}")
        return 1 if diffs else 0
    fp = fingerprint(verilog=not args.no_verilog, sizing=not args.no_sizing)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
