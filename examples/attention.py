"""Decode attention with a KV cache, parallelized over the batch three ways (paper §5, Fig. 16).

One decode step of one KV-head group per request. For every request ``b`` of a batch with current
KV length ``L_b`` the graph

1. appends the new token's key and value rows at row ``L_b`` of the request's K and V cache;
2. computes ``softmax(q_b · K_bᵀ) · V_b`` over the ``L_b + 1`` valid rows (scale 1; the query
   data of :func:`inputs` is drawn with standard deviation ``1/sqrt(head_dim)`` instead);
3. stores the output row.

**Softmax without max-subtraction.** As in the paper's artifact the graph computes
``exp(s) / sum(exp(s))`` directly. That is exact maths but overflows float32 once a score passes
~88; fine for the data :func:`inputs` draws, not for arbitrary activations.

Memory layout (every dynamic quantity is a tensor in memory, read by the graph):

* ``q``, ``k_new``, ``v_new``, ``out``: ``[B, head_dim]``, one row per request;
* ``k_cache``, ``v_cache``: ``[B * max_len, head_dim]``, one block of ``max_len`` rows per request,
  read and written in ``[kv_tile, head_dim]`` tiles (``max_len / kv_tile`` tiles per request);
* ``req_idx`` ``[B, 1]``: the request queue (request ids in dispatch order);
* ``n_tiles`` ``[B, 1]``: ``ceil((L_b + 1) / kv_tile)``, the KV tiles request ``b`` reads;
* ``offset`` ``[B, 1]``: ``L_b mod kv_tile``, the row of the new token inside its last tile;
* ``dispatch_seed`` ``[B, 1]`` and ``dispatch_keep`` ``[2B, 1]``: control data of the dynamic
  schedule (see below). Every schedule declares them, so that one memory image from
  :func:`inputs` fits every graph; only ``"dynamic"`` reads them.

Metadata is int64 (the tile addresses the library's address generators produce are int64; the
hardware-size graph uses int32, see below). The
KV lengths themselves are not stored: ``L_b = (n_tiles - 1) * kv_tile + offset``
(:func:`kv_lengths_of`). ``dispatch_seed`` holds ``0, 1, ..., B - 1``; the dynamic schedule reads
its first ``R`` entries as the regions' initial free slots.

**The append.** Each region turns ``(request id, n_tiles)`` into KV tile addresses
(``cache_read_addr``) and marks the last tile of every request (``last_tile_flags``). A Partition
by those flags splits the *addresses* into the tiles before the last and the last tile; both are
read with RandomOffChipLoad, the new row is written into the last tile at ``offset``
(``row_append``), the modified tile is written back to the same address (RandomOffChipStore) and
Reassemble, by the same flags, puts the request's tiles back in order for the compute. Splitting
the addresses (the artifact splits the loaded tiles and computes the write address separately)
keeps every load's tile count a regular symbol (``split{r}_n000``: tiles before the last,
``split{r}_n001``: last tiles), so the off-chip traffic evaluates exactly from a run's bindings.

**Padding.** The last tile holds ``kv_tile - offset - 1`` rows past the valid ones (stale data of
the cache, never assumed to be zero). A FlatMap makes one ``[1, kv_tile]`` bias tile per KV tile
from ``(n_tiles, offset)``: zero on valid columns and ``-inf`` on padding ones. It is added to the
scores before ``exp``, so padding weights are exactly ``exp(-inf) = 0`` whatever the padding rows
hold (as long as they are finite: ``0 · inf`` would be NaN in ``P · V``).

**Schedules** (``regions`` parallel regions, each a full copy of the per-request pipeline):

* ``"interleaved"``: Parallelize deals requests round-robin;
* ``"coarse"``: region ``r`` owns the contiguous block ``r·B/R .. (r+1)·B/R - 1`` of the queue
  (Reshape into ``R`` blocks, Parallelize the blocks);
* ``"dynamic"``: each request goes to the region that became free first. Every region emits its
  id when it has read the whole K cache of a request; those signals are merged by EagerMerge
  (``merge_done``) and fed back (``Feedback`` ``free``) into a second EagerMerge (``merge_free``)
  after one seed id per region (the first ``R`` entries of ``dispatch_seed``). The first ``B``
  availability ids (``dispatch_keep`` is ``B`` trues then falses; the Partition ``cut`` reads
  ``B + R`` of them) become the one-hot selectors of the Partition ``dispatch``; the last ``R``
  signals are dropped. This is the loop of the paper's Fig. 16 (and of
  ``dynamic_parallel_graph`` in ``tests/test_lang_graph.py``), with region ids instead of one-hot
  tiles on the loop. It works because Partition closes its outputs as soon as its selector ends:
  ``cut``'s selector is a finite memory read, so ``cut`` ends after ``B + R`` ids, ``dispatch``
  then ends, the regions drain and the loop's streams close.

Outputs are routed back to memory by request id (RandomOffChipStore), so no schedule needs to
restore the queue order on chip, and the per-request arithmetic is the same in every region:
all schedules give bit-identical results.

**Hardware size** (:func:`hardware`, :func:`hardware_inputs`, ``make rtl``): :data:`HW` (head dim
4, ``[4, 4]`` KV tiles, 16 cache rows per request), by default 4 requests over 2 regions, built
with the hardware's fixed-point functions (``step_lang.numerics.functions(HwConfig())``: int16
Q8 data, ``matmul_t`` narrowed to int16 for the scores, ``matmul_acc`` narrowed to int16 for
``P · V``, fixed-point ``exp``, ``row_sum`` and ``div``), so the interpreter predicts the RTL bit
for bit. Two things differ from the float graph:

* metadata (request ids, tile counts, offsets, tile addresses, region ids, ``dispatch_keep`` as
  0/1) is **int32**: the hardware's elements are at most its int32 accumulator wide, and an int32
  tile index addresses far more tiles than any memory map has. The int32 address generator and
  counter are ``step_lang.numerics.cache_read_addr`` and ``numerics.accum_count``;
* padding is masked **after** ``exp`` by multiplying with :func:`pad_mask` tiles (1.0 on valid
  rows, 0 on padding) instead of adding a bias before it. A bias of the most negative int16
  (-128.0 in Q8) would make ``exp`` exactly 0 (``numerics.exp_q(-32768) == 0``), but the
  hardware's ``add`` wraps: a negative padding score plus -128.0 wraps to a large positive value
  whose ``exp`` saturates. ``mul`` by 1.0 is exact and by 0 is 0, whatever the stale rows hold.

Fixed point bounds the data: ``exp`` saturates at 127.99 (scores above ~4.85), and the row sum of
the weights must stay below 128 (up to 16 rows of ``exp(s)``); :func:`hardware_inputs` draws
scores with standard deviation ~1, well inside.

Run ``python -m examples.attention`` for the graphs' sizes and costs.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, is_dataclass, replace
from typing import Any

import numpy as np
import sympy as sp

from examples.checks import is_positive_int, positive_int  # absolute: also as a script
from examples.traces import load_kv_lengths, synthetic_kv_lengths
from step_lang import (
    Accum,
    EagerMerge,
    Expand,
    Feedback,
    FlatMap,
    Flatten,
    Graph,
    InterpretResult,
    LinearOffChipLoad,
    Map,
    Metrics,
    OffChipTensor,
    Parallelize,
    Partition,
    RaggedSymbol,
    RandomOffChipLoad,
    RandomOffChipStore,
    Reassemble,
    Selector,
    Sink,
    Stream,
    StreamType,
    Tile,
    dtype,
    interpret,
    metrics,
    regular,
)
from step_lang import functions as F
from step_lang.errors import StepRuntimeError
from step_lang.metrics import NodeCost
from step_lang.tokens import is_data

__all__ = [
    "ARTIFACT_DEPTHS",
    "HW",
    "PAPER_HW",
    "QWEN",
    "SCHEDULES",
    "SMALL",
    "AttentionConfig",
    "artifact_b80_queue",
    "build",
    "cache_rows_needed",
    "check_kv_lengths",
    "evaluate",
    "fit_cache",
    "hardware",
    "hardware_inputs",
    "inputs",
    "kv_lengths_of",
    "main",
    "pad_bias",
    "pad_mask",
    "reference",
    "region_id",
    "region_select",
]

SCHEDULES = ("interleaved", "coarse", "dynamic")
# Element types of the fixed-point (hardware) graph: narrower than the hardware's int32
# accumulator. The error message of AttentionConfig still says "float type" (tests anchor it).
_FIXED_POINT = ("int8", "int16")
_HW_META = "int32"  # metadata of the hardware graph (see the module docstring)


@dataclass(frozen=True)
class AttentionConfig:
    """Sizes of one attention head group.

    Attributes:
        head_dim: columns of q, K and V.
        kv_tile: KV rows per tile (the paper uses 32).
        max_len: cache rows per request (a multiple of ``kv_tile``); KV lengths must stay below it.
        dtype: element type of q, K, V and the output: a float type, or ``int8``/``int16``
            fixed point for the hardware-size graph (:data:`HW`, :func:`hardware`).
        q_rows: query rows per request (1 by default; the artifact's 8 query heads per KV head,
            or the decoder layer's block-diagonal heads, see ``examples.decoder``). ``q`` and
            ``out`` are then ``[B * q_rows, head_dim]`` and read/written ``q_rows`` rows a tile.
    """

    head_dim: int
    kv_tile: int
    max_len: int
    dtype: str = "float32"
    # repr=False: the printed configuration of the default (one query row) stays as it was.
    q_rows: int = field(default=1, repr=False)

    def __post_init__(self):
        for name in ("head_dim", "kv_tile", "max_len", "q_rows"):
            # frozen: set the checked value (a numpy integer becomes an int)
            object.__setattr__(
                self, name, positive_int(f"AttentionConfig.{name}", getattr(self, name))
            )
        if self.max_len % self.kv_tile:
            raise ValueError(
                f"AttentionConfig.max_len ({self.max_len}) must be a multiple of kv_tile ({self.kv_tile})"
            )
        try:
            known = dtype(self.dtype).is_float or self.dtype in _FIXED_POINT
        except (TypeError, ValueError):  # not a dtype at all
            known = False
        if not known:
            raise ValueError(f"AttentionConfig.dtype must be a float type, not {self.dtype!r}")

    @property
    def tiles_per_request(self) -> int:
        """KV tiles in one request's cache block (the address stride between requests)."""
        return self.max_len // self.kv_tile

    @property
    def tile_bytes(self) -> int:
        """Bytes of one ``[kv_tile, head_dim]`` KV tile."""
        return self.kv_tile * self.head_dim * dtype(self.dtype).nbytes

    @property
    def row_bytes(self) -> int:
        """Bytes of one ``[1, head_dim]`` row (q, new k/v, output)."""
        return self.head_dim * dtype(self.dtype).nbytes


def _cache_rows(where: str, kv_tile: int, kv_lengths: Any) -> int:
    kv_tile = positive_int(f"{where}kv_tile", kv_tile)
    need = int(np.max(check_kv_lengths(None, kv_lengths, where=where))) + 1
    return -(-need // kv_tile) * kv_tile


def cache_rows_needed(kv_tile: int, kv_lengths: Sequence[int] | np.ndarray) -> int:
    """Cache rows per request for the longest request of ``kv_lengths`` (a non-empty 1-D
    array of non-negative integers) and its new token, in whole KV tiles of ``kv_tile`` rows."""
    return _cache_rows("attention.cache_rows_needed: ", kv_tile, kv_lengths)


def fit_cache(config: Any, kv_lengths: Sequence[int] | np.ndarray) -> Any:
    """``config`` (an :class:`AttentionConfig`, or any dataclass with ``kv_tile`` and
    ``max_len``, as ``decoder.DecoderConfig``) with :func:`cache_rows_needed` rows, and no fewer
    than it had: the paper pads the cache to the batch's longest request."""
    if not (
        is_dataclass(config)
        and not isinstance(config, type)
        and hasattr(config, "kv_tile")
        and hasattr(config, "max_len")
    ):
        raise TypeError(
            f"attention.fit_cache: config must be a dataclass with kv_tile and max_len "
            f"(AttentionConfig, decoder.DecoderConfig), not {config!r}"
        )
    rows = _cache_rows("attention.fit_cache: ", config.kv_tile, kv_lengths)
    return replace(config, max_len=max(config.max_len, rows))


QWEN = AttentionConfig(head_dim=64, kv_tile=32, max_len=6464)
"""Qwen3-30B-A3B as in the paper's artifact: head dim 64, KV tile 32, 6464 cache rows (B = 64)."""

SMALL = AttentionConfig(head_dim=8, kv_tile=4, max_len=32)
"""A tiny configuration for tests."""

HW = AttentionConfig(head_dim=4, kv_tile=4, max_len=16, dtype="int16")
"""Hardware size (:func:`hardware`): ``[4, 4]`` KV tiles (the default hardware tile), up to 16
cache rows (4 tiles) per request, int16 Q8 data."""


# ---------------------------------------------------------------------------------------------
# Functions the graph needs beyond step_lang.functions


def _scalar(err, t, port: str, fn: str) -> Tile:
    if not (isinstance(t, Tile) and t.rows == 1 and t.cols == 1 and t.dtype.is_integer):
        raise err(port, f"function '{fn}' needs a [1,1] integer tile, got {t}")
    return t


def _pad_tiles(
    name: str, kv_tile: int, dt, valid: float, pad: float, pieces: int = 1
) -> F.FlatMapFn:
    """``(n_tiles, offset)`` → ``n_tiles`` ``[1, kv_tile]`` tiles: ``valid`` on the valid KV rows,
    ``pad`` on the padding rows past ``offset`` in the last tile.

    ``kv_tile``, ``valid`` and ``pad`` are the function's parameters (``params``), which is what
    the hardware block (``step_hw.addrgen.PadTiles``) reads. With ``pieces = p`` (hierarchical
    tiling, ``FlatMapFn.pieces``) every tile is emitted as ``p`` tiles of ``[1, kv_tile / p]``,
    left to right (parameter ``pieces``).
    """
    width = kv_tile // pieces

    def type_rule(err, tiles, offset):
        _scalar(err, tiles, "in0", name)
        _scalar(err, offset, "in1", name)
        return Tile(dt, 1, width), (), None

    def apply(out, tiles, offset):
        n, k = int(tiles[0, 0]), int(offset[0, 0])
        if n < 1 or not 0 <= k < kv_tile:
            raise StepRuntimeError(
                f"function '{name}': {n} tiles with offset {k} (kv_tile {kv_tile})"
            )
        res = [np.full((1, kv_tile), valid, dtype=dt.numpy) for _ in range(n)]
        res[-1][0, k + 1 :] = pad
        return [t[:, j * width : (j + 1) * width] for t in res for j in range(pieces)]

    def split(p: int) -> F.FlatMapFn:
        if kv_tile % (pieces * p):
            raise ValueError(f"function '{name}': {pieces * p} pieces do not divide {kv_tile}")
        return _pad_tiles(name, kv_tile, dt, valid, pad, pieces * p)

    params = (("kv_tile", kv_tile), ("valid", valid), ("pad", pad))
    if pieces > 1:
        params = (*params, ("pieces", pieces))
    return F.FlatMapFn(name, 2, 0, type_rule, apply, params, pieces=split)


def pad_bias(kv_tile: int, dtype_: str = "float32") -> F.FlatMapFn:
    """Score bias tiles of one request: ``(n_tiles, offset)`` → ``n_tiles`` ``[1, kv_tile]`` tiles.

    Zero on valid KV rows, ``-inf`` on the padding rows past ``offset`` in the last tile (for an
    integer ``dtype_``, its most negative value; but see :func:`pad_mask`).
    """
    dt = dtype(dtype_)
    pad = -np.inf if dt.is_float else int(np.iinfo(dt.numpy).min)
    return _pad_tiles("pad_bias", kv_tile, dt, 0, pad)


def pad_mask(kv_tile: int, dtype_: str, one: int) -> F.FlatMapFn:
    """Weight mask tiles of one request: ``one`` (the fixed-point 1.0) on valid KV rows, ``0`` on
    the padding rows past ``offset`` in the last tile; multiplied into ``exp(scores)``.

    The fixed-point graph masks after ``exp`` because a bias cannot work there: the hardware's
    ``add`` wraps, so a negative padding score plus the most negative value wraps to a large
    positive one, whose ``exp`` saturates (``fx.mul`` by ``one`` is exact, by ``0`` gives 0).
    """
    return _pad_tiles("pad_mask", kv_tile, dtype(dtype_), one, 0)


def region_id(r: int, dtype_: str = "int64") -> F.MapFn:
    """Any element → the ``[1,1]`` integer id ``r`` of the region that emits it (a completion
    signal), of dtype ``dtype_``."""
    dt = dtype(dtype_)
    return F.MapFn(
        f"region_id{r}",
        1,
        lambda err, t: Tile(dt, 1, 1),
        lambda t: 0,
        lambda out, x: np.array([[r]], dtype=dt.numpy),
        (("region", r),),
    )


def region_select(n: int) -> F.MapFn:
    """A ``[1,1]`` integer region id → the one-hot ``n``-way selector of that region."""

    def type_rule(err, t):
        _scalar(err, t, "in0", "region_select")
        return Selector(n)

    def apply(out, x):
        i = int(x[0, 0])
        if not 0 <= i < n:
            raise StepRuntimeError(f"function 'region_select': region id {i} outside [0, {n})")
        sel = np.zeros(n, dtype=bool)
        sel[i] = True
        return sel

    return F.MapFn("region_select", 1, type_rule, lambda t: 0, apply, (("n", n),))


# ---------------------------------------------------------------------------------------------
# The graph


@dataclass(frozen=True)
class _Functions:
    """What differs between the float graph and the fixed-point (hardware) graph."""

    meta: str  # dtype of request ids, tile counts, offsets, addresses and region ids
    keep: str  # dtype of dispatch_keep
    scores: Any  # q @ kᵀ
    add: Any
    mul: Any
    exp: Any
    pv: Any  # acc += p @ v
    accum_add: Any
    row_sum: Any
    div: Any
    addr: Callable[[int], F.FlatMapFn]  # cache_read_addr(tiles_per_request)
    count: Any  # accum_count
    masking: str  # "bias": exp(s + pad_bias); "mask": exp(s) * pad_mask
    one: int = 1  # the element value of 1.0 (pad_mask)


_FLOAT = _Functions(
    meta="int64",
    keep="bool",
    scores=F.matmul(transpose_b=True),
    add=F.add,
    mul=F.mul,
    exp=F.exp,
    pv=F.matmul_acc(),
    accum_add=F.accum_add,
    row_sum=F.row_sum,
    div=F.div,
    addr=F.cache_read_addr,
    count=F.accum_count,
    masking="bias",
)


def _hardware_functions(hw: Any) -> _Functions:
    from step_lang import numerics

    fx = numerics.functions(hw)
    return _Functions(
        meta=_HW_META,
        keep=_HW_META,
        scores=fx.matmul_out(hw.elem_dtype, transpose_b=True),
        add=fx.add,
        mul=fx.mul,
        exp=fx.exp,
        pv=fx.matmul_acc_out(hw.elem_dtype),
        accum_add=fx.accum_add,
        row_sum=fx.row_sum,
        div=fx.div,
        addr=lambda n: numerics.cache_read_addr(n, _HW_META),
        count=numerics.accum_count(_HW_META),
        masking="mask",
        one=2**hw.frac_bits,
    )


@dataclass(frozen=True)
class _Tensors:
    q: OffChipTensor
    k_new: OffChipTensor
    v_new: OffChipTensor
    k_cache: OffChipTensor
    v_cache: OffChipTensor
    out: OffChipTensor
    req_idx: OffChipTensor
    n_tiles: OffChipTensor
    offset: OffChipTensor
    dispatch_seed: OffChipTensor
    dispatch_keep: OffChipTensor


def _declare(g: Graph, c: AttentionConfig, batch: int, fx: _Functions) -> _Tensors:
    rows = (batch, c.head_dim)
    q_rows = (batch * c.q_rows, c.head_dim)
    meta = (batch, 1)
    return _Tensors(
        q=g.tensor("q", q_rows, c.dtype),
        k_new=g.tensor("k_new", rows, c.dtype),
        v_new=g.tensor("v_new", rows, c.dtype),
        k_cache=g.tensor("k_cache", (batch * c.max_len, c.head_dim), c.dtype),
        v_cache=g.tensor("v_cache", (batch * c.max_len, c.head_dim), c.dtype),
        out=g.tensor("out", q_rows, c.dtype),
        req_idx=g.tensor("req_idx", meta, fx.meta),
        n_tiles=g.tensor("n_tiles", meta, fx.meta),
        offset=g.tensor("offset", meta, fx.meta),
        dispatch_seed=g.tensor("dispatch_seed", meta, fx.meta),
        dispatch_keep=g.tensor("dispatch_keep", (2 * batch, 1), fx.keep),
    )


def _check_build_args(
    config: AttentionConfig, schedule: str, batch: int, regions: int, blocks=None
) -> tuple[int, int, tuple[int, ...] | None]:
    """Refuse bad arguments of :func:`build`; return ``batch``, ``regions`` and ``blocks`` as
    ints (``blocks`` read once: an iterator is consumed here, and as a tuple of ints)."""
    if not isinstance(config, AttentionConfig):
        raise TypeError(f"config must be an AttentionConfig, not {config!r}")
    if schedule not in SCHEDULES:
        raise ValueError(
            f"schedule must be one of {', '.join(repr(s) for s in SCHEDULES)}, not {schedule!r}"
        )
    batch = positive_int("batch", batch)
    regions = positive_int("regions", regions)
    if regions > batch:
        raise ValueError(
            f"regions ({regions}) must not exceed batch ({batch}): a region would never get a request"
        )
    if blocks is not None:
        sizes = blocks
        if not isinstance(blocks, (str, bytes)):
            with contextlib.suppress(TypeError):  # not iterable: refused below
                sizes = tuple(blocks)
        if (
            schedule != "coarse"
            or not isinstance(sizes, tuple)
            or len(sizes) != regions
            or not all(is_positive_int(n) for n in sizes)
            or sum(sizes) != batch
        ):
            raise ValueError(
                f"blocks must be {regions} positive sizes summing to batch {batch} (coarse only), not {sizes!r}"
            )
        blocks = tuple(int(n) for n in sizes)
    elif schedule == "coarse" and batch % regions:
        raise ValueError(f"coarse schedule: regions ({regions}) must divide batch ({batch})")
    return batch, regions, blocks


def build(
    config: AttentionConfig,
    schedule: str,
    batch: int,
    regions: int = 4,
    *,
    fns: Any = None,
    graph: Graph | None = None,
    gate: Stream | None = None,
    distributor: str = "own",
    blocks: Sequence[int] | None = None,
) -> Graph:
    """Decode attention for ``batch`` requests over ``regions`` parallel regions.

    ``schedule`` is ``"interleaved"``, ``"coarse"`` or ``"dynamic"`` (see the module docstring).
    ``fns`` is internal: :func:`hardware` passes the fixed-point functions. Raises ``ValueError``
    for an unknown schedule, non-positive sizes, more regions than requests, or (coarse) regions
    that do not divide the batch.

    Options for composing and for the artifact's baselines (the defaults build the graph above):

    * ``graph``: add the nodes to this graph instead of a new one (``examples.decoder``);
    * ``gate``: a one-element ``[1]`` stream; the request queue is read only once it arrives (a
      data dependency on whatever wrote ``q``, ``k_new`` and ``v_new``);
    * ``distributor="shared"`` (interleaved only): the artifact's ``static_parallel.py``: q, the
      new key and value rows and the metadata are read once, centrally, and each is dealt
      round-robin by its own Parallelize; metadata queues hold 16 tokens and the K/V write-back
      queues 4 (:data:`ARTIFACT_DEPTHS`); the queues of q, k and v keep the profile's depth; each
      region reads all of a request's K (V) tiles with one load and splits the loaded tiles;
    * ``blocks`` (coarse only): the number of queue entries each region takes, in queue order
      (default ``batch / regions`` each); with the queue of :func:`artifact_b80_queue` and
      ``blocks=(32, 16, 16, 16)`` this is the artifact's B = 80 layout.
    """
    batch, regions, blocks = _check_build_args(config, schedule, batch, regions, blocks)
    if distributor not in ("own", "shared") or (
        distributor == "shared" and schedule != "interleaved"
    ):
        raise ValueError(
            f"distributor must be 'own' or (interleaved only) 'shared', not {distributor!r} for {schedule!r}"
        )
    fx = fns or _FLOAT
    g = graph if graph is not None else Graph(f"attention_{schedule}")
    t = _declare(g, config, batch, fx)
    # The request queue as [B, 1]: one single-element vector per request. Per-request FlatMaps
    # then keep a stop between requests (over a rank-0 [B] stream they would concatenate every
    # request's tiles into one vector), and Partition/Parallelize move one request per chunk.
    if schedule == "coarse":
        # Each region reads its own block of request ids: no shared distributor, which with
        # shallow queues would hand a whole block to one region before the next could start.
        sizes = list(blocks) if blocks is not None else [batch // regions] * regions
        starts = [sum(sizes[:r]) for r in range(regions)]
        lanes = [
            Flatten(
                LinearOffChipLoad(
                    t.req_idx,
                    tile=(1, 1),
                    out_shape=(sizes[r], 1),
                    base=starts[r],
                    ref=gate,
                    name=f"queue{r}",
                ).out,
                1,
                2,
                name=f"block{r}",
            ).out
            for r in range(regions)
        ]
        for r, lane in enumerate(lanes):
            _region(t, config, fx, r, lane, signal=False)
        return g
    queue = LinearOffChipLoad(
        t.req_idx, tile=(1, 1), out_shape=(batch, 1), ref=gate, name="queue"
    ).out
    queue = Flatten(queue, 1, 2, name="requests").out
    if distributor == "shared":
        lanes = Parallelize(queue, regions, rank=1, name="dispatch").outputs
        dealt = _shared_distributor(g, t, config, batch, regions, gate)
        for r, lane in enumerate(lanes):
            g.set_queue_depth(lane, ARTIFACT_DEPTHS["metadata"])
            _region(t, config, fx, r, lane, signal=False, given=dealt[r])
        return g
    if schedule == "interleaved":
        lanes = Parallelize(queue, regions, rank=1, name="dispatch").outputs
    else:
        free = Feedback(
            g, StreamType(Tile(dtype(fx.meta), 1, 1), (regular("free_n"),)), name="free"
        )
        lanes = _dynamic_dispatch(t, queue, free.out, batch, regions)
    signals = [
        _region(t, config, fx, r, lane, signal=schedule == "dynamic")
        for r, lane in enumerate(lanes)
    ]
    if schedule == "dynamic":
        done = EagerMerge(signals, name="merge_done")
        Sink(done.output("sel"), name="merge_done_sel")
        free.bind(done.output("data"))
    return g


ARTIFACT_DEPTHS = {"metadata": 16, "write_back": 4}
"""Queue depths of the artifact's baselines: metadata FIFOs and K/V write-back FIFOs."""


def artifact_b80_queue(batch: int = 80) -> np.ndarray:
    """The artifact's coarse B = 80 queue order (``run_static_coarse_par_b80``): region 0 takes
    requests 0-15 and 64-79, regions 1-3 take 16-31, 32-47 and 48-63 (use ``blocks=(32, 16, 16,
    16)``). Returns ``req_idx`` as ``[batch, 1]`` int64."""
    if batch != 80:
        raise ValueError(f"the artifact's coarse layout is for batch 80, not {batch!r}")
    order = [*range(0, 16), *range(64, 80), *range(16, 64)]
    return np.array(order, dtype=np.int64).reshape(batch, 1)


def _shared_distributor(
    g: Graph, t: _Tensors, c: AttentionConfig, batch: int, regions: int, gate: Stream | None
) -> list[dict[str, Stream]]:
    """The artifact's interleaved front end: every per-request input read once and dealt
    round-robin by its own Parallelize (the request id is dealt by ``dispatch``)."""
    dealt: list[dict[str, Stream]] = [{} for _ in range(regions)]
    for key, tensor, tile in (
        ("ntiles", t.n_tiles, (1, 1)),
        ("offset", t.offset, (1, 1)),
        ("q", t.q, (c.q_rows, c.head_dim)),
        ("knew", t.k_new, (1, c.head_dim)),
        ("vnew", t.v_new, (1, c.head_dim)),
    ):
        load = LinearOffChipLoad(
            tensor, tile=tile, out_shape=(batch, 1), ref=gate, name=f"all_{key}"
        ).out
        flat = Flatten(load, 1, 2, name=f"all_{key}_flat").out
        lanes = Parallelize(flat, regions, rank=1, name=f"deal_{key}").outputs
        for r, lane in enumerate(lanes):
            if key in ("ntiles", "offset"):
                g.set_queue_depth(lane, ARTIFACT_DEPTHS["metadata"])
            dealt[r][key] = lane
    return dealt


def _dynamic_dispatch(
    t: _Tensors, queue: Stream, free: Stream, batch: int, regions: int
) -> list[Stream]:
    """Route requests to the region whose id arrives first on the availability stream."""
    seed = LinearOffChipLoad(t.dispatch_seed, tile=(1, 1), out_shape=(regions,), name="seed").out
    seed = Flatten(seed, 0, 1, name="seed_ids").out
    avail = EagerMerge([seed, free], name="merge_free")
    Sink(avail.output("sel"), name="merge_free_sel")
    keep = LinearOffChipLoad(
        t.dispatch_keep, tile=(1, 1), out_shape=(batch + regions,), name="keep"
    ).out
    keep = Map(Flatten(keep, 0, 1, name="keep_flat").out, fn=F.to_selector(1), name="keep_sel").out
    granted = Partition(avail.output("data"), keep, 0, name="cut").outputs[0]
    route = Map(granted, fn=region_select(regions), name="route").out
    return Partition(queue, route, 1, name="dispatch").outputs


def _region(
    t: _Tensors,
    c: AttentionConfig,
    fx: _Functions,
    r: int,
    req: Stream,
    *,
    signal: bool,
    given: dict[str, Stream] | None = None,
) -> Stream | None:
    """The per-request pipeline of region ``r``; ``req`` holds its request ids as ``[n, 1]``.

    Shapes in the comments: ``n`` requests, ``T`` = ``tiles{r}_n`` KV tiles per request (ragged).
    With ``signal`` set, returns one ``[1,1]`` region id per request whose K tiles were all read.
    ``given`` (the shared distributor) supplies ``ntiles``, ``offset``, ``q``, ``knew`` and
    ``vnew`` as ``[n, 1]`` streams dealt to this region instead of reading them by request id.
    """
    hd, tile = c.head_dim, (c.kv_tile, c.head_dim)
    if given is None:
        ntiles = RandomOffChipLoad(req, t.n_tiles, tile=(1, 1), name=f"ntiles{r}").out  # [n, 1]
        offset = RandomOffChipLoad(req, t.offset, tile=(1, 1), name=f"offset{r}").out  # [n, 1]
        q = RandomOffChipLoad(req, t.q, tile=(c.q_rows, hd), name=f"qload{r}").out  # [n, 1]
    else:
        ntiles, offset, q = given["ntiles"], given["offset"], given["q"]
    ids = Flatten(req, 0, 1, name=f"ids{r}").out  # [n]
    offs = Flatten(offset, 0, 1, name=f"offs{r}").out  # [n]

    # KV tile addresses of every request, split by the last-tile flags into the tiles before the
    # last (split{r}_n000 of them) and the last tiles (split{r}_n001, one per request).
    addr = FlatMap(req, ntiles, fn=fx.addr(c.tiles_per_request), name=f"addr{r}").out  # [n, T]
    last = FlatMap(ntiles, fn=F.last_tile_flags, name=f"tiles{r}").out  # [n, T] of Sel<2>
    mid_addr, last_addr = Partition(addr, last, 0, name=f"split{r}").outputs
    if given is not None:  # the artifact reads every tile through one load (cache() below)
        Sink(mid_addr, name=f"midaddr{r}")

    def cache(x: str, cache_t: OffChipTensor, new_t: OffChipTensor) -> Stream:
        """Read one cache (K or V), append the new row, write the last tile back; [n, T] tiles."""
        if given is None:
            mid = RandomOffChipLoad(mid_addr, cache_t, tile=tile, name=f"{x}load{r}").out
            lst = RandomOffChipLoad(last_addr, cache_t, tile=tile, name=f"{x}last{r}").out
        else:  # the artifact: one load of every tile, the loaded tiles split by the flags
            every = RandomOffChipLoad(addr, cache_t, tile=tile, name=f"{x}load{r}").out
            mid, lst = Partition(every, last, 0, name=f"{x}split{r}").outputs
        if given is None:
            row = RandomOffChipLoad(ids, new_t, tile=(1, hd), name=f"{x}new{r}").out
        else:
            row = Flatten(given[f"{x}new"], 0, 1, name=f"{x}new{r}").out
        app = Map(lst, row, offs, fn=F.row_append, name=f"{x}append{r}").out
        if given is not None:
            t.q.graph.set_queue_depth(app, ARTIFACT_DEPTHS["write_back"])
        Sink(
            RandomOffChipStore(last_addr, app, cache_t, name=f"{x}store{r}").out, name=f"{x}ack{r}"
        )
        whole = Reassemble([mid, app], last, count=1, name=f"{x}gather{r}").out  # [n, T, 1]
        return Flatten(whole, 0, 1, name=f"{x}full{r}").out

    k = cache("k", t.k_cache, t.k_new)
    v = cache("v", t.v_cache, t.v_new)

    qx = Expand(q, k, rank=1, name=f"qexpand{r}").out  # [n, T]
    scores = Map(qx, k, fn=fx.scores, name=f"qk{r}").out  # [1, kv_tile] each
    if fx.masking == "bias":
        bias = FlatMap(ntiles, offset, fn=pad_bias(c.kv_tile, c.dtype), name=f"bias{r}").out
        p = Map(Map(scores, bias, fn=fx.add, name=f"mask{r}").out, fn=fx.exp, name=f"exp{r}").out
    else:  # fixed point: see pad_mask
        keep = FlatMap(ntiles, offset, fn=pad_mask(c.kv_tile, c.dtype, fx.one), name=f"bias{r}")
        p = Map(Map(scores, fn=fx.exp, name=f"exp{r}").out, keep.out, fn=fx.mul, name=f"mask{r}")
        p = p.out
    num = Accum(p, v, fn=fx.pv, rank=1, name=f"pv{r}").out  # [n] of [1, hd]
    psum = Accum(p, fn=fx.accum_add, rank=1, name=f"psum{r}").out  # [n] of [1, kv_tile]
    den = Map(psum, fn=fx.row_sum, name=f"rowsum{r}").out  # [n] of [1, 1]
    o = Map(num, den, fn=fx.div, name=f"div{r}").out
    Sink(RandomOffChipStore(ids, o, t.out, name=f"ostore{r}").out, name=f"oack{r}")

    if not signal:
        return None
    read = Accum(k, fn=fx.count, rank=1, name=f"kread{r}").out  # [n]
    return Map(read, fn=region_id(r, fx.meta), name=f"done{r}").out


def hardware(
    schedule: str = "interleaved",
    batch: int = 4,
    regions: int = 2,
    hw: Any = None,
    config: AttentionConfig | None = None,
) -> Graph:
    """The graph at hardware size (:data:`HW`, ``hw.elem_dtype`` data) with the hardware's
    fixed-point arithmetic (``step_lang.numerics.functions(hw)``) and int32 metadata; its memory
    image is :func:`hardware_inputs`. ``config`` replaces :data:`HW` (its dtype becomes
    ``hw.elem_dtype``): :data:`PAPER_HW`, tiles larger than the hardware's, is for
    :func:`step_lang.hier_tiling.hier_tile`."""
    from step_hw.config import HwConfig

    hw = hw or HwConfig()
    config = replace(config or HW, dtype=hw.elem_dtype)
    return build(config, schedule, batch, regions, fns=_hardware_functions(hw))


PAPER_HW = AttentionConfig(head_dim=64, kv_tile=32, max_len=320)
"""The paper's head dim and KV tile (:data:`QWEN`) with room for KV lengths up to 319 (10 tiles
per request): decode attention at paper tile sizes for hierarchical tiling onto 16x16 hardware
tiles (``hardware(config=PAPER_HW, hw=...)``, BF16)."""


# ---------------------------------------------------------------------------------------------
# Data and the numpy reference


def check_kv_lengths(
    config: AttentionConfig | None, kv_lengths: Sequence[int] | np.ndarray, *, where: str = ""
) -> np.ndarray:
    """``kv_lengths`` checked and as int64: a non-empty 1-D integer array of lengths in
    ``[0, config.max_len)`` (the new token needs a row), or ``>= 0`` without ``config``.
    ``where`` (e.g. ``"attention.fit_cache: "``) starts the messages."""
    try:
        kv = np.asarray(kv_lengths)
    except (TypeError, ValueError):  # e.g. a ragged list
        raise ValueError(
            f"{where}kv_lengths must be a non-empty 1-D integer array, got a "
            f"{type(kv_lengths).__name__} that is not one"
        ) from None
    if kv.ndim != 1 or kv.size == 0 or not np.issubdtype(kv.dtype, np.integer):
        raise ValueError(
            f"{where}kv_lengths must be a non-empty 1-D integer array, got {kv.dtype} {kv.shape}"
        )
    if config is None:
        if (kv < 0).any():
            raise ValueError(f"{where}KV length {kv[kv < 0][0]} is negative")
        return kv.astype(np.int64)
    if (kv < 0).any() or (kv >= config.max_len).any():
        bad = kv[(kv < 0) | (kv >= config.max_len)][0]
        raise ValueError(
            f"{where}KV length {bad} outside [0, {config.max_len - 1}] (max_len {config.max_len}, room for the new token)"
        )
    return kv.astype(np.int64)


def inputs(
    config: AttentionConfig, kv_lengths: Sequence[int] | np.ndarray, seed: int = 0
) -> dict[str, np.ndarray]:
    """Memory for one decode step of ``len(kv_lengths)`` requests (fits every schedule's graph).

    q rows have standard deviation ``1/sqrt(head_dim)`` (the usual attention scale folded into the
    query), new rows and the valid cache prefix are standard normal; cache rows at and past
    ``L_b`` hold stale values (uniform in ``[-4, 4]``), so missing masking would show.
    """
    kv = check_kv_lengths(config, kv_lengths)
    b, hd, ml = len(kv), config.head_dim, config.max_len
    dt = dtype(config.dtype).numpy
    rng = np.random.default_rng(seed)
    caches = {}
    for name in ("k_cache", "v_cache"):
        cache = rng.uniform(-4, 4, (b, ml, hd))
        valid = np.arange(ml)[None, :, None] < kv[:, None, None]
        cache = np.where(valid, rng.standard_normal((b, ml, hd)), cache)
        caches[name] = cache.reshape(b * ml, hd).astype(dt)
    return {
        "q": (rng.standard_normal((b * config.q_rows, hd)) / math.sqrt(hd)).astype(dt),
        "k_new": rng.standard_normal((b, hd)).astype(dt),
        "v_new": rng.standard_normal((b, hd)).astype(dt),
        **caches,
        **control_inputs(config, kv),
    }


def control_inputs(
    config: AttentionConfig, kv_lengths: Sequence[int] | np.ndarray
) -> dict[str, np.ndarray]:
    """The integer and bool tensors of :func:`inputs` (all a timing-only simulation needs)."""
    kv = check_kv_lengths(config, kv_lengths)
    b = len(kv)
    return {
        "req_idx": np.arange(b, dtype=np.int64).reshape(b, 1),
        "n_tiles": (kv // config.kv_tile + 1).reshape(b, 1),  # ceil((L + 1) / kv_tile)
        "offset": (kv % config.kv_tile).reshape(b, 1),
        "dispatch_seed": np.arange(b, dtype=np.int64).reshape(b, 1),
        "dispatch_keep": (np.arange(2 * b) < b).reshape(2 * b, 1),
    }


def hardware_inputs(
    kv_lengths: Sequence[int] | np.ndarray,
    seed: int = 0,
    hw: Any = None,
    config: AttentionConfig | None = None,
) -> dict[str, np.ndarray]:
    """The memory image of :func:`hardware`'s graphs: :func:`inputs` of :data:`HW` (or
    ``config``) with every float tensor rounded to fixed point (``hw.frac_bits`` fraction bits,
    saturated to ``hw.elem_dtype``), or to BF16 under a BF16 ``hw``, and the metadata as int32
    (``dispatch_keep`` as 0/1)."""
    from step_hw.config import HwConfig

    hw = hw or HwConfig()
    config = replace(config or HW, dtype=hw.elem_dtype)
    mem = inputs(replace(config, dtype="float32"), kv_lengths, seed)
    out = {}
    for name, x in mem.items():
        if x.dtype.kind == "f" and hw.is_float:
            out[name] = x.astype(dtype(hw.elem_dtype).numpy)
        elif x.dtype.kind == "f":
            info = np.iinfo(np.dtype(hw.elem_dtype))
            q = np.round(x.astype(np.float64) * 2**hw.frac_bits)
            out[name] = np.clip(q, info.min, info.max).astype(hw.elem_dtype)
        else:
            out[name] = x.astype(_HW_META)
    return out


def kv_lengths_of(config: AttentionConfig, memory: Mapping[str, np.ndarray]) -> np.ndarray:
    """The KV lengths a memory image encodes: ``(n_tiles - 1) * kv_tile + offset``."""
    n = np.asarray(memory["n_tiles"]).reshape(-1)
    off = np.asarray(memory["offset"]).reshape(-1)
    return (n - 1) * config.kv_tile + off


def reference(config: AttentionConfig, memory: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Plain numpy: the expected ``out`` and the K/V caches after the append (float64 maths)."""
    kv = kv_lengths_of(config, memory)
    ml = config.max_len
    dt = dtype(config.dtype).numpy
    k_cache = np.array(memory["k_cache"], copy=True)
    v_cache = np.array(memory["v_cache"], copy=True)
    out = np.zeros_like(np.asarray(memory["q"]))
    qr = config.q_rows
    for b, n in enumerate(kv):
        k_cache[b * ml + n] = memory["k_new"][b]
        v_cache[b * ml + n] = memory["v_new"][b]
        keys = k_cache[b * ml : b * ml + n + 1].astype(np.float64)
        vals = v_cache[b * ml : b * ml + n + 1].astype(np.float64)
        q = memory["q"][b * qr : (b + 1) * qr].astype(np.float64)
        w = np.exp(q @ keys.T)  # no max-subtraction, as the graph
        out[b * qr : (b + 1) * qr] = ((w @ vals) / w.sum(axis=1, keepdims=True)).astype(dt)
    return {"out": out, "k_cache": k_cache, "v_cache": v_cache}


# ---------------------------------------------------------------------------------------------
# Costs


def evaluate(m: Metrics, graph: Graph, result: InterpretResult) -> Metrics:
    """Metrics of ``graph`` with the dims a run of it observed.

    Regular symbols take their values from ``result.bindings``. A ragged symbol (here: KV tiles
    per request) has no single value; it is replaced by its mean over the stream it indexes
    (data tokens divided by the product of the stream's other dims), which makes every
    cardinality ``n * T`` - and so traffic, FLOPs and on-chip sizes that scale with it - exact.
    """
    known: dict[sp.Symbol, sp.Expr] = {k: sp.Integer(v) for k, v in result.bindings.regular.items()}
    for node in graph.nodes.values():
        for s in node.outputs:
            rag = [d for d in s.shape if isinstance(d, RaggedSymbol)]
            if len(rag) != 1 or rag[0] in known:
                continue
            others = sp.Mul(*[sp.sympify(d) for d in s.shape if d is not rag[0]]).subs(known)
            if others.free_symbols:
                continue
            count = sum(1 for tok in result.tokens(s) if is_data(tok))
            known[rag[0]] = sp.Rational(count, int(others)) if others else sp.Integer(0)

    def ev(x):
        if isinstance(x, int):
            return x
        y = sp.sympify(x).xreplace(known)
        return int(y) if y.is_Integer else y

    # Metrics.evaluate takes integers only, hence the substitution here.
    nodes = tuple(
        NodeCost(n.name, n.kind, ev(n.onchip_bytes), ev(n.offchip_bytes), ev(n.flops))
        for n in m.nodes
    )
    return Metrics(m.convention, nodes)


def main(argv: Sequence[str] | None = None) -> None:
    """Build every schedule for one batch, run it, and print its size and costs."""
    ap = argparse.ArgumentParser(
        prog="python -m examples.attention", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--batch", type=int, default=16, help="requests of the synthetic batch (default 16)"
    )
    ap.add_argument("--regions", type=int, default=4, help="parallel regions (default 4)")
    ap.add_argument(
        "--mean", type=float, default=400.0, help="median synthetic KV length (default 400)"
    )
    ap.add_argument(
        "--trace", help="a recorded KV-length trace (.npy) instead of synthetic lengths"
    )
    args = ap.parse_args(argv)
    # Bad arguments (and unreadable traces) are usage errors: one line, exit status 2.
    try:
        if args.regions < 1:
            raise ValueError(f"--regions must be a positive integer, not {args.regions}")
        if args.trace:
            kv = load_kv_lengths(args.trace)
            source = args.trace
        else:
            if args.batch < 1:
                raise ValueError(f"--batch must be a positive integer, not {args.batch}")
            kv = synthetic_kv_lengths(args.batch, mean=args.mean, high=QWEN.max_len - 1, seed=0)
            source = f"synthetic (median {args.mean:g}, seed 0)"
        # the paper pads the cache to the batch's longest request
        config = fit_cache(QWEN, kv)
        for schedule in SCHEDULES:
            _check_build_args(config, schedule, len(kv), args.regions)
    except ValueError as exc:  # TraceError included
        ap.error(str(exc))
    memory = inputs(config, kv)
    want = reference(config, memory)
    print(
        f"{config}\nbatch {len(kv)}, {args.regions} regions, KV lengths from {source}:\n  {kv.tolist()}"
    )
    for schedule in SCHEDULES:
        g = build(config, schedule, len(kv), args.regions)
        kinds = Counter(n.kind for n in g.nodes.values())
        m = metrics(g, "paper")  # inserts the broadcasts
        result = interpret(g, memory)
        if not np.allclose(result.memory["out"], want["out"], rtol=1e-4, atol=1e-6):
            raise SystemExit(f"{schedule}: the graph's output differs from the numpy reference")
        ev = evaluate(m, g, result)
        per_region = [sum(map(is_data, result.tokens(f"ids{r}.out"))) for r in range(args.regions)]
        print(
            f"\n{schedule}: {sum(kinds.values())} nodes (+{len(g.nodes) - sum(kinds.values())} broadcasts), requests per region {per_region}"
        )
        print("  " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
        for label, attr in (
            ("off-chip bytes", "offchip_bytes"),
            ("on-chip bytes", "onchip_bytes"),
            ("FLOPs", "flops"),
        ):
            print(f"  {label:<14} {getattr(m, attr)}")
            print(f"  {'':<14} = {getattr(ev, attr):,}")


if __name__ == "__main__":
    main()
