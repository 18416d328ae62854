"""Decode attention with a KV cache: numerics of every schedule, the append, masking, costs."""

from __future__ import annotations

import os
import pathlib
from dataclasses import replace

import numpy as np
import pytest
import sympy as sp

from examples import attention, traces
from step_lang import FixedOrder, LowestIndexFirst, RandomArrival, RoundRobin, interpret, metrics

C = attention.SMALL  # head_dim 8, kv_tile 4, max_len 32
assert (C.head_dim, C.kv_tile, C.max_len) == (8, 4, 32)
# 0: empty cache, the new token opens tile 0; 3, 7, 31: the new token fills the last row of a tile
# (31: of the whole cache block); 4, 16: a full cache, the new token opens a new tile;
# 13, 22: in the middle of a tile.
KV = np.array([0, 3, 4, 31, 7, 16, 13, 22])
B = len(KV)
POLICIES = [LowestIndexFirst(), RoundRobin(), RandomArrival(0), RandomArrival(1), RandomArrival(7)]


def _run(schedule: str, memory, regions: int = 4, **kw):
    return interpret(attention.build(C, schedule, B, regions), memory, **kw)


@pytest.fixture(scope="module")
def case():
    memory = attention.inputs(C, KV, seed=1)
    return memory, attention.reference(C, memory)


@pytest.fixture(scope="module")
def baseline(case):
    """The interleaved schedule's output, which every other run must equal bit for bit."""
    return _run("interleaved", case[0]).memory


def _check(memory_after, want, baseline=None):
    assert np.allclose(memory_after["out"], want["out"], rtol=1e-5, atol=1e-6)
    # The append writes exactly one row per request; nothing else in the caches may change.
    assert np.array_equal(memory_after["k_cache"], want["k_cache"])
    assert np.array_equal(memory_after["v_cache"], want["v_cache"])
    if baseline is not None:
        assert np.array_equal(memory_after["out"], baseline["out"])


@pytest.mark.parametrize("regions", [1, 2, 4])
@pytest.mark.parametrize("schedule", attention.SCHEDULES)
def test_schedule_matches_reference(schedule, regions, case, baseline):
    memory, want = case
    r = _run(schedule, memory, regions)
    _check(r.memory, want, baseline)
    assert r.written == {"out", "k_cache", "v_cache"}
    for name in ("q", "k_new", "v_new", "req_idx", "n_tiles", "offset"):
        assert np.array_equal(r.memory[name], memory[name])


def test_reference_appends_and_normalises(case):
    memory, want = case
    ml = C.max_len
    for b, n in enumerate(KV):
        assert np.array_equal(want["k_cache"][b * ml + n], memory["k_new"][b])
        assert np.array_equal(want["v_cache"][b * ml + n], memory["v_new"][b])
    # A request with an empty cache attends to its new token only: the output is its value row.
    assert np.allclose(want["out"][0], memory["v_new"][0], rtol=1e-6)


@pytest.mark.parametrize(
    "policy", POLICIES, ids=lambda p: f"{type(p).__name__}{getattr(p, 'seed', '')}"
)
def test_dynamic_is_arrival_independent(policy, case, baseline):
    memory, want = case
    r = _run("dynamic", memory, merge_policy=policy)
    _check(r.memory, want, baseline)
    counts = [r.bindings.values()[f"dispatch_n{i:03d}"] for i in range(4)]
    assert sum(counts) == B


def test_dynamic_dispatch_follows_completion_signals(case, baseline):
    memory, want = case
    # Availability taken in the order seed 0, then only fed-back signals: region 0 finishes each
    # request before the next is dispatched, so it serves the whole batch and 1..3 stay idle.
    hog = _run("dynamic", memory, merge_policy={"merge_free": FixedOrder([0] + [1] * (B - 1))})
    _check(hog.memory, want, baseline)
    assert [hog.bindings.values()[f"dispatch_n{i:03d}"] for i in range(4)] == [B, 0, 0, 0]
    # Every region starts with one request; then only region 0's completions are merged first.
    first = _run("dynamic", memory, merge_policy={"merge_done": FixedOrder([0] * (B - 4))})
    _check(first.memory, want, baseline)
    assert [first.bindings.values()[f"dispatch_n{i:03d}"] for i in range(4)] == [B - 3, 1, 1, 1]


