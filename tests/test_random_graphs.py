"""Random multi-operator graphs: the interpreter and the simulator agree token for token.

Hypothesis draws a Source of integer tiles, an optional route (two branches with a Map each:
Partition by a selector stream and Reassemble by the same selectors, or Partition or
Parallelize and an EagerMerge in arrival order; of the tiles, or of a Zip's pairs of them) and
a chain of shape, memory and higher-order operators (Map, Map of a Zip, RetileStreamify, Accum,
Scan, ...), each drawn among those that fit the current stream, and half the time a Zip of the
result with itself into the Sink. Every stream of the graph must
carry the same tokens in ``interpret`` and in ``simulate`` under both timing profiles (``paper``
and ``rtl``): timing may differ, values, stops and their order may not; where an EagerMerge
chooses by arrival, the interpreter replays the order the profile chose. The graphs compute with
the hardware's arithmetic (``numerics.functions``), which the ``rtl`` profile needs.

:func:`dispatch_graphs` draws the dynamic attention's loop instead: requests dealt to the region
that frees up first, the regions' done signals fed back through a ``Feedback`` into an
EagerMerge with the regions' ids (every EagerMerge's order replayed).

:func:`memory_graphs` draws graphs around off-chip memory instead (a matrix, or a 3-D tensor of
one or two matrices): a linear load (row-major, column-major, or re-reading the tensor or each
tile; once, or once per element of a reference stream of rank 0 to 2) or a random load of
tiles or blocks (``fetch``) at addresses from a list, from KV-cache rows of 0 or more tiles
(a FlatMap of ``cache_read_addr``: ragged, possibly empty) or from one-hot expert selectors (a
FlatMap of ``expert_addr``), an optional second load added to it, an optional route, a chain of
the same stages,
and a linear store, a random store (distinct or repeated addresses), a random store back into
the loaded tensor or a Sink, with the graph's own queue depths (1 to 4 tokens) on half of them.
Their off-chip tensors must also be equal. A store back races with the loads unless every write
follows the reads of its tile through the streams: then the simulator under both profiles and
the interpreter all raise ``StepRaceError``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import simulate
from sim.profiles import RtlProfile
from step_hw.config import HwConfig
from step_hw.graph_rules import check_graph
from step_lang import (
    DONE,
    Accum,
    Bufferize,
    EagerMerge,
    Expand,
    Feedback,
    FixedOrder,
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
    RandomOffChipStore,
    Reassemble,
    RepeatStatic,
    Reshape,
    RetileStreamify,
    Scan,
    Selector,
    Sink,
    Source,
    Stop,
    Streamify,
    StreamType,
    Tile,
    Zip,
    interpret,
    numerics,
)
from step_lang import functions as F
from step_lang.dims import ragged, regular
from step_lang.errors import StepRaceError, StepTypeError
from step_lang.ops import BufferValue
from step_lang.passes import lower
from tests.oracle import nest_leaves

ELEM = Tile("int32", 1, 2)
#: The hardware the rtl profile times, whose arithmetic (``numerics.functions``) the graphs are
#: drawn with: the profile refuses a function no block computes (``step_hw.unit_functions``).
STREAM_HW = HwConfig(elem_dtype=ELEM.dtype.name)
MEMORY_HW = HwConfig()


def same_token(a: Any, b: Any) -> bool:
    """Token equality: stops by level, arrays by dtype, shape and values, buffers by content."""
    if isinstance(a, Stop) or isinstance(b, Stop):
        return isinstance(a, Stop) and isinstance(b, Stop) and a.level == b.level
    if a is DONE or b is DONE:
        return a is b
    if isinstance(a, BufferValue) or isinstance(b, BufferValue):
        return (
            isinstance(a, BufferValue)
            and isinstance(b, BufferValue)
            and a.rank == b.rank
            and same_tokens(list(a.tokens), list(b.tokens))
        )
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and same_tokens(list(a), list(b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def same_tokens(a: list, b: list) -> bool:
    return len(a) == len(b) and all(same_token(x, y) for x, y in zip(a, b, strict=True))


# -- the graph generator --------------------------------------------------------------------------


def _unary_stage(draw, x, k: int, empty: bool, fns: Any = F):
    """One operator on ``x`` (a stream of ``ELEM`` tiles), chosen among those that fit its rank;
    ``fns`` supplies ``add`` and ``accum_add`` (``step_lang.functions``, or the hardware's
    ``numerics.functions(config)``).

    With ``empty`` vectors in the input, no operator adds an innermost dim (RepeatStatic,
    Reshape, Promote at rank 0) and Flatten keeps ``lo = 0``: an empty vector given a new inner
    dim becomes an empty non-innermost dim, written in canonical form as a lone stop, which a
    later Bufferize or Flatten(lo >= 1) passes on where the type promises full inner vectors and
    the interpreter's type check refuses (a limitation of the canonical form, reported with the
    issue).
    """
    r = x.rank
    options = ["map_add", "zip", "retile", "repeat", "promote", "reshape", "expand"]
    if r >= 1:
        options += ["accum", "scan", "flatten", "buffer"]
    if r >= 3:  # keep streams small: no further rank growth
        options = [o for o in options if o not in ("repeat", "promote", "buffer", "expand")]
    if empty:
        options = [
            o
            for o in options
            if o not in ("repeat", "reshape", "expand") and (o, r) != ("promote", 0)
        ]
    op = draw(st.sampled_from(options))
    name = f"{op}{k}"
    if op == "map_add":
        return Map(x, x, fn=fns.add, name=name).out  # fan-out: a Broadcast is inserted
    if op == "zip":  # pairs of x with itself, added by a Map of the tuples
        return Map(Zip(x, x, name=f"pair{k}").out, fn=fns.add, name=name).out
    if op == "retile":  # every tile into its rows or its columns
        return RetileStreamify(x, split=draw(st.sampled_from(["rows", "cols"])), name=name).out
    if op == "scan":
        return Scan(x, fn=fns.accum_add, rank=draw(st.integers(1, r)), name=name).out
    if op == "accum":
        return Accum(x, fn=fns.accum_add, rank=draw(st.integers(1, r)), name=name).out
    if op == "repeat":
        return RepeatStatic(x, draw(st.integers(1, 3)), name=name).out
    if op == "promote":
        return Promote(x, draw(st.integers(1 if empty else 0, r)), name=name).out
    if op == "flatten":
        lo = 0 if empty else draw(st.integers(0, r - 1))
        return Flatten(x, lo, draw(st.integers(lo + 1, r)), name=name).out
    if op == "expand":  # each element over a new inner dim, the copies x's own (a fan-out)
        copies = RepeatStatic(x, draw(st.integers(1, 3)), name=f"copies{k}").out
        return Expand(Promote(x, 0, name=f"lift{k}").out, copies, 1, name=name).out
    if op == "reshape":
        pad = np.full((x.elem.rows, x.elem.cols), -1, x.elem.dtype.numpy)
        return Reshape(x, draw(st.integers(1, 3)), pad=pad, name=name).out
    # Bufferize the innermost dims and replay each buffer 1-2 times.
    bz = Bufferize(x, draw(st.integers(1, r)), name=f"bz{k}").out
    return Streamify(bz, repeat=(draw(st.integers(1, 2)),), name=name).out


#: How :func:`_route` splits a stream into two branches and joins them again.
ROUTES = ("reassemble", "merge", "parallel")


def _route(draw, g: Graph, x, rank: int, inputs: dict[str, Any], fns: Any):
    """``x``'s chunks of ``rank`` inner dims through two branches (``Map`` of ``add`` and of
    ``sub`` on each chunk with itself) and back, in one of three ways (:data:`ROUTES`):
    ``Partition`` by a selector stream (``inputs["sel"]``: one or both branches per chunk) and
    ``Reassemble`` by the same selectors; the same ``Partition`` and an ``EagerMerge`` in
    arrival order; or ``Parallelize`` (chunks dealt round robin) and an ``EagerMerge``. An
    EagerMerge's ``sel`` output goes to a Sink (``merge_sel``): the order it chose, which the
    interpreter replays (:func:`_agree`). Half the time the routers move ``Zip(x, x)``'s tuples
    instead, and each branch's Map takes a tuple apart (``Map(part, fn=add)``)."""
    kind = draw(st.sampled_from(ROUTES))
    zipped = draw(st.booleans())
    if zipped:
        x = Zip(x, x, name="pairs").out
    if kind == "parallel":
        parts = Parallelize(x, 2, rank, name="deal").outputs
    else:
        outer = tuple(int(d) for d in x.shape[: len(x.shape) - rank])
        sel = Source(g, StreamType(Selector(2), outer), name="sel").out
        choice = st.sampled_from([(1, 0), (0, 1), (1, 1)])
        inputs["sel"] = nest_leaves(outer, lambda: np.array(draw(choice), bool))
        parts = Partition(x, sel, rank=rank, name="part").outputs
    branches = [
        Map(*[parts[0]] * (1 if zipped else 2), fn=fns.add, name="twice").out,
        Map(*[parts[1]] * (1 if zipped else 2), fn=fns.sub, name="zero").out,
    ]
    if kind == "reassemble":
        return Reassemble(branches, sel, name="gather").out
    merge = EagerMerge(branches, name="merge")
    Sink(merge.outputs[1], name="merge_sel")
    return merge.outputs[0]


