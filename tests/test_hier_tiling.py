"""Hierarchical tiling (step_lang.hier_tiling): the rewritten graph computes the same bits.

Every test interprets the user's graph and its hardware-tiled form on the same memory and
compares the output tensors bit for bit (BF16 compared as bit patterns, NaN included).
"""

from __future__ import annotations

import json
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hier_helpers import bits as _bits
from hier_helpers import largest_tile as _largest_tile
from hier_helpers import same_outputs as _same_outputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples import swiglu
from step_hw.config import BF16_CONFIG, HwConfig
from step_lang import (
    Accum,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    RetileStreamify,
    metrics,
    numerics,
)
from step_lang.errors import StepTypeError
from step_lang.hier_tiling import hier_tile, hw_split, tiling_report, uneven_splits

BF16 = numerics.functions(BF16_CONFIG)
FIXED = numerics.functions(HwConfig())


def _bf16_memory(config: swiglu.SwiGLUConfig, seed: int = 0) -> dict[str, np.ndarray]:
    mem = swiglu.inputs(replace(config, dtype="float32"), seed)
    return {k: v.astype(ml_dtypes.bfloat16) for k, v in mem.items()}


def test_hw_split_is_the_largest_divisor_that_fits():
    assert [hw_split(n, 16) for n in (1, 7, 16, 20, 24, 32, 17, 48, 256)] == [
        1, 7, 16, 10, 12, 16, 1, 16, 16,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("size", "tb", "ti"),
    [
        ((32, 64, 64), 32, 32),
        ((64, 64, 128), 16, 64),
        ((40, 48, 40), 20, 20),  # 20 = 2 x 10 on 16-wide hardware: tiles not divisible by 16
    ],
)
def test_swiglu_bf16_bit_exact_and_same_traffic(size, tb, ti):
    config = swiglu.SwiGLUConfig(*size, dtype="bfloat16")
    g = swiglu.hardware(tb, ti, hw=BF16_CONFIG, size=config)
    nodes_before = list(g.nodes)
    h = hier_tile(g, 16, 16)
    assert list(g.nodes) == nodes_before  # the user's graph is not changed
    rows, cols = _largest_tile(h)
    assert rows <= 16 and cols <= 16
    assert _largest_tile(g) == (max(tb, size[1]), size[1])  # there was something to split
    _same_outputs(g, h, _bf16_memory(config), ["out"])
    report = tiling_report(g, h)
    assert report.offchip_after == report.offchip_before
    assert metrics(h).flops == metrics(g).flops
    assert report.onchip_by_node["gate_a_buf"][0] is None  # new node, reported
    assert "off-chip bytes" in report.table()


def test_swiglu_fixed_point_k_split_bit_exact():
    """Q8.8 int16: K = 32 over two 16-wide hardware tiles is summed exactly and rounded once
    per big tile (``matmul_sum``), then added across the down projection's Accum."""
    size = swiglu.SwiGLUConfig(16, 32, 64, "int16")
    g = swiglu.hardware(16, 32, hw=HwConfig(), size=size)
    h = hier_tile(g, 16, 16)
    assert h.nodes["gate"].fn.name == "matmul_sum"
    assert h.nodes["down_tile"].fn.name == "matmul_sum" and h.nodes["down"].held == 2
    mem = swiglu.inputs(size, seed=7)
    _same_outputs(g, h, mem, ["out"])


def test_fixed_point_k_split_wraps_as_the_unsplit_matmul():
    """int16 operands at full scale: the int32 sums wrap (K = 24 products of up to 2^30), and
    the split form wraps them as the unsplit matmul does."""
    fns = numerics.functions(HwConfig(frac_bits=4))
    g = _matmul_graph(fns, "int16", 2, 2, 4, 12, 4, accum=True, transpose=False)
    h = hier_tile(g, 4, 4)
    rng = np.random.default_rng(3)
    shapes = {"a": (8, 24), "b": (24, 4), "c": (8, 4)}
    mem = {k: rng.integers(-32768, 32768, sh).astype(np.int16) for k, sh in shapes.items()}
    big = np.abs(np.asarray(mem["a"], np.int64)[:, :12] @ np.asarray(mem["b"], np.int64)[:12]).max()
    assert big >= 2**31  # the int32 sum does wrap
    _same_outputs(g, h, mem, ["out"])


