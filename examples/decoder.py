"""A decoder layer as one STeP graph: QKV generation, decode attention and the MoE layer (Fig. 17).

For a batch of ``B`` requests (one new token each, hidden state ``x[b]``):

1. **QKV generation**, the batch split 4 ways (static, ``qkv_regions``): region ``r`` multiplies
   its ``[B/4, D]`` block of ``x`` by every ``[D, head_dim]`` column tile of ``w_q``, ``w_k`` and
   ``w_v`` (weights read once per region) and scatters the rows (RetileStreamify +
   RandomOffChipStore, addresses from memory) into the attention's ``q``, ``k_new`` and ``v_new``;
2. **decode attention** (``examples.attention``) for all ``G`` KV-head groups of a request in the
   region the schedule gives the request (interleaved, coarse or dynamic): a KV tile holds
   ``kv_tile`` tokens of every group (``[kv_tile, G * head_dim]``, the cache layout of a request)
   and the query is the ``[H, G * head_dim]`` block-diagonal matrix whose row ``j`` holds query
   head ``j`` in the column block of its group. ``q Kᵀ`` then gives every head's scores against
   its own group and the diagonal blocks of ``P V`` are the heads' outputs (exact; the off-diagonal
   blocks are G - 1 wasted products per head, which the compute nodes pay: see ``docs``);
3. **the MoE layer** (``examples.moe``) on ``attn(x)``: the attention output's diagonal blocks,
   read back as ``[1, H * head_dim] = [1, D]`` rows (``H * head_dim = D`` for both models).

Output projection, residuals and norms are left out (the issue's layer is QKV + attention + MoE).
Each stage starts when the previous one has written its results: the store acknowledgements are
counted (Accum) and the count gates the next stage's first read (LinearOffChipLoad ``ref``), so
the graph is a correct program for the interpreter and the simulator alike.

Names: the attention's tensors and nodes carry the prefix ``attn_``, the MoE's ``moe_``
(``Graph.name_scope``); the QKV stage's are ``qkv_*`` and the layer input is ``x``.

Run ``python -m examples.decoder`` for the graphs' sizes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from step_lang import (
    Accum,
    Flatten,
    Graph,
    LinearOffChipLoad,
    Map,
    OffChipTensor,
    Promote,
    RandomOffChipStore,
    RepeatStatic,
    RetileStreamify,
    Stream,
    Tile,
)
from step_lang import functions as F

from . import attention, moe, traces
from .checks import positive_int, positive_or_none

__all__ = [
    "MIXTRAL",
    "QWEN",
    "SMALL",
    "DecoderConfig",
    "DecoderSchedule",
    "allocated_compute",
    "attention_config",
    "build",
    "control_inputs",
    "dim_values",
    "inputs",
    "profile",
    "reference",
    "stage_cycles",
]


@dataclass(frozen=True)
class DecoderConfig:
    """A model's decoder layer: attention heads and the MoE layer (``moe``)."""

    name: str
    moe: moe.MoEConfig
    heads: int
    kv_heads: int
    head_dim: int
    kv_tile: int = 32
    max_len: int = 6464

    def __post_init__(self):
        for f in ("heads", "kv_heads", "head_dim", "kv_tile", "max_len"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"DecoderConfig.{f} must be a positive integer, not {v!r}")
        if self.heads % self.kv_heads:
            raise ValueError(
                f"DecoderConfig.kv_heads {self.kv_heads} must divide heads {self.heads}"
            )
        if self.heads * self.head_dim != self.moe.hidden:
            raise ValueError(
                f"DecoderConfig: heads x head_dim ({self.heads * self.head_dim}) must equal the hidden size {self.moe.hidden}"
            )


QWEN = DecoderConfig("qwen", moe.QWEN, heads=32, kv_heads=4, head_dim=64)
MIXTRAL = DecoderConfig("mixtral", moe.MIXTRAL, heads=32, kv_heads=8, head_dim=128)
SMALL = DecoderConfig("small", moe.SMALL, heads=4, kv_heads=2, head_dim=4, kv_tile=4, max_len=32)
"""Test size: hidden 16, 4 heads of 4 in 2 groups, 4 experts top-2."""


