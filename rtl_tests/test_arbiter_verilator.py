"""The AXI4 arbiters of `step_hw.memory.arbiter` on Verilator, and a graph on shared ports.

* A small design (three read managers on one ``AxiReadArbiter``, two write managers on one
  ``AxiWriteArbiter``) lints clean and runs ``cocotb_arbiter.py`` against cocotbext-axi's
  ``AxiRamRead``/``AxiRamWrite`` with random pauses on every channel: one Verilator build.
* The hardware-size SwiGLU elaborated with ``HwConfig(axi_ports=1)`` (four loads behind one read
  port, the store on one write port) lints clean, and co-simulates (``step_hw.cosim``, the
  unchanged whole-graph bench, ``step_hw/cosim/bench.py``) to the interpreter's output, bit for bit.

Generated files live in ``build/rtl_tests/arbiter/`` and ``build/cosim/``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, ValueCastable
from amaranth.hdl._ir import PortDirection
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb_tools.check_results import get_results

from examples import swiglu
from step_hw import cosim
from step_hw.config import HwConfig
from step_hw.cosim import verilator
from step_hw.elaborate import convert
from step_hw.memory import AxiReadArbiter, AxiWriteArbiter
from step_lang import interpret

BUILD = Path(__file__).resolve().parents[1] / "build" / "rtl_tests" / "arbiter"
TOP = "arbiter_pair"
READS, WRITES = 3, 2
CFG = HwConfig()


class _Pair(wiring.Component):
    """A read arbiter and a write arbiter side by side, every manager port at the top."""

    def __init__(self):
        self.rd = AxiReadArbiter(n=READS, config=CFG)
        self.wr = AxiWriteArbiter(n=WRITES, config=CFG)
        super().__init__({
            "rd_mgr": In(self.rd.managers[0].signature.flip()).array(READS),
            "wr_mgr": In(self.wr.managers[0].signature.flip()).array(WRITES),
            "rd_axi": Out(self.rd.axi.signature),
            "wr_axi": Out(self.wr.axi.signature),
        })  # fmt: skip

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.rd, m.submodules.wr = self.rd, self.wr
        for i in range(READS):
            wiring.connect(m, wiring.flipped(self.rd_mgr[i]), self.rd.managers[i])
        for i in range(WRITES):
            wiring.connect(m, wiring.flipped(self.wr_mgr[i]), self.wr.managers[i])
        wiring.connect(m, self.rd.axi, wiring.flipped(self.rd_axi))
        wiring.connect(m, self.wr.axi, wiring.flipped(self.wr_axi))
        return m

    def ports(self) -> dict:
        """Managers as ``s_axi_rd<i>_<signal>``/``s_axi_wr<i>_<signal>``, the shared ports as
        ``m_axi_rd_<signal>``/``m_axi_wr_<signal>`` (cocotbext-axi's prefixes)."""
        names = {"rd_mgr": "s_axi_rd", "wr_mgr": "s_axi_wr", "rd_axi": "m_axi_rd",
                 "wr_axi": "m_axi_wr"}  # fmt: skip
        out = {}
        for path, member, value in self.signature.flatten(self):
            if isinstance(value, ValueCastable):
                value = value.as_value()
            head = names[path[0]] + ("".join(str(p) for p in path[1:-1]))
            direction = PortDirection.Input if member.flow == In else PortDirection.Output
            out[f"{head}_{path[-1]}"] = (value, direction)
        return out


_built: dict = {}


def _verilog() -> Path:
    if "path" not in _built:
        BUILD.mkdir(parents=True, exist_ok=True)
        dut = _Pair()
        text = verilog.convert(
            dut, name=TOP, ports=dut.ports(), emit_src=False, strip_internal_attrs=True
        )
        path = BUILD / f"{TOP}.v"
        if not path.is_file() or path.read_text() != text:  # unchanged: make skips the rebuild
            path.write_text(text)
        _built["path"] = path
    return _built["path"]


def test_arbiters_lint_clean():
    path = _verilog()
    text = path.read_text()
    for port in ("m_axi_rd_arid", "m_axi_wr_awid", "s_axi_rd2_rready", "s_axi_wr1_wlast"):
        assert port in text
    assert "output [5:0] m_axi_rd_arid;" in text and "output [4:0] m_axi_wr_awid;" in text
    result = verilator.lint([path], top=TOP)
    assert result.returncode == 0, result.stderr
    assert "%Warning" not in result.stderr


def test_arbiters_against_axi_ram():
    path = _verilog()
    runner = verilator.build([path], top=TOP, build_dir=BUILD / "sim_build")
    report = BUILD / "throughput.txt"
    report.unlink(missing_ok=True)
    results = runner.test(
        test_module="rtl_tests.cocotb_arbiter",
        hdl_toplevel=TOP,
        test_dir=BUILD,
        seed=20261122,
        extra_env={"ARB_READS": str(READS), "ARB_WRITES": str(WRITES), "ARB_REPORT": str(report)},
    )
    assert get_results(results) == (4, 0)  # three traffic patterns + the throughput run
    # One manager, 16-beat bursts, AxiRamRead without pauses: the arbiter adds no bubbles.
    assert float(report.read_text()) >= 0.9, report.read_text()


SHARED = HwConfig(axi_ports=1)


def test_swiglu_on_shared_ports_lints_clean():
    top = "swiglu_shared"
    text, desc = convert(swiglu.hardware(), SHARED, name=top)
    assert desc["axi_ports"] == ["m_axi_rd0", "m_axi_wr0"]
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / f"{top}.v"
    path.write_text(text)
    result = verilator.lint([path], top=top)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%Warning" not in result.stderr


@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_swiglu_on_shared_ports_matches_interpreter(pattern, seed):
    memory = swiglu.inputs(swiglu.HW_CONFIG, seed=seed)
    want = interpret(swiglu.hardware(), memory).memory["out"]
    got = cosim.run(
        swiglu.hardware(),
        memory,
        config=SHARED,
        pattern=pattern,
        seed=seed,
        tag=f"shared_{pattern}",
    )
    np.testing.assert_array_equal(got.outputs["out"], want)
    assert got.cycles > 0
