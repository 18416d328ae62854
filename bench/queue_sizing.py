"""Queue sizing report: storage and cycles of sized graphs against a uniform depth.

Writes ``build/bench/queue_sizing.json``:
``{"cases": [{"example", "schedule", "bits_uniform", "bits_sized", "cycles_deep", "cycles_sized",
"deadlock_free", "held_out", "held_out_added", "held_out_missed", "held_out_worst", ...}]}``.

Every example and schedule of ``stepcli.sizing.SCHEDULES`` is sized in the simulator
(:func:`sim.sizing.plan_queue_sizes`, stop tokens taking queue slots as in hardware) over
``IMAGES`` memory images and checked on ``--held-out`` more (default ``HELD_OUT``; the next
seeds): the images the sized depths miss are sized on too (``held_out_added``), and
``held_out_worst`` is the slowest held-out image's cycles over its reference. ``bits_uniform``
is the storage of the smallest uniform depth that also runs every image, held-out ones included,
without deadlock and within the same tolerance of the reference (per image the faster of the
depth-1024 run, ``cycles_deep``, and the graph's own depths), so the two storages compare at
equal performance. The hardware-size examples
(``stepcli.sizing.HARDWARE``) follow with the simulator's ``rtl`` profile and hardware token
widths (``"profile": "rtl"``).

``--cosim`` also confirms every hardware-size case on the RTL (``rtl_tests.sizing_cosim``):
the sized design and the design with every queue 1024 deep are built and co-simulated on each
image (held-out ones included), and queues that fall behind are grown until every image is
within 2%. Each ``rtl`` case then has ``"cosim": {"holds", "runs": [{"image", "cycles_sized",
"cycles_deep", "mismatched"}], "rounds", "depths"}`` and ``"bits_sized_cosim"``. The builds
are those of ``make test-all``'s ``rtl_tests/test_sizing_verilator.py`` and are cached under
``build/cosim/``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

from stepcli.sizing import (
    HARDWARE,
    IMAGES,
    SCHEDULES,
    hardware_case,
    image_counts,
    size_example,
    size_hardware,
)

OUT = pathlib.Path("build/bench/queue_sizing.json")
HELD_OUT = 5


def _worst(cycles: list[tuple[int | None, int]]) -> float | str | None:
    """The slowest held-out image's cycles over its reference ("deadlock" if one deadlocks)."""
    if any(c is None for c, _ in cycles):
        return "deadlock"
    return max((round(c / ref, 4) for c, ref in cycles), default=None)


def _case(example: str, schedule: str, report: Any, wall: float, profile: str) -> dict[str, Any]:
    return {
        "example": example,
        "schedule": schedule,
        "profile": profile,
        "bits_uniform": report.bits_uniform,
        "bits_sized": report.bits_sized,
        "bits_default": report.bits_default,
        "uniform_depth": report.uniform_depth,
        "cycles_deep": report.cycles_deep,
        "cycles_sized": report.cycles_sized,
        "cycles_uniform": report.cycles_uniform,
        "cycles_default": report.cycles_default,
        "deadlock_free": report.deadlock_free,
        "images": report.images,
        "held_out": len(report.held_out_cycles),
        "held_out_added": len(report.held_out_added),
        "held_out_missed": len(report.held_out_missed),
        "held_out_worst": _worst(report.held_out_cycles),
        "simulations": report.simulations,
        "queues": len(report.depths),
        "wall_s": round(wall, 2),
    }


def _cosim(example: str, schedule: str, report: Any, images: int) -> dict[str, Any]:
    from rtl_tests.sizing_cosim import confirm_in_cosim
    from sim.sizing import queue_bits

    _, memories = hardware_case(example, schedule, images)
    confirmed = confirm_in_cosim(example, schedule, report.depths, memories)
    return {"bits_sized_cosim": queue_bits(report.bits, confirmed.depths),
            "cosim": confirmed.to_json()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cosim", action="store_true", help="co-simulate the hardware-size cases (Verilator)"
    )
    ap.add_argument(
        "--held-out", type=int, default=HELD_OUT, metavar="N",
        help=f"check the sized depths on N more images each (default {HELD_OUT})",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.held_out < 0:
        ap.error(f"--held-out must be 0 or more, not {args.held_out}")
    cases = []
    for example, schedules in SCHEDULES.items():
        for schedule, params in schedules.items():
            t0 = time.perf_counter()
            images, held_out = image_counts(example, params, IMAGES, args.held_out)
            report = size_example(example, params, images=images, held_out=held_out)
            cases.append(_case(example, schedule, report, time.perf_counter() - t0, "paper"))
            print(f"{example:<10} {schedule:<12} {cases[-1]}", flush=True)
    for example, schedules in HARDWARE.items():
        for schedule in schedules:
            t0 = time.perf_counter()
            images, held_out = image_counts(example, {}, IMAGES, args.held_out)
            report = size_hardware(example, schedule, images=images, held_out=held_out)
            cases.append(_case(example, schedule, report, time.perf_counter() - t0, "rtl"))
            if args.cosim:
                cases[-1].update(_cosim(example, schedule, report, images + held_out))
            print(f"{example:<10} {schedule:<12} {cases[-1]}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"cases": cases}, indent=1))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
