"""Whole-graph co-simulation on Verilator of the MoE layer's other two schedules at hardware
size: dynamic tiling (``MoESchedule("dynamic")``: one ``[n_e, 4]`` tile per expert) and
configuration time-multiplexing (two regions of two experts: EagerMerge, ``expert_addr``,
RandomOffChipLoad, Partition). Each design is built once (``step_hw.cosim`` caches builds by
Verilog hash) and run on several routings, an expert without tokens and one expert receiving
every token among them, with AXI memories that answer at once and with random latency and
back-pressure; the output tensor must equal the interpreter's bit for bit.

The cycle counts are written to ``build/rtl_tests/moe_schedules_cycles.json``. Each design is
also linted (``verilator --lint-only -Wall`` with ``step_hw/cosim/waivers.vlt``), as ``make rtl``
writes it (``moe_dynamic``, ``moe_timemux``). The builds are the AXI tier's (unoptimised C++:
the bench runs Python on every edge).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from examples import moe, traces
from step_hw import cosim
from step_hw.cosim.verilator import lint
from step_lang import interpret

BATCH = 8
SCHEDULES = {
    "dynamic": moe.MoESchedule("dynamic"),
    "timemux": moe.MoESchedule("static", tile_n=4, tile_f=4, regions=2),
}
CYCLES = (
    Path(__file__).resolve().parent.parent / "build" / "rtl_tests" / "moe_schedules_cycles.json"
)


def _choices(routing: str) -> np.ndarray:
    """``[B, k]`` expert choices of one routing."""
    e, k = moe.HW.experts, moe.HW.top_k
    if routing == "skewed":
        return traces.synthetic_routing(BATCH, e, k, skew=1.5, seed=3)
    if routing == "idle_expert":  # expert 3 receives no token (expert 2 also none: region 1 of
        # the time-multiplexed layer then never runs)
        return np.array([[0, 1], [1, 0]] * (BATCH // 2))
    if routing == "one_expert_all":  # expert 2 receives every token, the others share the rest
        return np.array([[2, j % e if j % e != 2 else 3] for j in range(BATCH)])
    raise ValueError(routing)


ROUTINGS = ["skewed", "idle_expert", "one_expert_all"]
# Every routing under an always-ready memory, and random back-pressure on the skewed one, in
# make test; random back-pressure on the others in make test-all (same designs, other data).
CASES = [(r, "always") for r in ROUTINGS] + [
    (r, "random") if r == "skewed" else pytest.param(r, "random", marks=pytest.mark.slow)
    for r in ROUTINGS
]


def _lint(schedule: str) -> None:
    d = cosim.design(moe.hardware(BATCH, SCHEDULES[schedule]))
    result = lint([d.folder / f"{cosim.TOP}.v"], top=cosim.TOP)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%Warning" not in result.stderr


def _record(key: str, cycles: int) -> None:
    CYCLES.parent.mkdir(parents=True, exist_ok=True)
    table = json.loads(CYCLES.read_text()) if CYCLES.is_file() else {}
    table[key] = cycles
    CYCLES.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")


def _check(schedule: str, routing: str, pattern: str) -> None:
    choices = _choices(routing)
    counts = np.bincount(choices.reshape(-1), minlength=moe.HW.experts)
    if routing == "idle_expert":
        assert counts[3] == 0
    if routing == "one_expert_all":
        assert counts[2] == BATCH
    memory = moe.inputs(moe.HW, choices, seed=1)
    graph = moe.hardware(BATCH, SCHEDULES[schedule])
    want = interpret(moe.hardware(BATCH, SCHEDULES[schedule]), memory).memory["out"]
    r = cosim.run(graph, memory, pattern=pattern, seed=2, tag=f"{routing}_{pattern}")
    assert set(r.outputs) == {"out"}
    assert np.array_equal(r.outputs["out"], want), f"\n{r.outputs['out']}\nwant\n{want}"
    assert r.cycles > 0
    _record(f"{schedule}/{routing}/{pattern}", r.cycles)


@pytest.mark.parametrize(("routing", "pattern"), CASES)
def test_dynamic_tiling_matches_interpreter(routing: str, pattern: str):
    _check("dynamic", routing, pattern)


def test_dynamic_tiling_lints_clean():
    _lint("dynamic")


@pytest.mark.parametrize(("routing", "pattern"), CASES)
def test_time_multiplexing_matches_interpreter(routing: str, pattern: str):
    _check("timemux", routing, pattern)


def test_time_multiplexing_lints_clean():
    _lint("timemux")
