"""Queue sizing report: storage and cycles of sized graphs against a uniform depth.

Writes ``build/bench/queue_sizing.json``:
``{"cases": [{"example", "schedule", "bits_uniform", "bits_sized", "cycles_deep", "cycles_sized",
"deadlock_free", ...}]}``.

Every example and schedule of ``stepcli.sizing.SCHEDULES`` is sized in the simulator
(:func:`sim.sizing.plan_queue_sizes`, stop tokens taking queue slots as in hardware) over
``IMAGES`` memory images; ``bits_uniform`` is the storage of the smallest uniform depth that also
runs every image without deadlock and within the same tolerance of the reference (per image
the faster of the depth-1024 run, ``cycles_deep``, and the graph's own depths), so the two
storages compare at equal performance. The hardware-size examples
(``stepcli.sizing.HARDWARE``) follow with the simulator's ``rtl`` profile and hardware token
widths (``"profile": "rtl"``).

``--cosim`` also confirms every hardware-size case on the RTL (``rtl_tests.sizing_cosim``):
the sized design and the design with every queue 1024 deep are built and co-simulated on each
image, and queues that fall behind are grown until every image is within 2%. Each ``rtl`` case
then has ``"cosim": {"holds", "runs": [{"image", "cycles_sized", "cycles_deep", "mismatched"}],
"rounds", "depths"}`` and ``"bits_sized_cosim"``. The builds are those of ``make test-all``'s
``rtl_tests/test_sizing_verilator.py`` and are cached under ``build/cosim/``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

from stepcli.sizing import HARDWARE, IMAGES, SCHEDULES, hardware_case, size_example, size_hardware

OUT = pathlib.Path("build/bench/queue_sizing.json")


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
        "simulations": report.simulations,
        "queues": len(report.depths),
        "wall_s": round(wall, 2),
    }


def _cosim(example: str, schedule: str, report: Any) -> dict[str, Any]:
    from rtl_tests.sizing_cosim import confirm_in_cosim
    from sim.sizing import queue_bits

    _, memories = hardware_case(example, schedule, IMAGES)
    confirmed = confirm_in_cosim(example, schedule, report.depths, memories)
    return {"bits_sized_cosim": queue_bits(report.bits, confirmed.depths),
            "cosim": confirmed.to_json()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cosim", action="store_true", help="co-simulate the hardware-size cases (Verilator)"
    )
    args = ap.parse_args(argv)
    cases = []
    for example, schedules in SCHEDULES.items():
        for schedule, params in schedules.items():
            t0 = time.perf_counter()
            report = size_example(example, params, images=IMAGES)
            cases.append(_case(example, schedule, report, time.perf_counter() - t0, "paper"))
            print(f"{example:<10} {schedule:<12} {cases[-1]}", flush=True)
    for example, schedules in HARDWARE.items():
        for schedule in schedules:
            t0 = time.perf_counter()
            report = size_hardware(example, schedule, images=IMAGES)
            cases.append(_case(example, schedule, report, time.perf_counter() - t0, "rtl"))
            if args.cosim:
                cases[-1].update(_cosim(example, schedule, report))
            print(f"{example:<10} {schedule:<12} {cases[-1]}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"cases": cases}, indent=1))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
