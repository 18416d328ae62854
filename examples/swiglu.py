"""The SwiGLU layer of the paper's HDL validation, as a STeP graph.

``out = (silu(x @ Wg) * (x @ Wu)) @ Wd`` with ``x: [B, H]``, ``Wg, Wu: [H, I]``, ``Wd: [I, H]``
(batch 64, hidden 256, intermediate 512 by default: the paper's "32x scaled down" layer).

Schedule "mn_mk" (STEP_REFERENCE §6): gate and up tile the batch (``M = tile_b``) and the
intermediate dim (``N = tile_i``) with the hidden dim untiled; the down projection tiles ``M``
and ``K = tile_i`` with ``N = H`` untiled. Nothing is reused on chip: the input is re-read for
every N tile and the weights for every M tile (stride-0 reads), so off-chip traffic falls as
tiles grow. The paper's sweep is ``tile_b in {16, 32, 64}`` x ``tile_i in {16, ..., 256}``.

Run ``python -m examples.swiglu`` to print the symbolic metrics of the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from examples.checks import dtype_name, positive_int  # absolute: also as a script
from step_lang import Accum, Graph, LinearOffChipLoad, LinearOffChipStore, Map, metrics
from step_lang import functions as F
from step_lang.types import numpy_dtype

__all__ = ["SWEEP", "TILED_SIZE", "TILED_TILINGS", "SwiGLUConfig", "build", "hardware_tiled",
           "inputs", "reference"]  # fmt: skip

SWEEP = [(b, i) for b in (16, 32, 64) for i in (16, 32, 64, 128, 256)]


@dataclass(frozen=True)
class SwiGLUConfig:
    """Layer sizes (positive integers) and element type (a ``step_lang`` dtype name)."""

    batch: int = 64
    hidden: int = 256
    intermediate: int = 512
    dtype: str = "float32"

    def __post_init__(self):
        for name in ("batch", "hidden", "intermediate"):
            # frozen: set the checked value (a numpy integer becomes an int)
            object.__setattr__(
                self, name, positive_int(f"SwiGLUConfig.{name}", getattr(self, name))
            )
        dtype_name("SwiGLUConfig.dtype", self.dtype)


def build(
    config: SwiGLUConfig = SwiGLUConfig(), tile_b: int = 16, tile_i: int = 16, *, fns: Any = None
) -> Graph:
    """The SwiGLU graph with batch tile ``tile_b`` and intermediate tile ``tile_i``.

    ``fns`` supplies ``matmul``, ``silu``, ``mul`` and ``matmul_acc`` (default: the float
    functions of ``step_lang.functions``; :func:`hardware` uses the fixed-point ones).
    """
    c = config
    if not isinstance(c, SwiGLUConfig):
        raise TypeError(f"swiglu.build: config must be a SwiGLUConfig, not {c!r}")
    tile_b = positive_int("swiglu.build: tile_b", tile_b)
    tile_i = positive_int("swiglu.build: tile_i", tile_i)
    fns = fns or SimpleNamespace(
        matmul=F.matmul(), silu=F.silu, mul=F.mul, matmul_acc=F.matmul_acc()
    )
    if c.batch % tile_b or c.intermediate % tile_i:
        raise ValueError(
            f"tiles must divide the layer: batch {c.batch} by tile_b {tile_b}, "
            f"intermediate {c.intermediate} by tile_i {tile_i}"
        )
    nb, ni = c.batch // tile_b, c.intermediate // tile_i
    g = Graph(f"swiglu_b{tile_b}_i{tile_i}")
    x = g.tensor("x", (c.batch, c.hidden), c.dtype)
    wg = g.tensor("w_gate", (c.hidden, c.intermediate), c.dtype)
    wu = g.tensor("w_up", (c.hidden, c.intermediate), c.dtype)
    wd = g.tensor("w_down", (c.intermediate, c.hidden), c.dtype)
    out = g.tensor("out", (c.batch, c.hidden), c.dtype)

    # [1, nb, ni]: row block m of x for every (m, n); column block n of the weights.
    xs = LinearOffChipLoad(
        x, tile=(tile_b, c.hidden), out_shape=(nb, ni), stride=(1, 0), name="load_x"
    ).out
    gs = LinearOffChipLoad(
        wg, tile=(c.hidden, tile_i), out_shape=(nb, ni), stride=(0, 1), name="load_gate"
    ).out
    us = LinearOffChipLoad(
        wu, tile=(c.hidden, tile_i), out_shape=(nb, ni), stride=(0, 1), name="load_up"
    ).out
    gate = Map(xs, gs, fn=fns.matmul, name="gate").out
    up = Map(xs, us, fn=fns.matmul, name="up").out
    act = Map(gate, fn=fns.silu, name="silu").out
    h = Map(act, up, fn=fns.mul, name="mul").out
    # Down projection: K = tile_i, reduced over the ni tiles of each row block.
    ds = LinearOffChipLoad(
        wd, tile=(tile_i, c.hidden), out_shape=(nb, ni), stride=(0, 1), name="load_down"
    ).out
    y = Accum(h, ds, fn=fns.matmul_acc, rank=1, name="down").out
    LinearOffChipStore(y, out, name="store")
    return g


HW_CONFIG = SwiGLUConfig(batch=8, hidden=4, intermediate=8, dtype="int16")
"""The hardware-size layer: int16 Q8.8 fixed point in 4x4 tiles (``step_hw.HwConfig()``)."""


def hardware(
    tile_b: int = 4, tile_i: int = 4, hw: Any = None, size: SwiGLUConfig | None = None
) -> Graph:
    """The layer at hardware size with the hardware's fixed-point arithmetic (``step_lang.numerics``).

    ``size`` overrides the layer's sizes (default :data:`HW_CONFIG`; its dtype must be the
    hardware's element type), e.g. for the tile sweeps of ``make validate``."""
    from step_hw.config import HwConfig
    from step_lang import numerics

    hw = hw or HwConfig()
    fx = numerics.functions(hw)
    fns = SimpleNamespace(
        matmul=fx.matmul_out(hw.elem_dtype),
        silu=fx.silu,
        mul=fx.mul,
        matmul_acc=fx.matmul_acc_out(hw.elem_dtype),
    )
    return build(size or replace(HW_CONFIG, dtype=hw.elem_dtype), tile_b, tile_i, fns=fns)


