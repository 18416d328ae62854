"""Misuse of the STeP language: every error names its operator, port and offending values.

Each case asserts the exact exception class and the whole message (an anchored regex built with
``re.escape``), so a vaguer or reworded message fails the test. Nodes get explicit names so that
messages are deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import pytest

from step_lang import (
    DONE,
    Accum,
    Bufferize,
    EagerMerge,
    Expand,
    Feedback,
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
    Selector,
    Sink,
    Source,
    StepDeadlock,
    StepGraphError,
    StepRuntimeError,
    StepTypeError,
    StepValueError,
    Stop,
    Streamify,
    StreamType,
    Tile,
    Zip,
    array_to_tokens,
    from_tokens,
    interpret,
    to_tokens,
    tokens_to_array,
)
from step_lang import functions as F

F32 = "Tile<float32, 2x2>"  # how the default element type prints


def tile(dtype: str = "float32", rows: int = 2, cols: int = 2) -> Tile:
    return Tile(dtype, rows, cols)


def src(g: Graph, shape: tuple, elem=None, *, name: str):
    """The output of a Source of ``shape`` (default element: a 2x2 float32 tile)."""
    return Source(g, StreamType(elem if elem is not None else tile(), shape), name=name).out


def val(v, dtype=np.float32, rows: int = 2, cols: int = 2) -> np.ndarray:
    return np.full((rows, cols), v, dtype=dtype)


def addr(v: int, dtype=np.int64) -> np.ndarray:
    return np.array([[v]], dtype=dtype)


def sel(*bits: int) -> np.ndarray:
    return np.array([bool(b) for b in bits])


@contextmanager
def raises_exactly(exc_type: type[BaseException], message: str):
    """Expect ``exc_type`` itself (not a subclass) with exactly ``message``."""
    with pytest.raises(exc_type, match="^" + re.escape(message) + "$") as info:
        yield info
    assert type(info.value) is exc_type, (
        f"raised {type(info.value).__name__}, not {exc_type.__name__}"
    )


# ---------------------------------------------------------------------------------------------
# Construction-time errors: each builder gets a fresh graph 'g'.


def _graph_with_buffers(g: Graph):
    return Bufferize(src(g, (2, 4), name="a"), 1, name="bz").out


CONSTRUCTION: list = [
    # -- Map and friends: zipped inputs -----------------------------------------------------
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), src(g, (1, 2, 2), name="b"), fn=F.add, name="m"),
        StepTypeError,
        "Map 'm', port 'in1': shape [1, 2, 2] has rank 2, port 'in0' has [1, 4] (rank 1)",
        id="map-rank-mismatch",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), src(g, (1, 3), name="b"), fn=F.add, name="m"),
        StepTypeError,
        "Map 'm', port 'in1': shape [1, 3] differs from [1, 4] on port 'in0'",
        id="map-shape-mismatch",
    ),
    pytest.param(
        lambda g: Zip(src(g, (2, 3), name="a"), src(g, (2,), name="b"), name="z"),
        StepTypeError,
        "Zip 'z', port 'in1': shape [2] has rank 0, port 'in0' has [2, 3] (rank 1)",
        id="zip-rank-mismatch",
    ),
    pytest.param(
        lambda g: Map(src(g, (2,), name="a"), 3, fn=F.add, name="m"),
        StepTypeError,
        "Map 'm', port 'in1': expected a Stream, got int",
        id="map-input-not-a-stream",
    ),
    pytest.param(
        lambda g: Map("a", fn=F.exp, name="m"),
        StepTypeError,
        "Map 'm': cannot tell which graph it belongs to: its first input must be a Stream "
        "(a Graph for Source and Feedback, an OffChipTensor for LinearOffChipLoad)",
        id="map-first-input-not-a-stream",
    ),
    pytest.param(
        lambda g: Map(fn=F.exp, name="m"),
        StepTypeError,
        "Map 'm': cannot tell which graph it belongs to: its first input must be a Stream "
        "(a Graph for Source and Feedback, an OffChipTensor for LinearOffChipLoad)",
        id="map-without-inputs",
    ),
    # -- function type rules ----------------------------------------------------------------
    pytest.param(
        lambda g: Map(
            src(g, (1, 4), tile(rows=2, cols=3), name="a"),
            src(g, (1, 4), tile(rows=4, cols=2), name="b"),
            fn=F.matmul(),
            name="mm",
        ),
        StepTypeError,
        "Map 'mm', port 'in1': function 'matmul' needs matching inner dims, got "
        "Tile<float32, 2x3> and Tile<float32, 4x2>",
        id="matmul-inner-dim-mismatch",
    ),
    pytest.param(
        lambda g: Map(
            src(g, (1, 4), name="a"), src(g, (1, 4), tile("int32"), name="b"), fn=F.add, name="ad"
        ),
        StepTypeError,
        "Map 'ad', port 'in1': function 'add' needs equal dtypes, got float32 and int32",
        id="elementwise-dtype-mismatch",
    ),
    pytest.param(
        lambda g: Map(
            src(g, (2,), tile(cols=3), name="a"),
            src(g, (2,), tile(cols=4), name="b"),
            fn=F.mul,
            name="mu",
        ),
        StepTypeError,
        "Map 'mu', port 'in1': function 'mul' cannot broadcast columns of "
        "Tile<float32, 2x3> and Tile<float32, 2x4>",
        id="elementwise-broadcast-mismatch",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), tile("int32"), name="a"), fn=F.exp, name="ex"),
        StepTypeError,
        "Map 'ex', port 'in0': function 'exp' needs a float tile, got Tile<int32, 2x2>",
        id="exp-on-int-tile",
    ),
    pytest.param(
        lambda g: Map(src(g, (2,), Selector(2), name="a"), fn=F.exp, name="ex"),
        StepTypeError,
        "Map 'ex', port 'in0': function 'exp' needs a Tile, got Sel<2>",
        id="exp-on-selector",
    ),
    pytest.param(
        lambda g: Map(src(g, (2,), tile(rows=1, cols=3), name="a"), fn=F.to_selector(2), name="ts"),
        StepTypeError,
        "Map 'ts', port 'in0': function 'to_selector' needs a [1, 2] tile, got Tile<float32, 1x3>",
        id="to-selector-width",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), fn=F.add, name="m"),
        StepTypeError,
        "Map 'm': function 'add' takes 2 input(s), got 1",
        id="map-wrong-arity",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), fn=F.accum_add, name="m"),
        StepTypeError,
        "Map 'm': fn must be a MapFn from step_lang.functions, got AccumFn 'accum_add'",
        id="map-wrong-fn-class",
    ),
    pytest.param(
        lambda g: Accum(src(g, (1, 4), name="a"), fn=F.add, rank=1, name="acc"),
        StepTypeError,
        "Accum 'acc': fn must be an AccumFn from step_lang.functions, got MapFn 'add'",
        id="accum-wrong-fn-class",
    ),
    pytest.param(
        lambda g: FlatMap(src(g, (2,), name="a"), fn=F.exp, name="fm"),
        StepTypeError,
        "FlatMap 'fm': fn must be a FlatMapFn from step_lang.functions, got MapFn 'exp'",
        id="flatmap-wrong-fn-class",
    ),
    pytest.param(
        lambda g: Accum(src(g, (1, 4), name="a"), fn=F.accum_add, rank=2, name="acc"),
        StepTypeError,
        "Accum 'acc', port 'in0': rank must be an integer in [1, 1] for input shape [1, 4], not 2",
        id="accum-rank-too-large",
    ),
    pytest.param(
        lambda g: RetileStreamify(src(g, (2, 3), name="a"), split="diag", name="rt"),
        StepTypeError,
        "RetileStreamify 'rt', port 'in0': split must be 'rows' or 'cols', not 'diag'",
        id="retile-bad-split",
    ),
    # -- routing ----------------------------------------------------------------------------
    pytest.param(
        lambda g: Partition(
            src(g, (2, 4), name="a"), src(g, (3,), Selector(2), name="s"), rank=1, name="p"
        ),
        StepTypeError,
        "Partition 'p', port 'sel': selector shape [3] must equal the outer dims [2] of input "
        "[2, 4] (rank 1)",
        id="partition-selector-shape",
    ),
    pytest.param(
        lambda g: Partition(
            src(g, (2, 4), name="a"), src(g, (2, 4), Selector(2), name="s"), rank=1, name="p"
        ),
        StepTypeError,
        "Partition 'p', port 'sel': selector shape [2, 4] must equal the outer dims [2] of input "
        "[2, 4] (rank 1)",
        id="partition-selector-rank",
    ),
    pytest.param(
        lambda g: Partition(src(g, (2, 4), name="a"), src(g, (2,), name="s"), rank=1, name="p"),
        StepTypeError,
        f"Partition 'p', port 'sel': expected a selector stream, got Strm<{F32}, [2]>",
        id="partition-selector-not-selector",
    ),
    pytest.param(
        lambda g: Reassemble(
            [src(g, (2, 4), name="a"), src(g, (2, 4), name="b")],
            src(g, (3,), Selector(3), name="s"),
            name="r",
        ),
        StepTypeError,
        "Reassemble 'r', port 'sel': expected a selector over 2 inputs, got Strm<Sel<3>, [3]>",
        id="reassemble-selector-width",
    ),
    pytest.param(
        lambda g: Reassemble(
            [src(g, (2, 3), name="a"), src(g, (2, 4), name="b")],
            src(g, (1,), Selector(2), name="s"),
            name="r",
        ),
        StepTypeError,
        "Reassemble 'r', port 'in1': shape [2, 4] differs from [2, 3] on port 'in0'",
        id="reassemble-inner-shape",
    ),
    pytest.param(
        lambda g: Reassemble(
            [src(g, (2, 3), name="a"), src(g, (2, 3), name="b")],
            src(g, (1,), Selector(2), name="s"),
            count=0,
            name="r",
        ),
        StepTypeError,
        "Reassemble 'r', port 'sel': count 0 would make an empty non-innermost dimension",
        id="reassemble-count-zero",
    ),
    pytest.param(
        lambda g: EagerMerge(
            [src(g, (2, 3), name="a"), src(g, (2, 3), tile("int32"), name="b")], name="em"
        ),
        StepTypeError,
        "EagerMerge 'em', port 'in1': element Tile<int32, 2x2> differs from Tile<float32, 2x2> "
        "on port 'in0'",
        id="eagermerge-element-mismatch",
    ),
    pytest.param(
        lambda g: Parallelize(src(g, (2, 3), name="a"), 0, name="pz"),
        StepTypeError,
        "Parallelize 'pz', port 'in': n must be a positive integer, not 0",
        id="parallelize-zero-ways",
    ),
    # -- on-chip memory ---------------------------------------------------------------------
    pytest.param(
        lambda g: Bufferize(src(g, (2, 4), name="a"), 2, name="bz"),
        StepTypeError,
        f"Bufferize 'bz', port 'in': rank must be an integer in [1, 1] for input Strm<{F32}, [2, 4]>, not 2",
        id="bufferize-rank-too-large",
    ),
    pytest.param(
        lambda g: Bufferize(src(g, (2, 4), name="a"), 0, name="bz"),
        StepTypeError,
        f"Bufferize 'bz', port 'in': rank must be an integer in [1, 1] for input Strm<{F32}, [2, 4]>, not 0",
        id="bufferize-rank-zero",
    ),
    pytest.param(
        lambda g: Bufferize(
            Bufferize(src(g, (2, 4, 3), name="a"), 1, name="bz").out, 1, name="bz2"
        ),
        StepTypeError,
        f"Bufferize 'bz2', port 'in': cannot buffer buffer references (Buffer<{F32}, [3]>)",
        id="bufferize-of-buffers",
    ),
    pytest.param(
        lambda g: Streamify(src(g, (2, 4), name="a"), repeat=(2,), name="sf"),
        StepTypeError,
        "Streamify 'sf', port 'in': expected a stream of buffer references (from Bufferize), "
        f"got Strm<{F32}, [2, 4]>",
        id="streamify-non-buffer",
    ),
    pytest.param(
        lambda g: Streamify(
            _graph_with_buffers(g), repeat=(2,), ref=src(g, (2, 3), name="r"), name="sf"
        ),
        StepTypeError,
        "Streamify 'sf', port 'ref': give either repeat or ref, not both",
        id="streamify-repeat-and-ref",
    ),
    pytest.param(
        lambda g: Streamify(_graph_with_buffers(g), stride=(2,), out_shape=(3,), name="sf"),
        StepTypeError,
        "Streamify 'sf', port 'stride': the read reaches element #4 of a buffer of 4 elements",
        id="streamify-affine-past-buffer",
    ),
    pytest.param(
        lambda g: Streamify(_graph_with_buffers(g), stride=(1,), name="sf"),
        StepTypeError,
        "Streamify 'sf', port 'stride': an affine read needs both stride and out_shape",
        id="streamify-stride-without-out-shape",
    ),
    pytest.param(
        lambda g: Streamify(_graph_with_buffers(g), ref=src(g, (3, 5), name="r"), name="sf"),
        StepTypeError,
        "Streamify 'sf', port 'ref': reference shape [3, 5] does not start with the buffer "
        "stream shape [2]",
        id="streamify-ref-shape",
    ),
    # -- shape operators --------------------------------------------------------------------
    pytest.param(
        lambda g: Reshape(src(g, (1, 5, 4), name="a"), 2, rank=1, name="rs"),
        StepTypeError,
        "Reshape 'rs', port 'in': dim of rank 1 (5) in [1, 5, 4] must be static and divisible by 2",
        id="reshape-outer-not-divisible",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (1, "n", 4), name="a"), 2, rank=1, name="rs"),
        StepTypeError,
        "Reshape 'rs', port 'in': dim of rank 1 (n) in [1, n, 4] must be static and divisible by 2",
        id="reshape-outer-dynamic",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (1, 5), name="a"), 2, name="rs"),
        StepTypeError,
        "Reshape 'rs', port 'in': innermost dim 5 is not divisible by 2; give pad= to pad it",
        id="reshape-inner-not-divisible-without-pad",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (1, 5), name="a"), 2, pad=np.zeros((3, 2), np.float32), name="rs"),
        StepTypeError,
        f"Reshape 'rs', port 'in': pad of shape (3, 2) and dtype float32 does not match element {F32}",
        id="reshape-pad-wrong-shape",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (1, 5), name="a"), 2, pad=np.zeros((2, 2), np.int32), name="rs"),
        StepTypeError,
        f"Reshape 'rs', port 'in': pad of shape (2, 2) and dtype int32 does not match element {F32}",
        id="reshape-pad-wrong-dtype",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (2, 4), name="a"), 0, name="rs"),
        StepTypeError,
        "Reshape 'rs', port 'in': chunk must be a positive integer, not 0",
        id="reshape-chunk-zero",
    ),
    pytest.param(
        lambda g: Flatten(src(g, (1, 5, 4), name="a"), 1, 1, name="fl"),
        StepTypeError,
        "Flatten 'fl', port 'in': hi (1) must be greater than lo (1)",
        id="flatten-lo-equals-hi",
    ),
    pytest.param(
        lambda g: Flatten(src(g, (1, 5, 4), name="a"), 2, 1, name="fl"),
        StepTypeError,
        "Flatten 'fl', port 'in': hi (1) must be greater than lo (2)",
        id="flatten-lo-above-hi",
    ),
    pytest.param(
        lambda g: Flatten(src(g, (1, 5, 4), name="a"), 0, 3, name="fl"),
        StepTypeError,
        f"Flatten 'fl', port 'in': hi must be an integer in [0, 2] for input Strm<{F32}, [1, 5, 4]>, not 3",
        id="flatten-hi-out-of-range",
    ),
    pytest.param(
        lambda g: Expand(src(g, (2, 4), name="a"), src(g, (2, 4), name="r"), 1, name="ex"),
        StepTypeError,
        "Expand 'ex', port 'in': the inner 1 dims of [2, 4] must be 1",
        id="expand-inner-not-one",
    ),
    pytest.param(
        lambda g: Expand(src(g, (2, 1), name="a"), src(g, (2, 4, 3), name="r"), 1, name="ex"),
        StepTypeError,
        "Expand 'ex', port 'ref': reference rank 2 ([2, 4, 3]) differs from input rank 1 ([2, 1])",
        id="expand-rank-mismatch",
    ),
    pytest.param(
        lambda g: Expand(src(g, (3, 1), name="a"), src(g, (2, 4), name="r"), 1, name="ex"),
        StepTypeError,
        "Expand 'ex', port 'ref': reference shape [2, 4] does not match input shape [3, 1] "
        "outside the inner 1 dims",
        id="expand-outer-mismatch",
    ),
    pytest.param(
        lambda g: RepeatStatic(src(g, (2, 4), name="a"), 0, name="rp"),
        StepTypeError,
        "RepeatStatic 'rp', port 'in': count must be a positive integer, not 0",
        id="repeat-static-zero",
    ),
    pytest.param(
        lambda g: Promote(src(g, (2, 4), name="a"), 2, name="pr"),
        StepTypeError,
        f"Promote 'pr', port 'in': rank must be an integer in [0, 1] for input Strm<{F32}, [2, 4]>, not 2",
        id="promote-rank-too-large",
    ),
    pytest.param(
        lambda g: Promote(src(g, (2, 4), name="a"), -1, name="pr"),
        StepTypeError,
        f"Promote 'pr', port 'in': rank must be an integer in [0, 1] for input Strm<{F32}, [2, 4]>, not -1",
        id="promote-rank-negative",
    ),
    # -- off-chip memory --------------------------------------------------------------------
    pytest.param(
        lambda g: LinearOffChipLoad(g.tensor("w", (8, 8)), tile=(3, 4), name="ld"),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'tile': tile 3x4 does not divide the last two dims 8x8 of tensor 'w'",
        id="load-tile-not-dividing",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(g.tensor("w", (8, 8)), tile=(4,), name="ld"),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'tile': tile must be a pair of positive integers (rows, cols), not (4,)",
        id="load-tile-not-a-pair",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(
            g.tensor("w", (8, 8)), tile=(4, 4), out_shape=(2, 2), stride=(2, 2), name="ld"
        ),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'stride': the read reaches tile #4 but tensor 'w' has 4 tiles "
        "(tiled shape [2, 2])",
        id="load-stride-past-tensor",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(
            g.tensor("w", (8, 8)), tile=(4, 4), base=4, out_shape=(1,), name="ld"
        ),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'stride': the read reaches tile #4 but tensor 'w' has 4 tiles "
        "(tiled shape [2, 2])",
        id="load-base-past-tensor",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(
            g.tensor("w", (8, 8)), tile=(4, 4), out_shape=(2, 2), stride=(2,), name="ld"
        ),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'stride': stride [2] has 1 entries, out_shape [2, 2] has 2",
        id="load-stride-length",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(
            g.tensor("w", (8, 8)), tile=(4, 4), out_shape=(2, 2), stride=(2, -1), name="ld"
        ),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'stride': strides must be non-negative integers (tiles), not [2, -1]",
        id="load-negative-stride",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(
            g.tensor("w", (4, 4)), tile=(2, 2), out_shape=(0, 2), name="ld"
        ),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'out_shape': out_shape must be positive integers (tiles), not [0, 2]",
        id="load-empty-out-shape",
    ),
    pytest.param(
        lambda g: LinearOffChipLoad(g.tensor("w", (8,)), tile=(1, 1), name="ld"),
        StepTypeError,
        "LinearOffChipLoad 'ld', port 'tensor': tensor 'w' of shape [8] has fewer than 2 dims to tile",
        id="load-1d-tensor",
    ),
    pytest.param(
        lambda g: LinearOffChipStore(
            src(g, (1, 3), tile(rows=4, cols=4), name="a"), g.tensor("w", (8, 8)), name="st"
        ),
        StepTypeError,
        "LinearOffChipStore 'st', port 'in': stream Strm<Tile<float32, 4x4>, [1, 3]> holds 3 tiles "
        "but tensor 'w' has 4",
        id="store-wrong-tile-count",
    ),
    pytest.param(
        lambda g: LinearOffChipStore(
            src(g, (1, 4), tile(rows=4, cols=4), name="a"),
            g.tensor("w", (8, 8), "int32"),
            name="st",
        ),
        StepTypeError,
        "LinearOffChipStore 'st', port 'in': tile dtype float32 differs from tensor 'w' dtype int32",
        id="store-dtype-mismatch",
    ),
    pytest.param(
        lambda g: LinearOffChipStore(
            src(g, (1, 4), tile(rows="r", cols=2), name="a"), g.tensor("w", (4, 4)), name="st"
        ),
        StepTypeError,
        "LinearOffChipStore 'st', port 'in': stores need statically shaped tiles, got Tile<float32, rx2>",
        id="store-dynamic-tile",
    ),
    pytest.param(
        lambda g: RandomOffChipLoad(
            src(g, (1, 4), tile("int32", 1, 2), name="a"),
            g.tensor("w", (8, 8)),
            tile=(4, 4),
            name="rl",
        ),
        StepTypeError,
        "RandomOffChipLoad 'rl', port 'raddr': addresses are [1,1] integer tiles, got Tile<int32, 1x2>",
        id="raddr-not-1x1",
    ),
    pytest.param(
        lambda g: RandomOffChipLoad(
            src(g, (1, 4), tile("float32", 1, 1), name="a"),
            g.tensor("w", (8, 8)),
            tile=(4, 4),
            name="rl",
        ),
        StepTypeError,
        "RandomOffChipLoad 'rl', port 'raddr': addresses are [1,1] integer tiles, got Tile<float32, 1x1>",
        id="raddr-not-integer",
    ),
    pytest.param(
        lambda g: RandomOffChipStore(
            src(g, (1, 2), tile("int64", 1, 1), name="ad"),
            src(g, (1, 3), name="d"),
            g.tensor("w", (4, 4)),
            name="rs",
        ),
        StepTypeError,
        "RandomOffChipStore 'rs', port 'wdata': shape [1, 3] differs from waddr shape [1, 2]",
        id="random-store-shape-mismatch",
    ),
    pytest.param(
        lambda g: RandomOffChipLoad(
            src(g, (1, 1), tile("int32", 1, 1), name="a"),
            Graph("h").tensor("w", (8, 8)),
            tile=(4, 4),
            name="rl",
        ),
        StepTypeError,
        "RandomOffChipLoad 'rl', port 'tensor': tensor 'w' belongs to graph 'h'",
        id="tensor-of-another-graph",
    ),
    # -- graph building ---------------------------------------------------------------------
    pytest.param(
        lambda g: Map(
            src(g, (1, 4), name="a"), src(Graph("h"), (1, 4), name="b"), fn=F.add, name="m"
        ),
        StepTypeError,
        "Map 'm', port 'in1': stream b.out belongs to graph 'h', not 'g'",
        id="stream-from-another-graph",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), fn=F.exp, name="a"),
        StepGraphError,
        "Map: graph 'g' already has a node named 'a'",
        id="duplicate-node-name",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), fn=F.exp, name="1bad"),
        StepGraphError,
        "Map: node name must be an identifier, not '1bad'",
        id="node-name-starts-with-digit",
    ),
    pytest.param(
        lambda g: Map(src(g, (1, 4), name="a"), fn=F.exp, name="a.out"),
        StepGraphError,
        "Map: node name must be an identifier, not 'a.out'",
        id="node-name-with-dot",
    ),
    pytest.param(
        lambda g: Source(g, tile(), name="s"),
        StepTypeError,
        "Source 's', port 'out': expected a StreamType, got "
        "Tile(dtype=DType(name='float32', nbytes=4, kind='float'), rows=2, cols=2)",
        id="source-without-stream-type",
    ),
    pytest.param(
        lambda g: Source("g", StreamType(tile(), (1,)), name="s"),
        StepTypeError,
        "Source 's': expected a Graph, got 'g'",
        id="source-without-graph",
    ),
    pytest.param(
        lambda g: (g.tensor("w", (8, 8)), g.tensor("w", (4, 4))),
        StepGraphError,
        "graph 'g' already has a tensor named 'w'",
        id="tensor-declared-twice",
    ),
    pytest.param(
        lambda g: g.tensor("1w", (8, 8)),
        StepGraphError,
        "tensor name must be an identifier, not '1w'",
        id="tensor-bad-name",
    ),
    pytest.param(
        lambda g: g.tensor("w", ("n", 8)),
        StepGraphError,
        "tensor 'w' needs a non-empty static shape, got [n, 8]",
        id="tensor-dynamic-shape",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (2, 3), name="a"), 3, name="rs").output("pad_flags"),
        StepGraphError,
        "Reshape 'rs' has no output 'pad_flags'; it has ['out']",
        id="unknown-output-port",
    ),
    pytest.param(
        lambda g: Reshape(src(g, (2, 3), name="a"), 3, pad_flags=True, name="rs").out,
        StepGraphError,
        "Reshape 'rs' has 2 outputs; use .outputs[i]",
        id="out-of-multi-output-node",
    ),
]


@pytest.mark.parametrize(("build", "exc", "message"), CONSTRUCTION)
def test_construction_error(build: Callable[[Graph], object], exc: type, message: str):
    g = Graph("g")
    with raises_exactly(exc, message):
        build(g)


# ---------------------------------------------------------------------------------------------
# Feedback and graph validation


def _feedback(g: Graph, shape=(1, 4)) -> Feedback:
    return Feedback(g, StreamType(tile(), shape), name="fb")


def test_feedback_bound_with_wrong_type():
    g = Graph("g")
    fb = _feedback(g)
    with raises_exactly(
        StepTypeError,
        f"Feedback 'fb', port 'in': stream Strm<{F32}, [1, 3]> does not match the declared "
        f"Strm<{F32}, [1, 4]> ([1, 4])",
    ):
        fb.bind(src(g, (1, 3), name="a"))


def test_feedback_bound_with_wrong_element():
    g = Graph("g")
    fb = _feedback(g)
    with raises_exactly(
        StepTypeError,
        f"Feedback 'fb', port 'in': stream Strm<Tile<int32, 2x2>, [1, 4]> does not match the "
        f"declared Strm<{F32}, [1, 4]> ([1, 4])",
    ):
        fb.bind(src(g, (1, 4), tile("int32"), name="a"))


def test_feedback_bound_twice():
    g = Graph("g")
    fb = _feedback(g)
    fb.bind(src(g, (1, 4), name="a"))
    with raises_exactly(StepTypeError, "Feedback 'fb', port 'in': already bound to a.out"):
        fb.bind(src(g, (1, 4), name="b"))


def test_feedback_bound_to_stream_of_another_graph():
    g = Graph("g")
    fb = _feedback(Graph("h"))
    with raises_exactly(
        StepTypeError, "Feedback 'fb', port 'in': stream a.out belongs to graph 'g', not 'h'"
    ):
        fb.bind(src(g, (1, 4), name="a"))


def test_unbound_feedback_at_validate():
    g = Graph("g")
    Sink(_feedback(g).out, name="sk")
    with raises_exactly(StepGraphError, "Feedback 'fb' is never bound to a stream (call .bind)"):
        g.validate()


def test_unbound_feedback_at_interpret():
    g = Graph("g")
    Sink(_feedback(g).out, name="sk")
    with raises_exactly(StepGraphError, "Feedback 'fb' is never bound to a stream (call .bind)"):
        interpret(g)


def test_unconsumed_output_at_validate():
    g = Graph("g")
    Map(src(g, (1, 4), name="a"), fn=F.exp, name="e")
    with raises_exactly(
        StepGraphError,
        f"Map 'e', port 'out': output Strm<{F32}, [1, 4]> is never consumed; connect it or drain it with Sink",
    ):
        g.validate()


def test_unconsumed_second_output_at_validate():
    g = Graph("g")
    rs = Reshape(src(g, (2, 4), name="a"), 2, pad_flags=True, name="rs")
    Sink(rs.output("out"), name="sk")
    with raises_exactly(
        StepGraphError,
        "Reshape 'rs', port 'pad_flags': output Strm<Tile<bool, 1x1>, [2, 2, 2]> is never consumed; "
        "connect it or drain it with Sink",
    ):
        g.validate()


# ---------------------------------------------------------------------------------------------
# interpret(): memory and inputs


def _one_tensor_graph() -> Graph:
    g = Graph("g")
    g.tensor("w", (8, 8))
    return g


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        pytest.param(
            {"w": np.zeros((4, 8), np.float32)},
            "tensor 'w': array float32 [4, 8], declared float32 [8, 8]",
            id="wrong-shape",
        ),
        pytest.param(
            {"w": np.zeros((8, 8), np.float64)},
            "tensor 'w': array float64 [8, 8], declared float32 [8, 8]",
            id="wrong-dtype",
        ),
        pytest.param(
            {"v": np.zeros((8, 8), np.float32)},
            "memory holds v, which graph 'g' does not declare",
            id="unknown-tensor",
        ),
    ],
)
def test_memory_errors(memory, message):
    with raises_exactly(StepValueError, message):
        interpret(_one_tensor_graph(), memory)


def _source_to_sink(shape=(1, 4), elem=None) -> Graph:
    g = Graph("g")
    Sink(src(g, shape, elem, name="a"), name="sk")
    return g


def test_source_without_inputs():
    with raises_exactly(StepValueError, "Source 'a' has no tokens; pass inputs={'a': ...}"):
        interpret(_source_to_sink())


def test_inputs_naming_an_unknown_source():
    with raises_exactly(StepValueError, "inputs name zz, which are not Source nodes of graph 'g'"):
        interpret(_source_to_sink(), inputs={"a": [[val(1)] * 4], "zz": []})


def test_source_fed_fewer_elements_than_declared():
    with raises_exactly(
        StepRuntimeError,
        f"Source 'a': inputs['a'] Strm<{F32}, [1, 4]>: dim 1 of [1, 4]: declared 4, observed 3",
    ):
        interpret(_source_to_sink(), inputs={"a": [[val(1)] * 3]})


def test_source_fed_wrong_dtype():
    with raises_exactly(
        StepRuntimeError,
        f"Source 'a': inputs['a'] Strm<{F32}, [1, 4]>: element: expected dtype float32, got int32",
    ):
        interpret(_source_to_sink(), inputs={"a": [[val(1, np.int32)] * 4]})


def test_source_fed_stop_above_its_rank():
    with raises_exactly(
        StepRuntimeError,
        f"Source 'a': inputs['a'] Strm<{F32}, [1, 4]>: malformed tokens: token #1 is S2 but the "
        "stream has rank 1",
    ):
        interpret(_source_to_sink(), inputs={"a": [val(1), Stop(2), DONE]})


@pytest.mark.parametrize(
    ("tokens", "ending"),
    [
        ([val(1)] * 4 + [Stop(1)], "a list ending with S1"),
        ([val(1), DONE, val(2), val(3), val(4), Stop(1)], "a list ending with S1"),
        (tuple([val(1)] * 4 + [Stop(1), DONE]), "a tuple ending with D"),
    ],
)
def test_source_fed_a_token_list_without_its_done_token_last(tokens, ending):
    """Stop or done tokens at the top level make it a token list, which must end with DONE
    (read as nested lists instead, the first element was reported as no nested list)."""
    with raises_exactly(
        StepValueError,
        "Source 'a', port 'out': inputs['a'] holds stop or done tokens, so it is read as a token "
        f"list, which must be a list ending with the done token (DONE), not {ending}",
    ):
        interpret(_source_to_sink(), inputs={"a": tokens})


def test_source_fed_empty_non_innermost_dim():
    with raises_exactly(
        StepValueError,
        "Source 'a', port 'out': dimension of rank 1 at [0] is empty; stop tokens can only write an "
        "empty innermost dimension or an empty stream (use step_lang.tokens.canonical to rewrite "
        "it as one empty innermost vector)",
    ):
        interpret(_source_to_sink((2, "n", 4)), inputs={"a": [[], [[val(1)] * 4]]})


def test_merge_policy_of_wrong_type():
    g = Graph("g")
    em = EagerMerge([src(g, (2,), name="a"), src(g, (2,), name="b")], name="em")
    Sink(em.output("data"), name="s1")
    Sink(em.output("sel"), name="s2")
    with raises_exactly(
        StepValueError, "merge_policy for 'em' must be an ArrivalPolicy, not 'first'"
    ):
        interpret(g, inputs={"a": [val(1), val(2)], "b": [val(3), val(4)]}, merge_policy="first")


# ---------------------------------------------------------------------------------------------
# Runtime errors


def test_random_load_address_out_of_range():
    g = Graph("g")
    w = g.tensor("w", (8, 8))
    a = src(g, (1, 2), tile("int64", 1, 1), name="a")
    Sink(RandomOffChipLoad(a, w, tile=(4, 4), name="rl").out, name="sk")
    with raises_exactly(
        StepRuntimeError,
        "RandomOffChipLoad 'rl', port 'raddr': tile address 4 outside tensor 'w' of 4 tiles",
    ):
        interpret(g, inputs={"a": [[addr(1), addr(4)]]})


def test_random_store_address_out_of_range():
    g = Graph("g")
    w = g.tensor("w", (4, 4))
    ad = src(g, (1, 1), tile("int64", 1, 1), name="ad")
    Sink(RandomOffChipStore(ad, src(g, (1, 1), name="d"), w, name="rs").out, name="sk")
    with raises_exactly(
        StepRuntimeError,
        "RandomOffChipStore 'rs', port 'waddr': tile address -1 outside tensor 'w' of 4 tiles",
    ):
        interpret(g, inputs={"ad": [[addr(-1)]], "d": [[val(1)]]})


def _int8_binary(fn) -> Graph:
    g = Graph("g")
    a = src(g, (1, 1), tile("int8"), name="a")
    b = src(g, (1, 1), tile("int8"), name="b")
    Sink(Map(a, b, fn=fn, name="m").out, name="sk")
    return g


def test_integer_overflow_in_add():
    with raises_exactly(
        StepRuntimeError, "Map 'm': function 'add': result 200 does not fit int8 [-128, 127]"
    ):
        interpret(
            _int8_binary(F.add), inputs={"a": [[val(100, np.int8)]], "b": [[val(100, np.int8)]]}
        )


def test_integer_underflow_in_sub():
    with raises_exactly(
        StepRuntimeError, "Map 'm': function 'sub': result -129 does not fit int8 [-128, 127]"
    ):
        interpret(
            _int8_binary(F.sub), inputs={"a": [[val(-128, np.int8)]], "b": [[val(1, np.int8)]]}
        )


def test_integer_division_by_zero():
    with raises_exactly(StepRuntimeError, "Map 'm': function 'div': integer division by zero"):
        interpret(_int8_binary(F.div), inputs={"a": [[val(1, np.int8)]], "b": [[val(0, np.int8)]]})


def test_reassemble_count_violated():
    g = Graph("g")
    r = Reassemble(
        [src(g, (2,), name="a"), src(g, (2,), name="b")],
        src(g, (2,), Selector(2), name="s"),
        count=1,
        name="r",
    )
    Sink(r.out, name="sk")
    with raises_exactly(
        StepRuntimeError, "Reassemble 'r', port 'sel': selector sets 2 bits, declared count 1"
    ):
        interpret(
            g, inputs={"a": [val(1), val(2)], "b": [val(3), val(4)], "s": [sel(1, 0), sel(1, 1)]}
        )


def test_reassemble_selects_nothing_for_a_non_innermost_dim():
    g = Graph("g")
    r = Reassemble(
        [src(g, (1, 3), name="a"), src(g, (1, 3), name="b")],
        src(g, (1,), Selector(2), name="s"),
        name="r",
    )
    Sink(r.out, name="sk")
    with raises_exactly(
        StepRuntimeError,
        "Reassemble 'r', port 'sel': selector selects no input; the empty non-innermost dimension cannot be written",
    ):
        interpret(g, inputs={"a": [[val(1)] * 3], "b": [[val(2)] * 3], "s": [sel(0, 0)]})


def test_selector_of_wrong_width_fed_to_partition():
    g = Graph("g")
    p = Partition(src(g, (2,), name="a"), src(g, (2,), Selector(2), name="s"), name="p")
    for i, out in enumerate(p.outputs):
        Sink(out, name=f"sk{i}")
    # Source tokens are checked against the declared type before they are sent, so the 3-wide
    # selectors are caught at the Source, before Partition could misroute them.
    with raises_exactly(
        StepRuntimeError,
        "Source 's': inputs['s'] Strm<Sel<2>, [2]>: element: expected a Sel<2>, got bool (3,)",
    ):
        interpret(g, inputs={"a": [val(1), val(2)], "s": [sel(1, 0, 1), sel(0, 1, 1)]})


def test_zipped_inputs_that_do_not_line_up():
    g = Graph("g")
    m = Map(src(g, (1, "n"), name="a"), src(g, (1, "k"), name="b"), fn=F.add, name="m")
    Sink(m.out, name="sk")
    with raises_exactly(
        StepRuntimeError,
        "Map 'm', port 'in1': token S1 does not line up with a data element on port 'in0' "
        "(inputs must have the same shape, token by token)",
    ):
        interpret(g, inputs={"a": [[val(1)] * 3], "b": [[val(2)] * 2]})


def test_zip_of_streams_that_end_apart():
    g = Graph("g")
    z = Zip(src(g, ("n",), name="a"), src(g, ("k",), name="b"), name="z")
    Sink(z.out, name="sk")
    with raises_exactly(
        StepRuntimeError,
        "Zip 'z', port 'in1': token D does not line up with a data element on port 'in0' "
        "(inputs must have the same shape, token by token)",
    ):
        interpret(g, inputs={"a": [val(1), val(2)], "b": [val(3)]})


def test_store_of_too_few_tiles_at_run_time():
    g = Graph("g")
    LinearOffChipStore(src(g, (1, "n"), name="a"), g.tensor("w", (4, 4)), name="st")
    with raises_exactly(
        StepRuntimeError, "LinearOffChipStore 'st', port 'in': 3 tiles arrived but tensor 'w' has 4"
    ):
        interpret(g, inputs={"a": [[val(1)] * 3]})


def test_expand_reference_shorter_than_input():
    g = Graph("g")
    Sink(
        Expand(src(g, (2, 1), name="a"), src(g, ("m", "k"), name="r"), 1, name="ex").out, name="sk"
    )
    with raises_exactly(
        StepRuntimeError, "Expand 'ex', port 'ref': reference ended before the input"
    ):
        interpret(g, inputs={"a": [[val(1)], [val(2)]], "r": [[val(0)]]})


def test_deadlock_map_zipping_its_own_feedback():
    g = Graph("g")
    a = src(g, (1, 4), name="a")
    fb = _feedback(g)
    m = Map(a, fb.out, fn=F.add, name="m")
    fb.bind(m.out)
    with raises_exactly(
        StepDeadlock,
        "graph 'g' deadlocked; blocked nodes:\n"
        "  Feedback 'fb' waits for input 'in' (m.out)\n"
        "  Map 'm' waits for input 'in1' (fb.out)\n"
        "queues holding tokens:\n"
        "  a.out: 5 token(s)",
    ) as info:
        interpret(g, inputs={"a": [[val(1)] * 4]})
    assert info.value.blocked == {"fb": "input 'in' (m.out)", "m": "input 'in1' (fb.out)"}
    assert info.value.queues == {"a.out": 5, "fb.out": 0, "m.out": 0}


def test_deadlock_of_a_loop_without_a_first_token():
    g = Graph("g")
    fb = _feedback(g)
    m = Map(fb.out, fn=F.exp, name="m")
    fb.bind(m.out)
    with raises_exactly(
        StepDeadlock,
        "graph 'g' deadlocked; blocked nodes:\n"
        "  Feedback 'fb' waits for input 'in' (m.out)\n"
        "  Map 'm' waits for input 'in0' (fb.out)",
    ) as info:
        interpret(g)
    assert info.value.blocked == {"fb": "input 'in' (m.out)", "m": "input 'in0' (fb.out)"}
    assert info.value.queues == {"fb.out": 0, "m.out": 0}


# ---------------------------------------------------------------------------------------------
# Token converters


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda: to_tokens([[[val(1)], []], []], 2),
            "dimension of rank 1 at [1] is empty; stop tokens can only write an empty innermost "
            "dimension or an empty stream (use step_lang.tokens.canonical to rewrite it as one "
            "empty innermost vector)",
            id="to-tokens-empty-matrix",
        ),
        pytest.param(
            lambda: to_tokens([[[[val(1)]], []]], 3),
            "dimension of rank 1 at [0][1] is empty; stop tokens can only write an empty innermost "
            "dimension or an empty stream (use step_lang.tokens.canonical to rewrite it as one "
            "empty innermost vector)",
            id="to-tokens-empty-nested-matrix",
        ),
        pytest.param(
            lambda: to_tokens([[val(1), Stop(1)]], 1),
            "element [0][1] is a token, not data",
            id="to-tokens-token-as-element",
        ),
        pytest.param(
            lambda: to_tokens([val(1)], 1),
            "expected a nested list of depth 1 at [0], got ndarray",
            id="to-tokens-too-shallow",
        ),
        pytest.param(
            lambda: to_tokens([], -1),
            "stream rank must be a non-negative integer, not -1",
            id="to-tokens-negative-rank",
        ),
        pytest.param(
            lambda: from_tokens([val(1), Stop(1)], 1),
            "token list does not end with the done token",
            id="from-tokens-missing-done",
        ),
        pytest.param(
            lambda: from_tokens([val(1), Stop(2), DONE], 1),
            "token #1 is S2 but the stream has rank 1",
            id="from-tokens-stop-above-rank",
        ),
        pytest.param(
            lambda: from_tokens([val(1), DONE], 1),
            "done token #1 arrives inside an open rank-1 sub-tensor; a rank-1 stream closes each "
            "tensor with S1 first",
            id="from-tokens-done-inside-tensor",
        ),
        pytest.param(
            lambda: from_tokens([val(1), DONE, val(2)], 0),
            "token #2 (array([[2., 2.],\n       [2., 2.]], dtype=float32)) follows the done token",
            id="from-tokens-data-after-done",
        ),
        pytest.param(
            lambda: Stop(0), "stop level must be a positive integer, not 0", id="stop-level-zero"
        ),
        pytest.param(
            lambda: tokens_to_array([val(1), val(2), DONE], 0, (3,)),
            "stream holds 2 elements, shape (3,) needs 3",
            id="tokens-to-array-count",
        ),
        pytest.param(
            lambda: array_to_tokens(np.zeros((2, 2, 2)), 1),
            "array of shape (2, 2, 2) cannot hold a rank-1 stream of 2-d elements (needs 4 axes)",
            id="array-to-tokens-axes",
        ),
    ],
)
def test_converter_error(call: Callable[[], object], message: str):
    with raises_exactly(StepValueError, message):
        call()


# ---------------------------------------------------------------------------------------------
# Plain ValueError / TypeError from value types


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        pytest.param(
            lambda: Selector(0),
            ValueError,
            "Selector width must be a positive integer, not 0",
            id="selector-zero",
        ),
        pytest.param(
            lambda: StreamType(tile(), ()),
            ValueError,
            "a stream shape has at least one entry (the outermost count)",
            id="stream-shape-empty",
        ),
        pytest.param(
            lambda: StreamType(tile(), (1, -2)),
            ValueError,
            "stream dimension must be non-negative, not -2",
            id="stream-dim-negative",
        ),
        pytest.param(
            lambda: StreamType(tile(), (1, 2.5)),
            TypeError,
            "stream dimension must be an int or a sympy expression, not 2.5",
            id="stream-dim-float",
        ),
        pytest.param(
            lambda: Tile("float8", 2, 2),
            ValueError,
            "unknown dtype 'float8'; known: int8, int16, int32, int64, uint8, uint32, uint64, "
            "float16, bfloat16, float32, float64, bool",
            id="unknown-dtype",
        ),
        pytest.param(
            lambda: F.scalar_op("pow", 2),
            ValueError,
            "scalar_op must be one of ['add', 'ceil_div', 'mod', 'mul', 'sub'], not 'pow'",
            id="scalar-op-unknown",
        ),
    ],
)
def test_value_type_error(call: Callable[[], object], exc: type, message: str):
    with raises_exactly(exc, message):
        call()


def test_deadlocks_cross_process_boundaries_whole():
    """A deadlock raised in a worker process (``make validate --jobs``) reaches its parent with
    its message, its keyword-only attributes and those set after construction."""
    import pickle

    from step_lang.errors import SimDeadlock

    err = SimDeadlock("graph 'g' deadlocked", blocked={"a": "room"}, queues={"q": 3}, cycle=7)
    err.causes = ["q full"]
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is SimDeadlock and str(back) == "graph 'g' deadlocked"
    assert (back.blocked, back.queues, back.cycle, back.causes) == (
        {"a": "room"}, {"q": 3}, 7, ["q full"],
    )  # fmt: skip
