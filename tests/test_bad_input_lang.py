"""Bad input to the language: every operator's ports and parameters, functions, dtypes, shapes.

A corpus of misuses, each with the message it must give (an anchored regex naming the operator,
the port or parameter, and the offending value): never a traceback from deep inside, never a
silent result. Complements ``test_lang_errors.py`` (one hand-written case per rule) with tables
that sweep each parameter over wrong types and out-of-range values.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp

from step_lang import (
    Accum,
    Broadcast,
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
    StepRuntimeError,
    StepTypeError,
    StepValueError,
    Streamify,
    StreamType,
    Tile,
    Zip,
    interpret,
    metrics,
    numerics,
    to_tokens,
    tokens_to_array,
)
from step_lang import functions as F
from step_lang.dims import ragged
from step_lang.functions import checked_cast
from step_lang.tokens import DONE
from step_lang.types import dtype

F32 = "Tile<float32, 2x2>"
# Wrong types and values for integer parameters, as the user would write them.
NOT_INTS = [1.5, True, "2", None]


def src(g: Graph, shape: tuple, elem=None, name: str = "a"):
    """The output of a Source of ``shape`` (default element: a 2x2 float32 tile)."""
    elem = elem if elem is not None else Tile("float32", 2, 2)
    return Source(g, StreamType(elem, shape), name=name).out


def buffers(g: Graph):
    """A stream of two buffers of 4 elements: ``Strm<Buffer<2x2 f32, [4]>, [2]>``."""
    return Bufferize(src(g, (2, 4)), 1, name="bz").out


CASES: list = []


def case(id_: str, build, message: str, exc: type[BaseException] = StepTypeError) -> None:
    """Record one misuse: ``build(g)`` on a fresh graph must raise ``exc`` with ``message``."""
    CASES.append(pytest.param(build, exc, message, id=id_))


# -- Bufferize and Streamify ------------------------------------------------------------------

for v in [0, 2, -1, *NOT_INTS]:
    case(
        f"bufferize-rank-{v!r}",
        lambda g, v=v: Bufferize(src(g, (2, 4)), v, name="bz"),
        f"Bufferize 'bz', port 'in': rank must be an integer in [1, 1] for input "
        f"Strm<{F32}, [2, 4]>, not {v!r}",
    )
for v in [(0,), (-1,), (1.5,), (True,), (2, 0)]:
    case(
        f"streamify-repeat-{v!r}",
        lambda g, v=v: Streamify(buffers(g), repeat=v, name="sf"),
        f"Streamify 'sf', port 'repeat': repeat must be positive integers, not {list(v)}",
    )
for v in [3, None, "2"]:
    case(
        f"streamify-repeat-not-a-sequence-{v!r}",
        lambda g, v=v: Streamify(buffers(g), repeat=v, name="sf"),
        f"Streamify 'sf', port 'repeat': repeat must be a sequence of integers, not {v!r}",
    )
for param in ("out_shape", "stride"):
    for v in [2, "2"]:
        affine = {"out_shape": (2,), "stride": (1,), param: v}
        case(
            f"streamify-{param}-not-a-sequence-{v!r}",
            lambda g, affine=affine: Streamify(buffers(g), **affine, name="sf"),
            f"Streamify 'sf', port '{param}': {param} must be a sequence of integers, not {v!r}",
        )
for v in [-1, -4, 1.5, True, "0", None]:
    case(
        f"streamify-base-{v!r}",
        lambda g, v=v: Streamify(buffers(g), stride=(1,), out_shape=(2,), base=v, name="sf"),
        f"Streamify 'sf', port 'base': base must be a non-negative element index, not {v!r}",
    )
for v in [(1,), (0, 0), (1, 2), 1, "01", (True,), (0, "x"), (None, 0), ("x",), (0.0,)]:
    case(
        f"streamify-order-{v!r}",
        lambda g, v=v: Streamify(buffers(g), order=v, name="sf"),
        f"Streamify 'sf', port 'order': order {list(v)} is not a permutation of the 1 buffer dims"
        if isinstance(v, tuple)
        else f"Streamify 'sf', port 'order': order must be a permutation of range(1), not {v!r}",
    )
case(
    "streamify-order-with-affine-read",
    lambda g: Streamify(buffers(g), order=(0,), stride=(1,), out_shape=(2,), name="sf"),
    "Streamify 'sf', port 'order': give either order or an affine read (stride, out_shape), "
    "not both",
)
case(
    "streamify-order-two-dynamic-dims",
    lambda g: Streamify(
        Bufferize(src(g, (1, "n", "m")), 2, name="bz").out, order=(1, 0), name="sf"
    ),
    "Streamify 'sf', port 'order': a permuted read of Buffer<Tile<float32, 2x2>, [n, m]> needs "
    "at most one dynamic buffer dim, not 2 (the extents are taken from the buffer's element "
    "count)",
)
case(
    "streamify-base-without-affine-read",
    lambda g: Streamify(buffers(g), repeat=(2,), base=1, name="sf"),
    "Streamify 'sf', port 'base': base 1 needs an affine read (stride and out_shape); "
    "a whole read starts at 0",
)
case(
    "streamify-base-past-buffer",
    lambda g: Streamify(buffers(g), stride=(1,), out_shape=(2,), base=3, name="sf"),
    "Streamify 'sf', port 'stride': the read reaches element #4 of a buffer of 4 elements",
)
for v in [(0,), (-1,), (1.5,), (True,)]:
    case(
        f"streamify-out-shape-{v!r}",
        lambda g, v=v: Streamify(buffers(g), stride=(1,), out_shape=v, name="sf"),
        f"Streamify 'sf', port 'stride': out_shape {list(v)} and stride [1] must be equally long "
        "positive/non-negative integers",
    )
for v in [(-1,), (1.5,), (True,)]:
    case(
        f"streamify-stride-{v!r}",
        lambda g, v=v: Streamify(buffers(g), stride=v, out_shape=(2,), name="sf"),
        f"Streamify 'sf', port 'stride': strides must be non-negative integers, not {list(v)}",
    )
case(
    "streamify-stride-length",
    lambda g: Streamify(buffers(g), stride=(1, 1), out_shape=(2,), name="sf"),
    "Streamify 'sf', port 'stride': out_shape [2] and stride [1, 1] must be equally long "
    "positive/non-negative integers",
)
case(
    "streamify-out-shape-without-stride",
    lambda g: Streamify(buffers(g), out_shape=(2,), name="sf"),
    "Streamify 'sf', port 'stride': an affine read needs both stride and out_shape",
)
case(
    "streamify-ref-not-a-stream",
    lambda g: Streamify(buffers(g), ref=3, name="sf"),
    "Streamify 'sf', port 'ref': expected a Stream, got int",
)
case(
    "streamify-ref-lower-rank",
    lambda g: Streamify(
        Bufferize(src(g, (2, 3, 4)), 1, name="bz").out, ref=src(g, (2,), name="r"), name="sf"
    ),
    f"Streamify 'sf', port 'ref': reference Strm<{F32}, [2]> has lower rank than the buffer "
    f"stream Strm<Buffer<{F32}, [4]>, [2, 3]>",
)

# -- routing ------------------------------------------------------------------------------------

for v in [-1, 2, *NOT_INTS]:
    case(
        f"partition-rank-{v!r}",
        lambda g, v=v: Partition(
            src(g, (2, 4)), src(g, (2,), Selector(2), name="s"), rank=v, name="p"
        ),
        f"Partition 'p', port 'in': rank must be an integer in [0, 1] for input "
        f"Strm<{F32}, [2, 4]>, not {v!r}",
    )
for v in [0, -1, *NOT_INTS]:
    case(
        f"parallelize-n-{v!r}",
        lambda g, v=v: Parallelize(src(g, (2, 4)), v, name="pz"),
        f"Parallelize 'pz', port 'in': n must be a positive integer, not {v!r}",
    )
for v in [-1, 2, 1.5, True, "1"]:
    case(
        f"parallelize-rank-{v!r}",
        lambda g, v=v: Parallelize(src(g, (2, 4)), 2, rank=v, name="pz"),
        f"Parallelize 'pz', port 'in': rank must be an integer in [0, 1] for input "
        f"Strm<{F32}, [2, 4]>, not {v!r}",
    )
for v in [0, -1, *NOT_INTS]:
    case(
        f"broadcast-n-{v!r}",
        lambda g, v=v: Broadcast(src(g, (2, 4)), v, name="bc"),
        f"Broadcast 'bc', port 'in': n must be a positive integer, not {v!r}",
    )
for v in [-1, 1.5, True, "2"]:
    case(
        f"reassemble-count-{v!r}",
        lambda g, v=v: Reassemble(
            [src(g, (2, 3)), src(g, (2, 3), name="b")],
            src(g, (1,), Selector(2), name="s"),
            count=v,
            name="r",
        ),
        f"Reassemble 'r', port 'sel': count must be a non-negative integer, not {v!r}",
    )
case(
    "reassemble-no-inputs",
    lambda g: Reassemble([], src(g, (1,), Selector(1), name="s"), name="r"),
    "Reassemble 'r': cannot tell which graph it belongs to: its first input must be a Stream "
    "(a Graph for Source and Feedback, an OffChipTensor for LinearOffChipLoad)",
)
case(
    "eagermerge-no-inputs",
    lambda g: EagerMerge([], name="em"),
    "EagerMerge 'em': cannot tell which graph it belongs to: its first input must be a Stream "
    "(a Graph for Source and Feedback, an OffChipTensor for LinearOffChipLoad)",
)
case(
    "eagermerge-rank-mismatch",
    lambda g: EagerMerge([src(g, (2, 3)), src(g, (2,), name="b")], name="em"),
    "EagerMerge 'em', port 'in1': rank 0 differs from rank 1 on port 'in0'",
)
case(
    "partition-selector-not-a-stream",
    lambda g: Partition(src(g, (2, 4)), "sel", rank=1, name="p"),
    "Partition 'p', port 'sel': expected a Stream, got str",
)

# -- shape operators ----------------------------------------------------------------------------

for v in [0, -1, *NOT_INTS]:
    case(
        f"reshape-chunk-{v!r}",
        lambda g, v=v: Reshape(src(g, (2, 4)), v, name="rs"),
        f"Reshape 'rs', port 'in': chunk must be a positive integer, not {v!r}",
    )
for v in [-1, 2, *NOT_INTS]:
    case(
        f"reshape-rank-{v!r}",
        lambda g, v=v: Reshape(src(g, (2, 4)), 2, rank=v, name="rs"),
        f"Reshape 'rs', port 'in': rank must be an integer in [0, 1] for input "
        f"Strm<{F32}, [2, 4]>, not {v!r}",
    )
for v in [0, -1, *NOT_INTS]:
    case(
        f"repeat-static-count-{v!r}",
        lambda g, v=v: RepeatStatic(src(g, (2, 4)), v, name="rp"),
        f"RepeatStatic 'rp', port 'in': count must be a positive integer, not {v!r}",
    )
for v in [-1, 2, 1.5, True, "1"]:
    case(
        f"promote-rank-{v!r}",
        lambda g, v=v: Promote(src(g, (2, 4)), v, name="pr"),
        f"Promote 'pr', port 'in': rank must be an integer in [0, 1] for input "
        f"Strm<{F32}, [2, 4]>, not {v!r}",
    )
for v in [-1, 3, 1.5, True, "0"]:
    case(
        f"flatten-lo-{v!r}",
        lambda g, v=v: Flatten(src(g, (1, 5, 4)), v, 2, name="fl"),
        f"Flatten 'fl', port 'in': lo must be an integer in [0, 2] for input "
        f"Strm<{F32}, [1, 5, 4]>, not {v!r}",
    )
for v in [-1, 3, 1.5, True, "2"]:
    case(
        f"flatten-hi-{v!r}",
        lambda g, v=v: Flatten(src(g, (1, 5, 4)), 0, v, name="fl"),
        f"Flatten 'fl', port 'in': hi must be an integer in [0, 2] for input "
        f"Strm<{F32}, [1, 5, 4]>, not {v!r}",
    )
for v in [-1, 2, 1.5, True]:
    case(
        f"expand-rank-{v!r}",
        lambda g, v=v: Expand(src(g, (2, 1)), src(g, (2, 4), name="r"), v, name="ex"),
        f"Expand 'ex', port 'in': rank must be an integer in [1, 1] for input "
        f"Strm<{F32}, [2, 1]>, not {v!r}",
    )
case(
    "expand-ref-not-a-stream",
    lambda g: Expand(src(g, (2, 1)), [1, 2], 1, name="ex"),
    "Expand 'ex', port 'ref': expected a Stream, got list",
)

# -- higher-order -------------------------------------------------------------------------------

for kind, op in (("Accum", Accum), ("Scan", Scan)):
    for v in [0, -1, 2, *NOT_INTS]:
        case(
            f"{kind.lower()}-rank-{v!r}",
            lambda g, v=v, op=op, kind=kind: op(src(g, (1, 4)), fn=F.accum_add, rank=v, name="acc"),
            f"{kind} 'acc', port 'in0': rank must be an integer in [1, 1] for input shape [1, 4], "
            f"not {v!r}",
        )
for v in ["diag", "", None, 1, "ROWS"]:
    case(
        f"retile-split-{v!r}",
        lambda g, v=v: RetileStreamify(src(g, (2, 3)), split=v, name="rt"),
        f"RetileStreamify 'rt', port 'in0': split must be 'rows' or 'cols', not {v!r}",
    )
for fn_name, op, fn, want in (
    ("map", Map, F.accum_add, "a MapFn"),
    ("map", Map, F.retile_rows, "a MapFn"),
    ("accum", Accum, F.retile_rows, "an AccumFn"),
    ("scan", Scan, F.exp, "an AccumFn"),
    ("flatmap", FlatMap, F.accum_max, "a FlatMapFn"),
):
    got = f"{type(fn).__name__} '{fn.name}'"
    kwargs = {"rank": 1} if op in (Accum, Scan) else {}
    case(
        f"{fn_name}-fn-{fn.name}",
        lambda g, op=op, fn=fn, kw=kwargs: op(src(g, (1, 4)), fn=fn, name="h", **kw),
        f"{op.kind} 'h': fn must be {want} from step_lang.functions, got {got}",
    )
for v in [None, "exp", np.exp, 3]:
    case(
        f"map-fn-{type(v).__name__}",
        lambda g, v=v: Map(src(g, (1, 4)), fn=v, name="m"),
        f"Map 'm': fn must be a MapFn from step_lang.functions, got {v!r}",
    )

# -- off-chip memory ----------------------------------------------------------------------------


def _w(g: Graph):
    return g.tensor("w", (8, 8))


for v in [(0, 4), (4,), (4, 4, 4), (-4, 4), (1.5, 4), (True, 4), "4x4", None, 4]:
    case(
        f"load-tile-{v!r}",
        lambda g, v=v: LinearOffChipLoad(_w(g), tile=v, name="ld"),
        f"LinearOffChipLoad 'ld', port 'tile': tile must be a pair of positive integers "
        f"(rows, cols), not {v!r}",
    )
for v in [-1, 1.5, True, "0", None]:
    case(
        f"load-base-{v!r}",
        lambda g, v=v: LinearOffChipLoad(_w(g), tile=(4, 4), out_shape=(1,), base=v, name="ld"),
        f"LinearOffChipLoad 'ld', port 'base': base must be a non-negative tile index, not {v!r}",
    )
for v in [(0,), (-1,), (1.5,), (True,)]:
    case(
        f"load-out-shape-{v!r}",
        lambda g, v=v: LinearOffChipLoad(_w(g), tile=(4, 4), out_shape=v, name="ld"),
        f"LinearOffChipLoad 'ld', port 'out_shape': out_shape must be positive integers (tiles), "
        f"not {list(v)}",
    )
for v in [(-1,), (1.5,), (True,)]:
    case(
        f"load-stride-{v!r}",
        lambda g, v=v: LinearOffChipLoad(_w(g), tile=(4, 4), out_shape=(2,), stride=v, name="ld"),
        f"LinearOffChipLoad 'ld', port 'stride': strides must be non-negative integers (tiles), "
        f"not {list(v)}",
    )
for param in ("out_shape", "stride"):
    for v in [2, "2"]:
        given = {"out_shape": (2,), "stride": (1,), param: v}
        case(
            f"load-{param}-not-a-sequence-{v!r}",
            lambda g, given=given: LinearOffChipLoad(_w(g), tile=(4, 4), **given, name="ld"),
            f"LinearOffChipLoad 'ld', port '{param}': {param} must be a sequence of integers, "
            f"not {v!r}",
        )
for op_name in ("load", "store"):
    for v in [0, -1, 1.5, True, "4"]:
        if op_name == "load":
            build = lambda g, v=v: LinearOffChipLoad(_w(g), tile=(4, 4), elem_bytes=v, name="x")  # noqa: E731
            kind = "LinearOffChipLoad"
        else:
            build = lambda g, v=v: LinearOffChipStore(  # noqa: E731
                src(g, (1, 4), Tile("float32", 4, 4)), _w(g), elem_bytes=v, name="x"
            )
            kind = "LinearOffChipStore"
        case(
            f"{op_name}-elem-bytes-{v!r}",
            build,
            f"{kind} 'x': elem_bytes must be a positive integer, not {v!r}",
        )
for v in [1, "yes", None]:
    case(
        f"load-on-demand-{v!r}",
        lambda g, v=v: LinearOffChipLoad(_w(g), tile=(4, 4), on_demand=v, name="ld"),
        f"LinearOffChipLoad 'ld': on_demand must be a bool, not {v!r}",
    )
for v in ["w", 3, None]:
    case(
        f"store-tensor-{v!r}",
        lambda g, v=v: LinearOffChipStore(src(g, (1, 4), Tile("float32", 4, 4)), v, name="st"),
        f"LinearOffChipStore 'st', port 'tensor': expected an OffChipTensor (Graph.tensor), "
        f"got {type(v).__name__}",
    )
case(
    "load-tensor-of-other-graph",
    lambda g: LinearOffChipStore(
        src(g, (1, 4), Tile("float32", 4, 4)), Graph("other").tensor("w", (8, 8)), name="st"
    ),
    "LinearOffChipStore 'st', port 'tensor': tensor 'w' belongs to graph 'other'",
)
for v in [(0, 4), (3,), None]:
    case(
        f"random-load-tile-{v!r}",
        lambda g, v=v: RandomOffChipLoad(
            src(g, (1, 4), Tile("int64", 1, 1)), _w(g), tile=v, name="rl"
        ),
        f"RandomOffChipLoad 'rl', port 'tile': tile must be a pair of positive integers "
        f"(rows, cols), not {v!r}",
    )
for dt in ["float32", "bool", "float16"]:
    case(
        f"random-load-raddr-{dt}",
        lambda g, dt=dt: RandomOffChipLoad(
            src(g, (1, 4), Tile(dt, 1, 1)), _w(g), tile=(4, 4), name="rl"
        ),
        f"RandomOffChipLoad 'rl', port 'raddr': addresses are [1,1] integer tiles, "
        f"got Tile<{dt}, 1x1>",
    )
case(
    "random-store-data-not-a-stream",
    lambda g: RandomOffChipStore(src(g, (1, 2), Tile("int64", 1, 1)), None, _w(g), name="rs"),
    "RandomOffChipStore 'rs', port 'wdata': expected a Stream, got NoneType",
)

# -- first inputs that are not streams, and further port checks ---------------------------------

NO_GRAPH = (
    "cannot tell which graph it belongs to: its first input must be a Stream (a Graph for Source "
    "and Feedback, an OffChipTensor for LinearOffChipLoad)"
)
for kind, make in (
    ("Bufferize", lambda: Bufferize("x", 1, name="n")),
    ("Streamify", lambda: Streamify(None, repeat=(2,), name="n")),
    ("Parallelize", lambda: Parallelize([1, 2], 2, name="n")),
    ("Broadcast", lambda: Broadcast(3, 2, name="n")),
    ("Promote", lambda: Promote("x", name="n")),
    ("Flatten", lambda: Flatten(np.zeros(3), 0, 1, name="n")),
    ("Reshape", lambda: Reshape("x", 2, name="n")),
    ("RepeatStatic", lambda: RepeatStatic(None, 2, name="n")),
    ("Accum", lambda: Accum("x", fn=F.accum_add, rank=1, name="n")),
    ("Sink", lambda: Sink(3, name="n")),
    ("LinearOffChipLoad", lambda: LinearOffChipLoad("w", tile=(2, 2), name="n")),
):
    case(
        f"{kind.lower()}-first-input-not-a-stream",
        lambda g, make=make: make(),
        f"{kind} 'n': {NO_GRAPH}",
    )
case(
    "zip-input-not-a-stream",
    lambda g: Zip(src(g, (2, 3)), "b", name="z"),
    "Zip 'z', port 'in1': expected a Stream, got str",
)
case(
    "random-store-waddr-float",
    lambda g: RandomOffChipStore(
        src(g, (1, 2), Tile("float32", 1, 1)), src(g, (1, 2), name="d"), _w(g), name="rs"
    ),
    "RandomOffChipStore 'rs', port 'waddr': addresses are [1,1] integer tiles, got Tile<float32, 1x1>",
)
case(
    "random-store-shapes",
    lambda g: RandomOffChipStore(
        src(g, (1, 2), Tile("int64", 1, 1)), src(g, (1, 3), name="d"), _w(g), name="rs"
    ),
    "RandomOffChipStore 'rs', port 'wdata': shape [1, 3] differs from waddr shape [1, 2]",
)
case(
    "random-store-tile",
    lambda g: RandomOffChipStore(
        src(g, (1, 2), Tile("int64", 1, 1)),
        src(g, (1, 2), Tile("float32", 3, 3), name="d"),
        _w(g),
        name="rs",
    ),
    "RandomOffChipStore 'rs', port 'wdata': tile 3x3 does not divide the last two dims 8x8 of "
    "tensor 'w'",
)
for v in [2, 3]:
    case(
        f"reassemble-count-above-inputs-{v}",
        lambda g, v=v: Reassemble(
            [src(g, (2, 3))], src(g, (2,), Selector(1), name="s"), count=v, name="r"
        ),
        f"Reassemble 'r', port 'sel': count {v} exceeds the 1 input(s) a selector can pick",
    )
for v in [1, "yes", None]:
    case(
        f"reshape-pad-flags-{v!r}",
        lambda g, v=v: Reshape(src(g, (2, 4)), 2, pad_flags=v, name="rs"),
        f"Reshape 'rs', port 'in': pad_flags must be a bool, not {v!r}",
    )
case(
    "reshape-pad-at-rank-1",
    lambda g: Reshape(src(g, (2, 4)), 1, rank=1, pad=np.zeros((2, 2), np.float32), name="rs"),
    "Reshape 'rs', port 'in': pad applies to rank 0 only, not rank 1 (a dim of rank > 0 is "
    "static and divisible by the chunk, so nothing is padded)",
)
case(
    "reshape-scalar-pad",
    lambda g: Reshape(src(g, (2, 3)), 2, pad=3.0, name="rs"),
    f"Reshape 'rs', port 'in': pad of shape () and dtype float64 does not match element {F32}",
)

# -- plumbing -----------------------------------------------------------------------------------

for v in [None, (2, 4), Tile("float32", 2, 2)]:
    case(
        f"source-type-{type(v).__name__}",
        lambda g, v=v: Source(g, v, name="s"),
        f"Source 's', port 'out': expected a StreamType, got {v!r}",
    )
case(
    "feedback-bind-mismatch",
    lambda g: Feedback(g, StreamType(Tile("float32", 2, 2), (2, 4)), name="fb").bind(
        src(g, (2, 3))
    ),
    f"Feedback 'fb', port 'in': stream Strm<{F32}, [2, 3]> does not match the declared "
    f"Strm<{F32}, [2, 4]> ([2, 4])",
)

# -- functions: parameters ----------------------------------------------------------------------

for v in [2.5, 0.5, True, "2", None, np.float32(2.0)]:
    for op in ("add", "mul", "mod"):
        case(
            f"scalar-op-{op}-const-{v!r}",
            lambda g, v=v, op=op: F.scalar_op(op, v),
            f"function 'scalar_{op}': constant must be an integer, not {v!r}",
            TypeError,
        )
for op in ("mod", "ceil_div"):
    case(
        f"scalar-op-{op}-zero",
        lambda g, op=op: F.scalar_op(op, 0),
        f"function 'scalar_{op}': constant must be non-zero (it divides), not 0",
        ValueError,
    )
for v in ["pow", "", "MUL", None]:
    case(
        f"scalar-op-name-{v!r}",
        lambda g, v=v: F.scalar_op(v, 1),
        f"scalar_op must be one of ['add', 'ceil_div', 'mod', 'mul', 'sub'], not {v!r}",
        ValueError,
    )
for fn_name, make in (
    ("to_selector", lambda v: F.to_selector(v)),
    ("cache_write_addr", lambda v: F.cache_write_addr(v)),
    ("cache_read_addr", lambda v: F.cache_read_addr(v)),
):
    what = "n" if fn_name == "to_selector" else "row_offset"
    for v in [0, -1]:
        case(
            f"{fn_name}-{v!r}",
            lambda g, make=make, v=v: make(v),
            f"function '{fn_name}': {what} must be at least 1, not {v!r}",
            ValueError,
        )
    for v in [1.5, True, "4"]:
        case(
            f"{fn_name}-{v!r}",
            lambda g, make=make, v=v: make(v),
            f"function '{fn_name}': {what} must be an integer, not {v!r}",
            TypeError,
        )
for v in [-1, 1.5, True]:
    exc = ValueError if v == -1 else TypeError
    rule = "be at least 0" if v == -1 else "be an integer"
    case(
        f"expert-addr-base-{v!r}",
        lambda g, v=v: F.expert_addr(4, base=v),
        f"function 'expert_addr': base must {rule}, not {v!r}",
        exc,
    )
for v in [0, -1, 1.5, True, "4", None]:
    exc = ValueError if v in (0, -1) and not isinstance(v, bool) else TypeError
    rule = "be at least 1" if exc is ValueError else "be an integer"
    case(
        f"expert-addr-tiles-{v!r}",
        lambda g, v=v: F.expert_addr(v),
        f"function 'expert_addr': tiles_per_expert must {rule}, not {v!r}",
        exc,
    )
for v in ["float7", "int128", ""]:
    case(
        f"matmul-out-dtype-{v!r}",
        lambda g, v=v: F.matmul(out_dtype=v),
        f"unknown dtype {v!r}; known: int8, int16, int32, int64, uint8, uint32, uint64, float16, "
        "bfloat16, float32, float64, bool",
        ValueError,
    )

# -- arrival policies, metrics and token converters ---------------------------------------------

for v in ["01", 3, None]:
    case(
        f"fixed-order-{v!r}",
        lambda g, v=v: FixedOrder(v),
        f"FixedOrder: order must be a sequence of input indices, not {v!r}",
    )
for v in ["x", 1.5, True, None]:
    case(
        f"fixed-order-step-{v!r}",
        lambda g, v=v: FixedOrder([0, v]),
        f"FixedOrder: step 1 must be an input index, not {v!r}",
    )
case(
    "fixed-order-step-negative",
    lambda g: FixedOrder([0, -1]),
    "FixedOrder: step 1 must be a non-negative input index, not -1",
    StepValueError,
)


def _costs(g: Graph):
    """The metrics of ``exp`` over a ``[n, 4]`` stream (its FLOPs grow with ``n``)."""
    Sink(Map(src(g, ("n", 4)), fn=F.exp, name="m").out, name="sink")
    return metrics(g)


for v in [-7, -1, 1.5, True, "3", None]:
    case(
        f"metrics-evaluate-{v!r}",
        lambda g, v=v: _costs(g).evaluate({"n": v}),
        f"Metrics.evaluate: value of dim n must be a non-negative integer, not {v!r}",
        StepValueError,
    )


for v in [[("n", 5)], 5, None]:
    case(
        f"metrics-evaluate-not-a-mapping-{v!r}",
        lambda g, v=v: _costs(g).evaluate(v),
        "Metrics.evaluate: values must be a mapping of dims (symbols or names) to integers, "
        f"not {type(v).__name__}",
        StepValueError,
    )


def _tokens_2x3() -> list:
    """The tokens of a ``[2, 3]`` stream of scalars."""
    return to_tokens([[0, 1, 2], [3, 4, 5]], 1)


for shape, message in (
    ((3, 2), "the tokens have shape [2, 3], not (3, 2)"),
    ((6, 1), "the tokens have shape [2, 3], not (6, 1)"),
    ((1, 6), "the tokens have shape [2, 3], not (1, 6)"),
    ((2, -3), "shape (2, -3) must hold non-negative integers"),
    ((2, 1.5), "shape (2, 1.5) must hold non-negative integers"),
):
    case(
        f"tokens-to-array-shape-{shape}",
        lambda g, shape=shape: tokens_to_array(_tokens_2x3(), 1, shape),
        f"tokens_to_array: {message}",
        StepValueError,
    )
case(
    "tokens-to-array-ragged",
    lambda g: tokens_to_array(to_tokens([[0, 1, 2], [3]], 1), 1, (1, 4)),
    "tokens_to_array: the tokens are ragged (dim 1 has extents 3 and 1), not of shape (1, 4)",
    StepValueError,
)
case(
    "tokens-to-array-empty-vectors",
    lambda g: tokens_to_array(to_tokens([[], [], []], 1), 1, (2, 0)),
    "tokens_to_array: the tokens have shape [3, 0], not (2, 0)",
    StepValueError,
)
case(
    "tokens-to-array-empty-stream",
    lambda g: tokens_to_array(to_tokens([], 1), 1, (2, 0)),
    "tokens_to_array: the tokens have shape [0, ?], not (2, 0)",
    StepValueError,
)

# -- functions: type rules ----------------------------------------------------------------------

for name in ("add", "sub", "mul", "div", "maximum"):
    fn = getattr(F, name)
    case(
        f"{name}-dtypes",
        lambda g, fn=fn: Map(
            src(g, (1, 4)), src(g, (1, 4), Tile("int32", 2, 2), name="b"), fn=fn, name="m"
        ),
        f"Map 'm', port 'in1': function '{fn.name}' needs equal dtypes, got float32 and int32",
    )
    case(
        f"{name}-broadcast",
        lambda g, fn=fn: Map(
            src(g, (1, 4), Tile("float32", 2, 3)),
            src(g, (1, 4), Tile("float32", 3, 3), name="b"),
            fn=fn,
            name="m",
        ),
        f"Map 'm', port 'in1': function '{fn.name}' cannot broadcast rows of "
        "Tile<float32, 2x3> and Tile<float32, 3x3>",
    )
    case(
        f"{name}-selector",
        lambda g, fn=fn: Map(
            src(g, (1, 4), Selector(2)), src(g, (1, 4), name="b"), fn=fn, name="m"
        ),
        f"Map 'm', port 'in0': function '{fn.name}' needs a Tile, got Sel<2>",
    )
for name in ("exp", "silu"):
    for dt in ("int32", "int8", "bool"):
        case(
            f"{name}-on-{dt}",
            lambda g, name=name, dt=dt: Map(
                src(g, (1, 4), Tile(dt, 2, 2)), fn=getattr(F, name), name="m"
            ),
            f"Map 'm', port 'in0': function '{name}' needs a float tile, got Tile<{dt}, 2x2>",
        )
for op in ("add", "mod", "ceil_div"):
    for t, shown in (
        (Tile("int64", 1, 2), "Tile<int64, 1x2>"),
        (Tile("float32", 1, 1), "Tile<float32, 1x1>"),
    ):
        case(
            f"scalar-op-{op}-on-{shown}",
            lambda g, op=op, t=t: Map(src(g, (1, 4), t), fn=F.scalar_op(op, 3), name="m"),
            f"Map 'm', port 'in0': function 'scalar_{op}' needs a [1,1] integer tile, got {shown}",
        )
case(
    "row-sum-on-selector",
    lambda g: Map(src(g, (1, 4), Selector(3)), fn=F.row_sum, name="m"),
    "Map 'm', port 'in0': function 'row_sum' needs a Tile, got Sel<3>",
)
case(
    "matmul-t-inner",
    lambda g: Map(
        src(g, (1, 4), Tile("float32", 2, 3)),
        src(g, (1, 4), Tile("float32", 2, 4), name="b"),
        fn=F.matmul(transpose_b=True),
        name="m",
    ),
    "Map 'm', port 'in1': function 'matmul_t' needs matching inner dims, got Tile<float32, 2x3> "
    "and Tile<float32, 2x4>",
)
case(
    "expert-addr-on-tile",
    lambda g: FlatMap(src(g, (1, 4)), fn=F.expert_addr(2), name="fm"),
    f"FlatMap 'fm', port 'in0': function 'expert_addr' needs a selector, got {F32}",
)
case(
    "retile-rows-masked-mask",
    lambda g: FlatMap(
        src(g, (1, 4)),
        src(g, (1, 4), Tile("bool", 3, 1), name="b"),
        fn=F.retile_rows_masked,
        name="fm",
    ),
    "FlatMap 'fm', port 'in1': function 'retile_rows_masked' needs a [2, 1] padding mask, got "
    "Tile<bool, 3x1>",
)
case(
    "row-append-row",
    lambda g: Map(
        src(g, (1, 4)),
        src(g, (1, 4), Tile("float32", 1, 3), name="b"),
        src(g, (1, 4), Tile("int64", 1, 1), name="c"),
        fn=F.row_append,
        name="m",
    ),
    "Map 'm', port 'in1': function 'row_append' needs a [1, 2] float32 row, got Tile<float32, 1x3>",
)

# -- dtypes, tiles, selectors, stream shapes, tensors -------------------------------------------

for v in ["float7", "int4", "bf16", ""]:
    case(
        f"dtype-{v!r}",
        lambda g, v=v: Tile(v, 2, 2),
        f"unknown dtype {v!r}; known: int8, int16, int32, int64, uint8, uint32, uint64, float16, "
        "bfloat16, float32, float64, bool",
        ValueError,
    )
for what, make in (
    ("rows", lambda v: Tile("float32", v, 2)),
    ("cols", lambda v: Tile("float32", 2, v)),
):
    case(
        f"tile-{what}-negative",
        lambda g, make=make: make(-1),
        f"tile {what} must be non-negative, not -1",
        ValueError,
    )
    case(
        f"tile-{what}-float",
        lambda g, make=make: make(1.5),
        f"tile {what} must be an int or a sympy expression, not 1.5",
        TypeError,
    )
    case(
        f"tile-{what}-bool",
        lambda g, make=make: make(True),
        f"tile {what} must be an int or a sympy expression, not True",
        TypeError,
    )
for v in [0, -1, 1.5]:
    case(
        f"selector-{v!r}",
        lambda g, v=v: Selector(v),
        f"Selector width must be a positive integer, not {v!r}",
        ValueError,
    )
case(
    "stream-shape-empty",
    lambda g: StreamType(Tile("float32", 2, 2), ()),
    "a stream shape has at least one entry (the outermost count)",
    ValueError,
)
case(
    "stream-dim-negative",
    lambda g: StreamType(Tile("float32", 2, 2), (2, -1)),
    "stream dimension must be non-negative, not -1",
    ValueError,
)
case(
    "stream-dim-float",
    lambda g: StreamType(Tile("float32", 2, 2), (2.5,)),
    "stream dimension must be an int or a sympy expression, not 2.5",
    TypeError,
)
case(
    "tensor-dim-negative",
    lambda g: g.tensor("w", (4, -1)),
    "tensor 'w' dimension must be non-negative, not -1",
    ValueError,
)
case(
    "tensor-dim-float",
    lambda g: g.tensor("w", (4, 1.5)),
    "tensor 'w' dimension must be an int or a sympy expression, not 1.5",
    TypeError,
)
case(
    "tensor-dtype",
    lambda g: g.tensor("w", (4, 4), "float7"),
    "unknown dtype 'float7'; known: int8, int16, int32, int64, uint8, uint32, uint64, float16, "
    "bfloat16, float32, float64, bool",
    ValueError,
)


@pytest.mark.parametrize(("build", "exc", "message"), CASES)
def test_bad_construction(build, exc, message):
    with pytest.raises(exc, match="^" + re.escape(message) + "$") as info:
        build(Graph("g"))
    assert type(info.value) is exc, f"raised {type(info.value).__name__}, not {exc.__name__}"


def test_permuted_read_of_a_ragged_buffer_names_the_node():
    """A permuted read needs a full grid: rows of the dynamic dim of different lengths fail."""
    g = Graph("g")
    x = src(g, (1, 2, ragged("n")), elem=Tile("int32", 1, 1))
    Sink(Streamify(Bufferize(x, 2, name="bz").out, order=(1, 0), name="sf").out)
    t = [np.ones((1, 1), np.int32)]
    with pytest.raises(StepRuntimeError, match=r"^Streamify 'sf'.*is not a full grid of \[2, n\]"):
        interpret(g, inputs={"a": [[t * 2, t * 3]]})


# -- float-to-integer casts: NaN, infinities and fractions never pass silently -----------------

CASTS = [
    pytest.param(value, dt, id=f"{dt}-{value!r}")
    for dt in ("int8", "int16", "int32", "int64", "uint8")
    for value in (np.nan, np.inf, -np.inf, 0.5, 2.5, -1.25)
]


@pytest.mark.parametrize(("value", "dt"), CASTS)
def test_checked_cast_refuses_non_integral_floats(value, dt):
    if np.isfinite(value):
        message = f"function 'f': result {value} is not an integer; casting it to {dt} would round"
    else:
        message = f"function 'f': result {value} is not a finite number; it cannot be cast to {dt}"
    with pytest.raises(StepRuntimeError, match="^" + re.escape(message) + "$"):
        checked_cast(np.array([[1.0, value]]), dtype(dt), "f")


def test_checked_cast_keeps_integral_floats():
    out = checked_cast(np.array([[3.0, -2.0]]), dtype("int32"), "f")
    assert out.dtype == np.int32 and out.tolist() == [[3, -2]]


# -- run-time: the node is named with the function's message ------------------------------------


def _matmul_to_int(a: np.ndarray) -> tuple:
    g = Graph("g")
    x = src(g, (1, 1), Tile("float32", 1, 2), name="x")
    w = src(g, (1, 1), Tile("float32", 2, 1), name="w")
    m = Map(x, w, fn=F.matmul(out_dtype="int32"), name="mm")
    from step_lang import Sink

    Sink(m.out, name="sink")
    return g, {"x": [[a]], "w": [[np.ones((2, 1), np.float32)]]}


RUNTIME = [
    pytest.param(
        np.array([[0.25, 0.5]], np.float32),
        "Map 'mm': function 'matmul': result 0.75 is not an integer; casting it to int32 would round",
        id="matmul-fraction-to-int",
    ),
    pytest.param(
        np.array([[np.nan, 1]], np.float32),
        "Map 'mm': function 'matmul': result nan is not a finite number; it cannot be cast to int32",
        id="matmul-nan-to-int",
    ),
    pytest.param(
        np.array([[np.inf, 1]], np.float32),
        "Map 'mm': function 'matmul': result inf is not a finite number; it cannot be cast to int32",
        id="matmul-inf-to-int",
    ),
    pytest.param(
        np.array([[3e9, 1]], np.float32),
        "Map 'mm': function 'matmul': result 3000000000.0 does not fit int32 "
        "[-2147483648, 2147483647]",
        id="matmul-overflow-to-int",
    ),
]


@pytest.mark.parametrize(("a", "message"), RUNTIME)
def test_runtime_cast_errors_name_the_node(a, message):
    g, inputs = _matmul_to_int(a)
    with pytest.raises(StepRuntimeError, match="^" + re.escape(message) + "$"):
        interpret(g, inputs=inputs)


SCALAR = [
    pytest.param(
        "mul", 2**62, 2, "result 9223372036854775808 does not fit int64", id="mul-overflow"
    ),
    pytest.param(
        "add", 2**63 - 1, 1, "result 9223372036854775808 does not fit int64", id="add-overflow"
    ),
    pytest.param(
        "sub", 1, -(2**63), "result -9223372036854775809 does not fit int64", id="sub-overflow"
    ),
]


@pytest.mark.parametrize(("op", "const", "x", "what"), SCALAR)
def test_scalar_op_overflow_names_the_node(op, const, x, what):
    from step_lang import Sink

    g = Graph("g")
    m = Map(src(g, (1, 1), Tile("int64", 1, 1), name="x"), fn=F.scalar_op(op, const), name="so")
    Sink(m.out, name="sink")
    message = (
        f"Map 'so': function 'scalar_{op}': {what} [-9223372036854775808, 9223372036854775807]"
    )
    with pytest.raises(StepRuntimeError, match="^" + re.escape(message) + "$"):
        interpret(g, inputs={"x": [[np.array([[x]], np.int64)]]})


# -- run-time: tile counts, arrival orders; valid uses still work --------------------------------


def _scalars(values: list[int]) -> list:
    return [np.array([[v]], np.int32) for v in values]


COUNTS = [
    pytest.param(F.cache_read_addr(4), [2, 1], "cache_read_addr", "in1", id="cache-read-addr"),
    pytest.param(
        numerics.cache_read_addr(4), [2, 1], "cache_read_addr", "in1", id="cache-read-addr-int32"
    ),
    pytest.param(F.last_tile_flags, [2], "last_tile_flags", "in0", id="last-tile-flags"),
]


def _count_graph(fn, counts: list[int]) -> tuple[Graph, dict, object]:
    """A FlatMap of ``fn`` over rank-0 streams of ``[1,1]`` int32 tiles; the last input holds
    the tile counts ``counts``, any other one indices ``0, 1, ...``."""
    g = Graph("g")
    names = ["idx", "tiles"] if fn.arity == 2 else ["tiles"]
    ins = [src(g, (len(counts),), Tile("int32", 1, 1), name=n) for n in names]
    fm = FlatMap(*ins, fn=fn, name="fm")
    Sink(fm.out, name="sink")
    inputs = {"tiles": _scalars(counts)}
    if fn.arity == 2:
        inputs["idx"] = _scalars(list(range(len(counts))))
    return g, inputs, fm


@pytest.mark.parametrize(("fn", "good", "name", "port"), COUNTS)
@pytest.mark.parametrize("bad", [-3, -2, -1])
def test_negative_tile_count_is_an_error(fn, good, name, port, bad):
    g, inputs, _ = _count_graph(fn, [*good, bad])
    message = (
        f"FlatMap 'fm': function '{name}': tile count ({port}) must be non-negative, not {bad}"
    )
    with pytest.raises(StepRuntimeError, match="^" + re.escape(message) + "$"):
        interpret(g, inputs=inputs)


@pytest.mark.parametrize(("fn", "good", "name", "port"), COUNTS)
def test_zero_and_positive_tile_counts_still_work(fn, good, name, port):
    g, inputs, fm = _count_graph(fn, [*good, 0])
    out = [t for t in interpret(g, inputs=inputs).tokens(fm.out) if isinstance(t, np.ndarray)]
    assert len(out) == sum(good)


def test_expert_addr_of_valid_parameters():
    g = Graph("g")
    fm = FlatMap(src(g, (2,), Selector(3), name="s"), fn=F.expert_addr(2, base=1), name="fm")
    Sink(fm.out, name="sink")
    sel = [np.array([False, True, False]), np.array([False, False, True])]
    got = interpret(g, inputs={"s": sel}).tokens(fm.out)
    assert [int(t[0, 0]) for t in got if isinstance(t, np.ndarray)] == [3, 4, 5, 6]


def _merge(order: list[int]) -> tuple[Graph, dict, object]:
    """A two-input EagerMerge 'm' of two chunks per input, run under ``FixedOrder(order)``."""
    g = Graph("g")
    a = src(g, (2,), Tile("int32", 1, 1), name="a")
    b = src(g, (2,), Tile("int32", 1, 1), name="b")
    m = EagerMerge([a, b], name="m")
    Sink(m.outputs[0], name="data")
    Sink(m.outputs[1], name="sel")
    return g, {"a": _scalars([1, 2]), "b": _scalars([3, 4])}, m


MERGE_ORDERS = [
    pytest.param(
        [5, 0], "FixedOrder: step 0 names input 5, but the merge has 2 inputs", id="index-5"
    ),
    pytest.param(
        [0, 2], "FixedOrder: step 1 names input 2, but the merge has 2 inputs", id="index-2"
    ),
    pytest.param(
        [0, 1, 0, 1, 0, 0, 1, 1],
        "FixedOrder: step 4 names input 0, which has already ended (the order has 8 steps; the "
        "merge took 4 chunks)",
        id="extra-entries",
    ),
    pytest.param(
        [0, 0, 0],
        "FixedOrder: step 2 names input 0, which has already ended (the order has 3 steps; the "
        "merge took 2 chunks)",
        id="input-exhausted",
    ),
]


@pytest.mark.parametrize(("order", "message"), MERGE_ORDERS)
def test_fixed_order_that_does_not_match_the_run(order, message):
    g, inputs, _ = _merge(order)
    with pytest.raises(StepRuntimeError, match="^" + re.escape(f"EagerMerge 'm': {message}") + "$"):
        interpret(g, inputs=inputs, merge_policy=FixedOrder(order))


def test_fixed_order_on_a_graph_without_merges():
    """A replay on a graph with no EagerMerge would be ignored; it is refused. An empty order
    (nothing to replay) and the default policy still run."""
    g = Graph("g")
    Sink(src(g, (2,), Tile("int32", 1, 1), name="a"), name="data")
    inputs = {"a": _scalars([1, 2])}
    message = "merge_policy FixedOrder([0, 1]) replays merges, but graph 'g' has no EagerMerge node"
    with pytest.raises(StepValueError, match="^" + re.escape(message) + "$"):
        interpret(g, inputs=inputs, merge_policy=FixedOrder([0, 1]))
    for policy in (FixedOrder([]), None):
        assert len(interpret(g, inputs=inputs, merge_policy=policy).tokens("a.out")) == 3


@pytest.mark.parametrize(
    ("order", "want"), [([1, 0, 1, 0], [3, 1, 4, 2]), ([1], [3, 1, 2, 4]), ([], [1, 2, 3, 4])]
)
def test_fixed_order_that_matches_or_is_shorter(order, want):
    g, inputs, m = _merge(order)
    res = interpret(g, inputs=inputs, merge_policy=FixedOrder(order))
    assert [int(t[0, 0]) for t in res.tokens(m.outputs[0]) if isinstance(t, np.ndarray)] == want


def test_valid_uses_still_work():
    """Metrics at a dim of 0, a matching tokens_to_array, Streamify's permuted read and a
    Reshape of rank 1 without pad."""
    assert _costs(Graph("g")).evaluate({"n": 0}).flops == 0
    for three in (np.int64(3), sp.Integer(3)):
        assert (
            _costs(Graph("g")).evaluate({"n": three}).flops
            == 3 * 4 * 2 * 2 * F.ELEMENT_FLOPS["exp"]
        )
    arr = tokens_to_array(_tokens_2x3(), 1, (2, 3))
    assert arr.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert tokens_to_array([DONE], 2, (0, 4, 3)).shape == (0, 4, 3)
    assert tokens_to_array(to_tokens([[[]], [[]]], 2), 2, (2, 0, 3)).shape == (2, 0, 3)
    g = Graph("g")
    sf = Streamify(Bufferize(src(g, (1, 2, 3)), 2, name="bz").out, order=(1, 0), name="sf")
    assert sf.out.shape == (1, 3, 2)
    rs = Reshape(src(g, (2, 4), name="b"), 1, rank=1, name="rs")
    assert rs.out.shape == (2, 1, 4) and rs.params()["padded"] is False
