"""A mixture-of-experts layer with SwiGLU experts, top-k routing and routing weights.

``out[b] = sum_{e in topk(b)} w[b, e] * SwiGLU_e(x[b])`` with ``SwiGLU_e(x) =
(silu(x @ Wg_e) * (x @ Wu_e)) @ Wd_e``. Three schedules (STEP_REFERENCE §4, §7.2, §7.3):

* ``static`` tiling: each expert's tokens are packed into ``[tile_n, D]`` tiles, the last one
  padded with zero rows (Reshape + Accum(retile_row)); padded rows are dropped after the down
  projection using Reshape's padding flags;
* ``dynamic`` tiling: Promote instead of Reshape, so one dynamically sized ``[n_e, D]`` tile
  holds all of an expert's tokens; no padding; weight staging is allocated on demand (only for
  experts that receive tokens);
* ``timemux`` (configuration time-multiplexing) with ``regions`` compute regions: the experts of
  a region share one SwiGLU pipeline; EagerMerge feeds it packed tiles from any of its experts
  and its selector drives both the weight addresses (``expert_addr`` + RandomOffChipLoad) and the
  Partition that returns results to their experts. Works with static or dynamic tiles.

``MoESchedule(construction="artifact")`` builds the time-multiplexed layer as the authors'
artifact does (``timeshare_mem_bound/``): dynamic tiles are packed by Reshape into chunks of one
row (zero padding) + Flatten + Accum(retile_row) rather than Promote + Accum, and ``regions``
equal to the number of experts (one expert per region, the "128(1)" point of their Fig. 12
sweep) is the layer without multiplexing (their baseline graph), not one merge, address
generator and partition per expert. The default, ``"ours"``, is the construction above.

Routing choices and weights live in memory: a multi-hot ``[B, E]`` token selector, a one-hot
``[B*k, E]`` selector per (token, slot) and the ``[B*k, 1]`` routing weights.

Off-chip operators take ``elem_bytes`` (default 2: the artifact's bf16 accounting of fp32 data)
while on-chip accumulators are fp32, as in the paper's figures.

Run ``python -m examples.moe`` to print symbolic metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from examples.checks import dtype_name, positive_int, positive_or_none  # absolute: also as a script
from examples.traces import (
    check_routing,
    routing_weights,
    synthetic_routing,
)
from step_lang import (
    Accum,
    EagerMerge,
    FlatMap,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    Map,
    Partition,
    Promote,
    RandomOffChipLoad,
    Reassemble,
    RepeatStatic,
    Reshape,
    RetileStreamify,
    Stream,
    metrics,
)
from step_lang import functions as F
from step_lang.types import numpy_dtype

__all__ = [
    "CONSTRUCTIONS",
    "MIXTRAL",
    "QWEN",
    "SMALL",
    "MoEConfig",
    "MoESchedule",
    "build",
    "dim_values",
    "hardware_fns",
    "inputs",
    "reference",
]


@dataclass(frozen=True)
class MoEConfig:
    """Model shape: hidden size D, expert intermediate size F, experts E, top-k (positive
    integers, ``top_k <= experts``); ``name`` names the graphs; ``dtype`` is a ``step_lang``
    dtype name."""

    name: str
    hidden: int
    intermediate: int
    experts: int
    top_k: int
    dtype: str = "float32"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"MoEConfig.name must be a non-empty string, not {self.name!r}")
        for f in ("hidden", "intermediate", "experts", "top_k"):
            # frozen: set the checked value (a numpy integer becomes an int)
            object.__setattr__(self, f, positive_int(f"MoEConfig.{f}", getattr(self, f)))
        if self.top_k > self.experts:
            raise ValueError(
                f"MoEConfig.top_k {self.top_k} must not exceed the {self.experts} experts"
            )
        dtype_name("MoEConfig.dtype", self.dtype)


MIXTRAL = MoEConfig("mixtral", 4096, 14336, 8, 2)
QWEN = MoEConfig("qwen", 2048, 768, 128, 8)
SMALL = MoEConfig("small", 16, 64, 4, 2)


@dataclass(frozen=True)
class MoESchedule:
    """How the layer is tiled and mapped.

    ``tiling`` is ``"static"`` (token tile ``tile_n``) or ``"dynamic"``; ``tile_f`` tiles the
    intermediate dim; ``regions`` (when set) time-multiplexes ``E / regions`` experts per region;
    ``construction`` is ``"ours"`` or ``"artifact"`` (the authors' time-multiplexed graph: see
    the module docstring).
    """

    tiling: str = "static"
    tile_n: int = 16
    tile_f: int = 64
    regions: int | None = None
    construction: str = "ours"

    def __post_init__(self):
        # The messages of tiling and construction predate the "MoESchedule." prefix (tests
        # anchor them).
        if self.tiling not in ("static", "dynamic"):
            raise ValueError(f"tiling must be 'static' or 'dynamic', not {self.tiling!r}")
        # frozen: set the checked values (a numpy integer becomes an int). Dynamic tiling
        # ignores tile_n: None is fine there (bench/validate.py passes it), 0 is not.
        if self.tiling == "static":
            tile_n = positive_int("MoESchedule.tile_n", self.tile_n)
        else:
            tile_n = positive_or_none("MoESchedule.tile_n", self.tile_n)
        object.__setattr__(self, "tile_n", tile_n)
        object.__setattr__(self, "tile_f", positive_int("MoESchedule.tile_f", self.tile_f))
        regions = positive_or_none("MoESchedule.regions", self.regions)
        object.__setattr__(self, "regions", regions)
        if self.construction not in CONSTRUCTIONS:
            raise ValueError(
                f"construction must be one of {', '.join(CONSTRUCTIONS)}, not {self.construction!r}"
            )

    def check(self, config: MoEConfig) -> None:
        """Refuse a schedule that does not fit ``config``: ``tile_f`` must divide the
        intermediate size and ``regions`` the experts."""
        if not isinstance(config, MoEConfig):
            raise TypeError(f"MoESchedule.check: config must be a MoEConfig, not {config!r}")
        if config.intermediate % self.tile_f:
            raise ValueError(
                f"tile_f {self.tile_f} must divide the intermediate size {config.intermediate}"
            )
        if self.regions is not None and config.experts % self.regions:
            raise ValueError(f"regions {self.regions} must divide the {config.experts} experts")

    def multiplexed_regions(self, config: MoEConfig) -> int | None:
        """The regions the graph multiplexes (None: one pipeline per expert); the artifact's
        construction builds one expert per region without multiplexing."""
        if self.construction == "artifact" and self.regions == config.experts:
            return None
        return self.regions


CONSTRUCTIONS = ("ours", "artifact")
"""How the time-multiplexed layer is built: ours, or as the authors' artifact builds it."""