@dataclass(frozen=True)
class DecoderSchedule:
    """The three optimizations and the baselines' knobs.

    ``attention``: ``"dynamic"`` (dynamic parallelization), ``"interleaved"`` or ``"coarse"``;
    ``tiling``/``tile_n``: the MoE's token tiling; ``moe_regions``: time-multiplexing (None: one
    pipeline per expert); ``regions``: the 4-way batch split of QKV and attention;
    ``distributor``: ``"shared"`` for the artifact's interleaved front end.
    """

    attention: str = "dynamic"
    tiling: str = "dynamic"
    tile_n: int = 16
    tile_f: int = 64
    moe_regions: int | None = None
    regions: int = 4
    distributor: str = "own"

    def __post_init__(self):
        if self.attention not in attention.SCHEDULES:
            raise ValueError(
                f"DecoderSchedule.attention must be one of {', '.join(attention.SCHEDULES)}, not {self.attention!r}"
            )
        if self.tiling not in ("static", "dynamic"):
            raise ValueError(
                f"DecoderSchedule.tiling must be 'static' or 'dynamic', not {self.tiling!r}"
            )
        # frozen: set the checked values (a numpy integer becomes an int)
        for f in ("tile_n", "tile_f", "regions"):
            object.__setattr__(self, f, positive_int(f"DecoderSchedule.{f}", getattr(self, f)))
        regions = positive_or_none("DecoderSchedule.moe_regions", self.moe_regions)
        object.__setattr__(self, "moe_regions", regions)
        if self.distributor not in ("own", "shared"):
            raise ValueError(
                f"DecoderSchedule.distributor must be 'own' or 'shared', not {self.distributor!r}"
            )
        if self.distributor == "shared" and self.attention != "interleaved":
            raise ValueError(
                f"DecoderSchedule.distributor 'shared' needs attention 'interleaved', not {self.attention!r}"
            )

    @property
    def label(self) -> str:
        moe_part = "dyntile" if self.tiling == "dynamic" else f"tile{self.tile_n}"
        tm = f"_tm{self.moe_regions}" if self.moe_regions else ""
        return f"{self.attention}_{moe_part}{tm}"


class _LayerGraph(Graph):
    """The decoder's graph: builders compose under ``Graph.name_scope``; the QKV stage declares
    the attention's ``q``, ``k_new`` and ``v_new`` (it writes them), and the attention builder's
    own declarations of them, inside :meth:`declared`, return those tensors."""

    def __init__(self, name: str):
        super().__init__(name)
        #: the last node of each stage (``stage_cycles``)
        self.stage_ends: dict[str, str] = {}
        self._declared: dict[str, OffChipTensor] = {}

    @contextlib.contextmanager
    def declared(self, tensors: dict[str, OffChipTensor]):
        """While active, ``tensor(name, shape)`` for a key of ``tensors`` (a name as the builder
        gives it, before any scope prefix) returns that tensor (same shape required)."""
        old, self._declared = self._declared, dict(tensors)
        try:
            yield
        finally:
            self._declared = old

    def tensor(self, name, shape, dtype="float32"):
        t = self._declared.get(name)
        if t is None:
            return super().tensor(name, shape, dtype)
        if tuple(t.shape) != tuple(shape):
            raise ValueError(
                f"tensor {t.name!r} declared again with shape {tuple(shape)}, not {t.shape}"
            )
        return t


def attention_config(config: DecoderConfig) -> attention.AttentionConfig:
    """The attention of the layer: all groups per request, block-diagonal queries."""
    return attention.AttentionConfig(
        head_dim=config.kv_heads * config.head_dim,
        kv_tile=config.kv_tile,
        max_len=config.max_len,
        q_rows=config.heads,
    )


