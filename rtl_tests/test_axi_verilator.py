"""The AXI4 controllers of `step_hw.memory` as Verilog: lint, then cocotb on Verilator against
cocotbext-axi's AXI RAM, compared with the interpreter (see `cocotb_axi.py`).

One Verilator build per configuration (`cocotb_axi_cases.CASES`), reused by every cocotb test of
that configuration. Generated files live in ``build/rtl_tests/axi_<case>/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from amaranth.back import verilog
from cocotb_tools.check_results import get_results

from rtl_tests.cocotb_axi_cases import CASES, AxiCase
from step_hw.cosim import verilator
from step_hw.memory import axi_ports

BUILD = Path(__file__).resolve().parents[1] / "build" / "rtl_tests"
# stream pattern x AXI pattern (cocotb_axi.controller_matches_interpreter), SLVERR and DECERR
# (cocotb_axi.axi_error_response)
MATCH_TESTS = 9
ERROR_TESTS = 2

_verilog: dict[str, Path] = {}


def convert(case: AxiCase) -> Path:
    """The controller as Verilog (rewritten only when it changes, so `make` can skip a rebuild),
    with its interface metadata beside it."""
    if case.name not in _verilog:
        dut = case.dut()
        folder = BUILD / case.top
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{case.top}.v"
        text = verilog.convert(
            dut, name=case.top, ports=axi_ports(dut), emit_src=False, strip_internal_attrs=True
        )
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        (folder / f"{case.top}.json").write_text(
            json.dumps(dut.metadata.as_json(), indent=2) + "\n"
        )
        _verilog[case.name] = path
    return _verilog[case.name]


# AXI4 signals cocotbext-axi's AxiReadBus / AxiWriteBus look for, as (direction, width) at the
# manager (ID width 4, 32-bit addresses; data widths from the case).
_READ = {"arid": ("output", 4), "araddr": ("output", 32), "arlen": ("output", 8),
         "arsize": ("output", 3), "arburst": ("output", 2), "arvalid": ("output", 1),
         "arready": ("input", 1), "rid": ("input", 4), "rdata": ("input", None),
         "rresp": ("input", 2), "rlast": ("input", 1), "rvalid": ("input", 1),
         "rready": ("output", 1)}  # fmt: skip
_WRITE = {"awid": ("output", 4), "awaddr": ("output", 32), "awlen": ("output", 8),
          "awsize": ("output", 3), "awburst": ("output", 2), "awvalid": ("output", 1),
          "awready": ("input", 1), "wdata": ("output", None), "wstrb": ("output", None),
          "wlast": ("output", 1), "wvalid": ("output", 1), "wready": ("input", 1),
          "bid": ("input", 4), "bresp": ("input", 2), "bvalid": ("input", 1),
          "bready": ("output", 1)}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_ports_follow_cocotbext_axi(name: str):
    case = CASES[name]
    text = convert(case).read_text()
    top = text[text.index(f"module {case.top}(") :]
    top = top[: top.index("endmodule")]
    ports = {
        m.group(3): (m.group(1), int(m.group(2) or 0) + 1)
        for m in re.finditer(r"^\s*(input|output) (?:\[(\d+):0\] )?(\w+);", top, re.M)
    }
    want = _WRITE if case.kind.endswith("Store") else _READ
    width = case.config.axi_data_width
    axi = {p[len("m_axi_") :]: d for p, d in ports.items() if p.startswith("m_axi_")}
    assert axi == {
        s: (d, w if w is not None else (width // 8 if s == "wstrb" else width))
        for s, (d, w) in want.items()
    }


@pytest.mark.parametrize("name", CASES)
def test_lint(name: str):
    case = CASES[name]
    result = verilator.lint([convert(case)], top=case.top)
    assert result.returncode == 0, result.stderr
    assert "%Warning" not in result.stderr


@pytest.mark.parametrize("name", CASES)
def test_cocotb(name: str):
    case = CASES[name]
    path = convert(case)
    folder = path.parent
    runner = verilator.build([path], top=case.top, build_dir=folder / "sim_build")
    report = folder / "throughput.txt"
    report.unlink(missing_ok=True)
    results = runner.test(
        test_module="rtl_tests.cocotb_axi",
        hdl_toplevel=case.top,
        test_dir=folder,
        seed=20240611,
        extra_env={"AXI_CASE": name, "AXI_REPORT": str(report)},
        test_filter=None
        if name == "lload"
        else "controller_matches_interpreter|axi_error_response",
    )
    # runner.test already fails on a failing cocotb test; also make sure they all ran.
    expected = MATCH_TESTS + ERROR_TESTS + (1 if name == "lload" else 0)
    assert get_results(results) == (expected, 0)
    if name == "lload":
        # Measured on AxiRam without pauses (see cocotb_axi.bursts_in_flight): 1-beat bursts,
        # 4 allowed in flight.
        rate, most, *_ = report.read_text().split()
        assert float(rate) >= 0.9 and int(most) >= 2, report.read_text()