FLOAT_FNS = SimpleNamespace(
    matmul=F.matmul(),
    silu=F.silu,
    mul=F.mul,
    matmul_acc=F.matmul_acc(),
    accum_add=F.accum_add,
    expert_addr=F.expert_addr,
)
"""The functions of the float layer."""

HW = MoEConfig("hw", 4, 8, 4, 2, dtype="int16")
"""The hardware-size layer: int16 Q8.8 in 4x4 tiles (``step_hw.HwConfig()``)."""


def hardware(batch: int = 8, schedule: MoESchedule | None = None, hw: Any = None) -> Graph:
    """The layer at hardware size with the hardware's arithmetic (``numerics.functions(hw)``:
    fixed point, or BF16 with ``HwConfig(elem_dtype="bfloat16")``).

    ``schedule`` defaults to static tiling with ``tile_n = tile_f = 4``; a ``tile_f`` larger than
    the hardware tile's columns (``MoESchedule("dynamic")``'s default 64) is reduced to them, so
    ``hardware(schedule=MoESchedule("dynamic"))`` is the dynamic-tiling layer in hardware (each
    expert's tokens in one ``[n_e, 4]`` tile of up to ``batch`` rows, which
    ``HwConfig.dyn_tile_rows`` must hold). Time-multiplexing's addresses are
    ``numerics.expert_addr`` (int32).
    """
    from dataclasses import replace

    from step_hw.config import HwConfig

    hw = hw or HwConfig()
    schedule = schedule or MoESchedule("static", tile_n=4, tile_f=4)
    if schedule.tile_f > hw.tile_cols:
        schedule = replace(schedule, tile_f=hw.tile_cols)
    return build(
        replace(HW, dtype=hw.elem_dtype), schedule, batch, elem_bytes=None, fns=hardware_fns(hw)
    )


