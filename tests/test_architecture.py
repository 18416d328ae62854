"""The layering of docs/architecture.md, checked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from step_lang.registry import node_classes

ROOT = Path(__file__).resolve().parent.parent


def _loaded_after(statement: str) -> list[str]:
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)  # fmt: skip
    return out.stdout.split()


def test_the_simulator_and_the_hardware_contract_load_no_amaranth():
    for statement in ("import sim", "import step_hw.contract", "import step_lang"):
        mods = _loaded_after(statement)
        assert not [m for m in mods if m.startswith("amaranth")], statement


def test_the_language_imports_no_reader():
    mods = _loaded_after("import step_lang")
    assert not [m for m in mods if m.split(".")[0] in ("sim", "step_hw", "amaranth")]


def test_no_reader_looks_operators_up_by_kind_string():
    """Operator behaviour is reached from the node class (registries, isinstance), not from
    quoted kind names; what remains are ``__all__`` lists of blocks named after operators."""
    kinds = "|".join(c.__name__ for c in node_classes() if c.__module__.startswith("step_lang."))
    quoted = re.compile(rf"[\"']({kinds})[\"']")
    hits = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for folder in ("sim", "step_hw")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if quoted.search(line)
    ]
    assert all("__all__" in h or h.split(": ", 1)[1].startswith('"') for h in hits), hits
    assert len(hits) <= 10, hits


def test_the_cosimulation_package_loads_cocotb_and_the_simulator_only_when_used():
    """``step_hw.cosim`` (installed, public) imports cocotb, the simulator and Amaranth inside
    the functions that need them, so importing it is cheap and works without a simulator."""
    mods = _loaded_after("import step_hw.cosim")
    assert not [m for m in mods if m.split(".")[0] in ("cocotb", "cocotb_tools", "sim", "amaranth")]


def test_the_cocotb_benches_load_neither_the_language_nor_the_harness():
    """Every co-simulation run starts a simulator process that imports its bench: loading the
    language (sympy, ml_dtypes) and the harness there took 0.87 s of a 1.5 s run."""
    for bench in ("step_hw.cosim.bench", "step_hw.cosim.fast_bench"):
        mods = _loaded_after(f"import {bench}")
        heavy = [
            m
            for m in mods
            if m.split(".")[0] in ("step_lang", "sympy", "ml_dtypes", "sim")
            or m in ("step_hw.cosim.harness", "step_hw.cosim.report")
        ]
        assert not heavy, (bench, heavy)


def test_the_language_loads_ml_dtypes_only_for_bfloat16():
    assert "ml_dtypes" not in _loaded_after("import step_lang")
    assert "ml_dtypes" in _loaded_after("from step_lang.types import bfloat16; bfloat16.numpy")
