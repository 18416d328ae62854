"""The fast path through Amaranth's netlist values (``step_hw.netlist_speed``): the same Verilog,
and the checks it keeps."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.hdl import _nir

from step_hw import netlist_speed

ROOT = Path(__file__).resolve().parent.parent

CONVERT = """
import hashlib, sys
import step_hw.netlist_speed as ns
if sys.argv[1] == "off":
    ns.install = lambda: False
from examples import swiglu
from step_hw.config import BF16_CONFIG
from step_hw.elaborate import _convert
text, _ = _convert(swiglu.hardware(hw=BF16_CONFIG), BF16_CONFIG, "step_top")
print(ns.installed(), hashlib.sha256(text.encode()).hexdigest())
"""


def _convert(mode: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", CONVERT, mode],
        cwd=ROOT, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return out.stdout.split()


def test_a_design_converts_to_the_same_verilog_with_and_without_it():
    on, off = _convert("on"), _convert("off")
    assert on[0] == "True" and off[0] == "False"
    assert on[1] == off[1]


def test_values_from_values_are_copied_and_anything_else_is_still_checked():
    assert netlist_speed.install() and netlist_speed.installed()
    assert netlist_speed.install()  # idempotent
    a = _nir.Value(_nir.Net.from_const(b) for b in (1, 0, 1, 1))
    b = _nir.Value(a)
    assert type(b) is _nir.Value and b == a
    assert type(a[1:3]) is _nir.Value and a[1:3] == (a[1], a[2])
    assert a[0] == _nir.Net.from_const(1)
    with pytest.raises(AssertionError):
        _nir.Value([1, 2])  # not nets: Amaranth's own check
    with pytest.raises(AssertionError):
        _nir.Value((1, 2))


def test_an_unknown_amaranth_is_left_alone(monkeypatch):
    import amaranth

    monkeypatch.setattr(netlist_speed, "_INSTALLED", False)
    monkeypatch.setattr(amaranth, "__version__", "0.6.0")
    before = _nir.Value.__dict__["__getitem__"]
    assert not netlist_speed.install()
    assert _nir.Value.__dict__["__getitem__"] is before