def hardware_fns(hw: Any) -> SimpleNamespace:
    """The functions of :func:`build` with the hardware's arithmetic (``numerics.functions(hw)``;
    time-multiplexing's addresses are ``numerics.expert_addr``, int32)."""
    from step_lang import numerics

    fx = numerics.functions(hw)
    return SimpleNamespace(
        matmul=fx.matmul_out(hw.elem_dtype),
        silu=fx.silu,
        mul=fx.mul,
        matmul_acc=fx.matmul_acc_out(hw.elem_dtype),
        accum_add=fx.accum_add,
        expert_addr=numerics.expert_addr,
    )


def _rows(load: Stream) -> Stream:
    """``[1, N, 1]`` of row tiles to ``[N]``."""
    return Flatten(load, 0, 2).out


def build(
    config: MoEConfig,
    schedule: MoESchedule,
    batch: int,
    *,
    elem_bytes: int | None = 2,
    fns: Any = None,
    graph: Graph | None = None,
    x_rows: Stream | None = None,
) -> Graph:
    """The MoE layer for ``batch`` tokens under ``schedule``.

    ``fns`` supplies ``matmul``, ``silu``, ``mul``, ``matmul_acc``, ``accum_add`` and optionally
    ``expert_addr`` (default: the float functions of ``step_lang.functions``; :func:`hardware`
    uses the fixed-point ones). ``graph`` adds the layer to an existing graph and ``x_rows``
    (a ``[batch]`` stream of ``[1, D]`` rows) replaces the read of the ``x`` tensor, which is then
    not declared (``examples.decoder`` feeds the attention's output).
    """
    c, s = config, schedule
    if not isinstance(s, MoESchedule):
        raise TypeError(f"moe.build: schedule must be a MoESchedule, not {s!r}")
    s.check(c)
    batch = positive_int("moe.build: batch", batch)
    fx = fns or FLOAT_FNS
    D, Fdim, E, k, tf = c.hidden, c.intermediate, c.experts, c.top_k, s.tile_f
    nf = Fdim // tf
    dyn = s.tiling == "dynamic"
    artifact = s.construction == "artifact"
    regions = s.multiplexed_regions(c)
    name = (
        f"moe_{c.name}_{s.tiling}"
        + (f"{s.tile_n}" if not dyn else "")
        + (f"_tm{s.regions}" if s.regions else "")
        + ("_artifact" if artifact else "")
    )
    g = graph if graph is not None else Graph(name)
    x_t = g.tensor("x", (batch, D), c.dtype) if x_rows is None else None
    sel_t = g.tensor("token_sel", (batch, E), "int32")
    slot_sel_t = g.tensor("slot_sel", (batch * k, E), "int32")
    w_t = g.tensor("route_w", (batch * k, 1), c.dtype)
    wg_t = g.tensor("w_gate", (E, D, Fdim), c.dtype)
    wu_t = g.tensor("w_up", (E, D, Fdim), c.dtype)
    wd_t = g.tensor("w_down", (E, Fdim, D), c.dtype)
    out_t = g.tensor("out", (batch, D), c.dtype)

    if x_rows is None:
        rows = _rows(LinearOffChipLoad(x_t, tile=(1, D), elem_bytes=elem_bytes, name="load_x").out)
    else:
        rows = x_rows
    # Routing and gathering read the token selector separately: gathering runs far behind routing
    # (an expert's tile closes only when its last token arrives), and one shared stream would make
    # routing wait for gathering.
    sel_raw = _rows(LinearOffChipLoad(sel_t, tile=(1, E), name="load_sel").out)
    sel = Map(sel_raw, fn=F.to_selector(E), name="token_sel").out
    gather_raw = _rows(LinearOffChipLoad(sel_t, tile=(1, E), name="load_gather_sel").out)
    gather_sel = Map(gather_raw, fn=F.to_selector(E), name="gather_sel").out
    slot_raw = _rows(LinearOffChipLoad(slot_sel_t, tile=(1, E), name="load_slot_sel").out)
    slot_sel = Map(slot_raw, fn=F.to_selector(E), name="slot_sel").out
    weights = _rows(LinearOffChipLoad(w_t, tile=(1, 1), elem_bytes=elem_bytes, name="load_w").out)

    per_expert = Partition(rows, sel, 0, name="route").outputs
    per_expert_w = Partition(weights, slot_sel, 0, name="wroute").outputs

    packed: list[Stream] = []
    pad_masks: list[Stream | None] = []
    for e, xs in enumerate(per_expert):
        if dyn:
            if artifact:  # rows rounded to chunks of one (no padding) and flattened back
                one = Reshape(xs, 1, pad=np.zeros((1, D), numpy_dtype(c.dtype)), name=f"round{e}")
                xs = Flatten(one.outputs[0], 0, 1, name=f"round_flat{e}").out
            grouped = Promote(xs, name=f"promote{e}").out
            pad_masks.append(None)
        else:
            r = Reshape(
                xs,
                s.tile_n,
                pad=np.zeros((1, D), numpy_dtype(c.dtype)),
                pad_flags=True,
                name=f"chunk{e}",
            )
            grouped = r.outputs[0]
            pad_masks.append(Accum(r.outputs[1], fn=F.retile_row, rank=1, name=f"padmask{e}").out)
        packed.append(Accum(grouped, fn=F.retile_row, rank=1, name=f"pack{e}").out)

    if regions is None:
        outs = [
            _expert(g, e, packed[e], (wg_t, wu_t, wd_t), nf, tf, D, dyn, elem_bytes, fx)
            for e in range(E)
        ]
    else:
        outs = [None] * E
        group = E // regions
        for r in range(regions):
            experts = list(range(r * group, (r + 1) * group))
            ys = _region(
                g,
                r,
                [packed[e] for e in experts],
                experts[0],
                (wg_t, wu_t, wd_t),
                nf,
                tf,
                D,
                elem_bytes,
                fx,
            )
            for e, y in zip(experts, ys, strict=True):
                outs[e] = y

    scaled = []
    for e in range(E):
        rows_e = RetileStreamify(outs[e], is_pad=pad_masks[e], name=f"unpack{e}").out
        scaled.append(Map(rows_e, per_expert_w[e], fn=fx.mul, name=f"scale{e}").out)
        # Gathering takes rows in token order, so one expert's results wait for another's: its
        # queue holds up to every token of the batch (one expert may receive them all). The
        # routing weights wait for the expert's results the same way.
        g.set_queue_depth(scaled[-1], batch)
        g.set_queue_depth(per_expert_w[e], batch)
    gathered = Reassemble(scaled, gather_sel, count=k, name="gather").out
    combined = Accum(gathered, fn=fx.accum_add, rank=1, name="combine").out
    LinearOffChipStore(combined, out_t, name="store")
    return g


