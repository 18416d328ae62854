"""A hardware-tiled graph on Verilator: the SwiGLU written with ``[8, 8]`` BF16 big tiles,
rewritten by :func:`step_lang.hier_tiling.hier_tile` onto ``4 x 4`` hardware tiles.

Its down projection is an Accum with held accumulators (``AccumUnit`` with a bank of one
accumulator per output hardware tile) and its blocked streams' queues hold a big tile each
(``Graph.queue_scale``): the outputs must equal the interpreter's bit for bit, with memories that
answer at once and under random back-pressure (fast tier; one build).
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from examples import swiglu
from step_hw import cosim
from step_hw.config import BF16_CONFIG
from step_hw.memory_model import MemoryModel
from step_lang import interpret
from step_lang.hier_tiling import hier_tile
from step_lang.passes import lower

LAYER = swiglu.SwiGLUConfig(batch=16, hidden=8, intermediate=16, dtype="bfloat16")
HW = replace(BF16_CONFIG, tile_rows=4, tile_cols=4, lanes=16)


def _case():
    graph = hier_tile(swiglu.hardware(8, 8, hw=HW, size=LAYER), 4, 4)
    memory = swiglu.inputs(replace(LAYER, dtype="float32"), seed=3)
    return graph, {k: v.astype(ml_dtypes.bfloat16) for k, v in memory.items()}


@pytest.mark.parametrize(("pattern", "seed"), [("always", 1), ("random", 2)])
def test_hier_tiled_swiglu_matches_interpreter(pattern, seed):
    graph, memory = _case()
    down = graph.nodes["down"]
    assert (down.held, down.held_shape) == (2, (2, 2))  # a 2 x 2 bank of accumulators
    want = interpret(graph, {k: v.copy() for k, v in memory.items()}).memory["out"]
    result = cosim.run(
        graph,
        memory,
        config=HW,
        tier="fast",
        pattern=pattern,
        seed=seed,
        memory_model=MemoryModel.hbm() if pattern == "random" else None,
        tag=f"hier_{pattern}",
    )
    got = result.outputs["out"]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_rtl_profile_gives_every_queue_of_the_hier_tiled_swiglu():
    """With a memory that answers at once, the rtl profile's Bufferize and Streamify timing
    (``sim.profiles.rtl``, from the contract) and its held-accumulator emission give every
    queue of the hardware-tiled SwiGLU the RTL's handshake cycles."""
    graph, memory = _case()
    report = cosim.validate(graph, memory, config=HW, tier="fast", tag="hier_validate", quiet=True)
    assert report.ok, str(report)
    assert report.rtl_profile_cycles == report.rtl_cycles
    lowered = lower(graph)  # (with the Broadcasts the hardware builds)
    streams = [s for n in lowered.nodes.values() for s in n.outputs]
    assert report.divergence is None and report.compared_streams == len(streams), str(report)


# -- decode attention ---------------------------------------------------------------------------

KV_LENGTHS = [0, 7, 12, 30]  # ragged: 1, 1, 2 and 4 KV tiles; new rows in both row blocks


def _attention_case():
    """Decode attention with ``[1, 8]`` queries and ``[8, 8]`` KV tiles, rewritten onto ``4 x 4``
    BF16 hardware tiles: random block loads and stores (``fetch``), Expand of blocks,
    ``row_append_part`` with ``block_row_offsets``, padding masks in pieces and ``row_sum_acc``."""
    from examples import attention

    config = attention.AttentionConfig(head_dim=8, kv_tile=8, max_len=32)
    graph = hier_tile(attention.hardware("interleaved", 4, 2, hw=HW, config=config), 4, 4)
    memory = attention.hardware_inputs(KV_LENGTHS, seed=5, hw=HW, config=config)
    return graph, memory