def test_fixed_point_k_split_across_an_accum_needs_wrapping():
    fns = numerics.functions(HwConfig(), overflow="raise")
    g = _matmul_graph(fns, "int16", 1, 2, 4, 8, 4, accum=True, transpose=False)
    with pytest.raises(
        StepTypeError,
        match=r"^Accum 'mm': hierarchical tiling to 4x4: fixed-point 'matmul_acc' with K = 8 > 4 "
        r"under overflow='raise'",
    ):
        hier_tile(g, 4, 4)


def _matmul_graph(
    fns, dtype: str, s: int, d: int, m: int, k: int, n: int, *, accum: bool, transpose: bool
) -> Graph:
    """load A [s*m, d*k] as (m, k) tiles, B as (k, n) tiles (or (n, k) transposed), matmul or
    matmul_acc over d, an element-wise tail, store."""
    g = Graph("mm")
    a = g.tensor("a", (s * m, d * k), dtype)
    b = g.tensor("b", (n, d * k) if transpose else (d * k, n), dtype)
    c = g.tensor("c", (s * m, n), dtype)
    out = g.tensor("out", (s * m, n), dtype)
    xs = LinearOffChipLoad(a, tile=(m, k), name="load_a").out  # [1, s, d]
    if transpose:
        ws = LinearOffChipLoad(b, tile=(n, k), out_shape=(s, d), stride=(0, 1), name="load_b").out
    else:
        ws = LinearOffChipLoad(b, tile=(k, n), out_shape=(s, d), stride=(0, 1), name="load_b").out
    if accum:
        y = Accum(
            xs, ws, fn=fns.matmul_acc_out(dtype, transpose_b=transpose), rank=1, name="mm"
        ).out
    else:
        assert d == 1
        y = Map(xs, ws, fn=fns.matmul_out(dtype, transpose_b=transpose), name="mm").out
    if accum:  # [1, s], as the Accum's output
        cs = LinearOffChipLoad(c, tile=(m, n), out_shape=(s,), stride=(1,), name="load_c").out
    else:  # [1, s, 1]
        cs = LinearOffChipLoad(c, tile=(m, n), name="load_c").out
    act = Map(y, fn=fns.silu, name="act").out
    z = Map(act, cs, fn=fns.mul, name="mul").out
    LinearOffChipStore(z, out, name="store")
    return g