def _expert(
    g: Graph, e: int, packed: Stream, weights, nf: int, tf: int, D: int, dyn: bool, elem_bytes, fx
) -> Stream:
    """One expert's SwiGLU on its packed token tiles: ``[T] -> [T]`` of ``[rows, D]`` tiles."""
    wg_t, wu_t, wd_t = weights
    rep = RepeatStatic(packed, nf, name=f"repeat{e}").out
    opts = {
        "ref": packed,
        "out_shape": (nf,),
        "stride": (1,),
        "base": e * nf,
        "elem_bytes": elem_bytes,
        "on_demand": dyn,
    }
    wg = LinearOffChipLoad(wg_t, tile=(D, tf), name=f"load_gate{e}", **opts).out
    wu = LinearOffChipLoad(wu_t, tile=(D, tf), name=f"load_up{e}", **opts).out
    wd = LinearOffChipLoad(wd_t, tile=(tf, D), name=f"load_down{e}", **opts).out
    return _swiglu(f"{e}", rep, wg, wu, wd, fx)


def _swiglu(tag: str, rep: Stream, wg: Stream, wu: Stream, wd: Stream, fx: Any) -> Stream:
    gate = Map(rep, wg, fn=fx.matmul, name=f"gate{tag}").out
    up = Map(rep, wu, fn=fx.matmul, name=f"up{tag}").out
    h = Map(Map(gate, fn=fx.silu, name=f"silu{tag}").out, up, fn=fx.mul, name=f"mul{tag}").out
    return Accum(h, wd, fn=fx.matmul_acc, rank=1, name=f"down{tag}").out