@pytest.mark.parametrize("schedule", attention.SCHEDULES)
def test_padding_rows_do_not_matter(schedule, case, baseline):
    memory, _ = case
    # Stale rows at and past L (row L is overwritten by the append) get huge values: an unmasked
    # padding row would turn the output into inf/NaN, a masked one leaves it bit-identical.
    noisy = dict(memory)
    ml = C.max_len
    stale = (np.arange(B * ml) % ml >= np.repeat(KV, ml))[:, None]
    for name in ("k_cache", "v_cache"):
        noisy[name] = np.where(stale, np.float32(1e3), memory[name]).astype(np.float32)
    r = _run(schedule, noisy)
    assert np.array_equal(r.memory["out"], baseline["out"])
    _check(r.memory, attention.reference(C, noisy))


@pytest.mark.parametrize("schedule", attention.SCHEDULES)
def test_queue_order_does_not_change_results(schedule, case, baseline):
    memory, want = case
    shuffled = dict(
        memory, req_idx=np.array([5, 2, 7, 0, 3, 6, 1, 4], dtype=np.int64).reshape(B, 1)
    )
    _check(_run(schedule, shuffled, regions=2).memory, want, baseline)


@pytest.mark.parametrize("seed", [2, 3])
def test_random_lengths_all_schedules_identical(seed):
    kv = np.random.default_rng(seed).integers(0, C.max_len, size=B)
    memory = attention.inputs(C, kv, seed=seed)
    want = attention.reference(C, memory)
    outs = [
        _run(s, memory, regions=2, merge_policy=RandomArrival(seed)).memory
        for s in attention.SCHEDULES
    ]
    for o in outs:
        _check(o, want, outs[0])


# -- costs ----------------------------------------------------------------------------------------


