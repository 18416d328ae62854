"""Whole-graph co-simulation on Verilator: the hardware-size SwiGLU layer, built once, run with
AXI memories that answer at once and with random latency and back-pressure; its output tensor
must equal the interpreter's bit for bit (hardware-exact fixed-point numerics)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cocotb_tools.runner import get_results

from examples import swiglu
from rtl_tests import verilator
from step_hw.elaborate import convert
from step_lang import interpret

FOLDER = Path(__file__).resolve().parent.parent / "build" / "rtl_tests" / "graph_swiglu"
TOP = "swiglu_top"


@pytest.fixture(scope="module")
def built():
    FOLDER.mkdir(parents=True, exist_ok=True)
    text, desc = convert(swiglu.hardware(), name=TOP)
    (FOLDER / f"{TOP}.v").write_text(text)
    (FOLDER / "desc.json").write_text(json.dumps(desc))
    runner = verilator.build([FOLDER / f"{TOP}.v"], top=TOP, build_dir=FOLDER / "sim_build")
    return runner, desc


@pytest.mark.parametrize("pattern", ["always", "random"])
@pytest.mark.parametrize("seed", [1, 2])
def test_swiglu_cosim_matches_interpreter(built, pattern, seed):
    runner, desc = built
    memory = swiglu.inputs(swiglu.HW_CONFIG, seed=seed)
    want = interpret(swiglu.hardware(), memory).memory["out"]
    data = FOLDER / f"data_{pattern}_{seed}.npz"
    np.savez(data, **{f"in_{k}": v for k, v in memory.items()}, out_out=want)
    report = FOLDER / f"cycles_{pattern}_{seed}.txt"
    report.unlink(missing_ok=True)
    results = runner.test(
        test_module="rtl_tests.cocotb_graph",
        hdl_toplevel=TOP,
        test_dir=FOLDER,
        seed=seed,
        extra_env={"GRAPH_DESC": str(FOLDER / "desc.json"), "GRAPH_DATA": str(data), "GRAPH_PAUSES": pattern,
                   "GRAPH_SEED": str(seed), "GRAPH_REPORT": str(report)},  # fmt: skip
        results_xml=str(FOLDER / f"results_{pattern}_{seed}.xml"),
    )
    assert get_results(results) == (1, 0)
    _, cycles = report.read_text().split()
    assert int(cycles) > 0