def _region(
    g: Graph,
    r: int,
    packed: list[Stream],
    first: int,
    weights,
    nf: int,
    tf: int,
    D: int,
    elem_bytes,
    fx,
) -> list[Stream]:
    """A time-multiplexed region: the experts ``first..`` share one SwiGLU pipeline."""
    wg_t, wu_t, wd_t = weights
    merge = EagerMerge(packed, name=f"merge{r}")
    data, which = merge.outputs
    addr = FlatMap(
        Promote(which, 0, name=f"slot{r}").out,
        fn=getattr(fx, "expert_addr", F.expert_addr)(nf, base=first * nf),
        name=f"addr{r}",
    ).out
    wg = RandomOffChipLoad(
        addr, wg_t, tile=(D, tf), elem_bytes=elem_bytes, name=f"load_gate_r{r}"
    ).out
    wu = RandomOffChipLoad(
        addr, wu_t, tile=(D, tf), elem_bytes=elem_bytes, name=f"load_up_r{r}"
    ).out
    wd = RandomOffChipLoad(
        addr, wd_t, tile=(tf, D), elem_bytes=elem_bytes, name=f"load_down_r{r}"
    ).out
    rep = RepeatStatic(data, nf, name=f"repeat_r{r}").out
    y = _swiglu(f"_r{r}", rep, wg, wu, wd, fx)
    return Partition(y, which, 0, name=f"unmerge{r}").outputs