def _memory(dtype: str, shapes: dict[str, tuple[int, int]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int16":
        return {k: rng.integers(-256, 256, s).astype(np.int16) for k, s in shapes.items()}
    return {k: (rng.standard_normal(s) / 2).astype(ml_dtypes.bfloat16) for k, s in shapes.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(["bfloat16", "int16"]),
    hw=st.sampled_from([4, 8]),
    s=st.integers(1, 3),
    d=st.integers(1, 3),
    m=st.integers(1, 13),
    k=st.integers(1, 13),
    n=st.integers(1, 13),
    accum=st.booleans(),
    transpose=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_matmul_graphs_bit_exact(fmt, hw, s, d, m, k, n, accum, transpose, seed):
    if not accum:
        d = 1
    fns = BF16 if fmt == "bfloat16" else FIXED
    g = _matmul_graph(fns, fmt, s, d, m, k, n, accum=accum, transpose=transpose)
    h = hier_tile(g, hw, hw)
    rows, cols = _largest_tile(h)
    assert rows <= hw and cols <= hw
    shapes = {
        "a": (s * m, d * k),
        "b": (n, d * k) if transpose else (d * k, n),
        "c": (s * m, n),
    }
    mem = _memory(fmt, shapes, seed)
    mem["out"] = np.zeros((s * m, n), mem["a"].dtype)
    _same_outputs(g, h, mem, ["out"])
    assert metrics(h).offchip_bytes == metrics(g).offchip_bytes


def test_unsplittable_operator_is_refused_with_node_tile_and_hardware_tile():
    g = Graph("rt")
    x = g.tensor("x", (32, 32), "bfloat16")
    xs = LinearOffChipLoad(x, tile=(32, 32), name="load").out
    RetileStreamify(xs, split="cols", name="rows")
    with pytest.raises(
        StepTypeError,
        match=r"RetileStreamify 'rows'.*16x16.*reads big tiles Tile<bfloat16, 32x32>",
    ):
        hier_tile(g, 16, 16)


def test_store_out_of_row_major_order_is_refused():
    g = Graph("st")
    x = g.tensor("x", (32, 64), "bfloat16")
    y = g.tensor("y", (32, 64), "bfloat16")
    LinearOffChipStore(LinearOffChipLoad(x, tile=(32, 32), name="load").out, y, name="store")
    with pytest.raises(StepTypeError, match=r"LinearOffChipStore 'store'.*row-major order"):
        hier_tile(g, 16, 16)


@pytest.mark.parametrize("bad", [0, -16, 1.5, True, "16"])
def test_bad_hardware_tile_is_refused(bad):
    g = swiglu.hardware(4, 4)
    with pytest.raises(StepTypeError, match=r"hier_tile: rows must be a positive integer"):
        hier_tile(g, bad, 16)


def test_fitting_graph_is_copied_unchanged():
    g = swiglu.hardware(4, 4)  # 4x4 tiles
    h = hier_tile(g, 16, 16)
    assert {(n.name, n.kind, tuple(n.out_types)) for n in h.nodes.values()} == {
        (n.name, n.kind, tuple(n.out_types)) for n in g.nodes.values()
    }
    mem = swiglu.inputs(swiglu.HW_CONFIG)
    _same_outputs(g, h, mem, ["out"])


@settings(max_examples=60, deadline=None)
@given(
    fmt=st.sampled_from(["bfloat16", "int16"]),
    op=st.sampled_from(["accum_add", "accum_max"]),
    s=st.integers(1, 3),
    d=st.integers(1, 4),
    r=st.integers(1, 11),
    c=st.integers(1, 11),
    seed=st.integers(0, 2**16),
)
def test_random_element_wise_folds_bit_exact(fmt, op, s, d, r, c, seed):
    fns = BF16 if fmt == "bfloat16" else FIXED
    g = Graph("fold")
    x = g.tensor("x", (s * r, d * c), fmt)
    out = g.tensor("out", (s * r, c), fmt)
    xs = LinearOffChipLoad(x, tile=(r, c), name="load").out  # [1, s, d]
    y = Accum(xs, fn=getattr(fns, op), rank=1, name="fold").out
    LinearOffChipStore(y, out, name="store")
    h = hier_tile(g, 4, 4)
    assert max(_largest_tile(h)) <= 4
    mem = _memory(fmt, {"x": (s * r, d * c)}, seed)
    mem["out"] = np.zeros((s * r, c), mem["x"].dtype)
    _same_outputs(g, h, mem, ["out"])


def _cli(capsys, *argv):
    from stepcli.main import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_sim_and_graph_run_the_rewritten_graph(capsys, tmp_path):
    sizes = ("-p", "tile_b=64", "-p", "tile_i=64")
    rc, out, _ = _cli(capsys, "sim", "swiglu", *sizes, "--json")
    before = json.loads(out.strip().splitlines()[-1])
    rc2, out, _ = _cli(capsys, "sim", "swiglu", *sizes, "--hw-tile", "16x16", "--json")
    after = json.loads(out.strip().splitlines()[-1])
    assert rc == rc2 == 0
    assert after["offchip_bytes"] == before["offchip_bytes"]
    assert after["flops"] == before["flops"]
    assert "gate_b_read" in out  # a node of the rewritten graph among the busiest
    dot = tmp_path / "g.dot"
    rc, _, _ = _cli(capsys, "graph", "swiglu", *sizes, "--hw-tile", "16x16", "-o", str(dot))
    assert rc == 0
    text = dot.read_text()
    assert text.startswith('digraph "swiglu_b64_i64_hw16x16" {') and "gate_a_buf" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["sim", "swiglu", "--hw-tile", "16"],
            "step: error: argument --hw-tile: must be ROWSxCOLS",
        ),
        (
            ["sim", "swiglu", "--hw-tile", "0x16"],
            "step: error: argument --hw-tile: must be ROWSxCOLS",
        ),
        (["rtl", "swiglu", "--hw-tile", "16x16"], "step: error: step rtl builds each example"),
        (["metrics", "attention", "--hw-tile", "16x16"], "step: error: "),
    ],
)
def test_cli_hw_tile_errors_are_one_line(capsys, argv, message):
    rc, _, err = _cli(capsys, *argv)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith(message), err


