"""Token payloads: layout widths agree with Amaranth, packing round-trips, misuse is rejected."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Const
from hypothesis import given, settings
from hypothesis import strategies as st

from step_hw.config import HwConfig
from step_hw.payload import Kind, TokenFormat
from step_lang import DONE, Selector, StepTypeError, Stop, Tile, regular
from step_lang.types import float32, int8, int16

CFG = HwConfig()


def test_layout_width_matches_amaranth():
    fmt = TokenFormat.for_elem(Tile(int16, 2, 3), CFG)
    assert fmt.layout().size == fmt.width == 2 + 3 + 2 * 3 * 16
    assert TokenFormat.for_elem(Selector(5), CFG).layout().size == 2 + 3 + 5


def test_pack_agrees_with_amaranth_layout():
    fmt = TokenFormat.for_elem(Tile(int8, 2, 2), CFG)
    tile = np.array([[1, -2], [127, -128]])
    bits = fmt.pack(tile)
    view = fmt.layout().const({"kind": Kind.DATA, "level": 0, "data": [[1, -2], [127, -128]]})
    assert bits == Const.cast(view).value
    assert np.array_equal(fmt.unpack(bits), tile)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_round_trip(draw):
    rows, cols = draw.draw(st.integers(1, 4)), draw.draw(st.integers(1, 4))
    dt = draw.draw(st.sampled_from([int8, int16]))
    fmt = TokenFormat.for_elem(Tile(dt, rows, cols), CFG)
    lo, hi = -(2 ** (dt.nbytes * 8 - 1)), 2 ** (dt.nbytes * 8 - 1) - 1
    tile = np.array(
        draw.draw(st.lists(st.integers(lo, hi), min_size=rows * cols, max_size=rows * cols))
    ).reshape(rows, cols)
    level = draw.draw(st.integers(1, CFG.max_level))
    assert np.array_equal(fmt.unpack(fmt.pack(tile)), tile)
    assert fmt.unpack(fmt.pack(Stop(level))) == Stop(level)
    assert fmt.unpack(fmt.pack(DONE)) is DONE


def test_selector_round_trip():
    fmt = TokenFormat.for_elem(Selector(4), CFG)
    sel = np.array([True, False, False, True])
    assert fmt.pack(sel) >> 5 == 0b1001
    assert np.array_equal(fmt.unpack(fmt.pack(sel)), sel)


@pytest.mark.parametrize(
    ("elem", "message"),
    [
        (Tile(int16, 8, 4), r"^x: tile Tile<int16, 8x4> does not fit the configured 4x4 tile$"),
        (  # dynamic rows are encoded (tests/test_hw_dynamic_tiles.py); dynamic columns are not
            Tile(int16, 4, regular("n")),
            r"^x: tile Tile<int16, 4xn> has dynamic columns; hardware tiles have static columns "
            r"\(only the row count may be dynamic\)$",
        ),
        (
            Tile(float32, 4, 4),
            r"^x: dtype float32 is not supported by the hardware \(int16/int32\)$",
        ),
    ],
)
def test_unsupported_elements_are_rejected(elem, message):
    with pytest.raises(StepTypeError, match=message):
        TokenFormat.for_elem(elem, CFG, where="x")


def test_values_that_do_not_fit_are_rejected():
    fmt = TokenFormat.for_elem(Tile(int8, 1, 1), CFG)
    with pytest.raises(ValueError, match=r"^value 128 does not fit a 8-bit element$"):
        fmt.pack(np.array([[128]]))
    with pytest.raises(ValueError, match=r"^stop level 8 does not fit 3 level bits$"):
        fmt.pack(Stop(8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"elem_dtype": "float32"},
            r"^HwConfig: floating point is elem_dtype 'bfloat16' with acc_dtype 'float32', not 'float32' with 'int32'$",
        ),
        ({"tile_rows": 0}, r"^HwConfig.tile_rows must be a positive integer, not 0$"),
        ({"acc_dtype": "int8"}, r"^HwConfig.acc_dtype int8 is narrower than elem_dtype int16$"),
        (
            {"axi_data_width": 48},
            r"^HwConfig.axi_data_width must be 32, 64, 128, 256 or 512, not 48$",
        ),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HwConfig(**kwargs)
