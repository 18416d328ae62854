# amaranth: UnusedElaboratable=no
"""Shared floating-point cells (``step_hw.compute.fp_cells``): inside ``shared()`` an FP function
adds one instance of its cell module, the library defines each module once, and Verilog from
``step_hw.elaborate.convert`` instantiates them. Bit-exactness of the cells in a design is
checked by the BF16 co-simulations (``rtl_tests/test_bf16_verilator.py``)."""

from __future__ import annotations

import re

import pytest
from amaranth.hdl import Instance, Module, Signal

from examples import swiglu
from step_hw.compute import fp, fp_approx, fp_cells
from step_hw.config import BF16_CONFIG
from step_hw.elaborate import convert
from step_hw.verilog_modules import instance_module, module_bodies
from step_lang.errors import StepTypeError


def _instances(m: Module) -> dict[str, Instance]:
    return {
        name: sub for name, (sub, _) in m._named_submodules.items() if isinstance(sub, Instance)
    }


def test_outside_shared_the_logic_is_inline():
    m = Module()
    out = fp.add_f32(m, Signal(32), Signal(32), name="sum")
    assert _instances(m) == {}
    assert out.name == "sum_out" and len(out) == 32
    assert len(m._statements) > 0  # the adder's own assignments


def test_inside_shared_one_instance_per_call_and_one_module_per_operation():
    m = Module()
    a, b = Signal(16), Signal(16)
    with fp_cells.shared() as cells:
        p0 = fp.mul_bf16(m, a, b, name="lane0_mul")
        p1 = fp.mul_bf16(m, b, a, name="lane1_mul")
        s = fp.add_f32(m, p0, p1, name="lane1_add")
        y = fp_approx.silu_bf16(m, fp.f32_to_bf16(m, s, name="round"), name="act")
    assert sorted(cells) == [
        "step_fp_add_f32", "step_fp_f32_to_bf16", "step_fp_mul_bf16", "step_fp_silu_bf16",
    ]  # fmt: skip
    insts = _instances(m)
    assert sorted(insts) == ["act", "lane0_mul", "lane1_add", "lane1_mul", "round"]
    assert insts["lane0_mul"].type == "step_fp_mul_bf16"
    assert (len(p0), len(s), len(y)) == (32, 32, 16)
    assert m._statements == {}  # nothing inline


def test_library_defines_each_cell_once_with_its_port_widths():
    m = Module()
    with fp_cells.shared() as cells:
        fp.max_float(m, Signal(16), Signal(16), width=16, name="m16")
        fp.max_float(m, Signal(32), Signal(32), width=32, name="m32")
        fp_approx.div_bf16(m, Signal(16), Signal(16), name="q")
    text = fp_cells.library(cells)
    modules = re.findall(r"^module (\w+)\(", text, re.M)
    assert modules == ["step_fp_div_bf16", "step_fp_max_float_width16", "step_fp_max_float_width32"]
    body = text[text.index("module step_fp_max_float_width32(") :]
    body = body[: body.index("endmodule")]
    for port, width in (("in0", 32), ("in1", 32), ("out", 32)):
        assert re.search(rf"^\s*(input|output) \[{width - 1}:0\] {port};", body, re.M), port


def test_a_taken_instance_name_gets_a_suffix():
    m = Module()
    with fp_cells.shared():
        fp.f32_to_bf16(m, Signal(32), name="cvt")
        fp.f32_to_bf16(m, Signal(32), name="cvt")
        fp.f32_to_bf16(m, Signal(32), name="cvt")
    assert sorted(_instances(m)) == ["cvt", "cvt_1", "cvt_2"]


def test_wider_operands_pass_their_low_bits_and_narrower_ones_are_refused():
    m = Module()
    wide = Signal(40)
    with fp_cells.shared():
        fp.f32_to_bf16(m, wide, name="ok")
        with pytest.raises(ValueError, match=r"^f32_to_bf16 'bad': operand 0 has 16 bits, fewer"):
            fp.f32_to_bf16(m, Signal(16), name="bad")
    assert len(_instances(m)["ok"].ports["in0"][0]) == 32


def test_convert_instantiates_the_cells_of_a_bf16_graph():
    graph = swiglu.hardware(hw=BF16_CONFIG)
    text, _ = convert(graph, BF16_CONFIG)
    defined = re.findall(r"^module (step_fp_\w+)\(", text, re.M)
    assert len(defined) == len(set(defined)) and "step_fp_mul_bf16" in defined
    # one multiplier per lane in each matmul unit (gate, up, down), one per element in `mul`;
    # gate and up, of the same shapes, are one module instantiated twice (identical modules
    # are merged)
    bodies = module_bodies(text)
    units = {u: instance_module(bodies, f"{graph.name}.{u}") for u in ("gate", "up", "down", "mul")}
    per_unit = {
        u: len(re.findall(r"^\s*step_fp_mul_bf16 \\?\S+ \(", bodies[module], re.M))
        for u, module in units.items()
    }
    lanes, elements = BF16_CONFIG.lanes, BF16_CONFIG.tile_rows * BF16_CONFIG.tile_cols
    assert per_unit == {"gate": lanes, "up": lanes, "down": lanes, "mul": elements}
    assert units["gate"] == units["up"] and len(set(units.values())) == 3
    # every instantiated cell is defined
    assert set(re.findall(r"^\s*(step_fp_\w+) \\?\S+ \(", text, re.M)) <= set(defined)


def test_a_graph_named_like_a_cell_is_refused():
    graph = swiglu.hardware(hw=BF16_CONFIG)
    with pytest.raises(StepTypeError, match=r"step_fp_mul_bf16.*floating-point cell module"):
        convert(graph, BF16_CONFIG, name="step_fp_mul_bf16")