def test_repeat_and_flatten_of_blocked_streams_bit_exact():
    """RepeatStatic replays a block of hardware tiles; Flatten merges outer dims (20-row big
    tiles become 10-row hardware tiles)."""
    from step_lang import Flatten, RepeatStatic

    g = Graph("rep")
    x = g.tensor("x", (40, 24), "bfloat16")
    w = g.tensor("w", (24, 64), "bfloat16")
    o = g.tensor("o", (80, 32), "bfloat16")  # the 4 output tiles stacked (row-major order)
    xs = Flatten(LinearOffChipLoad(x, tile=(20, 24), name="lx").out, 0, 1, name="fl").out
    xr = RepeatStatic(xs, 2, name="rep").out  # [1, 2, 2]
    ws = LinearOffChipLoad(w, tile=(24, 32), out_shape=(2, 2), stride=(0, 1), name="lw").out
    y = Map(xr, ws, fn=BF16.matmul_out("bfloat16"), name="mm").out
    LinearOffChipStore(Flatten(y, 0, 1, name="fy").out, o, name="st")
    h = hier_tile(g, 16, 16)
    assert {n.kind for n in h.nodes.values()} >= {"Streamify", "Bufferize", "Flatten"}
    mem = _memory("bfloat16", {"x": (40, 24), "w": (24, 64)}, 3)
    mem["o"] = np.zeros((80, 32), ml_dtypes.bfloat16)
    _same_outputs(g, h, mem, ["o"])


def test_fetch_blocks_move_the_same_bytes_in_fewer_requests():
    """A load of [16, 16] BF16 tiles (32-byte rows) reads 64-byte requests half empty; with
    fetch=(1, 4) four horizontally adjacent tiles are one transfer of 128-byte rows."""
    from sim import simulate
    from sim.profiles.paper import PaperProfile

    def graph(fetch):
        g = Graph("fetch")
        x = g.tensor("x", (64, 64), "bfloat16")
        y = g.tensor("y", (64, 64), "bfloat16")
        xs = LinearOffChipLoad(x, tile=(16, 16), out_shape=(4, 1, 4), fetch=fetch, name="ld").out
        LinearOffChipStore(xs, y, fetch=fetch, name="st")
        return g

    plain, fetched = graph(None), graph((1, 4))
    assert metrics(fetched).offchip_bytes == metrics(plain).offchip_bytes == 2 * 64 * 64 * 2
    assert metrics(fetched).onchip_bytes == 4 * metrics(plain).onchip_bytes  # a block staged
    assert fetched.nodes["ld"].params()["fetch"] == (1, 4)
    mem = {
        "x": _memory("bfloat16", {"x": (64, 64)}, 0)["x"],
        "y": np.zeros((64, 64), ml_dtypes.bfloat16),
    }
    r0 = simulate(plain, dict(mem), profile=PaperProfile.hdl_validation())
    r1 = simulate(fetched, dict(mem), profile=PaperProfile.hdl_validation())
    np.testing.assert_array_equal(_bits(r1.memory["y"]), _bits(mem["x"]))
    assert r1.offchip_read_bytes == r0.offchip_read_bytes
    assert r1.cycles < r0.cycles


@pytest.mark.parametrize(
    ("fetch", "message"),
    [
        (
            (2, 4),
            r"LinearOffChipLoad 'ld', port 'fetch': fetch \[2, 4\] must equal the stream's two innermost dims, not \[1, 4\]",
        ),
        ((0, 4), r"LinearOffChipLoad 'ld'.*fetch"),
        ("1x4", r"LinearOffChipLoad 'ld'.*fetch"),
    ],
)
def test_bad_fetch_is_refused(fetch, message):
    g = Graph("fetch")
    x = g.tensor("x", (64, 64), "bfloat16")
    with pytest.raises(StepTypeError, match=message):
        LinearOffChipLoad(x, tile=(16, 16), out_shape=(4, 1, 4), fetch=fetch, name="ld")


def test_queue_depths_carry_over_in_hardware_tiles():
    config = swiglu.SwiGLUConfig(32, 64, 64, "bfloat16")
    g = swiglu.hardware(32, 32, hw=BF16_CONFIG, size=config)
    g.set_queue_depth(g.nodes["silu"].out, 3)  # [32, 32] tiles: 2 x 2 hardware tiles each
    g.set_queue_depth(g.nodes["store"].inputs[0], 2)
    h = hier_tile(g, 16, 16)
    assert h.queue_depths == {"silu.out": 12, "down.out": 16}  # [32, 64]: 2 x 4 tiles


def test_accum_over_big_tiles_holds_its_output_tiles_and_buffers_one_big_tile():
    """The down projection (an Accum of matmul_acc over the intermediate's big tiles) keeps one
    accumulator per output hardware tile across the big tiles (held accumulators), so its
    operands are buffered one big tile at a time and consumed as they arrive."""
    g = swiglu.hardware(32, 64, hw=BF16_CONFIG, size=swiglu.SwiGLUConfig(64, 64, 256, "bfloat16"))
    h = hier_tile(g, 16, 16)
    down = h.nodes["down"]
    assert (down.rank, down.held, down.inner, down.held_shape) == (2, 2, 1, (2, 4))
    assert h.nodes["down_a_buf"].rank == h.nodes["down_b_buf"].rank == 2  # one big tile
    assert down.out.shape[-2:] == (2, 4)
    mem = _bf16_memory(swiglu.SwiGLUConfig(64, 64, 256, "bfloat16"), seed=5)
    _same_outputs(g, h, mem, ["out"])


