"""Whole-graph co-simulation on Verilator: the hardware-size SwiGLU and MoE layers, each built
once, run with AXI memories that answer at once and with random latency and back-pressure; the
output tensor must equal the interpreter's bit for bit (hardware-exact fixed-point numerics)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cocotb_tools.runner import get_results

from examples import moe, swiglu, traces
from rtl_tests import verilator
from step_hw.elaborate import convert
from step_lang import interpret

BUILD = Path(__file__).resolve().parent.parent / "build" / "rtl_tests"


def _swiglu_memory(seed: int) -> dict:
    return swiglu.inputs(swiglu.HW_CONFIG, seed=seed)


def _moe_memory(seed: int) -> dict:
    choices = traces.synthetic_routing(8, moe.HW.experts, moe.HW.top_k, skew=1.5, seed=seed)
    return moe.inputs(moe.HW, choices, seed=seed)


EXAMPLES = {"swiglu": (swiglu.hardware, _swiglu_memory), "moe": (moe.hardware, _moe_memory)}
_BUILT: dict = {}


def _build(name: str):
    if name not in _BUILT:
        folder = BUILD / f"graph_{name}"
        folder.mkdir(parents=True, exist_ok=True)
        top = f"{name}_top"
        text, desc = convert(EXAMPLES[name][0](), name=top)
        (folder / f"{top}.v").write_text(text)
        (folder / "desc.json").write_text(json.dumps(desc))
        runner = verilator.build([folder / f"{top}.v"], top=top, build_dir=folder / "sim_build")
        _BUILT[name] = (runner, folder, top)
    return _BUILT[name]


@pytest.mark.parametrize("example", list(EXAMPLES))
@pytest.mark.parametrize("pattern", ["always", "random"])
@pytest.mark.parametrize("seed", [1, 2])
def test_cosim_matches_interpreter(example, pattern, seed):
    runner, FOLDER, TOP = _build(example)
    make, memory_of = EXAMPLES[example]
    memory = memory_of(seed)
    want = interpret(make(), memory).memory["out"]
    data = FOLDER / f"data_{pattern}_{seed}.npz"
    np.savez(data, **{f"in_{k}": v for k, v in memory.items()}, out_out=want)
    report = FOLDER / f"cycles_{pattern}_{seed}.txt"
    report.unlink(missing_ok=True)
    results = runner.test(
        test_module="rtl_tests.cocotb_graph",
        hdl_toplevel=TOP,
        test_dir=FOLDER,
        seed=seed,
        extra_env={
            "GRAPH_DESC": str(FOLDER / "desc.json"),
            "GRAPH_DATA": str(data),
            "GRAPH_PAUSES": pattern,
            "GRAPH_SEED": str(seed),
            "GRAPH_REPORT": str(report),
        },
        results_xml=str(FOLDER / f"results_{pattern}_{seed}.xml"),
    )
    assert get_results(results) == (1, 0)
    _, cycles = report.read_text().split()
    assert int(cycles) > 0
