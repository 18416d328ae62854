"""MoE example: numerics of every schedule, and the paper's memory ratios (Fig. 9/10)."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

from examples import moe, traces
from step_lang import LowestIndexFirst, RandomArrival, RoundRobin, interpret, metrics

SMALL = moe.SMALL
BATCH = 12
SCHEDULES = [
    moe.MoESchedule("static", tile_n=2, tile_f=16),
    moe.MoESchedule("static", tile_n=4, tile_f=32),
    moe.MoESchedule("dynamic", tile_f=16),
    moe.MoESchedule("static", tile_n=3, tile_f=16, regions=2),
    moe.MoESchedule("dynamic", tile_f=16, regions=2),
    moe.MoESchedule("dynamic", tile_f=32, regions=1),
]


def _choices(seed: int, skew: float) -> np.ndarray:
    return traces.synthetic_routing(BATCH, SMALL.experts, SMALL.top_k, skew=skew, seed=seed)


@pytest.fixture(scope="module")
def skewed():
    """A routing where some expert receives no token at all."""
    choices = np.array([[0, 1]] * 7 + [[1, 2]] * 5)
    mem = moe.inputs(SMALL, choices, seed=3)
    return choices, mem, moe.reference(SMALL, mem)


@pytest.mark.parametrize(
    "schedule",
    SCHEDULES,
    ids=lambda s: f"{s.tiling}{s.tile_n if s.tiling == 'static' else ''}_f{s.tile_f}_r{s.regions}",
)
def test_schedule_matches_numpy(schedule, skewed):
    choices, mem, want = skewed
    g = moe.build(SMALL, schedule, BATCH)
    r = interpret(g, mem)
    assert np.allclose(r.memory["out"], want, rtol=1e-4, atol=1e-5)
    counts = np.bincount(choices.reshape(-1), minlength=SMALL.experts)
    assert counts[3] == 0
    assert {k: v for k, v in r.bindings.values().items() if k.startswith("route_n")} == {
        f"route_n{e:03d}": int(n) for e, n in enumerate(counts)
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_all_schedules_identical(seed):
    choices = _choices(seed, skew=1.5)
    mem = moe.inputs(SMALL, choices, seed=seed)
    outs = {s: interpret(moe.build(SMALL, s, BATCH), mem).memory["out"] for s in SCHEDULES}
    # The same intermediate tile means the same reduction order: bit-identical results, whatever
    # the token tiling (static, dynamic) or mapping (dedicated, time-multiplexed).
    for tile_f in (16, 32):
        group = [o for s, o in outs.items() if s.tile_f == tile_f]
        assert len(group) >= 2
        for o in group[1:]:
            assert np.array_equal(o, group[0])
    for o in outs.values():
        assert np.allclose(o, moe.reference(SMALL, mem), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", [LowestIndexFirst(), RoundRobin(), RandomArrival(7)], ids=type)
def test_time_multiplexing_is_arrival_independent(policy):
    choices = _choices(4, skew=0.5)
    mem = moe.inputs(SMALL, choices, seed=4)
    g = moe.build(SMALL, moe.MoESchedule("static", tile_n=2, tile_f=16, regions=2), BATCH)
    base = interpret(moe.build(SMALL, SCHEDULES[0], BATCH), mem).memory["out"]
    assert np.array_equal(interpret(g, mem, merge_policy=policy).memory["out"], base)


def test_metrics_substitute_trace_counts():
    choices = _choices(5, skew=1.0)
    g = moe.build(SMALL, moe.MoESchedule("dynamic", tile_f=16), BATCH)
    r = interpret(g, moe.inputs(SMALL, choices))
    m = metrics(g, "artifact")
    by_run = m.evaluate(r.bindings.regular)
    by_trace = m.evaluate(moe.dim_values(choices, SMALL.experts))
    assert by_run.onchip_bytes == by_trace.onchip_bytes and isinstance(by_run.onchip_bytes, int)
    assert by_run.offchip_bytes == by_trace.offchip_bytes


def test_bad_schedules_are_rejected():
    with pytest.raises(ValueError, match=r"^regions 3 must divide the 4 experts$"):
        moe.build(SMALL, moe.MoESchedule("static", 2, 16, regions=3), BATCH)
    with pytest.raises(ValueError, match=r"^tiling must be 'static' or 'dynamic', not 'adaptive'$"):
        moe.build(SMALL, moe.MoESchedule("adaptive"), BATCH)
    with pytest.raises(ValueError, match=r"^tile_f 24 must divide the intermediate size 64$"):
        moe.build(SMALL, moe.MoESchedule("static", 2, 24), BATCH)
    with pytest.raises(ValueError, match=r"^construction must be one of ours, artifact, not 'x'$"):
        moe.build(SMALL, moe.MoESchedule("dynamic", tile_f=16, construction="x"), BATCH)


@pytest.mark.parametrize("tiling", ["dynamic", "static"])
@pytest.mark.parametrize("regions", [SMALL.experts, 2, 1])
def test_artifact_construction(tiling, regions, skewed):
    """The authors' time-multiplexed graph computes the same layer; one expert per region is
    their baseline, the layer without multiplexing."""
    _, mem, want = skewed
    s = moe.MoESchedule(tiling, tile_n=2, tile_f=16, regions=regions, construction="artifact")
    g = moe.build(SMALL, s, BATCH)
    assert g.name.endswith("_artifact")
    base = interpret(moe.build(SMALL, moe.MoESchedule(tiling, 2, 16), BATCH), mem).memory["out"]
    out = interpret(g, mem).memory["out"]
    assert np.array_equal(out, base) and np.allclose(out, want, rtol=1e-4, atol=1e-5)
    merges = [n for n in g.nodes.values() if n.kind == "EagerMerge"]
    assert len(merges) == (0 if regions == SMALL.experts else regions)
    assert any(n.startswith("round") for n in g.nodes) == (tiling == "dynamic")
    assert s.multiplexed_regions(SMALL) == (None if regions == SMALL.experts else regions)


# -- the paper's memory figures -----------------------------------------------------------------

TRACES = pathlib.Path(
    os.environ.get("STEP_TRACES", pathlib.Path(__file__).resolve().parents[2] / "shared" / "traces")
)
needs_traces = pytest.mark.skipif(
    not (TRACES / "expert_routing").is_dir(), reason=f"routing traces not found at {TRACES}"
)


def _onchip(cfg: moe.MoEConfig, batch: int, schedule: moe.MoESchedule, choices: np.ndarray) -> int:
    m = metrics(moe.build(cfg, schedule, batch), "artifact").evaluate(
        moe.dim_values(choices, cfg.experts)
    )
    return m.onchip_bytes


# (model, batch, static tile, expected dynamic-vs-static ratio): >1 means dynamic uses less memory.
PAPER_RATIOS = [
    ("mixtral", 64, 16, 1.0),  # Fig. 9: equal to tile 16
    ("mixtral", 64, 32, 1.33),  # 1.33x less than tile 32
    ("qwen", 64, 8, 2.1),  # 2.1x less than tile 8
    ("qwen", 64, 64, 5.05),  # 5.05x less than tile 64
    ("mixtral", 1024, 256, 1.0),  # Fig. 10: equal to tile 256
    ("mixtral", 1024, 128, 1 / 1.79),  # 1.79x more than tile 128
    ("qwen", 1024, 64, 1.13),  # 1.13x less than tile 64
    ("qwen", 1024, 1024, 12.5),  # 12.5x less than tile 1024
]


@needs_traces
@pytest.mark.parametrize(("model", "batch", "tile", "ratio"), PAPER_RATIOS)
def test_paper_memory_ratios(model, batch, tile, ratio):
    cfg = {"mixtral": moe.MIXTRAL, "qwen": moe.QWEN}[model]
    (path,) = traces.routing_files(TRACES, model, batch)
    choices = traces.load_routing(path, cfg.experts)
    static = _onchip(cfg, batch, moe.MoESchedule("static", tile_n=tile), choices)
    dynamic = _onchip(cfg, batch, moe.MoESchedule("dynamic"), choices)
    assert static / dynamic == pytest.approx(ratio, rel=0.01)