def _diag_heads(config: DecoderConfig) -> F.MapFn:
    """``[H, G * hd]`` block-diagonal attention output -> the ``[1, H * hd]`` row of its heads."""
    H, G, hd = config.heads, config.kv_heads, config.head_dim
    per = H // G

    def type_rule(err, t):
        if not (isinstance(t, Tile) and t.rows == H and t.cols == G * hd):
            raise err("in0", f"function 'diag_heads' needs a [{H}, {G * hd}] tile, got {t}")
        return Tile(t.dtype, 1, H * hd)

    def apply(out, x):
        row = np.concatenate([x[j, (j // per) * hd : (j // per + 1) * hd] for j in range(H)])
        return row.reshape(1, H * hd).astype(x.dtype)

    return _RowFn("diag_heads", 1, type_rule, lambda t: 0, apply, (("heads", H),))


class _RowFn(F.MapFn):
    """A MapFn whose shape-only result is the ``[1, cols]`` row of its output type (the library
    has no shape rule for a reshape; timing-only simulations need one)."""

    def apply(self, out_type, *values):
        from step_lang.meta import MetaTile, is_meta

        if is_meta(*values):
            return MetaTile((1, out_type.cols), out_type.dtype.numpy)
        return self._apply(out_type, *values)


def _gate(streams: list[Stream], name: str) -> Stream:
    """One token once every stream (of acknowledgements) has ended: counts, summed."""
    counts = []
    for i, s in enumerate(streams):
        if len(s.shape) > 1:
            s = Flatten(s, 0, len(s.shape) - 1, name=f"{name}_flat{i}").out
        s = Promote(s, name=f"{name}_all{i}").out  # [N] -> [1, N]
        counts.append(Accum(s, fn=F.accum_count, rank=1, name=f"{name}_count{i}").out)
    total = counts[0]
    for i, c in enumerate(counts[1:]):
        total = Map(total, c, fn=F.add, name=f"{name}_sum{i}").out
    return total


def _qkv_addresses(config: DecoderConfig, batch: int, regions: int) -> dict[str, np.ndarray]:
    """Tile addresses of the QKV rows in stream order (region, column tile, token)."""
    H, G = config.heads, config.kv_heads
    per, blk = H // G, batch // regions
    out = {}
    for key, cols in (("q", H), ("k", G), ("v", G)):
        addr = []
        for r in range(regions):
            for j in range(cols):
                for i in range(blk):
                    b = r * blk + i
                    # q: row b*H + j of [B*H, G*hd] in (1, hd) tiles, block of group j // per;
                    # k, v: row b of [B, G*hd], block j.
                    addr.append((b * H + j) * G + j // per if key == "q" else b * G + j)
        out[f"qkv_addr_{key}"] = np.array(addr, dtype=np.int64).reshape(-1, 1)
    return out


def build(config: DecoderConfig, schedule: DecoderSchedule, batch: int) -> Graph:
    """The decoder layer for ``batch`` requests under ``schedule`` (one graph)."""
    c, s = config, schedule
    if not isinstance(c, DecoderConfig):
        raise TypeError(f"decoder.build: config must be a DecoderConfig, not {c!r}")
    if not isinstance(s, DecoderSchedule):
        raise TypeError(f"decoder.build: schedule must be a DecoderSchedule, not {s!r}")
    batch = positive_int("decoder.build: batch", batch)
    if batch % s.regions:
        raise ValueError(f"batch {batch} must be a multiple of regions {s.regions}")
    _check_moe_regions("decoder.build", c, s.moe_regions)
    H, G, hd, D = c.heads, c.kv_heads, c.head_dim, c.moe.hidden
    blk = batch // s.regions
    g = _LayerGraph(f"decoder_{c.name}_{s.label}")
    acfg = attention_config(c)
    x_t = g.tensor("x", (batch, D), c.moe.dtype)
    acks = []
    # -- QKV generation, batch split over the regions -------------------------------------------
    with g.name_scope("attn_"):  # the attention's inputs, which the QKV stage writes
        shared = {
            "q": g.tensor("q", (batch * H, G * hd), c.moe.dtype),
            "k_new": g.tensor("k_new", (batch, G * hd), c.moe.dtype),
            "v_new": g.tensor("v_new", (batch, G * hd), c.moe.dtype),
        }
    targets = {"q": shared["q"], "k": shared["k_new"], "v": shared["v_new"]}
    weights = {
        "q": g.tensor("qkv_w_q", (D, H * hd), c.moe.dtype),
        "k": g.tensor("qkv_w_k", (D, G * hd), c.moe.dtype),
        "v": g.tensor("qkv_w_v", (D, G * hd), c.moe.dtype),
    }
    cols = {"q": H, "k": G, "v": G}
    addr_t = {
        k: g.tensor(f"qkv_addr_{k}", (s.regions * n * blk, 1), "int64") for k, n in cols.items()
    }
    for r in range(s.regions):
        xb = LinearOffChipLoad(
            x_t, tile=(blk, D), out_shape=(1,), base=r, elem_bytes=2, name=f"qkv_x{r}"
        ).out
        xb = Flatten(xb, 0, 1, name=f"qkv_xflat{r}").out
        for key, n in cols.items():
            rep = RepeatStatic(xb, n, name=f"qkv_rep_{key}{r}").out
            w = LinearOffChipLoad(
                weights[key],
                tile=(D, hd),
                out_shape=(n,),
                stride=(1,),
                elem_bytes=2,
                name=f"qkv_load_{key}{r}",
            ).out
            y = Map(rep, w, fn=F.matmul(), name=f"qkv_{key}{r}").out
            rows = RetileStreamify(y, name=f"qkv_rows_{key}{r}").out
            addr = LinearOffChipLoad(
                addr_t[key],
                tile=(1, 1),
                out_shape=(n * blk,),
                base=r * n * blk,
                name=f"qkv_addr_{key}{r}",
            ).out
            store = RandomOffChipStore(
                addr, rows, targets[key], elem_bytes=2, name=f"qkv_store_{key}{r}"
            )
            acks.append(store.out)
    gate = _gate(acks, "qkv_done")
    g.stage_ends["qkv"] = gate.node.name
    # -- attention -------------------------------------------------------------------------------
    with g.name_scope("attn_"), g.declared(shared):
        attention.build(
            acfg,
            s.attention,
            batch,
            s.regions,
            graph=g,
            gate=gate,
            distributor=s.distributor,
        )
    for name, node in list(g.nodes.items()):  # the attention experiments' queues of 1
        if name.startswith("attn_"):
            for out in node.outputs:
                if out.name not in g.queue_depths:
                    g.set_queue_depth(out, 1)
    out_acks = [g.nodes[f"attn_ostore{r}"].out for r in range(s.regions)]
    done = _gate(out_acks, "attn_done")
    g.stage_ends["attention"] = done.node.name
    # -- MoE on the attention output ---------------------------------------------------------------
    out_t = g.tensors["attn_out"]
    heads = LinearOffChipLoad(
        out_t, tile=(H, G * hd), out_shape=(batch,), ref=done, elem_bytes=2, name="moe_in"
    ).out
    if len(heads.shape) > 1:
        heads = Flatten(heads, 0, len(heads.shape) - 1, name="moe_in_flat").out
    x_rows = Map(heads, fn=_diag_heads(c), name="moe_in_rows").out
    with g.name_scope("moe_"):
        moe.build(
            c.moe,
            moe.MoESchedule(s.tiling, tile_n=s.tile_n, tile_f=s.tile_f, regions=s.moe_regions),
            batch,
            graph=g,
            x_rows=x_rows,
        )
    return g


# ---------------------------------------------------------------------------------------------
# Memory, reference, costs


def _check_moe_regions(where: str, config: DecoderConfig, moe_regions: Any) -> int | None:
    """``moe_regions``: None (no time-multiplexing) or a positive divisor of the experts."""
    regions = positive_or_none(f"{where}: moe_regions", moe_regions)
    if regions is not None and config.moe.experts % regions:
        raise ValueError(
            f"{where}: moe_regions {regions} must divide the {config.moe.experts} experts"
        )
    return regions


def _check_inputs(
    where: str, config: DecoderConfig, kv_lengths: Any, choices: Any, regions: Any
) -> tuple[np.ndarray, np.ndarray, int]:
    """The KV lengths, routing choices and QKV regions of :func:`inputs`, checked against each
    other: one token per request, and regions that divide the batch (as :func:`build` needs)."""
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"{where}: config must be a DecoderConfig, not {config!r}")
    kv = attention.check_kv_lengths(attention_config(config), kv_lengths, where=f"{where}: ")
    choices = traces.check_routing(
        choices, config.moe.experts, config.moe.top_k, what=f"{where}: choices"
    )
    if choices.shape[0] != len(kv):
        raise ValueError(f"{where}: choices have {choices.shape[0]} tokens, kv_lengths {len(kv)}")
    regions = positive_int(f"{where}: regions", regions)
    if len(kv) % regions:
        raise ValueError(f"{where}: regions {regions} must divide batch {len(kv)}")
    return kv, choices, regions


def control_inputs(
    config: DecoderConfig, kv_lengths: np.ndarray, choices: np.ndarray, *, regions: int = 4
) -> dict[str, np.ndarray]:
    """The integer tensors of :func:`inputs`: all a timing-only simulation reads.

    ``regions`` is the schedule's QKV/attention split (``DecoderSchedule.regions``): it must
    divide the batch, ``len(kv_lengths)``, which is also the number of rows of ``choices``."""
    kv, choices, regions = _check_inputs(
        "decoder.control_inputs", config, kv_lengths, choices, regions
    )
    mem = {
        f"attn_{k}": v for k, v in attention.control_inputs(attention_config(config), kv).items()
    }
    mem.update({f"moe_{k}": v for k, v in moe.routing_tensors(config.moe, choices).items()})
    mem.update(_qkv_addresses(config, len(kv), regions))
    return mem


def inputs(
    config: DecoderConfig,
    kv_lengths: np.ndarray,
    choices: np.ndarray,
    *,
    regions: int = 4,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Memory of one decode step: ``x``, QKV weights, KV caches, MoE weights and control data
    (``regions`` as in :func:`control_inputs`)."""
    c = config
    kv, choices, regions = _check_inputs("decoder.inputs", c, kv_lengths, choices, regions)
    batch = len(kv)
    H, G, hd, D = c.heads, c.kv_heads, c.head_dim, c.moe.hidden
    acfg = attention_config(c)
    rng = np.random.default_rng(seed)
    mem = {f"attn_{k}": v for k, v in attention.inputs(acfg, kv, seed=seed).items()}
    # The QKV stage writes q (block-diagonal: zero outside each head's group), k_new and v_new.
    mem["attn_q"] = np.zeros_like(mem["attn_q"])
    mem["attn_k_new"] = np.zeros_like(mem["attn_k_new"])
    mem["attn_v_new"] = np.zeros_like(mem["attn_v_new"])
    mem.update(
        {f"moe_{k}": v for k, v in moe.inputs(c.moe, choices, seed=seed).items() if k != "x"}
    )
    mem["x"] = rng.standard_normal((batch, D)).astype(np.float32)
    # q is scaled by 1/sqrt(hd) through its weights, so scores stay small (no max-subtraction).
    mem["qkv_w_q"] = (rng.standard_normal((D, H * hd)) / np.sqrt(D) / np.sqrt(hd)).astype(
        np.float32
    )
    mem["qkv_w_k"] = (rng.standard_normal((D, G * hd)) / np.sqrt(D)).astype(np.float32)
    mem["qkv_w_v"] = (rng.standard_normal((D, G * hd)) / np.sqrt(D)).astype(np.float32)
    mem.update(_qkv_addresses(c, batch, regions))
    return mem


def reference(config: DecoderConfig, memory: dict[str, np.ndarray]) -> np.ndarray:
    """Plain numpy: the MoE output ``[B, D]`` of the layer (float64 maths)."""
    c = config
    H, G, hd = c.heads, c.kv_heads, c.head_dim
    per = H // G
    x = memory["x"].astype(np.float64)
    batch = x.shape[0]
    q = x @ memory["qkv_w_q"]
    k = x @ memory["qkv_w_k"]
    v = x @ memory["qkv_w_v"]
    n_tiles = memory["attn_n_tiles"].reshape(-1)
    offset = memory["attn_offset"].reshape(-1)
    kv = (n_tiles - 1) * c.kv_tile + offset
    ml = memory["attn_k_cache"].shape[0] // batch
    attn = np.zeros((batch, H * hd))
    for b in range(batch):
        n = int(kv[b])
        keys = memory["attn_k_cache"][b * ml : b * ml + n + 1].astype(np.float64).copy()
        vals = memory["attn_v_cache"][b * ml : b * ml + n + 1].astype(np.float64).copy()
        keys[n], vals[n] = k[b], v[b]
        for j in range(H):
            gg = j // per
            cols = slice(gg * hd, (gg + 1) * hd)
            w = np.exp(keys[:, cols] @ q[b, j * hd : (j + 1) * hd])
            attn[b, j * hd : (j + 1) * hd] = (w @ vals[:, cols]) / w.sum()
    mem = {k[4:]: val for k, val in memory.items() if k.startswith("moe_")}
    mem["x"] = attn.astype(np.float32)
    return moe.reference(c.moe, mem)


def stage_cycles(graph: Graph, result: Any) -> dict[str, int]:
    """Cycles of each stage in a simulation ``result`` of ``graph``: QKV (until its last store
    was acknowledged), attention (until its last output was stored) and the MoE (the rest)."""
    qkv = result.nodes[graph.stage_ends["qkv"]].finish
    attn = result.nodes[graph.stage_ends["attention"]].finish
    return {"qkv_cycles": qkv, "attention_cycles": attn - qkv, "moe_cycles": result.cycles - attn}


def dim_values(
    config: DecoderConfig, choices: np.ndarray, moe_regions: int | None = None
) -> dict[str, int]:
    """Values of the MoE's routing dims (``moe_route_nXXX``, ...) and, time-multiplexed, of each
    region's merged dynamic tile (``moe_merge{r}_rows``: the largest tile the region takes, which
    its buffers must hold). ``moe_regions`` must divide the experts."""
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"decoder.dim_values: config must be a DecoderConfig, not {config!r}")
    E = config.moe.experts
    choices = traces.check_routing(choices, E, config.moe.top_k, what="decoder.dim_values: choices")
    moe_regions = _check_moe_regions("decoder.dim_values", config, moe_regions)
    values = {f"moe_{k}": v for k, v in moe.dim_values(choices, E).items()}
    if moe_regions:
        counts = np.bincount(choices.reshape(-1), minlength=E)
        per = E // moe_regions
        for r in range(moe_regions):
            values[f"moe_merge{r}_rows"] = int(counts[r * per : (r + 1) * per].max())
    return values


ATTENTION_BW = 2048
"""FLOPs/cycle of the attention's compute nodes (the artifact's); the others get the profile's
default (4096, Fig. 9's static tiling)."""


def profile(graph: Graph, compute_bw: int = 4096):
    """The paper profile for a decoder graph: queues of 2 (the MoE experiments; :func:`build`
    gives the attention's queues 1, as in the attention experiments), attention compute nodes at
    :data:`ATTENTION_BW`, the others at ``compute_bw``."""
    from sim import PaperProfile

    overrides = {
        name: ATTENTION_BW
        for name, node in graph.nodes.items()
        if name.startswith("attn_") and node.kind in ("Map", "Accum", "Scan")
    }
    return PaperProfile(
        compute_bw_default=compute_bw, channel_depth=2, compute_bw_overrides=overrides
    )


def allocated_compute(graph: Graph, prof) -> int:
    """FLOPs/cycle allocated: the compute bandwidth of every Map/Accum node that computes."""
    total = 0
    for node in graph.nodes.values():
        if node.kind in ("Map", "Accum") and node.flops() != 0:
            total += prof.compute_bw(node)
    return total


def main() -> None:
    from step_lang import metrics

    for cfg in (QWEN, MIXTRAL):
        for sched in (DecoderSchedule(), DecoderSchedule("interleaved", "static", tile_n=16)):
            g = build(cfg, sched, 64)
            m = metrics(g, "artifact")
            print(f"{g.name}: {len(g.nodes)} nodes, FLOPs {m.flops}")


if __name__ == "__main__":
    main()
