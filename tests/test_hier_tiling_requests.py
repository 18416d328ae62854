# amaranth: UnusedElaboratable=no
"""Hierarchical tiling of decode attention's per-request operators.

Random loads and stores of whole big tiles (``fetch`` blocks), Expand, ``row_append``,
``row_sum`` over column blocks, padding-mask FlatMaps, element-wise folds over a dynamic dim and
counts of blocks. Every test interprets the user's graph and its hardware-tiled form on the same
memory and compares the output tensors bit for bit (BF16 as bit patterns), and checks that the
rewrite moves the same off-chip bytes.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from hier_helpers import rewrite, same_outputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples import attention
from step_hw.config import BF16_CONFIG
from step_lang import (
    Accum,
    FlatMap,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    RandomOffChipLoad,
    RandomOffChipStore,
    Sink,
    numerics,
)
from step_lang import functions as F
from step_lang.errors import StepTypeError
from step_lang.hier_tiling import hier_tile
from step_lang.types import Tile

BF16 = numerics.functions(BF16_CONFIG)
BF = ml_dtypes.bfloat16
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- decode attention ---------------------------------------------------------------------------

SMALL_HW = attention.AttentionConfig(head_dim=8, kv_tile=8, max_len=32)


@pytest.mark.parametrize("schedule", ["interleaved", "coarse", "dynamic"])
def test_attention_on_4x4_tiles_bit_exact(schedule):
    """Head dim 8 and KV tiles of 8 on 4x4 hardware tiles: q, K and V tiles split 2 ways (K and
    V both ways), KV lengths ragged across requests, including a request whose new row lands in
    each row block of its last tile."""
    g = attention.hardware(schedule, 6, 2, hw=BF16_CONFIG, config=SMALL_HW)
    h = rewrite(g, 4)
    kv = np.array([0, 3, 4, 7, 12, 30])
    mem = attention.hardware_inputs(kv, seed=2, hw=BF16_CONFIG, config=SMALL_HW)
    same_outputs(g, h, mem, ["out", "k_cache", "v_cache"])


@SETTINGS
@given(
    kv=st.lists(st.integers(0, 31), min_size=1, max_size=5),
    schedule=st.sampled_from(["interleaved", "dynamic"]),
    seed=st.integers(0, 2**16),
)
def test_random_kv_lengths_bit_exact(kv, schedule, seed):
    g = attention.hardware(schedule, len(kv), 1, hw=BF16_CONFIG, config=SMALL_HW)
    h = rewrite(g, 4)
    mem = attention.hardware_inputs(np.array(kv), seed=seed, hw=BF16_CONFIG, config=SMALL_HW)
    same_outputs(g, h, mem, ["out", "k_cache", "v_cache"])


def test_paper_size_attention_on_16x16_tiles_bit_exact():
    """The paper's head dim 64 and KV tile 32 (``PAPER_HW``), 16 requests of KV length 256 to
    318, on 16x16 hardware tiles."""
    hw = dataclasses.replace(BF16_CONFIG, tile_rows=16, tile_cols=16)
    g = attention.hardware("interleaved", 16, 2, hw=hw, config=attention.PAPER_HW)
    h = rewrite(g, 16)
    kv = np.random.default_rng(1).integers(256, 319, size=16)
    mem = attention.hardware_inputs(kv, seed=3, hw=hw, config=attention.PAPER_HW)
    same_outputs(g, h, mem, ["out", "k_cache", "v_cache"])


# -- the operators one by one ------------------------------------------------------------------


def _addresses(g: Graph, name: str, values: list[int]) -> tuple:
    t = g.tensor(name, (len(values), 1), "int32")
    return t, LinearOffChipLoad(t, tile=(1, 1), out_shape=(len(values),), name=f"{name}_ld").out


@SETTINGS
@given(
    nr=st.integers(1, 3),
    nc=st.integers(1, 3),
    blocks=st.integers(1, 4),
    reads=st.lists(st.integers(0, 99), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_random_load_and_store_of_big_tiles_bit_exact(nr, nc, blocks, reads, seed):
    """Whole-width big tiles of ``4 nr x 4 nc`` read at random block addresses and written back
    elsewhere: the same bytes, through fetch blocks."""
    g = Graph("rw")
    rows, cols = 4 * nr * blocks, 4 * nc
    x = g.tensor("x", (rows, cols), "bfloat16")
    y = g.tensor("y", (4 * nr * len(reads), cols), "bfloat16")
    src = [r % blocks for r in reads]
    _, ra = _addresses(g, "ra", src)
    _, wa = _addresses(g, "wa", list(range(len(reads))))
    big = RandomOffChipLoad(ra, x, tile=(4 * nr, 4 * nc), name="load").out
    twice = Map(big, big, fn=BF16.add, name="twice").out
    Sink(RandomOffChipStore(wa, twice, y, name="store").out, name="acks")
    h = rewrite(g, 4)
    load = h.nodes["load"]
    assert load.tile == (4, 4)
    assert load.fetch == ((nr, nc) if (nr, nc) != (1, 1) else None)  # a fitting tile: as it was
    rng = np.random.default_rng(seed)
    mem = {
        "x": (rng.standard_normal((rows, cols))).astype(BF),
        "ra": np.array(src, np.int32).reshape(-1, 1),
        "wa": np.arange(len(reads), dtype=np.int32).reshape(-1, 1),
    }
    same_outputs(g, h, mem, ["y"])


def test_random_load_of_non_consecutive_blocks_is_refused():
    g = Graph("nc")
    x = g.tensor("x", (16, 16), "bfloat16")
    _, ra = _addresses(g, "ra", [0, 3])
    Sink(RandomOffChipLoad(ra, x, tile=(8, 8), name="load").out, name="s")
    with pytest.raises(
        StepTypeError,
        match=r"^RandomOffChipLoad 'load': hierarchical tiling to 4x4: its 8x8 tiles of tensor "
        r"'x' \(2 tiles wide\) are not one run of 4x4 hardware tiles",
    ):
        hier_tile(g, 4, 4)


def test_row_sum_without_a_chain_continuing_sum_is_refused():
    """The plain float row_sum (numpy's order) has no bit-exact split over column blocks."""
    g = Graph("rs")
    x = g.tensor("x", (4, 8), "float32")
    o = g.tensor("o", (4, 1), "float32")
    t = LinearOffChipLoad(x, tile=(4, 8), name="ld").out
    LinearOffChipStore(Map(t, fn=F.row_sum, name="rsum").out, o, name="st")
    with pytest.raises(
        StepTypeError,
        match=r"^Map 'rsum': hierarchical tiling to 4x4: 'row_sum' over 2 column blocks needs a "
        r"chain-continuing row sum",
    ):
        hier_tile(g, 4, 4)


@SETTINGS
@given(r=st.sampled_from([4, 8, 12]), c=st.sampled_from([4, 8, 12, 16]), seed=st.integers(0, 999))
def test_bf16_row_sum_over_column_blocks_bit_exact(r, c, seed):
    g = Graph("rs")
    x = g.tensor("x", (2 * r, c), "bfloat16")
    o = g.tensor("o", (2 * r, 1), "bfloat16")
    t = LinearOffChipLoad(x, tile=(r, c), name="ld").out
    LinearOffChipStore(Map(t, fn=BF16.row_sum, name="rsum").out, o, name="st")
    h = rewrite(g, 4)
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-3, 4, size=(2 * r, c))
    same_outputs(g, h, {"x": (rng.standard_normal((2 * r, c)) * scale).astype(BF)}, ["o"])


def test_flatmap_without_pieces_is_refused():
    g = Graph("fm")
    n = g.tensor("n", (2, 1), "int32")
    o = g.tensor("o", (2, 1), "int32")
    ns = LinearOffChipLoad(n, tile=(1, 1), out_shape=(2, 1), name="ld").out

    def rule(err, t):
        return Tile(t.dtype, 1, 8), (), 1

    fn = F.FlatMapFn("wide", 1, 0, rule, lambda out, t: [np.zeros((1, 8), np.int32)])
    wide = FlatMap(ns, fn=fn, name="wide").out
    cnt = Accum(wide, fn=numerics.accum_count("int32"), rank=1, name="cnt").out
    LinearOffChipStore(Flatten(cnt, 0, 1, name="f").out, o, name="st")
    with pytest.raises(
        StepTypeError,
        match=r"^FlatMap 'wide': hierarchical tiling to 4x4: its function 'wide' generates tiles "
        r"Tile<int32, 1x8> with no form on 4x4 hardware tiles",
    ):
        hier_tile(g, 4, 4)