def test_blocked_queues_hold_the_bytes_of_a_big_tile():
    """A queue of a blocked stream without a depth of its own holds the reader's default
    number of big tiles: its depth is scaled by the hardware tiles per big tile; half of that
    when only Bufferizes read it (their second buffer holds the rest)."""
    from sim.profiles.rtl import RtlProfile
    from step_hw import contract

    g = swiglu.hardware(32, 32, hw=BF16_CONFIG, size=swiglu.SwiGLUConfig(32, 64, 64, "bfloat16"))
    h = hier_tile(g, 16, 16)
    assert h.queue_scale["load_x.out"] == 2 * 4 // 2  # [32, 64] -> 2 x 4, into two Bufferizes
    assert h.queue_scale["silu.out"] == 2 * 2  # read by the Map mul
    assert "gate_a_read.out" not in h.queue_scale  # a stream of the pass's own: one tile each
    assert h.queue_depth("load_x.out", 3) == 12 and h.queue_depth("gate_a_read.out", 3) == 3
    hw = replace(BF16_CONFIG, tile_rows=16, tile_cols=16)
    assert contract.queue_depth(h, "silu.out", hw) == 4 * hw.queue_depth
    assert RtlProfile(hw).channel_depth == hw.queue_depth  # the default the scale multiplies


@pytest.mark.parametrize(
    ("tile_b", "tile_i"), [(16, 16), (32, 16), (32, 128), (64, 32), (64, 64), (64, 256)]
)
def test_fig8_rewrite_keeps_the_paper_profile_cycles(tile_b, tile_i):
    """The rewritten Fig. 8 SwiGLU (paper size, 16x16 BF16 hardware tiles) costs what the big-tile
    graph costs under the paper profile's Fig. 8 settings, within 2 %
    (``bench.hier_tiling`` runs all 15 points; docs/hierarchical_tiling.md)."""
    from sim import simulate
    from sim.profiles.paper import PaperProfile

    layer = swiglu.SwiGLUConfig(64, 256, 512, "bfloat16")
    hw = replace(BF16_CONFIG, tile_rows=16, tile_cols=16)
    g = swiglu.hardware(tile_b, tile_i, hw=hw, size=layer)
    h = hier_tile(g, 16, 16)
    before, after = (
        simulate(x, profile=PaperProfile.hdl_validation(), functional=False).cycles for x in (g, h)
    )
    assert abs(after - before) <= 0.02 * before, (before, after)


def test_uneven_splits_name_the_streams_on_part_of_each_hardware_tile():
    """A 20 x 48 tile on 16 x 16 hardware: two 10-row tiles per column block (62.5% of each);
    a 17-column tile: 1-column tiles; tiles that divide or fit are not named."""
    g = Graph("uneven")
    x = g.tensor("x", (40, 48), "bfloat16")
    w = g.tensor("w", (17, 17), "bfloat16")
    LinearOffChipLoad(x, tile=(20, 48), out_shape=(2,), stride=(1,), name="lx")
    LinearOffChipLoad(w, tile=(17, 17), out_shape=(1,), stride=(1,), name="lw")
    LinearOffChipLoad(x, tile=(8, 16), out_shape=(5,), stride=(3,), name="fits")
    found = {s.stream: s for s in uneven_splits(g, 16, 16)}
    tiled = {s.name: s.elem for n in hier_tile(g, 16, 16).nodes.values() for s in n.outputs}
    for name, split in found.items():  # the tiles hier_tile makes
        assert (tiled[name].rows, tiled[name].cols) == (split.rows, split.cols)
    assert set(found) == {"lx.out", "lw.out"}
    assert (found["lx.out"].rows, found["lx.out"].cols, found["lx.out"].use) == (10, 16, 0.625)
    assert found["lw.out"].describe() == (
        "stream lw.out: its [17, 17] tiles become 17 x 17 hardware tiles of [1, 1] each "
        "(17 rows and 17 columns: not a multiple of the 16x16 hardware tile; each fills 0.4% "
        "of it)"
    )
    assert [s.stream for s in uneven_splits(g, 20, 17)] == ["lx.out"]  # 48 on 17: 16 columns
