"""The paper-scale sweeps of ``make validate``: their layers, hardware, memory and inputs.

* **fig8**: the paper's Fig. 8, a SwiGLU of 64 x 256 x 512 in BF16 on 16x16 hardware tiles
  (``step_lang.hier_tiling.hier_tile``), ``tile_b x tile_i`` as the paper sweeps them, with the
  paper's balance of compute to off-chip bandwidth scaled down by :data:`FIG8_SCALE`; the 14
  tilings with the same nodes run on one build, their geometry a run-time setting
  (``HwConfig.geometry_bounds``), ``16 x 16`` on its own;
* **moe_scale**: an MoE layer of 16 experts (hidden 256, intermediate 64, top-2) in BF16 on 16x16
  tiles, batches of 16 tokens routed as the recorded Qwen3-30B-A3B trace routes them
  (:func:`trace_routings`), under static tiling, dynamic tiling and time-multiplexing;
* **attention_scale**: decode attention of 16 requests at the paper's head dim and KV tile
  (``attention.PAPER_HW``) on 16x16 tiles, KV lengths from the recorded Azure traces scaled to the
  design's cache (:func:`trace_kv_batches`), under the interleaved, coarse and dynamic schedules.

Every sweep runs on the fast co-simulation tier with the HBM-like memory
(``MemoryModel.hbm()``). The recorded traces are read from ``--traces`` (default
``../shared/traces`` beside the checkout); without them the two trace-driven sweeps are skipped
and say so. The decisions are written down in ``docs/validation.md`` ("Paper scale").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from examples import swiglu
from step_hw.config import BF16_CONFIG
from step_hw.memory_model import MemoryModel

#: Where the recorded traces are unless ``--traces`` says otherwise.
DEFAULT_TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"

HW_TILE = 16

#: Fig. 8 of the paper at its size.
FIG8_LAYER = swiglu.SwiGLUConfig(batch=64, hidden=256, intermediate=512, dtype="bfloat16")
FIG8_TILES = [(b, i) for b in (16, 32, 64) for i in (16, 32, 64, 128, 256)]
#: The paper's Fig. 8 balance, 4096 FLOPs per cycle per compute node against 256 B per cycle
#: off-chip (``PaperProfile.hdl_validation()``), divided by FIG8_SCALE: 64 MAC lanes (128
#: FLOPs per cycle) per matmul unit against one 64-bit read port shared by every load, a beat
#: per cycle (8 B per cycle); stores on one write port of the same width.
FIG8_SCALE = 32
FIG8_HW = dataclasses.replace(
    BF16_CONFIG,
    tile_rows=HW_TILE,
    tile_cols=HW_TILE,
    lanes=4096 // FIG8_SCALE // 2,
    axi_ports=1,
    axi_data_width=256 // FIG8_SCALE * 8,
    # a 16x16 BF16 tile of a row-major tensor is 16 bursts of 4 beats: 16 in flight cover the
    # memory's 64-cycle latency
    max_outstanding=16,
)
#: An HBM-like memory (``MemoryModel.hbm()``): 64 cycles from a read request to its first beat
#: and from a write burst to its response, 16 requests queued per channel.
SCALE_MEMORY = MemoryModel.hbm()

#: The hardware of the trace-driven sweeps: BF16 on 16x16 tiles, the default 16 MAC lanes, a
#: port per load and store, 16 bursts in flight each (the HBM latency hidden).
SCALE_HW = dataclasses.replace(
    BF16_CONFIG, tile_rows=HW_TILE, tile_cols=HW_TILE, max_outstanding=16
)


def fig8_inputs(seed: int = 1) -> dict[str, np.ndarray]:
    """The Fig. 8 layer's activations and weights in BF16."""
    import ml_dtypes

    mem = swiglu.inputs(dataclasses.replace(FIG8_LAYER, dtype="float32"), seed=seed)
    return {k: v.astype(ml_dtypes.bfloat16) for k, v in mem.items()}


def fig8_graph(tile_b: int, tile_i: int):
    """The Fig. 8 SwiGLU with ``tile_b x tile_i`` big tiles on 16x16 hardware tiles."""
    return swiglu.hardware_tiled(tile_b, tile_i, HW_TILE, hw=FIG8_HW, size=FIG8_LAYER)


# -- MoE ------------------------------------------------------------------------------------------

#: (name, hidden, intermediate, experts, top-k) of the MoE layer at scale.
MOE_LAYER = ("scale16", 256, 64, 16, 2)
MOE_BATCH = 16
MOE_POINTS = 10  # routings (batches of MOE_BATCH tokens) per schedule
#: schedule label -> MoESchedule arguments. Static and dynamic tiling time-multiplex the 16
#: experts on 2 regions (8 each); "timemux1" puts all 16 on one region.
MOE_SCHEDULES = {
    "static_tm2": {"tiling": "static", "tile_n": 16, "tile_f": 16, "regions": 2},
    "dynamic_tm2": {"tiling": "dynamic", "tile_f": 16, "regions": 2},
    "static_tm1": {"tiling": "static", "tile_n": 16, "tile_f": 16, "regions": 1},
}
MOE_TRACE = ("qwen", 1024)