def hardware_tiled(
    tile_b: int, tile_i: int, hw_tile: int, *, hw: Any = None, size: SwiGLUConfig | None = None
) -> Graph:
    """:func:`hardware` with ``tile_b x tile_i`` tiles split onto ``hw_tile x hw_tile``
    hardware tiles (``step_lang.hier_tiling.hier_tile``), as the paper's Fig. 8 runs on 16 x 16."""
    from step_lang.hier_tiling import hier_tile

    return hier_tile(hardware(tile_b, tile_i, hw=hw, size=size), hw_tile, hw_tile)


#: A small layer and tilings of it on 4 x 4 hardware tiles (``hardware_tiled(b, i, 4,
#: size=TILED_SIZE)``) that have the same nodes: one build runs them all when their geometry is a
#: run-time setting (``HwConfig.geometry_bounds``, ``step_hw.run_time_geometry``).
TILED_SIZE = SwiGLUConfig(batch=8, hidden=8, intermediate=16, dtype="int16")
TILED_TILINGS = [(4, 8), (8, 16), (4, 16)]


def inputs(config: SwiGLUConfig = SwiGLUConfig(), seed: int = 0) -> dict[str, np.ndarray]:
    """Random activations and weights (scaled to keep activations in a useful range)."""
    if not isinstance(config, SwiGLUConfig):
        raise TypeError(f"swiglu.inputs: config must be a SwiGLUConfig, not {config!r}")
    rng = np.random.default_rng(seed)
    c = config
    dt = numpy_dtype(c.dtype)  # bfloat16 included (ml_dtypes)
    if np.issubdtype(dt, np.integer):  # fixed point Q8.8: values of a few units
        return {
            k: rng.integers(-256, 256, shape).astype(dt)
            for k, shape in (("x", (c.batch, c.hidden)), ("w_gate", (c.hidden, c.intermediate)),
                             ("w_up", (c.hidden, c.intermediate)), ("w_down", (c.intermediate, c.hidden)))
        }  # fmt: skip
    return {
        "x": rng.standard_normal((c.batch, c.hidden)).astype(dt),
        "w_gate": (rng.standard_normal((c.hidden, c.intermediate)) / np.sqrt(c.hidden)).astype(dt),
        "w_up": (rng.standard_normal((c.hidden, c.intermediate)) / np.sqrt(c.hidden)).astype(dt),
        "w_down": (
            rng.standard_normal((c.intermediate, c.hidden)) / np.sqrt(c.intermediate)
        ).astype(dt),
    }


def reference(memory: dict[str, np.ndarray]) -> np.ndarray:
    """Plain numpy SwiGLU."""
    x = memory["x"].astype(np.float64)
    gate = x @ memory["w_gate"]
    up = x @ memory["w_up"]
    h = gate / (1 + np.exp(-gate)) * up
    return h @ memory["w_down"]


def main() -> None:
    print(
        f"{'tile_b':>6} {'tile_i':>6} {'off-chip MB':>12} {'on-chip KB (paper)':>19} {'GFLOP':>7}"
    )
    for tb, ti in SWEEP:
        m = metrics(build(SwiGLUConfig(), tb, ti), "paper")
        print(
            f"{tb:>6} {ti:>6} {m.offchip_bytes / 1e6:>12.3f} {m.onchip_bytes / 1e3:>19.1f} {m.flops / 1e9:>7.3f}"
        )


if __name__ == "__main__":
    main()
