"""`make rtl`'s examples convert to Verilog that passes `verilator --lint-only -Wall` (with the
project's commented waivers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples import attention, moe, swiglu
from step_hw.config import BF16_CONFIG
from step_hw.cosim import TOP
from step_hw.cosim.verilator import lint
from step_hw.elaborate import convert

BUILD = Path(__file__).resolve().parent.parent / "build" / "rtl_tests" / "elaborate"


@pytest.mark.parametrize(("name", "make", "ports"), [
    ("swiglu", swiglu.hardware, ("m_axi_load_x_araddr", "m_axi_store_awaddr")),
    ("moe", moe.hardware, ("m_axi_load_sel_araddr", "m_axi_load_gate3_araddr", "m_axi_store_wdata")),
    # make rtl writes the interleaved schedule. The dynamic one adds the feedback loop, the
    # EagerMerges and the count / region-id / region-select units (blocks in the same style as
    # the row-append unit linted here); its co-simulation verilates it in `make test` anyway.
    ("attention", lambda: attention.hardware("interleaved"),
     ("m_axi_queue_araddr", "m_axi_kload1_araddr", "m_axi_kstore0_wdata", "snk_oack1__payload")),
    pytest.param("attention_dynamic", lambda: attention.hardware("dynamic"),
                 ("m_axi_keep_araddr", "m_axi_vstore1_awaddr", "snk_merge_done_sel__valid"),
                 marks=pytest.mark.slow),
    # make rtl's BF16 designs (the same graphs with step_lang.float_numerics)
    ("swiglu_bf16", lambda: swiglu.hardware(hw=BF16_CONFIG),
     ("m_axi_load_x_araddr", "m_axi_store_awaddr")),
    pytest.param("moe_bf16", lambda: moe.hardware(hw=BF16_CONFIG),
                 ("m_axi_load_sel_araddr", "m_axi_store_wdata"), marks=pytest.mark.slow),
    pytest.param("attention_bf16", lambda: attention.hardware("interleaved", hw=BF16_CONFIG),
                 ("m_axi_queue_araddr", "m_axi_kstore0_wdata"), marks=pytest.mark.slow),
])  # fmt: skip
def test_verilog_lints_clean(name, make, ports):
    # named as co-simulation names its top, so that the conversion is shared (step_hw.conversions)
    top = TOP
    text, desc = convert(make(), name=top)
    (BUILD / name).mkdir(parents=True, exist_ok=True)
    path = BUILD / name / f"{top}.v"
    path.write_text(text)
    assert f"module {top}(" in text
    for port in (*ports, "start", "done", "error"):
        assert port in text
    result = lint([path], top=top)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%Warning" not in result.stderr
    assert desc["memory_map"]["out"]["dtype"] == ("bfloat16" if "bf16" in name else "int16")


def test_node_names_that_clash_in_hdl_are_made_safe():
    """A RepeatStatic named ``rep`` would name its block instance like the block's own ``rep``
    register (Verilator's VARHIDDEN under -Wall); the instance is renamed and the description
    maps it back to the node."""
    from step_lang import Graph, RepeatStatic, Sink, Source, StreamType, Tile
    from step_lang.types import int16

    g = Graph("clash")
    x = Source(g, StreamType(Tile(int16, 4, 4), (2,)), name="x")
    Sink(RepeatStatic(x.out, 2, name="rep").out, name="y")
    BUILD.mkdir(parents=True, exist_ok=True)
    text, desc = convert(g)
    assert desc["instances"] == {"rep": "rep_node"} and desc["nodes"] == {"rep": "RepeatStatic"}
    path = BUILD / "clash.v"
    path.write_text(text)
    result = lint([path], top="clash")
    assert result.returncode == 0 and "%Warning" not in result.stderr, result.stderr
    # names that clash with nothing are kept
    _, desc = convert(swiglu.hardware())
    assert desc["instances"] == {}