def fold_routing(choices: np.ndarray, experts: int, top_k: int) -> np.ndarray:
    """Each token's first ``top_k`` distinct experts after folding expert ``e`` onto
    ``e % experts``, in the trace's order (the router's ranking). A token with fewer distinct
    folded experts raises ``ValueError`` naming it."""
    out = np.empty((len(choices), top_k), np.int64)
    for t, row in enumerate(choices):
        seen: list[int] = []
        for e in row.tolist():
            if e % experts not in seen:
                seen.append(e % experts)
        if len(seen) < top_k:
            raise ValueError(
                f"fold_routing: token {t} has {len(seen)} distinct experts after folding onto "
                f"{experts}, top_k is {top_k}"
            )
        out[t] = seen[:top_k]
    return out


def trace_routings(traces: Path) -> dict[str, np.ndarray]:
    """:data:`MOE_POINTS` batches of :data:`MOE_BATCH` tokens: consecutive windows of the
    recorded Qwen3-30B-A3B routing (1,024 tokens, top-8 of 128 experts), folded onto 16
    experts and top-2 (:func:`fold_routing`)."""
    from examples import traces as tr

    model, batch = MOE_TRACE
    files = tr.routing_files(traces, model, batch)
    if not files:
        raise FileNotFoundError(f"no {model}_b{batch} routing trace under {traces}")
    _, _, _, experts, top_k = MOE_LAYER
    folded = fold_routing(tr.load_routing(files[0]), experts, top_k)
    return {
        f"{files[0].stem}_t{i * MOE_BATCH}": folded[i * MOE_BATCH : (i + 1) * MOE_BATCH]
        for i in range(MOE_POINTS)
    }


def moe_config(schedule: dict[str, Any]):
    """The hardware of one MoE schedule: dynamic tiles hold up to a whole batch."""
    if schedule["tiling"] == "dynamic":
        return dataclasses.replace(SCALE_HW, dyn_tile_rows=MOE_BATCH)
    return SCALE_HW


def moe_graph(schedule: dict[str, Any]):
    """The 16-expert layer under ``schedule``, hierarchically tiled onto 16x16 tiles."""
    from examples import moe
    from step_lang.hier_tiling import hier_tile

    layer = moe.MoEConfig(*MOE_LAYER, dtype="bfloat16")
    graph = moe.build(
        layer,
        moe.MoESchedule(**schedule),
        MOE_BATCH,
        elem_bytes=None,
        fns=moe.hardware_fns(moe_config(schedule)),
    )
    return hier_tile(graph, HW_TILE, HW_TILE)


def moe_inputs(choices: np.ndarray, seed: int = 1) -> dict[str, np.ndarray]:
    """The layer's memory image for ``choices`` (floats in BF16)."""
    import ml_dtypes

    from examples import moe

    mem = moe.inputs(moe.MoEConfig(*MOE_LAYER, dtype="float32"), choices, seed=seed)
    return {k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in mem.items()}


# -- decode attention ---------------------------------------------------------------------------

ATTENTION_BATCH = 16
ATTENTION_REGIONS = 2
ATTENTION_SCHEDULES = ("interleaved", "coarse", "dynamic")
#: Recorded KV lengths (Azure, batch 16: up to 7,930 tokens) divided by this, rounded, at least
#: 1: the longest then fits ``attention.PAPER_HW``'s 320-row cache (at most 319 and the new
#: token), the spread of each trace kept.
KV_SCALE = 25
ATTENTION_POINTS = 10


def scale_kv(kv: np.ndarray, max_len: int) -> np.ndarray:
    """``kv / KV_SCALE`` rounded, at least 1; a length that still does not fit ``max_len - 1``
    raises ``ValueError`` naming it (nothing is clipped)."""
    out = np.maximum(1, np.rint(np.asarray(kv) / KV_SCALE)).astype(np.int64)
    if (out >= max_len).any():
        bad = int(np.asarray(kv)[np.argmax(out)])
        raise ValueError(
            f"scale_kv: KV length {bad} / {KV_SCALE} does not fit a cache of {max_len} rows"
        )
    return out


def trace_kv_batches(traces: Path) -> dict[str, np.ndarray]:
    """:data:`ATTENTION_POINTS` batches of 16 requests: the recorded Azure KV-length traces of
    batch 16, every other one by standard deviation (from the narrowest), scaled
    (:func:`scale_kv`)."""
    from examples import attention
    from examples import traces as tr

    files = tr.kv_length_files(traces, ATTENTION_BATCH)
    if not files:
        raise FileNotFoundError(f"no batch-{ATTENTION_BATCH} KV-length traces under {traces}")
    chosen = files[::2][:ATTENTION_POINTS]
    return {
        path.stem: scale_kv(tr.load_kv_lengths(path), attention.PAPER_HW.max_len)
        for _, path in chosen
    }


def attention_graph(schedule: str):
    """Decode attention at paper tile sizes under ``schedule``, tiled onto 16x16 tiles."""
    from examples import attention
    from step_lang.hier_tiling import hier_tile

    graph = attention.hardware(
        schedule, ATTENTION_BATCH, ATTENTION_REGIONS, hw=SCALE_HW, config=attention.PAPER_HW
    )
    return hier_tile(graph, HW_TILE, HW_TILE)


def attention_inputs(kv: np.ndarray, seed: int = 1) -> dict[str, np.ndarray]:
    from examples import attention

    return attention.hardware_inputs(kv, seed=seed, hw=SCALE_HW, config=attention.PAPER_HW)
