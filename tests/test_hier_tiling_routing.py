# amaranth: UnusedElaboratable=no
"""Hierarchical tiling of routing, packing, random loads and broadcasting (MoE's operators).

Every test interprets the user's graph and its hardware-tiled form on the same memory and
compares the output tensors bit for bit (BF16 as bit patterns), and checks that the rewrite
moves the same off-chip bytes.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hier_helpers import rewrite as _rewrite
from hier_helpers import same_outputs as _checked_same
from hw_helpers import built_not_elaborated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples import moe
from step_hw.config import BF16_CONFIG
from step_lang import (
    Accum,
    Broadcast,
    EagerMerge,
    FlatMap,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Parallelize,
    Partition,
    Promote,
    RandomOffChipLoad,
    Reassemble,
    Reshape,
    RetileStreamify,
    Sink,
    numerics,
)
from step_lang import functions as F
from step_lang.errors import StepTypeError
from step_lang.hier_tiling import hier_tile

BF16 = numerics.functions(BF16_CONFIG)
BF = ml_dtypes.bfloat16
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same_outputs(g, h, memory, outs, *, check: bool = True) -> None:
    """Bit-exact outputs; with ``check`` (every stream of the rewritten graph checked against
    its type) also the same FLOPs (``hier_helpers.same_outputs``)."""
    _checked_same(g, h, memory, outs, flops=check, check=check)


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.standard_normal(shape) / 2).astype(BF)


def _k_hot(rng: np.random.Generator, n: int, e: int, k: int, used: int) -> np.ndarray:
    """``n`` rows with ``k`` distinct bits among the first ``used`` of ``e`` (the others never
    receive anything: empty routes)."""
    sel = np.zeros((n, e), np.int32)
    for i in range(n):
        sel[i, rng.choice(used, size=k, replace=False)] = 1
    return sel


# -- the MoE layer ------------------------------------------------------------------------------


def _moe(config: moe.MoEConfig, schedule: moe.MoESchedule, batch: int, used: int, seed: int):
    """The layer with the hardware's BF16 functions, and a memory image whose routing sends no
    token to experts ``used..E-1``."""
    g = moe.build(config, schedule, batch, elem_bytes=None, fns=moe.hardware_fns(BF16_CONFIG))
    rng = np.random.default_rng(seed)
    choices = np.stack([rng.choice(used, size=config.top_k, replace=False) for _ in range(batch)])
    mem = moe.inputs(replace(config, dtype="float32"), choices, seed=seed)
    mem = {k: v.astype(BF) if v.dtype == np.float32 else v for k, v in mem.items()}
    mem["out"] = np.zeros((batch, config.hidden), BF)
    return g, mem


HW16 = moe.MoEConfig("hw16", 256, 64, 16, 2, dtype="bfloat16")


@pytest.mark.parametrize(
    ("schedule", "batch"),
    [
        (moe.MoESchedule("static", tile_n=16, tile_f=16, regions=1), 16),
        (moe.MoESchedule("static", tile_n=32, tile_f=16, regions=2), 64),
        (moe.MoESchedule("static", tile_n=16, tile_f=16), 32),
    ],
    ids=["timemux1_n16_b16", "timemux2_n32_b64", "static_n16_b32"],
)
def test_moe_16_experts_d256_bit_exact_with_hardware_blocks(schedule, batch):
    """The paper-size MoE layer at 16 experts, D = 256 on 16x16 hardware tiles; experts 12-15
    receive no token. Every stream of the rewritten graph is checked against its type, and
    every node has a hardware block (the blocks are built, not elaborated)."""
    from step_hw.elaborate import ElaboratedGraph

    g, mem = _moe(HW16, schedule, batch, used=12, seed=batch)
    h = _rewrite(g, 16)
    _same_outputs(g, h, mem, ["out"])
    built_not_elaborated(h, replace(BF16_CONFIG, tile_rows=16, tile_cols=16))
    with pytest.raises(StepTypeError, match=r"does not fit the configured 16x16 tile"):
        ElaboratedGraph(g, replace(BF16_CONFIG, tile_rows=16, tile_cols=16))


SMALL = moe.MoEConfig("small", 24, 16, 4, 2, dtype="bfloat16")


@pytest.mark.parametrize(
    "schedule",
    [
        moe.MoESchedule("static", tile_n=12, tile_f=8, regions=1),
        moe.MoESchedule("static", tile_n=5, tile_f=16, regions=2),
        moe.MoESchedule("static", tile_n=12, tile_f=8),
    ],
    ids=["timemux1", "timemux2", "static"],
)
def test_small_moe_on_8x8_tiles_bit_exact_and_well_typed(schedule):
    """D = 24 on 8-wide tiles (3 column blocks), token tiles of 12 rows (two 6-row hardware
    tiles) or 5, weights of [24, 8] (3 x 1 blocks in rows of 2 big tiles: the addresses are
    reordered) or [24, 16]; expert 3 receives nothing. The rewritten graph's streams are
    checked against their types."""
    g, mem = _moe(SMALL, schedule, 10, used=3, seed=1)
    h = _rewrite(g, 8)
    _same_outputs(g, h, mem, ["out"])


@pytest.mark.parametrize(
    ("schedule", "batch"),
    [
        (moe.MoESchedule("dynamic", tile_f=16, regions=1), 16),
        (moe.MoESchedule("dynamic", tile_f=16), 16),
        (moe.MoESchedule("dynamic", tile_f=32, regions=2), 64),
    ],
    ids=["timemux1_b16", "static_b16", "timemux2_b64"],
)
def test_dynamic_moe_16_experts_d256_bit_exact(schedule, batch):
    """Dynamic tiling at paper size: each expert's tokens in one [n_e, 256] tile (rows dynamic,
    up to the batch), its 16 column blocks packed from the rows' pieces and unpacked again
    (Streamify(order=)); experts 12-15 receive no token (0-row tiles). With batch 64 an
    expert's tile has more rows than the 16-row hardware tile: rows stay whole (dynamic
    tiles hold HwConfig.dyn_tile_rows). Every stream of the rewritten graph is checked
    against its type."""
    g, mem = _moe(HW16, schedule, batch, used=12, seed=batch)
    h = _rewrite(g, 16)
    _same_outputs(g, h, mem, ["out"])


@pytest.mark.parametrize(
    "schedule",
    [
        moe.MoESchedule("dynamic", tile_f=8),
        moe.MoESchedule("dynamic", tile_f=16, regions=2),
        moe.MoESchedule("dynamic", tile_f=8, regions=4, construction="artifact"),
    ],
    ids=["static", "timemux2", "artifact"],
)
def test_small_dynamic_moe_on_8x8_tiles_bit_exact(schedule):
    """D = 24 on 8-wide tiles (3 column blocks), tile_f 8 or 16 (two column blocks of h);
    expert 3 receives nothing."""
    g, mem = _moe(SMALL, schedule, 10, used=3, seed=2)
    h = _rewrite(g, 8)
    _same_outputs(g, h, mem, ["out"])


def test_dynamic_padding_mask_is_refused_with_the_node():
    """A padding mask of dynamic tiles has no hardware-tile form (dynamic tiles need none)."""
    g = Graph("dynmask")
    rows, (sel, _) = _rows_and_selectors(g, 4, 1, 8, 2)
    xs = Partition(rows, sel, 0, name="route").outputs[0]
    r = Reshape(xs, 1, pad=np.zeros((1, 8), BF), pad_flags=True, name="chunk")
    packed, mask = (
        Accum(Promote(Flatten(o, 0, 1).out).out, fn=F.retile_row, rank=1, name=f"pack{i}").out
        for i, o in enumerate(r.outputs)
    )
    back = RetileStreamify(packed, is_pad=mask, name="unpack").out
    LinearOffChipStore(back, g.tensor("out", (4, 8), "bfloat16"), name="store")
    with pytest.raises(
        StepTypeError,
        match=r"^RetileStreamify 'unpack': hierarchical tiling to 4x4: a padding mask of dynamic",
    ):
        hier_tile(g, 4, 4)


# -- routing -----------------------------------------------------------------------------------


def _rows_and_selectors(g: Graph, n: int, a: int, c: int, e: int):
    x = g.tensor("x", (n * a, c), "bfloat16")
    sel_t = g.tensor("sel", (n, e), "int32")
    rows = Flatten(LinearOffChipLoad(x, tile=(a, c), name="load_x").out, 0, 2).out
    sels = []
    for name in ("route", "gather"):
        raw = Flatten(LinearOffChipLoad(sel_t, tile=(1, e), name=f"load_{name}").out, 0, 2).out
        sels.append(Map(raw, fn=F.to_selector(e), name=f"{name}_sel").out)
    return rows, sels


@SETTINGS
@given(
    n=st.integers(1, 6),
    a=st.integers(1, 9),
    c=st.integers(1, 11),
    e=st.integers(1, 4),
    data=st.data(),
    merge=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_routing_of_blocks_bit_exact(n, a, c, e, data, merge, seed):
    """Partition, (EagerMerge + Partition back), Reassemble of [a, c] tiles on 4x4 hardware:
    whole blocks routed, random k-hot selectors, some experts empty."""
    k = data.draw(st.integers(1, e))
    used = data.draw(st.integers(k, e))
    g = Graph("route")
    rows, (sel, gsel) = _rows_and_selectors(g, n, a, c, e)
    parts = Partition(rows, sel, 0, name="route").outputs
    if merge:
        merged, which = EagerMerge(parts, name="merge").outputs
        y = Map(merged, fn=BF16.silu, name="act").out
        parts = Partition(y, which, 0, name="unmerge").outputs
    else:
        parts = [Map(p, fn=BF16.silu, name=f"act{i}").out for i, p in enumerate(parts)]
    gathered = Reassemble(parts, gsel, count=k, name="gather").out  # [n, k]
    out = g.tensor("out", (n * k * a, c), "bfloat16")
    LinearOffChipStore(Flatten(gathered, 0, 1).out, out, name="store")
    h = _rewrite(g, 4)
    rng = np.random.default_rng(seed)
    mem = {"x": _bf16(rng, (n * a, c)), "sel": _k_hot(rng, n, e, k, used)}
    _same_outputs(g, h, mem, ["out"])


@SETTINGS
@given(
    n=st.integers(0, 9),
    c=st.integers(1, 11),
    tn=st.integers(1, 7),
    e=st.integers(1, 3),
    data=st.data(),
    dynamic=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_pack_and_unpack_bit_exact(n, c, tn, e, data, dynamic, seed):
    """MoE's token path without the experts: rows routed, packed into [tn, c] tiles (Reshape
    with zero padding and flags, Accum(retile_row)), an element-wise map, unpacked without
    the padded rows (RetileStreamify), scaled by a routed [1,1] weight (a broadcasting Map),
    gathered and summed over k. Sizes 0..9 rows, tn = 1..7 on 4x4 hardware (most do not
    divide). ``dynamic``: each expert's rows in one dynamically sized tile (Promote, no
    padding), of 0 rows for an expert that receives nothing."""
    k = data.draw(st.integers(1, e))
    used = data.draw(st.integers(k, e))
    g = Graph("pack")
    rows, (sel, gsel) = _rows_and_selectors(g, max(n, 1), 1, c, e)
    slot_t = g.tensor("slot_sel", (max(n, 1) * k, e), "int32")
    w_t = g.tensor("w", (max(n, 1) * k, 1), "bfloat16")
    slot = Map(
        Flatten(LinearOffChipLoad(slot_t, tile=(1, e), name="load_slot").out, 0, 2).out,
        fn=F.to_selector(e),
        name="slot",
    ).out
    w = Flatten(LinearOffChipLoad(w_t, tile=(1, 1), name="load_w").out, 0, 2).out
    per_w = Partition(w, slot, 0, name="wroute").outputs
    scaled = []
    for i, xs in enumerate(Partition(rows, sel, 0, name="route").outputs):
        if dynamic:
            grouped, mask = Promote(xs, name=f"promote{i}").out, None
        else:
            r = Reshape(xs, tn, pad=np.zeros((1, c), BF), pad_flags=True, name=f"chunk{i}")
            grouped = r.outputs[0]
            mask = Accum(r.outputs[1], fn=F.retile_row, rank=1, name=f"padmask{i}").out
        packed = Accum(grouped, fn=F.retile_row, rank=1, name=f"pack{i}").out
        y = Map(packed, fn=BF16.silu, name=f"act{i}").out
        back = RetileStreamify(y, is_pad=mask, name=f"unpack{i}").out
        scaled.append(Map(back, per_w[i], fn=BF16.mul, name=f"scale{i}").out)
    gathered = Reassemble(scaled, gsel, count=k, name="gather").out
    combined = Accum(gathered, fn=BF16.accum_add, rank=1, name="combine").out
    out = g.tensor("out", (max(n, 1), c), "bfloat16")
    LinearOffChipStore(combined, out, name="store")
    h = _rewrite(g, 4)
    rng = np.random.default_rng(seed)
    choices = _k_hot(rng, max(n, 1), e, k, used)
    slots = np.zeros((max(n, 1) * k, e), np.int32)
    hot = [np.flatnonzero(row) for row in choices]
    for t, row in enumerate(hot):
        for j, ex in enumerate(row):
            slots[t * k + j, ex] = 1
    mem = {
        "x": _bf16(rng, (max(n, 1), c)),
        "sel": choices,
        "slot_sel": slots,
        "w": _bf16(rng, (max(n, 1) * k, 1)),
    }
    _same_outputs(g, h, mem, ["out"])


@SETTINGS
@given(
    t=st.integers(1, 3),
    tn=st.integers(1, 11),
    c=st.integers(1, 11),
    seed=st.integers(0, 2**16),
)
def test_random_concat_rows_and_split_bit_exact(t, tn, c, seed):
    """Accum(retile_row) of [1, c] rows into [tn, c] tiles (rows blocked or fitting, the result
    in 4-row or smaller hardware tiles), then RetileStreamify back into rows, unmasked."""
    g = Graph("rows")
    x = g.tensor("x", (t * tn, c), "bfloat16")
    out = g.tensor("out", (t * tn, c), "bfloat16")
    rows = LinearOffChipLoad(x, tile=(1, c), out_shape=(t, tn), name="load").out  # [1, t, tn]
    packed = Accum(rows, fn=F.retile_row, rank=1, name="pack").out
    y = Map(packed, fn=BF16.silu, name="act").out
    back = RetileStreamify(y, name="unpack").out  # [1, t * tn]
    LinearOffChipStore(back, out, name="store")
    h = _rewrite(g, 4)
    _same_outputs(g, h, {"x": _bf16(np.random.default_rng(seed), (t * tn, c))}, ["out"])


# -- random loads ----------------------------------------------------------------------------


def _expert_load_graph(e: int, s: int, k: int, tf: int, nf: int, down: bool, promote: bool):
    """One-hot selectors -> expert_addr -> RandomOffChipLoad of [k, tf] (or [tf, k]) weight
    tiles -> silu -> store."""
    g = Graph("rload")
    sel_t = g.tensor("sel", (s, e), "int32")
    shape = (e, nf * tf, k) if down else (e, k, nf * tf)
    tile = (tf, k) if down else (k, tf)
    w_t = g.tensor("w", shape, "bfloat16")
    out = g.tensor("out", (s * nf * tile[0], tile[1]), "bfloat16")
    raw = Flatten(LinearOffChipLoad(sel_t, tile=(1, e), name="load_sel").out, 0, 2).out
    sel = Map(raw, fn=F.to_selector(e), name="sel").out  # [s]
    if promote:
        sel = Promote(sel, 0, name="slot").out  # [s, 1]: one run per element
    addr = FlatMap(sel, fn=numerics.expert_addr(nf), name="addr").out
    w = RandomOffChipLoad(addr, w_t, tile=tile, name="load_w").out
    y = Map(w, fn=BF16.silu, name="act").out
    flat = Flatten(y, 0, 1).out if promote else y
    LinearOffChipStore(flat, out, name="store")
    return g, shape


@SETTINGS
@given(
    e=st.integers(1, 3),
    s=st.integers(1, 4),
    k=st.integers(1, 11),
    tf=st.integers(1, 6),
    nf=st.integers(1, 3),
    down=st.booleans(),
    promote=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_expert_loads_bit_exact(e, s, k, tf, nf, down, promote, seed):
    """RandomOffChipLoad of big weight tiles named by expert_addr: gate-like [k, tf] tiles (a
    big tile's hardware tiles are not consecutive: the addresses are reordered) and down-like
    [tf, k] tiles, one or several runs per selector stream element, on 4x4 hardware."""
    g, shape = _expert_load_graph(e, s, k, tf, nf, down, promote)
    h = _rewrite(g, 4)
    rng = np.random.default_rng(seed)
    sel = np.zeros((s, e), np.int32)
    sel[np.arange(s), rng.integers(0, e, s)] = 1
    _same_outputs(g, h, {"sel": sel, "w": _bf16(rng, shape)}, ["out"])


def test_random_load_of_partial_rows_is_refused():
    """Runs of one big tile in rows of two: the big tile's hardware tiles are strided, and a
    run of hardware-tile addresses would read the neighbour's too."""
    g = Graph("rload")
    sel_t = g.tensor("sel", (2, 3), "int32")
    w_t = g.tensor("w", (3, 8, 8), "bfloat16")
    sel = Map(Flatten(LinearOffChipLoad(sel_t, tile=(1, 3)).out, 0, 2).out, fn=F.to_selector(3)).out
    addr = FlatMap(sel, fn=numerics.expert_addr(1), name="addr").out
    LinearOffChipStore(
        RandomOffChipLoad(addr, w_t, tile=(8, 4), name="load_w").out,
        g.tensor("out", (16, 4), "bfloat16"),
    )
    with pytest.raises(
        StepTypeError,
        match=r"^RandomOffChipLoad 'load_w': hierarchical tiling to 4x4: its expert_addr runs "
        r"of 1 big tiles from 0 are not whole rows",
    ):
        hier_tile(g, 4, 4)


def test_reassemble_of_tiles_without_count_is_refused():
    g = Graph("ra")
    rows, (sel, gsel) = _rows_and_selectors(g, 2, 1, 8, 2)
    parts = Partition(rows, sel, 0, name="route").outputs
    gathered = Reassemble(parts, gsel, name="gather").out
    LinearOffChipStore(
        Flatten(gathered, 0, 1).out, g.tensor("out", (4, 8), "bfloat16"), name="store"
    )
    with pytest.raises(StepTypeError, match=r"^Reassemble 'gather':.*without a count"):
        hier_tile(g, 4, 4)


# -- broadcasting --------------------------------------------------------------------------------


@SETTINGS
@given(
    r=st.integers(1, 11),
    c=st.integers(1, 11),
    s=st.integers(1, 3),
    form=st.sampled_from(["scalar", "column", "row"]),
    swap=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_broadcasting_maps_bit_exact(r, c, s, form, swap, seed):
    """Map(mul) of [r, c] tiles with a [1, 1], [r, 1] or [1, c] operand (either port), on 4x4
    hardware: the small operand repeated per hardware tile."""
    small = {"scalar": (1, 1), "column": (r, 1), "row": (1, c)}[form]
    g = Graph("bc")
    x = g.tensor("x", (s * r, c), "bfloat16")
    y = g.tensor("y", (s * small[0], small[1]), "bfloat16")
    out = g.tensor("out", (s * r, c), "bfloat16")
    xs = LinearOffChipLoad(x, tile=(r, c), name="load_x").out  # [1, s, 1]
    ys = LinearOffChipLoad(y, tile=small, name="load_y").out
    args = (ys, xs) if swap else (xs, ys)
    LinearOffChipStore(Map(*args, fn=BF16.mul, name="mul").out, out, name="store")
    h = _rewrite(g, 4)
    rng = np.random.default_rng(seed)
    mem = {"x": _bf16(rng, (s * r, c)), "y": _bf16(rng, (s * small[0], small[1]))}
    _same_outputs(g, h, mem, ["out"])


def test_reshape_of_outer_dims_of_blocks_bit_exact():
    """Reshape above rank 0 splits an outer dim of a blocked stream: the same Reshape two
    ranks up."""
    g = Graph("rs")
    x = g.tensor("x", (8, 24), "bfloat16")
    out = g.tensor("out", (8, 24), "bfloat16")
    xs = LinearOffChipLoad(x, tile=(2, 12), name="load").out  # [1, 4, 2]
    ys = Reshape(xs, 2, 1, name="split").out  # [1, 2, 2, 2]
    LinearOffChipStore(Flatten(ys, 0, 2).out, out, name="store")
    h = _rewrite(g, 4)
    assert h.nodes["split"].params()["rank"] == 3
    _same_outputs(g, h, {"x": _bf16(np.random.default_rng(0), (8, 24))}, ["out"])


@SETTINGS
@given(
    n1=st.integers(1, 3),
    n2=st.integers(1, 4),
    a=st.integers(1, 7),
    c=st.integers(1, 9),
    p=st.integers(1, 3),
    rank=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_random_parallelize_and_broadcast_of_blocks_bit_exact(n1, n2, a, c, p, rank, seed):
    """Parallelize deals whole blocks round-robin (chunks of rank 0 or 1 become rank 2 or 3);
    an explicit Broadcast copies a blocked stream. Each output stored on its own."""
    g = Graph("par")
    x = g.tensor("x", (n1 * n2 * a, c), "bfloat16")
    xs = LinearOffChipLoad(x, tile=(a, c), out_shape=(n1, n2), name="load").out  # [1, n1, n2]
    xs = Flatten(xs, 1, 2).out if rank == 1 else Flatten(xs, 0, 2).out  # [n1, n2] or [n1*n2]
    copy, rest = Broadcast(xs, 2, name="copy").outputs
    chunks = n1 if rank == 1 else n1 * n2
    per = n2 if rank == 1 else 1
    outs = []
    for i, y in enumerate(Parallelize(rest, p, rank, name="deal").outputs):
        count = chunks // p + (i < chunks % p)
        t = g.tensor(f"out{i}", (max(count, 1) * per * a, c), "bfloat16")
        if count:
            LinearOffChipStore(Map(y, fn=BF16.silu, name=f"act{i}").out, t, name=f"store{i}")
            outs.append(f"out{i}")
        else:  # an output that receives nothing: drained
            Sink(y, name=f"sink{i}")
    t = g.tensor("copy", (n1 * n2 * a, c), "bfloat16")
    LinearOffChipStore(copy, t, name="store_copy")
    h = _rewrite(g, 4)
    _same_outputs(
        g, h, {"x": _bf16(np.random.default_rng(seed), (n1 * n2 * a, c))}, [*outs, "copy"]
    )