def hand_offchip(
    kv: np.ndarray, schedule: str, regions: int, c: attention.AttentionConfig = C
) -> int:
    """Off-chip bytes counted from the KV lengths."""
    b = len(kv)
    tile, row = c.kv_tile * c.head_dim * 4, c.head_dim * 4
    tiles_read = int(sum(-(-(n + 1) // c.kv_tile) for n in kv))  # ceil((L + 1) / kv_tile)
    total = 3 * b * 8  # req_idx, n_tiles, offset: one int64 each per request
    total += 2 * tiles_read * tile  # K and V tiles read
    total += 2 * b * tile  # K and V: the last tile of every request written back
    total += 4 * b * row  # q, k_new, v_new read; out written
    if schedule == "dynamic":
        total += regions * 8 + (b + regions) * 1  # dispatch_seed ids, dispatch_keep flags
    return total


def hand_flops(kv: np.ndarray, c: attention.AttentionConfig = C) -> int:
    kt, hd = c.kv_tile, c.head_dim
    tiles = int(sum(n // kt + 1 for n in kv))
    per_tile = 2 * kt * hd + kt + 4 * kt + 2 * kt * hd + kt  # q·Kᵀ, +bias, exp, P·V, sum of P
    per_request = kt + hd  # row sum, division
    return tiles * per_tile + len(kv) * per_request


@pytest.mark.parametrize("regions", [2, 4])
@pytest.mark.parametrize("schedule", attention.SCHEDULES)
def test_offchip_bytes_match_hand_count(schedule, regions, case):
    memory, _ = case
    g = attention.build(C, schedule, B, regions)
    r = interpret(g, memory, merge_policy=RoundRobin())
    for convention in ("paper", "artifact"):
        m = metrics(g, convention)
        # Only regular symbols: tile counts come from the split Partitions (tiles before the
        # last, last tiles), request counts from the dynamic dispatch; static ones are numbers.
        want = {f"split{i}_n{j:03d}" for i in range(regions) for j in (0, 1)}
        if schedule == "dynamic":
            want |= {f"dispatch_n{i:03d}" for i in range(regions)}
        assert {str(s) for s in sp.sympify(m.offchip_bytes).free_symbols} == want
        assert m.evaluate(r.bindings.regular).offchip_bytes == hand_offchip(KV, schedule, regions)


def test_evaluate_with_ragged_tile_counts(case):
    memory, _ = case
    per_schedule = {}
    for schedule in attention.SCHEDULES:
        g = attention.build(C, schedule, B, 2)
        m = metrics(g, "paper")
        ev = attention.evaluate(m, g, interpret(g, memory))
        assert ev.flops == hand_flops(KV)
        assert isinstance(ev.onchip_bytes, int) and ev.onchip_bytes == m.onchip_bytes  # all static
        per_schedule[schedule] = ev
    # Coarse reads each region's block of request ids with its own load: one more double-buffered
    # [1,1] int64 tile (2 x 8 bytes) than interleaved's single shared load, with 2 regions.
    assert per_schedule["coarse"].onchip_bytes == per_schedule["interleaved"].onchip_bytes + 16


def test_symbols_read_well():
    g = attention.build(C, "dynamic", B, 2)
    m = metrics(g, "paper")
    assert sorted(map(str, m.free_symbols)) == [
        "dispatch_n000",
        "dispatch_n001",
        "split0_n000",
        "split0_n001",
        "split1_n000",
        "split1_n001",
        "tiles0_n",
        "tiles1_n",
    ]
    assert {"kload0", "klast1", "merge_free", "merge_done", "free", "cut", "dispatch"} <= set(
        g.nodes
    )


# -- a recorded batch at the paper's KV tile ------------------------------------------------------

TRACES = pathlib.Path(
    os.environ.get("STEP_TRACES", pathlib.Path(__file__).resolve().parents[2] / "shared" / "traces")
)
needs_traces = pytest.mark.skipif(
    not (TRACES / "kv_lengths").is_dir(), reason=f"KV-length traces not found at {TRACES}"
)


@needs_traces
def test_recorded_trace_at_paper_tile():
    (_, path), *_ = traces.kv_length_files(TRACES, 16)
    kv = traces.load_kv_lengths(path)
    c = replace(attention.QWEN, head_dim=4, max_len=(int(kv.max()) // 32 + 1) * 32)  # narrow rows
    memory = attention.inputs(c, kv)
    want = attention.reference(c, memory)
    outs = {}
    for schedule in ("interleaved", "dynamic"):
        g = attention.build(c, schedule, len(kv), 4)
        r = interpret(g, memory)
        assert np.allclose(r.memory["out"], want["out"], rtol=1e-4, atol=1e-6)
        assert np.array_equal(r.memory["k_cache"], want["k_cache"])
        assert metrics(g).evaluate(r.bindings.regular).offchip_bytes == hand_offchip(
            kv, schedule, 4, c
        )
        outs[schedule] = r.memory["out"]
    assert np.array_equal(outs["interleaved"], outs["dynamic"])


# -- misuse ---------------------------------------------------------------------------------------


def test_build_rejects_bad_arguments():
    with pytest.raises(
        ValueError,
        match=r"^schedule must be one of 'interleaved', 'coarse', 'dynamic', not 'greedy'$",
    ):
        attention.build(C, "greedy", 8)
    with pytest.raises(
        ValueError, match=r"^coarse schedule: regions \(3\) must divide batch \(8\)$"
    ):
        attention.build(C, "coarse", 8, 3)
    with pytest.raises(
        ValueError,
        match=r"^regions \(5\) must not exceed batch \(4\): a region would never get a request$",
    ):
        attention.build(C, "dynamic", 4, 5)
    with pytest.raises(ValueError, match=r"^batch must be a positive integer, not 0$"):
        attention.build(C, "interleaved", 0)
    with pytest.raises(ValueError, match=r"^regions must be a positive integer, not True$"):
        attention.build(C, "interleaved", 8, True)
    with pytest.raises(TypeError, match=r"^config must be an AttentionConfig, not 'small'$"):
        attention.build("small", "interleaved", 8)


def test_config_and_inputs_reject_bad_values():
    with pytest.raises(
        ValueError, match=r"^AttentionConfig.max_len \(30\) must be a multiple of kv_tile \(4\)$"
    ):
        attention.AttentionConfig(head_dim=8, kv_tile=4, max_len=30)
    with pytest.raises(
        ValueError, match=r"^AttentionConfig.kv_tile must be a positive integer, not 0$"
    ):
        attention.AttentionConfig(head_dim=8, kv_tile=0, max_len=32)
    with pytest.raises(
        ValueError, match=r"^AttentionConfig.dtype must be a float type, not 'int32'$"
    ):
        attention.AttentionConfig(head_dim=8, kv_tile=4, max_len=32, dtype="int32")
    with pytest.raises(
        ValueError, match=r"^KV length 32 outside \[0, 31\] \(max_len 32, room for the new token\)$"
    ):
        attention.inputs(C, [3, 32])
    with pytest.raises(
        ValueError, match=r"^kv_lengths must be a non-empty 1-D integer array, got float64 \(2,\)$"
    ):
        attention.inputs(C, [1.0, 2.0])