@st.composite
def graphs(draw, elem: Tile = ELEM, fns: Any = F):
    """``(graph, inputs)``: a random graph of ``elem`` tiles (1x2) and the tokens of its Sources;
    ``fns`` as for :func:`_unary_stage` (``tests/test_random_graphs_rtl.py`` draws graphs with
    the hardware's arithmetic)."""
    g = Graph("rand")
    outer = draw(st.integers(1, 3))
    inner = draw(st.lists(st.integers(0, 3), min_size=outer, max_size=outer))
    values = st.integers(-50, 50)
    dtype = elem.dtype.numpy
    data = [[np.array([[draw(values), draw(values)]], dtype) for _ in range(n)] for n in inner]
    # Vectors of different lengths (or empty ones) make a ragged innermost dim.
    shape = (outer, inner[0]) if len(set(inner)) == 1 and inner[0] else (outer, ragged("len"))
    x = Source(g, StreamType(elem, shape), name="x").out
    inputs: dict[str, Any] = {"x": data}
    if draw(st.booleans()):  # each vector through two branches and back
        x = _route(draw, g, x, 1, inputs, fns)
    for k in range(draw(st.integers(1, 4))):
        x = _unary_stage(draw, x, k, empty=0 in inner, fns=fns)
    if draw(st.booleans()):  # the Sink takes pairs whole: a top-level port of tuples
        x = Zip(x, x, name="out_pairs").out
    Sink(x, name="sink")
    return g, inputs


