"""The rtl profile's burst geometry (``sim.profiles.rtl.axi._geometry``): the bursts of every tile
of a tensor under the AXI rules of ``step_hw.memory.axi`` (no burst crosses 4 KiB, at most 256
beats), worked out once per tensor shape, element size, tile and bus width."""

from __future__ import annotations

from sim.profiles.rtl.axi import _geometry
from step_hw.config import HwConfig
from step_lang import Graph, LinearOffChipLoad, LinearOffChipStore, Sink


def _load(shape, tile, dtype="bfloat16", name="x"):
    g = Graph(f"geometry_{name}")
    x = g.tensor(name, shape, dtype)
    node = LinearOffChipLoad(x, tile=tile, name=f"load_{name}")
    Sink(node.out, name=f"sink_{name}")
    return node


def test_a_row_of_4_kib_tiles_splits_at_256_beats():
    # 8 KiB rows of BF16 in 4 KiB tiles, 8-byte beats: 512 beats per tile, two bursts of 256
    bursts, n = _geometry(_load((4, 4096), (1, 2048)), HwConfig(axi_data_width=64))
    assert n == 8  # 4 rows x 2 tiles
    assert bursts == ((256, 256),) * 8


def test_a_tile_of_several_rows_is_one_burst_per_row_segment():
    # 16 x 16 BF16 tiles of a 64-column tensor: each tile row is its own 32-byte segment
    bursts, n = _geometry(_load((32, 64), (16, 16)), HwConfig(axi_data_width=64))
    assert n == 2 * 4
    assert bursts[0] == (4,) * 16  # 16 segments of 32 bytes, 4 beats each
    assert len(bursts) == 8


def test_a_segment_that_crosses_4_kib_is_split_at_the_boundary():
    # whole rows of 3,000 BF16 elements (6,000 bytes) on 16-byte beats (16 divides 6,000)
    bursts, n = _geometry(_load((2, 3000), (1, 3000)), HwConfig(axi_data_width=128))
    assert n == 2
    # row 0: 4,096 bytes up to the boundary (256 beats), then 1,904 bytes (119 beats)
    assert bursts[0] == (256, 119)
    # row 1 starts at 6,000: 2,192 bytes to the 8 KiB boundary (137 beats), then 3,808 (238)
    assert bursts[1] == (137, 238)


def test_the_same_geometry_is_worked_out_once_and_shared():
    config = HwConfig(axi_data_width=64)
    a = _geometry(_load((64, 256), (16, 16), name="a"), config)
    b = _geometry(_load((64, 256), (16, 16), name="b"), config)
    assert a is b  # another tensor of that shape, tile and bus: the same (immutable) bursts
    c = _geometry(_load((64, 256), (16, 32), name="c"), config)
    assert c is not a and c[1] == 4 * 8


def test_a_store_has_the_geometry_of_a_load_of_its_tensor():
    g = Graph("geometry_store")
    x = g.tensor("x", (32, 64), "bfloat16")
    y = g.tensor("y", (32, 64), "bfloat16")
    store = LinearOffChipStore(LinearOffChipLoad(x, tile=(16, 16), name="lx").out, y, name="sy")
    config = HwConfig(axi_data_width=64)
    assert _geometry(store, config) == _geometry(_load((32, 64), (16, 16), name="z"), config)
