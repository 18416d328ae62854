"""The BF16 examples co-simulated on Verilator: SwiGLU, the MoE layer under its three schedules
(static, dynamic tiling, time-multiplexed) and decode attention, on BF16 tiles with FP32
accumulation (``step_hw.config.BF16_CONFIG``, ``make rtl``'s ``*_bf16`` designs).

Every output tensor must equal the interpreter's bit for bit (``step_lang.float_numerics``), with
memories that answer at once and with random latency and back-pressure. The largest relative
error against a float64 numpy reference of the same layer on the same (BF16) inputs is written
to ``build/rtl_tests/bf16_cosim.json`` with the cycle counts.

SwiGLU runs in ``make test``; the MoE and attention designs (Verilator builds of several
minutes each) in ``make test-all``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from examples import attention, moe, swiglu, traces
from step_hw import cosim
from step_hw.config import BF16_CONFIG
from step_hw.cosim.report import same_values
from step_lang import interpret

RESULTS = Path(__file__).resolve().parent.parent / "build" / "rtl_tests" / "bf16_cosim.json"
BF16 = "bfloat16"


def _float64(memory: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        k: v.astype(np.float64) if v.dtype.name == BF16 else np.asarray(v)
        for k, v in memory.items()
    }


def _swiglu():
    memory = swiglu.inputs(replace(swiglu.HW_CONFIG, dtype=BF16), seed=4)
    return swiglu.hardware(hw=BF16_CONFIG), memory, {"out": swiglu.reference(_float64(memory))}


def _moe(schedule: moe.MoESchedule):
    def make():
        choices = traces.synthetic_routing(8, moe.HW.experts, moe.HW.top_k, skew=1.5, seed=3)
        config = replace(moe.HW, dtype=BF16)
        memory = moe.inputs(config, choices, seed=5)
        graph = moe.hardware(schedule=schedule, hw=BF16_CONFIG)
        return graph, memory, {"out": moe.reference(config, _float64(memory))}

    return make


def _attention():
    memory = attention.hardware_inputs([0, 15, 5, 10], seed=6, hw=BF16_CONFIG)
    config = replace(attention.HW, dtype="float64")
    want = attention.reference(config, _float64(memory))
    return attention.hardware("interleaved", hw=BF16_CONFIG), memory, {"out": want["out"]}


CASES = {
    "swiglu": _swiglu,
    "moe_static": _moe(moe.MoESchedule("static", tile_n=4, tile_f=4)),
    "moe_dynamic": _moe(moe.MoESchedule("dynamic")),
    "moe_timemux": _moe(moe.MoESchedule("static", tile_n=4, tile_f=4, regions=2)),
    "attention": _attention,
}
SLOW = ("moe_static", "moe_dynamic", "moe_timemux", "attention")


def _record(name: str, row: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    data[name] = row
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES]
)
def test_bf16_example_matches_interpreter_under_back_pressure(case: str):
    graph, memory, reference = CASES[case]()
    want = interpret(graph, memory).memory
    row = {}
    for pattern, seed in (("always", 0), ("random", 7)):
        result = cosim.run(graph, memory, pattern=pattern, seed=seed, tag=f"bf16_{case}_{pattern}")
        for name in reference:
            got = result.outputs[name]
            assert got.dtype.name == BF16
            assert same_values(got, want[name]), f"{case} {pattern}: tensor '{name}' differs"
        row[f"cycles_{pattern}"] = result.cycles
        row["build_s"] = round(max(row.get("build_s", 0.0), result.build_s), 1)
    errors = {}
    for name, ref in reference.items():
        got = want[name].astype(np.float64)
        errors[name] = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    row["max_rel_error_vs_float64"] = errors
    _record(case, row)
    # BF16 keeps 8 significand bits: a layer's outputs stay within a few per cent of float64
    assert all(e < 0.05 for e in errors.values()), errors


def test_bf16_swiglu_every_reader_agrees_cycle_for_cycle():
    """``step_hw.cosim.validate`` on the BF16 SwiGLU (the build of the test above): interpreter,
    both profiles and the RTL give the same bits, and the ``rtl`` profile's handshake cycles
    equal the RTL's on every queue (BF16 units keep the fixed-point units' timing)."""
    graph, memory, _ = _swiglu()
    report = cosim.validate(graph, memory, quiet=True)
    assert report.ok, str(report)
    assert report.config.is_float
    assert report.rtl_cycles == report.rtl_profile_cycles
    assert report.divergence is None and report.compared_streams > 0
