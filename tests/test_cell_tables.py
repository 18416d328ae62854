# amaranth: UnusedElaboratable=no
"""Which cells the fast tier makes tables, and the Verilog it writes for them
(``step_hw.cosim.cell_tables``; the tables against the cells' Verilog on Verilator:
``rtl_tests/test_cell_tables_verilator.py``)."""

import re

import numpy as np
import pytest
from amaranth.hdl import Module, Signal

from step_hw.compute import fp, fp_approx, fp_cells
from step_hw.cosim import cell_tables


def _library() -> str:
    m = Module()
    x, y = Signal(16), Signal(32)
    with fp_cells.shared() as cells:
        fp_approx.silu_bf16(m, x)
        fp_approx.recip_bf16(m, x)
        fp_approx.div_bf16(m, x, x)
        fp.add_f32(m, y, y)
        fp.max_float(m, x, x, width=16)
    return "module step_top(a);\n  input a;\nendmodule\n" + fp_cells.library(cells)


def test_only_one_input_16_bit_cells_become_tables():
    text = _library()
    assert sorted(cell_tables.tabular_cells(text)) == ["step_fp_recip_bf16", "step_fp_silu_bf16"]
    new, names = cell_tables.tabulate(text, cell_tables.tabular_cells(text))
    assert names == ["step_fp_recip_bf16", "step_fp_silu_bf16"]
    assert new.startswith(
        "package step_fp_tables;\n"
        "  logic [15:0] step_fp_recip_bf16 [0:65535];\n"
        "  logic [15:0] step_fp_silu_bf16 [0:65535];\n"
        "endpackage\n"
    )
    assert "assign out = step_fp_tables::step_fp_silu_bf16[in0];" in new
    # the other cells and the design keep their Verilog
    for module in ("step_fp_div_bf16", "step_fp_add_f32", "step_fp_max_float_width16"):
        before = re.search(rf"^module {module}\(.*?^endmodule\n", text, re.M | re.S).group(0)
        assert before in new
    assert "module step_top(a);\n  input a;\nendmodule\n" in new
    assert len(new) < len(text)


def test_a_design_without_such_cells_is_left_as_it_is():
    text = "module step_top(a);\n  input a;\nendmodule\n"
    assert cell_tables.tabular_cells(text) == {}
    assert cell_tables.tabulate(text, {}) == (text, [])


def test_the_loader_stops_on_a_missing_table(tmp_path):
    lines = cell_tables.loader(["step_fp_silu_bf16"])
    assert lines[0] == "    begin : load_step_fp_silu_bf16" and lines[-1] == "    end"
    text = "\n".join(lines)
    assert '$value$plusargs("TABLE_step_fp_silu_bf16=%s", f)' in text
    assert '$fatal(1, "step_fast: no +TABLE_step_fp_silu_bf16=<file>' in text
    assert 'fd = $fopen(f, "r");\n      if (fd == 0) $fatal(' in text
    assert text.endswith("$readmemh(f, step_fp_tables::step_fp_silu_bf16);\n    end")
    with pytest.raises(FileNotFoundError, match=r"the table of step_fp_silu_bf16 .* is missing"):
        cell_tables.plusargs(tmp_path, ["step_fp_silu_bf16"])
    (tmp_path / "cell_tables").mkdir()
    (tmp_path / "cell_tables" / "step_fp_silu_bf16.hex").write_text("0000\n")
    assert cell_tables.plusargs(tmp_path, ["step_fp_silu_bf16"]) == [
        f"+TABLE_step_fp_silu_bf16={tmp_path}/cell_tables/step_fp_silu_bf16.hex"
    ]


def test_a_table_is_computed_once_per_version_of_its_cell(tmp_path, monkeypatch):
    """The cache holds a cell's results by the digest of its Verilog: a second build copies
    them. (The real results against the cell's Verilog on every input:
    rtl_tests/test_cell_tables_verilator.py.)"""
    text = _library()
    calls = []

    def fake(fn, operands, **kw):
        calls.append(fn.__name__)
        return (operands[0] * 3 + len(calls)).astype(np.uint16)

    monkeypatch.setattr(fp_cells, "evaluate", fake)
    for build in ("a", "b"):
        cell_tables.write_tables(
            cell_tables.tabular_cells(text), tmp_path / build, tmp_path / "cache"
        )
    assert sorted(calls) == ["recip_bf16", "silu_bf16"]
    assert len(list((tmp_path / "cache").iterdir())) == 2
    for build in ("a", "b"):
        lines = (tmp_path / build / "cell_tables" / "step_fp_silu_bf16.hex").read_text().split()
        assert len(lines) == 2**16 and lines[1] == f"{3 + calls.index('silu_bf16') + 1:04x}"
    changed = text.replace(
        "module step_fp_silu_bf16(out, in0);", "module step_fp_silu_bf16(out, in0);\n"
    )
    cell_tables.write_tables(cell_tables.tabular_cells(changed), tmp_path / "c", tmp_path / "cache")
    assert calls[-1] == "silu_bf16" and len(calls) == 3  # a changed cell: computed again


def test_tables_can_be_turned_off(monkeypatch):
    monkeypatch.delenv(cell_tables.TABLES_ENV, raising=False)
    assert cell_tables.enabled()
    monkeypatch.setenv(cell_tables.TABLES_ENV, "0")
    assert not cell_tables.enabled()
