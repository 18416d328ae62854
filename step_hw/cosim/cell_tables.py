"""One-input floating-point cells as tables in the fast co-simulation tier.

Verilator evaluates every combinational block of a design on every clock edge. A SiLU Map unit on
16 x 16 BF16 tiles is 256 ``step_fp_silu_bf16`` cells that compute on every edge although the
unit takes a tile once per 64 (Fig. 8) or 256 (the MoE) cycles: a third of the fast tier's run
time on the paper-scale sweeps (``perf``, docs/validation.md). A cell with one 16-bit operand has
65,536 possible inputs; the fast tier replaces its logic with a read of a 65,536-entry table of
**that cell's own results**, so the design computes the same result in the same cycle.

* Which cells: every cell module of the design (:mod:`step_hw.compute.fp_cells`) whose operation
  reads one 16-bit operand, returns 16 bits and has no parameters (exp, silu and recip in BF16),
  :func:`tabular_cells`.
* The table: the cell's function evaluated on every input by Amaranth's simulator
  (:func:`~step_hw.compute.fp_cells.evaluate`, the logic the cell's Verilog is converted from),
  cached in ``cache/<module>_<digest of the cell's Verilog>.hex`` and copied into the build folder
  (:func:`write_tables`); ``rtl_tests/test_cell_tables_verilator.py`` runs the cell's Verilog in
  the fast tier on all 65,536 inputs against it.
* In the fast tier's copy of the design's Verilog (:func:`tabulate`) each such module reads its
  table from the package ``step_fp_tables``; the harness's ``initial`` block loads every table from
  ``+TABLE_<module>=<file>`` and stops with ``$fatal`` when one is not given (:func:`loader`).

The axi tier and ``make rtl`` keep the arithmetic. ``STEP_COSIM_FAST_TABLES=0`` makes the fast
tier co-simulate it too (another build folder: the Verilog differs). The decision and its
measurements are in docs/cosim.md ("One-input cells as tables").
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import numpy as np

from step_hw.paths import write_atomically

__all__ = [
    "PACKAGE",
    "TABLES_ENV",
    "enabled",
    "loader",
    "plusargs",
    "tabular_cells",
    "tabulate",
    "write_tables",
]

#: The SystemVerilog package that holds the tables.
PACKAGE = "step_fp_tables"
#: ``0`` co-simulates the cells' arithmetic in the fast tier too.
TABLES_ENV = "STEP_COSIM_FAST_TABLES"
#: The operand and result width of a cell made a table.
WIDTH = 16
#: The folder of the tables' files inside a build folder.
FOLDER = "cell_tables"


def enabled() -> bool:
    """Whether the fast tier makes one-input cells tables (unless ``STEP_COSIM_FAST_TABLES=0``)."""
    return os.environ.get(TABLES_ENV, "1") != "0"


def _operation(module: str):
    """(function, in_widths, out_width) of the cell operation of ``module``, or None (the
    fast tier's harness imports this module without Amaranth: it is imported here)."""
    from step_hw.compute import fp, fp_approx  # noqa: F401  (they register the operations)
    from step_hw.compute.fp_cells import OPERATIONS, PREFIX

    # (a cell with parameters has them in its name, and is not found)
    return OPERATIONS.get(module[len(PREFIX) :]) if module.startswith(PREFIX) else None


def _tabular(module: str) -> bool:
    if (operation := _operation(module)) is None:
        return False
    _, in_widths, out_width = operation  # (found by name: an operation without parameters)
    return in_widths() == (WIDTH,) and out_width() == WIDTH


def tabular_cells(verilog: str) -> dict[str, str]:
    """The cell modules of ``verilog`` that can be tables, by name: their Verilog text."""
    from step_hw.compute.fp_cells import PREFIX

    modules = re.finditer(rf"^module ({PREFIX}\w+)\(.*?^endmodule\n", verilog, re.M | re.S)
    return {m.group(1): m.group(0) for m in modules if _tabular(m.group(1))}


def tabulate(verilog: str, cells: dict[str, str]) -> tuple[str, list[str]]:
    """``verilog`` with each cell module of ``cells`` (:func:`tabular_cells` of it) reading its
    result from the table ``step_fp_tables::<module>``, the package first; and the names of
    those modules."""
    if not cells:
        return verilog, []
    for module, text in cells.items():
        verilog = verilog.replace(
            text,
            f"// {module}: its results on every input, from a table (step_hw.cosim.cell_tables)\n"
            f"module {module}(out, in0);\n"
            f"  input [{WIDTH - 1}:0] in0;\n"
            f"  wire [{WIDTH - 1}:0] in0;\n"
            f"  output [{WIDTH - 1}:0] out;\n"
            f"  wire [{WIDTH - 1}:0] out;\n"
            f"  assign out = {PACKAGE}::{module}[in0];\n"
            "endmodule\n",
        )
    names = sorted(cells)
    package = [f"package {PACKAGE};"]
    package += [f"  logic [{WIDTH - 1}:0] {n} [0:{2**WIDTH - 1}];" for n in names]
    package += ["endpackage", ""]
    return "\n".join(package) + verilog, names


def loader(modules: list[str]) -> list[str]:
    """The lines of an ``initial`` block (with ``string f`` declared) that load the tables of
    ``modules`` from their plusargs, or stop the simulation when one is missing."""
    lines = []
    for n in modules:
        lines += [
            f"    begin : load_{n}",
            "      integer fd;",
            f'      if (!$value$plusargs("TABLE_{n}=%s", f))',
            f'        $fatal(1, "step_fast: no +TABLE_{n}=<file> (step_hw.cosim.cell_tables)");',
            # ($readmemh only warns about a missing file, and leaves the table zero)
            '      fd = $fopen(f, "r");',
            f'      if (fd == 0) $fatal(1, "step_fast: cannot read the table of {n}: %s", f);',
            "      $fclose(fd);",
            f"      $readmemh(f, {PACKAGE}::{n});",
            "    end",
        ]
    return lines


def _table(module: str, text: str, cache: Path) -> Path:
    """The table file of the cell ``module`` whose Verilog is ``text``, computed once per
    version of the cell into ``cache``."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = cache / f"{module}_{digest}.hex"
    if not path.is_file():
        from step_hw.compute.fp_cells import evaluate

        fn = _operation(module)[0]
        results = evaluate(fn, [np.arange(2**WIDTH, dtype=np.uint32)], width=WIDTH)
        cache.mkdir(parents=True, exist_ok=True)
        write_atomically(path, "".join(f"{int(v):04x}\n" for v in results))
    return path


def write_tables(cells: dict[str, str], folder: Path, cache: Path) -> None:
    """Put the tables of ``cells`` (:func:`tabular_cells`: module name -> its Verilog) into
    ``folder/cell_tables/``."""
    if cells:
        (folder / FOLDER).mkdir(parents=True, exist_ok=True)
    for module, text in cells.items():
        shutil.copyfile(_table(module, text, cache), folder / FOLDER / f"{module}.hex")


def plusargs(folder: Path, modules: list[str]) -> list[str]:
    """The plusargs that give a fast-tier build in ``folder`` its tables; FileNotFoundError
    when one is missing (the harness would stop on it)."""
    files = {n: folder / FOLDER / f"{n}.hex" for n in modules}
    for n, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(
                f"fast-tier build {folder}: the table of {n} ({path}) is missing; remove the "
                "folder to build the design again"
            )
    return [f"+TABLE_{n}={path}" for n, path in files.items()]
