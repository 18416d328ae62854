"""The elaborated SwiGLU layer converts to Verilog that passes `verilator --lint-only -Wall`."""

from __future__ import annotations

from pathlib import Path

from examples import swiglu
from rtl_tests.verilator import lint
from step_hw.elaborate import convert

BUILD = Path(__file__).resolve().parent.parent / "build" / "rtl_tests" / "elaborate"


def test_swiglu_verilog_lints_clean():
    BUILD.mkdir(parents=True, exist_ok=True)
    text, desc = convert(swiglu.hardware(), name="swiglu_top")
    path = BUILD / "swiglu_top.v"
    path.write_text(text)
    assert "module swiglu_top(" in text
    for port in ("m_axi_load_x_araddr", "m_axi_store_awaddr", "start", "done"):
        assert port in text
    result = lint([path], top="swiglu_top")
    assert result.returncode == 0, result.stdout + result.stderr
    assert desc["memory_map"]["out"]["shape"] == [8, 4]