def inputs(config: MoEConfig, choices: np.ndarray, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Memory for the layer: activations, routing tensors from ``choices`` ([B, k]), weights."""
    c = config
    if not isinstance(c, MoEConfig):
        raise TypeError(f"moe.inputs: config must be a MoEConfig, not {c!r}")
    choices = check_routing(choices, c.experts, c.top_k, what="moe.inputs: choices")
    batch, k = choices.shape
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(c.dtype)
    # Routing weights in slot order; the graph consumes them per expert in token order.
    w = routing_weights(choices, seed=seed)
    if np.issubdtype(dt, np.integer):  # fixed point Q8.8
        return {
            "x": rng.integers(-256, 256, (batch, c.hidden)).astype(dt),
            **routing_tensors(c, choices),
            "route_w": np.rint(w.reshape(batch * k, 1) * 256).astype(dt),
            "w_gate": rng.integers(-128, 128, (c.experts, c.hidden, c.intermediate)).astype(dt),
            "w_up": rng.integers(-128, 128, (c.experts, c.hidden, c.intermediate)).astype(dt),
            "w_down": rng.integers(-128, 128, (c.experts, c.intermediate, c.hidden)).astype(dt),
        }
    return {
        "x": rng.standard_normal((batch, c.hidden)).astype(dt),
        **routing_tensors(c, choices),
        "route_w": w.reshape(batch * k, 1).astype(dt),
        "w_gate": (
            rng.standard_normal((c.experts, c.hidden, c.intermediate)) / np.sqrt(c.hidden)
        ).astype(dt),
        "w_up": (
            rng.standard_normal((c.experts, c.hidden, c.intermediate)) / np.sqrt(c.hidden)
        ).astype(dt),
        "w_down": (
            rng.standard_normal((c.experts, c.intermediate, c.hidden)) / np.sqrt(c.intermediate)
        ).astype(dt),
    }


def routing_tensors(config: MoEConfig, choices: np.ndarray) -> dict[str, np.ndarray]:
    """The integer routing tensors for ``choices`` ([B, k]): all a timing-only simulation needs.

    ``token_sel`` is the multi-hot ``[B, E]`` token selector, ``slot_sel`` the one-hot
    ``[B*k, E]`` selector of each (token, slot). ``choices`` must pass :func:`~examples.traces.check_routing`.
    """
    if not isinstance(config, MoEConfig):
        raise TypeError(f"moe.routing_tensors: config must be a MoEConfig, not {config!r}")
    choices = check_routing(
        choices, config.experts, config.top_k, what="moe.routing_tensors: choices"
    )
    batch, k = choices.shape
    token_sel = np.zeros((batch, config.experts), np.int32)
    token_sel[np.arange(batch)[:, None], choices] = 1
    slot_sel = np.zeros((batch * k, config.experts), np.int32)
    slot_sel[np.arange(batch * k), choices.reshape(-1)] = 1
    return {"token_sel": token_sel, "slot_sel": slot_sel}


def reference(config: MoEConfig, memory: dict[str, np.ndarray]) -> np.ndarray:
    """Plain numpy MoE: weighted sum of each token's top-k expert SwiGLUs."""
    x = memory["x"].astype(np.float64)
    batch = x.shape[0]
    slots = memory["slot_sel"].reshape(batch, config.top_k, config.experts).argmax(axis=2)
    w = memory["route_w"].reshape(batch, config.top_k)
    out = np.zeros_like(x)
    for b in range(batch):
        for j, e in enumerate(slots[b]):
            gate = x[b] @ memory["w_gate"][e]
            up = x[b] @ memory["w_up"][e]
            out[b] += w[b, j] * ((gate / (1 + np.exp(-gate)) * up) @ memory["w_down"][e])
    return out


def dim_values(choices: np.ndarray, num_experts: int) -> dict[str, int]:
    """Values of the graph's routing dims (``route_nXXX``, ``wroute_nXXX``) for ``choices``
    (checked by :func:`~examples.traces.check_routing`)."""
    num_experts = positive_int("moe.dim_values: num_experts", num_experts)
    choices = check_routing(choices, num_experts, what="moe.dim_values: choices")
    counts = np.bincount(choices.reshape(-1), minlength=num_experts)
    values = {}
    for e, n in enumerate(counts):
        values[f"route_n{e:03d}"] = int(n)
        values[f"wroute_n{e:03d}"] = int(n)
    return values


def main() -> None:
    for cfg, batch in ((MIXTRAL, 64), (QWEN, 64)):
        choices = synthetic_routing(batch, cfg.experts, cfg.top_k, seed=0)
        vals = dim_values(choices, cfg.experts)
        print(f"{cfg.name}, batch {batch} (synthetic routing), artifact accounting:")
        for sched in (MoESchedule("static", 16), MoESchedule("static", 64), MoESchedule("dynamic")):
            m = metrics(build(cfg, sched, batch), "artifact").evaluate(vals)
            label = f"{sched.tiling} {sched.tile_n if sched.tiling == 'static' else ''}"
            print(
                f"  {label:<12} on-chip {m.onchip_bytes / 2**20:9.2f} MiB  off-chip {m.offchip_bytes / 2**20:9.2f} MiB"
            )


if __name__ == "__main__":
    main()