def _ack_stage(draw, acks, k: int):
    """A shape operator on a stream of acknowledgements (``[1,1]`` bool tiles), which the
    hardware moves as any tile: Promote, Flatten or RepeatStatic."""
    r = acks.rank
    options = (["promote"] if r < 3 else []) + ["repeat"] + (["flatten"] if r >= 1 else [])
    op = draw(st.sampled_from(options))
    name = f"ack_{op}{k}"
    if op == "promote":
        return Promote(acks, draw(st.integers(0, r)), name=name).out
    if op == "flatten":
        lo = draw(st.integers(0, r - 1))
        return Flatten(acks, lo, draw(st.integers(lo + 1, r)), name=name).out
    return RepeatStatic(acks, draw(st.integers(1, 2)), name=name).out


ADDRESS = Tile("int32", 1, 1)
# Tile shapes of memory graphs: all fit the hardware's default 4 x 4 (``HwConfig()``).
MEMORY_TILES = ((1, 2), (2, 2), (4, 4), (1, 4), (4, 1), (2, 4))


def _walk(draw, rows: int, cols: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(out_shape, stride)`` of a linear load over a ``rows`` x ``cols`` grid of tiles."""
    kind = draw(st.sampled_from(["rows", "cols", "again", "each"]))
    if kind == "rows":
        return (rows, cols), (cols, 1)
    if kind == "cols":
        return (cols, rows), (1, cols)
    k = draw(st.integers(2, 3))
    if kind == "again":  # the whole tensor k times (stride 0 outermost)
        return (k, rows, cols), (0, cols, 1)
    return (rows, cols, k), (cols, 1, 0)  # each tile k times


#: How :func:`_addresses` makes a random load's addresses.
ADDRESSINGS = ("list", "cache rows", "experts")


def _addresses(draw, g: Graph, units: int, inputs: dict[str, Any], empty_rows: bool):
    """A stream of addresses below ``units`` for a random load, made one of three ways
    (:data:`ADDRESSINGS`): a list from a Source (``raddr``, 1 to 6 addresses); the tiles of
    1 to 3 KV-cache rows (``numerics.cache_read_addr``: a request index and a tile count each,
    0 included, per row of ``row`` tiles: a ragged stream, empty when every count is 0), in one
    or two groups; or each selected expert's ``tiles_per_expert`` tiles from one-hot selectors
    (``numerics.expert_addr``, over ``experts`` experts after ``base``). Rows of 0 tiles only
    with ``empty_rows``: a load of fetch blocks would make them empty dims that are not
    innermost, which the canonical form cannot carry through every stage (``_unary_stage``)."""
    kind = draw(st.sampled_from(ADDRESSINGS))
    if kind == "list":
        n = draw(st.integers(1, 6))
        inputs["raddr"] = [
            np.full((1, 1), draw(st.integers(0, units - 1)), np.int32) for _ in range(n)
        ]
        return Source(g, StreamType(ADDRESS, (n,)), name="raddr").out
    if kind == "cache rows":
        row = draw(st.integers(1, units))
        shape = draw(st.sampled_from([(1,), (2,), (3,), (2, 1), (2, 2)]))
        ids = st.integers(0, units // row - 1)
        inputs["rid"] = nest_leaves(shape, lambda: np.full((1, 1), draw(ids), np.int32))
        lengths = st.integers(0 if empty_rows else 1, row)
        inputs["rlen"] = nest_leaves(shape, lambda: np.full((1, 1), draw(lengths), np.int32))
        rid = Source(g, StreamType(ADDRESS, shape), name="rid").out
        rlen = Source(g, StreamType(ADDRESS, shape), name="rlen").out
        return FlatMap(rid, rlen, fn=numerics.cache_read_addr(row), name="rows").out
    per = draw(st.integers(1, units))
    experts = draw(st.integers(1, units // per))
    base = draw(st.integers(0, units - experts * per))
    n = draw(st.integers(1, 4))
    hot = st.integers(0, experts - 1)
    inputs["rsel"] = [np.arange(experts) == draw(hot) for _ in range(n)]
    sel = Source(g, StreamType(Selector(experts), (n,)), name="rsel").out
    return FlatMap(sel, fn=numerics.expert_addr(per, base), name="experts").out


@st.composite
def memory_graphs(draw, dtype: str = "int16", fns: Any = F):
    """``(graph, memory, inputs)``: a random graph around off-chip memory (module docstring);
    ``fns`` as for :func:`_unary_stage`."""
    g = Graph("memrand")
    th, tw = draw(st.sampled_from(MEMORY_TILES))
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    batch = draw(st.sampled_from([None, 1, 2]))  # a 3-D tensor of `batch` matrices
    shape = (th * rows, tw * cols) if batch is None else (batch, th * rows, tw * cols)
    size = int(np.prod(shape))
    values = lambda: np.array(  # noqa: E731
        draw(st.lists(st.integers(-50, 50), min_size=size, max_size=size)), dtype
    ).reshape(shape)
    memory: dict[str, np.ndarray] = {"a": values()}
    inputs: dict[str, Any] = {}
    a = g.tensor("a", shape, dtype)
    empty = False  # vectors of the load's output may be empty (``_unary_stage``)
    if draw(st.booleans()):
        if batch is None:
            out_shape, stride = _walk(draw, rows, cols)
        else:  # the tiles in order, once or twice
            k = draw(st.integers(1, 2))
            out_shape, stride = (k, batch, rows, cols), (0, rows * cols, cols, 1)
        ref = None
        if draw(st.booleans()):  # the walk once per element of a reference stream
            ref_shape = draw(st.sampled_from([(1,), (2,), (3,), (1, 2), (2, 2), (1, 2, 2)]))
            ref = Source(g, StreamType(ADDRESS, ref_shape), name="ref").out
            inputs["ref"] = nest_leaves(ref_shape, lambda: np.zeros((1, 1), np.int32))
            if len(out_shape) + len(ref_shape) > 5:  # rank <= 4, room for the stages' levels
                out_shape, stride = out_shape[-2:], stride[-2:]
        walk = {"tile": (th, tw), "out_shape": out_shape, "stride": stride, "ref": ref}
        x = LinearOffChipLoad(a, **walk, name="ld").out
        if draw(st.booleans()):
            memory["b"] = values()
            b = g.tensor("b", shape, dtype)
            x = Map(x, LinearOffChipLoad(b, **walk, name="ldb").out, fn=fns.add, name="sum").out
    else:
        # single tiles, or blocks of fr x fc tiles (``fetch``)
        fr = draw(st.sampled_from([d for d in (1, 2, 3) if rows % d == 0]))
        fc = draw(st.sampled_from([d for d in (1, 2, 3) if cols % d == 0]))
        fetch = None if (fr, fc) == (1, 1) and draw(st.booleans()) else (fr, fc)
        units = (batch or 1) * (rows // fr) * (cols // fc)
        src = _addresses(draw, g, units, inputs, empty_rows=fetch is None)
        x = RandomOffChipLoad(src, a, tile=(th, tw), fetch=fetch, name="rld").out
        empty = not all(isinstance(d, int) for d in src.shape)  # a count of 0 empties a row
    # a route's selectors come from a Source, whose dims are static: its chunks take the
    # ragged dims in
    ragged_in = len(x.shape) - next(
        (i for i, d in enumerate(x.shape) if not isinstance(d, int)), len(x.shape)
    )
    if ragged_in <= min(1, x.rank) and draw(st.booleans()):  # tiles or vectors, two branches
        x = _route(draw, g, x, draw(st.integers(ragged_in, min(1, x.rank))), inputs, fns)
    for k in range(draw(st.integers(0, 3))):
        x = _unary_stage(draw, x, k, empty=empty, fns=fns)
    tiles_out = x.type.cardinality
    storable = (
        isinstance(tiles_out, int)
        and tiles_out >= 1
        and (x.elem.rows, x.elem.cols) == (th, tw)
        and all(isinstance(d, int) for d in x.shape)
    )
    end = draw(st.sampled_from(["sink", "store", "random store", "write back"]))
    if storable and end == "write back" and x.elem.dtype == a.dtype:
        # into the tensor the loads read: ordered or racing, as the addresses fall
        units = (batch or 1) * rows * cols
        dims = tuple(int(d) for d in x.shape)
        addresses = iter(
            draw(st.lists(st.integers(0, units - 1), min_size=tiles_out, max_size=tiles_out))
        )
        waddr = Source(g, StreamType(ADDRESS, dims), name="waddr").out
        inputs["waddr"] = nest_leaves(dims, lambda: np.full((1, 1), next(addresses), np.int32))
        Sink(RandomOffChipStore(waddr, x, a, name="wb").out, name="acks")
    elif storable and end == "store":
        LinearOffChipStore(x, g.tensor("c", (th * tiles_out, tw), dtype), name="st")
    elif storable and end == "random store":
        slots = draw(st.integers(tiles_out, tiles_out + 2))
        order = draw(st.lists(st.integers(0, slots - 1), min_size=tiles_out,
                              max_size=tiles_out, unique=draw(st.booleans())))  # fmt: skip
        addresses = iter(order)
        dims = tuple(int(d) for d in x.shape)
        waddr = Source(g, StreamType(ADDRESS, dims), name="waddr").out
        inputs["waddr"] = nest_leaves(dims, lambda: np.full((1, 1), next(addresses), np.int32))
        c = g.tensor("c", (th * slots, tw), dtype)
        memory["c"] = np.zeros((th * slots, tw), dtype)
        acks = RandomOffChipStore(waddr, x, c, name="rst").out
        for k in range(draw(st.integers(0, 2))):  # blocks that read the acks as they come
            acks = _ack_stage(draw, acks, k)
        Sink(acks, name="acks")
    else:
        Sink(x, name="sink")
    if draw(st.booleans()):
        for node in list(g.nodes.values()):
            for stream in node.outputs:
                g.set_queue_depth(stream, draw(st.integers(1, 4)))
    return g, memory, inputs


ID = Tile("int32", 1, 1)


@st.composite
def dispatch_graphs(draw, elem: Tile = ELEM, fns: Any = F):
    """``(graph, inputs)``: ``n`` requests (``elem`` tiles, ``[n, 1]``) dealt to 1 to 3 regions
    in the order the regions free up, the loop of the dynamic attention (``examples/attention``)
    closed by a ``Feedback``: the availability stream is an EagerMerge of the regions' ids (a
    Source, in a random order) and of the ids the regions send back, one per request done; the
    first ``n`` of them pick each request's region (``region_select``), the last are cut off. A
    region adds each request to itself, then optionally scans it or repeats it 2 to 3 times; its
    done signal is a count of the request's tokens mapped to its id. The regions' results go to
    Sinks, to an EagerMerge, or back in request order (Reassemble by the same selectors)."""
    from examples.attention import region_id, region_select

    g = Graph("dispatch")
    regions, n = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    values = st.integers(-50, 50)
    dtype = elem.dtype.numpy
    inputs: dict[str, Any] = {
        "x": [[np.array([[draw(values), draw(values)]], dtype)] for _ in range(n)],
        "seed": [np.full((1, 1), r, np.int32) for r in draw(st.permutations(range(regions)))],
        "keep": [np.full((1, 1), int(i < n), np.int32) for i in range(n + regions)],
    }
    x = Source(g, StreamType(elem, (n, 1)), name="x").out
    free = Feedback(g, StreamType(ID, (regular("freed"),)), name="free")
    avail = EagerMerge([Source(g, StreamType(ID, (regions,)), name="seed").out, free.out],
                       name="avail")  # fmt: skip
    Sink(avail.output("sel"), name="avail_sel")
    keep = Source(g, StreamType(ID, (n + regions,)), name="keep").out
    keep = Map(keep, fn=F.to_selector(1), name="keep_sel").out
    granted = Partition(avail.output("data"), keep, 0, name="cut").outputs[0]
    route = Map(granted, fn=region_select(regions), name="route").out
    results, done = [], []
    for r, part in enumerate(Partition(x, route, 1, name="deal").outputs):
        y = Map(part, part, fn=fns.add, name=f"work{r}").out
        extra = draw(st.sampled_from(["none", "scan", "repeat"]))
        if extra == "scan":
            y = Scan(y, fn=fns.accum_add, rank=1, name=f"scan{r}").out
        elif extra == "repeat":
            y = RepeatStatic(y, draw(st.integers(2, 3)), name=f"repeat{r}").out
        results.append(y)
        count = Accum(y, fn=numerics.accum_count("int32"), rank=len(y.shape) - 1,
                      name=f"count{r}").out  # fmt: skip
        done.append(Map(count, fn=region_id(r, "int32"), name=f"done{r}").out)
    back = EagerMerge(done, name="back")
    Sink(back.output("sel"), name="back_sel")
    free.bind(back.output("data"))
    end = draw(st.sampled_from(["sinks", "merge", "reassemble"]))
    alike = len({tuple(map(str, y.shape[1:])) for y in results}) == 1  # the same inner dims
    if end == "reassemble" and alike:
        Sink(Reassemble(results, route, name="gather").out, name="sink")
    elif end == "merge" and alike:
        merged = EagerMerge(results, name="merge")
        Sink(merged.output("sel"), name="merge_sel")
        Sink(merged.output("data"), name="sink")
    else:
        for r, y in enumerate(results):
            Sink(y, name=f"sink{r}")
    return g, inputs


_SIM_SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=500, **_SIM_SETTINGS)
@given(graphs(fns=numerics.functions(STREAM_HW)))
def test_interpreter_and_simulator_agree_token_for_token(case):
    g, inputs = case
    _agree(g, {}, inputs, STREAM_HW)


def _agree(
    g: Graph, memory: dict[str, np.ndarray], inputs: dict[str, Any], config: HwConfig
) -> None:
    """Every stream the simulator records, under both profiles (the rtl profile's hardware
    ``config``), carries the interpreter's tokens, and every off-chip tensor ends equal. The
    rtl profile refuses a graph only for a rule of the hardware (``step_hw.graph_rules``: e.g. a
    buffer with no bound, a fetch block not consecutive in its tensor), with that rule's
    message. Where an EagerMerge chooses by arrival, the interpreter replays the order the
    profile's run chose (its ``sel`` stream)."""
    merges = [n.name for n in lower(g).nodes.values() if isinstance(n, EagerMerge)]
    for profile in (None, RtlProfile(config)):
        label = type(profile).__name__ if profile else "paper"
        try:
            got = simulate(g, memory, inputs=inputs, profile=profile)
        except StepTypeError as exc:
            if profile is None:
                raise
            with pytest.raises(StepTypeError, match="^" + re.escape(str(exc)) + "$"):
                check_graph(lower(g), config)
            continue
        except StepRaceError:
            if not merges:  # every node takes the same tokens in the same order: a race there too
                with pytest.raises(StepRaceError):
                    interpret(g, memory, inputs=inputs)
            continue
        orders = {m: FixedOrder.from_selectors(got.streams[f"{m}.sel"]) for m in merges}
        # the same takes in every node: the interpreter finds no race either
        want = interpret(g, memory, inputs=inputs, merge_policy=orders)
        assert set(got.streams) <= {k for k in want.streams if isinstance(k, str)}
        for name, tokens in got.streams.items():
            assert same_tokens(tokens, want.tokens(name)), (
                f"{label}: stream {name} differs:\n"
                f"  simulate  {tokens}\n  interpret {want.tokens(name)}"
            )
        assert got.streams, "the simulator recorded no streams"
        assert set(got.memory) == set(want.memory)
        for tensor, value in want.memory.items():
            assert np.array_equal(got.memory[tensor], value), f"{label}: tensor {tensor} differs"


@settings(max_examples=300, **_SIM_SETTINGS)
@given(memory_graphs(MEMORY_HW.elem_dtype, numerics.functions(MEMORY_HW)))
def test_interpreter_and_simulator_agree_on_graphs_with_memory(case):
    _agree(*case, MEMORY_HW)


@settings(max_examples=100, **_SIM_SETTINGS)
@given(dispatch_graphs(fns=numerics.functions(STREAM_HW)))
def test_interpreter_and_simulator_agree_on_dispatch_loops(case):
    g, inputs = case
    _agree(g, {}, inputs, STREAM_HW)