def test_hier_tiled_attention_matches_interpreter_and_rtl_profile():
    """Outputs and both caches bit-exact against the interpreter (memories that answer at once;
    one build), and the rtl profile cycle-exact: every stream's handshakes as the RTL's
    (measured: 217 cycles, 188 streams; 218 while the dispatch's first token was a cycle late, 224
    while the interpreter's Partition and Reassemble forwarded whole chunks)."""
    graph, memory = _attention_case()
    want = interpret(graph, {k: v.copy() for k, v in memory.items()}).memory
    report = cosim.validate(graph, memory, config=HW, tier="fast", tag="hier_attention", quiet=True)
    assert report.ok, str(report)  # every output tensor as the interpreter's
    for name in ("out", "k_cache", "v_cache"):
        got = report.cosim.outputs[name]
        np.testing.assert_array_equal(got.view(np.uint16), want[name].view(np.uint16))
    assert report.rtl_profile_cycles == report.rtl_cycles, str(report)
    assert report.divergence is None and report.compared_streams > 0, str(report)


def test_hier_tiled_fixed_point_swiglu_matches_interpreter():
    """The Q8.8 int16 SwiGLU with ``K = 8`` on ``4 x 4`` hardware tiles: every K split is an
    Accum of ``matmul_sum`` (the exact int32 sum, rounded once per big tile), the down
    projection's big tiles added by a held ``accum_add``; outputs equal bit for bit and the rtl
    profile cycle-exact (one build)."""
    from step_hw.config import HwConfig

    hw = HwConfig(tile_rows=4, tile_cols=4, lanes=16)
    size = swiglu.SwiGLUConfig(batch=16, hidden=8, intermediate=16, dtype="int16")
    graph = hier_tile(swiglu.hardware(8, 8, hw=hw, size=size), 4, 4)
    assert graph.nodes["gate"].fn.name == "matmul_sum"
    memory = swiglu.inputs(size, seed=3)
    report = cosim.validate(graph, memory, config=hw, tier="fast", tag="hier_fixed", quiet=True)
    assert report.ok, str(report)
    # every queue's handshake cycles as the RTL's (measured: 310 cycles, all 25 queues)
    assert report.rtl_profile_cycles == report.rtl_cycles, str(report)
    assert report.divergence is None and report.compared_streams > 0, str(report)


# -- dynamic tiling ---------------------------------------------------------------------------


def _dynamic_moe_case():
    """The MoE layer under dynamic tiling, time-multiplexed over two regions, with ``D = F = 8``
    on ``4 x 4`` BF16 hardware tiles: each expert's tokens packed into ``[n_e, 4]`` dynamic tiles
    of its two column blocks (``Bufferize`` of a buffer with a dynamic dim, read column block
    first with ``Streamify(order=)``), matmuls with a dynamic ``M``, the down projection's held
    accumulators of dynamic tiles, and the rows unpacked through a second permuted read. The
    routing sends no token to expert 3."""
    from examples import moe

    layer = moe.MoEConfig("hwt", 8, 8, 4, 2, dtype="bfloat16")
    schedule = moe.MoESchedule("dynamic", tile_f=8, regions=2)
    graph = moe.build(layer, schedule, 8, elem_bytes=None, fns=moe.hardware_fns(HW))
    choices = np.array([[0, 1], [2, 0], [1, 2], [0, 2], [1, 0], [2, 1], [0, 1], [1, 2]])
    memory = moe.inputs(replace(layer, dtype="float32"), choices, seed=4)
    memory = {
        k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in memory.items()
    }
    memory["out"] = np.zeros((8, 8), ml_dtypes.bfloat16)
    return hier_tile(graph, 4, 4), memory


def test_hier_tiled_dynamic_moe_matches_interpreter_and_rtl_profile():
    """Outputs bit-exact against the interpreter (memories that answer at once; one build) and
    the rtl profile cycle-exact: every stream's handshakes as the RTL's (measured 2026-12-06:
    372 cycles, 166 streams; the total was exact while 90 streams differed, the first a
    paper-form Promote's output a cycle late, until its skid register was modelled, and 381
    while the interpreter's Partition forwarded whole chunks)."""
    graph, memory = _dynamic_moe_case()
    want = interpret(graph, {k: v.copy() for k, v in memory.items()}).memory["out"]
    report = cosim.validate(graph, memory, config=HW, tier="fast", tag="hier_moe_dyn", quiet=True)
    assert report.ok, str(report)
    got = report.cosim.outputs["out"]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert report.rtl_profile_cycles == report.rtl_cycles, str(report)
    assert report.divergence is None and report.compared_streams > 0, str(report)
