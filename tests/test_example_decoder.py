"""The decoder layer (QKV generation, attention, MoE as one graph) against a numpy reference."""

import re

import numpy as np
import pytest

from examples import attention, decoder, traces
from step_lang import interpret

KV = np.array([3, 9, 0, 17, 5, 30, 2, 11])


@pytest.fixture(scope="module")
def memory():
    choices = traces.synthetic_routing(len(KV), decoder.SMALL.moe.experts, 2, seed=1)
    mem = decoder.inputs(decoder.SMALL, KV, choices)
    return mem, decoder.reference(decoder.SMALL, mem)


@pytest.mark.parametrize(
    "schedule",
    [
        decoder.DecoderSchedule(),  # dynamic parallelization + dynamic tiling
        decoder.DecoderSchedule("dynamic", "dynamic", moe_regions=2),  # + time-multiplexing
        decoder.DecoderSchedule("interleaved", "static", tile_n=2),  # the baseline
        decoder.DecoderSchedule("interleaved", "static", tile_n=4, distributor="shared"),
        decoder.DecoderSchedule("coarse", "static", tile_n=2, moe_regions=2),
    ],
    ids=lambda s: f"{s.label}_{s.distributor}",
)
def test_layer_matches_numpy(schedule, memory):
    mem, want = memory
    g = decoder.build(decoder.SMALL, schedule, len(KV))
    result = interpret(g, mem)
    got = result.memory["moe_out"]
    assert got.shape == (8, 16)
    assert np.abs(want).max() > 0.1  # the check is not vacuous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # the attention appended the new key row at each request's length
    k_new = mem["x"] @ mem["qkv_w_k"]
    ml = mem["attn_k_cache"].shape[0] // len(KV)
    np.testing.assert_allclose(result.memory["attn_k_cache"][3 * ml + 17], k_new[3], rtol=1e-5)


def test_one_graph_with_scoped_names():
    g = decoder.build(decoder.SMALL, decoder.DecoderSchedule(), 8)
    assert {"x", "attn_q", "attn_k_cache", "moe_out", "qkv_w_q"} <= set(g.tensors)
    assert "attn_merge_done" in g.nodes and "moe_route" in g.nodes and "qkv_q0" in g.nodes


def test_layer_graph_composes_with_the_public_name_scope():
    from step_lang import Graph

    # of Graph's methods only the public tensor() is overridden; names come from name_scope
    own = {k for k in vars(decoder._LayerGraph) if k in vars(Graph) and not k.startswith("__")}
    assert own == {"tensor"}
    g = decoder.build(decoder.SMALL, decoder.DecoderSchedule(), 8)
    assert sum(name.endswith("q") and name.startswith("attn_") for name in g.tensors) == 1
    assert g.nodes["qkv_store_q0"].tensor is g.tensors["attn_q"] and "attn_ostore0" in g.nodes


def test_allocated_compute_falls_with_time_multiplexing():
    def alloc(s):
        g = decoder.build(decoder.SMALL, s, 8)
        return decoder.allocated_compute(g, decoder.profile(g))

    full = alloc(decoder.DecoderSchedule())
    tm = alloc(decoder.DecoderSchedule(moe_regions=2))
    # 4 experts x 5 compute nodes become 2 regions x 5: 10 nodes of 4096 FLOPs/cycle fewer
    assert full - tm == 10 * 4096


def test_bad_batch_is_one_line_error():
    with pytest.raises(ValueError, match=r"^batch 6 must be a multiple of regions 4$"):
        decoder.build(decoder.SMALL, decoder.DecoderSchedule(), 6)


def test_artifact_b80_queue_and_blocks():
    q = attention.artifact_b80_queue().reshape(-1)
    assert q[:32].tolist() == [*range(16), *range(64, 80)]
    assert sorted(q.tolist()) == list(range(80))
    with pytest.raises(ValueError, match=re.escape("blocks must be 4 positive sizes")):
        attention.build(attention.SMALL, "coarse", 8, 4, blocks=(4, 4))


def test_step_example_runs_the_small_layer():
    from stepcli.registry import run_point

    row = run_point("decoder", {"model": "small", "batch": 8, "mean": 10, "sigma": 0.5})
    assert row["cycles"] > 0 and row["offchip_bytes"] > 0
    assert row["model"] == "small" and row["attention"] == "dynamic"


def test_bad_schedule_is_one_line_error():
    with pytest.raises(
        ValueError, match=r"^DecoderSchedule.attention must be one of .*, not 'eager'$"
    ):
        decoder.DecoderSchedule(attention="eager")
