"""Property tests: every operator against the nested-list oracle in ``tests/oracle.py``.

Each case draws random data of random rank (0-3) with static, dynamic-regular and ragged dims
(including empty innermost vectors, empty streams, and empty non-innermost dims that reach the
stream only through the canonical rewrite), declares the Source type honestly (the interpreter
checks every stream against its type), runs a small graph and compares the decoded output with
the oracle's result put into canonical form.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import oracle as O
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from step_lang import (
    DONE,
    Accum,
    Bufferize,
    EagerMerge,
    Expand,
    FixedOrder,
    FlatMap,
    Flatten,
    Graph,
    LinearOffChipLoad,
    LinearOffChipStore,
    LowestIndexFirst,
    Map,
    Parallelize,
    Partition,
    Promote,
    RandomArrival,
    RandomOffChipLoad,
    RandomOffChipStore,
    Reassemble,
    RepeatStatic,
    Reshape,
    RetileStreamify,
    RoundRobin,
    Scan,
    Selector,
    Sink,
    Source,
    StepValueError,
    Stop,
    Streamify,
    StreamType,
    Tile,
    Zip,
    array_to_tokens,
    canonical,
    from_tokens,
    interpret,
    ragged,
    regular,
    to_tokens,
    tokens_to_array,
)
from step_lang import functions as F
from step_lang.types import int32, int64

SCALAR = Tile(int32, 1, 1)
ADDR = Tile(int64, 1, 1)

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

values = st.integers(-20, 20).map(O.scalar)


# ---------------------------------------------------------------------------------------------
# Random streams


@dataclass(frozen=True)
class DimSpec:
    """How one dim of a generated stream varies: one static/regular value, or ragged per node."""

    kind: str  # "static", "regular" or "ragged"
    value: int  # static and regular dims
    lo: int  # ragged dims: extent range
    hi: int
    decl: Any  # the declared dim (int or symbol)


@dataclass
class SD:
    """A generated stream: element type, declared shape and canonical nested data."""

    elem: Any
    shape: tuple
    data: list
    rank: int

    @property
    def stype(self) -> StreamType:
        return StreamType(self.elem, self.shape)


@st.composite
def dim_specs(
    draw,
    rank: int,
    prefix: str,
    *,
    max_len: int = 3,
    outer: tuple[int, int] = (0, 3),
    inner_empty: bool = True,
    kinds: Sequence[str] = ("static", "regular", "ragged"),
) -> list[DimSpec]:
    """Specs of dims ``[D_rank .. D_0]`` (outermost first).

    Non-innermost dims are empty only when ragged with ragged dims all the way in, so that the
    canonical rewrite (one empty innermost vector) never lands under a static or regular dim.
    """
    chosen = []
    for idx in range(rank + 1):
        options = [k for k in kinds if not (idx == 0 and k == "ragged")] or ["static", "regular"]
        chosen.append(draw(st.sampled_from(options)))
    specs = []
    for idx, kind in enumerate(chosen):
        if idx == 0:
            lo, hi = outer
        elif idx == rank:
            lo, hi = (0 if inner_empty else 1), max_len
        else:
            deeper_ragged = all(k == "ragged" for k in chosen[idx + 1 :])
            lo, hi = (0 if kind == "ragged" and deeper_ragged and inner_empty else 1), max_len
        if kind == "ragged":
            specs.append(DimSpec(kind, 0, lo, hi, ragged(f"{prefix}_r{idx}")))
        else:
            v = draw(st.integers(lo, hi))
            decl = v if kind == "static" else regular(f"{prefix}_g{idx}")
            specs.append(DimSpec(kind, v, lo, hi, decl))
    return specs


def gen_nested(draw, specs: Sequence[DimSpec], leaf) -> Any:
    """Nested lists following ``specs`` (one list level per spec), leaves drawn from ``leaf``."""

    def build(level: int) -> Any:
        if level == len(specs):
            return draw(leaf)
        s = specs[level]
        # Ragged extents favour the lower bound, so that empties (0 where allowed) are common.
        n = (
            draw(st.one_of(st.just(s.lo), st.integers(s.lo, s.hi)))
            if s.kind == "ragged"
            else s.value
        )
        return [build(level + 1) for _ in range(n)]

    return build(0)


@st.composite
def streams(
    draw,
    rank: int | None = None,
    prefix: str = "x",
    leaf=values,
    elem=SCALAR,
    min_rank: int = 0,
    max_rank: int = 3,
    **kw,
) -> SD:
    if rank is None:
        rank = draw(st.integers(min_rank, max_rank))
    if "kinds" not in kw and draw(st.integers(0, 3)) == 0:
        kw["kinds"] = ("ragged",)  # all ragged: empty non-innermost dims become possible everywhere
    specs = draw(dim_specs(rank, prefix, **kw))
    raw = gen_nested(draw, specs, leaf)
    return SD(elem, tuple(s.decl for s in specs), O.canonical(raw, rank), rank)


def selectors(n: int, *, one_hot: bool = False, nonzero: bool = False):
    if one_hot:
        return st.integers(0, n - 1).map(lambda i: np.eye(n, dtype=bool)[i])
    bits = st.lists(st.booleans(), min_size=n, max_size=n)
    if nonzero:
        bits = bits.filter(any)
    return bits.map(lambda b: np.array(b, dtype=bool))


def tile_values(rows: int, cols: int, dtype=np.int32):
    return st.lists(st.integers(-20, 20), min_size=rows * cols, max_size=rows * cols).map(
        lambda v: np.array(v, dtype=dtype).reshape(rows, cols)
    )


# ---------------------------------------------------------------------------------------------
# Running graphs


def run(
    build: Callable[..., Any],
    sources: dict[str, SD],
    memory=None,
    policy=None,
):
    """Build ``build(g, **source_streams)`` (returns output streams), drain, run, decode."""
    g = Graph("prop")
    ins = {name: Source(g, sd.stype, name=name).out for name, sd in sources.items()}
    outs = build(g, **ins)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for o in outs:
        Sink(o)
    res = interpret(
        g,
        memory,
        inputs={n: to_tokens(sd.data, sd.rank) for n, sd in sources.items()},
        merge_policy=policy,
    )
    return [from_tokens(res.tokens(o), o.rank) for o in outs], res


def same(got: Any, expected: Any, rank: int) -> None:
    want = O.canonical(expected, rank)
    assert O.norm(got) == O.norm(want), f"\n got  {O.norm(got)}\n want {O.norm(want)}"


def tile_sum(elems):
    return O.sum_tiles(elems, (1, 1))


# ---------------------------------------------------------------------------------------------
# Token converters


def raw_nested(rank: int):
    """Arbitrary nested data of depth ``rank + 1``, empty lists allowed at every level."""
    leaf = values
    for _ in range(rank + 1):
        leaf = st.lists(leaf, max_size=3)
    return leaf


def has_empty_inner_dim(nested: Any, rank: int) -> bool:
    def bad(sub: Any, k: int) -> bool:
        if k == 1:
            return False
        return not sub or any(bad(c, k - 1) for c in sub)

    return rank > 0 and any(bad(t, rank) for t in nested)


@FAST
@given(st.integers(0, 3).flatmap(lambda r: st.tuples(st.just(r), raw_nested(r))))
def test_tokens_roundtrip_canonical(case):
    rank, raw = case
    canon = canonical(raw, rank)
    assert O.norm(canon) == O.norm(O.canonical(raw, rank))  # the oracle's own rewrite agrees
    assert O.norm(canonical(canon, rank)) == O.norm(canon)  # idempotent
    toks = to_tokens(canon, rank)
    assert toks[-1] is DONE and all(t is not DONE for t in toks[:-1])
    assert all(t.level <= rank for t in toks if isinstance(t, Stop))
    assert O.norm(from_tokens(toks, rank)) == O.norm(canon)
    # Exactly one stop closes every innermost vector (it may also close outer levels).
    n_vectors = 0 if rank == 0 else len(O.nodes_at(canon, rank))
    assert sum(isinstance(t, Stop) for t in toks) == n_vectors
    if has_empty_inner_dim(raw, rank):
        with pytest.raises(StepValueError):
            to_tokens(raw, rank)
    else:
        assert O.norm(from_tokens(to_tokens(raw, rank), rank)) == O.norm(raw)


@FAST
@given(
    st.integers(0, 3).flatmap(
        lambda r: st.tuples(
            st.just(r),
            st.lists(st.integers(1, 3), min_size=r + 1, max_size=r + 1),
            st.tuples(st.integers(1, 2), st.integers(1, 2)),
            st.integers(0, 2**31 - 1),
        )
    )
)
def test_array_tokens_roundtrip(case):
    rank, shape, elem, seed = case
    arr = np.random.default_rng(seed).integers(-50, 50, size=(*shape, *elem)).astype(np.int32)
    toks = array_to_tokens(arr, rank)
    assert O.norm(from_tokens(toks, rank)) == O.norm(O.nest_array(arr, rank + 1))
    back = tokens_to_array(toks, rank, shape)
    assert back.dtype == arr.dtype and back.shape == arr.shape and np.array_equal(back, arr)


# ---------------------------------------------------------------------------------------------
# Higher-order operators


@FAST
@given(streams(), st.sampled_from(["add", "sub", "mul"]), st.integers(-3, 3))
def test_map_unary_scalar(x, op, c):
    def build(g, x):
        # A unary scalar function, and a binary one on zipped copies of the same stream.
        return [Map(x, fn=F.scalar_op(op, c)).out, Map(Zip(x, x).out, fn=F.add).out]

    (got, doubled), _ = run(build, {"x": x})
    f = {"add": lambda v: v + c, "sub": lambda v: v - c, "mul": lambda v: v * c}[op]
    same(got, O.map_unary(x.data, x.rank, lambda e: O.scalar(f(int(e[0, 0])))), x.rank)
    same(doubled, O.map_unary(x.data, x.rank, lambda e: (e * 2).astype(np.int32)), x.rank)


@st.composite
def stream_pairs(draw, **kw):
    """Two streams of one shape (the second with fresh values in the first's structure)."""
    x = draw(streams(**kw))
    n = len(O.leaves(x.data, x.rank + 1))
    vals = iter(draw(st.lists(values, min_size=n, max_size=n)))
    y = SD(x.elem, x.shape, O.map_leaves(x.data, x.rank, lambda _e: next(vals)), x.rank)
    return x, y


@FAST
@given(
    stream_pairs(),
    st.sampled_from([(F.add, np.add), (F.sub, np.subtract), (F.mul, np.multiply)]),
    st.booleans(),
)
def test_map_binary(pair, fns, zipped):
    x, y = pair
    fn, npf = fns

    def build(g, x, y):
        return Map(Zip(x, y).out, fn=fn).out if zipped else Map(x, y, fn=fn).out

    (got,), _ = run(build, {"x": x, "y": y})
    same(got, O.map_binary(x.data, y.data, x.rank, lambda a, b: npf(a, b).astype(np.int32)), x.rank)


@FAST
@given(stream_pairs())
def test_zip(pair):
    x, y = pair
    (got,), _ = run(lambda g, x, y: Zip(x, y).out, {"x": x, "y": y})
    same(got, O.zip_streams(x.data, y.data, x.rank), x.rank)


@FAST
@given(streams(min_rank=1), st.data())
def test_accum_add(x, data):
    b = data.draw(st.integers(1, x.rank))
    (got,), _ = run(lambda g, x: Accum(x, fn=F.accum_add, rank=b).out, {"x": x})
    same(got, O.accum(x.data, x.rank, b, tile_sum), x.rank - b)


@FAST
@given(st.integers(1, 3), st.integers(1, 3), st.data())
def test_accum_retile_row(rank, cols, data):
    x = data.draw(streams(rank=rank, leaf=tile_values(1, cols), elem=Tile(int32, 1, cols)))
    b = data.draw(st.integers(1, x.rank))
    (got,), _ = run(lambda g, x: Accum(x, fn=F.retile_row, rank=b).out, {"x": x})
    same(got, O.accum(x.data, x.rank, b, lambda es: O.stack_rows(es, cols)), x.rank - b)


@FAST
@given(streams(min_rank=1), st.data())
def test_scan_add(x, data):
    b = data.draw(st.integers(1, x.rank))
    (got,), _ = run(lambda g, x: Scan(x, fn=F.accum_add, rank=b).out, {"x": x})
    same(got, O.scan(x.data, x.rank, b, lambda a, e: (a + e).astype(np.int32)), x.rank)


def _flatmap_fn(c: int) -> F.FlatMapFn:
    """``v`` becomes ``v % 3`` rank-``c`` sub-tensors of data-dependent extents (possibly none)."""

    def subs(v: int, e: np.ndarray) -> list[Any]:
        def tensor(k: int, j: int) -> Any:
            if k == 0:
                return O.scalar(v * 10 + j)
            return [tensor(k - 1, i) for i in range((v + j + k) % 3)]

        return O.canonical([tensor(c, j) for j in range(v % 3)], c)  # FlatMap takes canonical data

    inner = tuple(ragged(f"fm_i{k}") for k in range(c))
    return F.FlatMapFn(
        f"fm{c}",
        1,
        c,
        lambda err, t: (t, inner, None),
        lambda out, e: subs(int(e[0, 0]), e),
    )


@FAST
@given(streams(leaf=st.integers(0, 9).map(O.scalar)), st.integers(0, 2))
def test_flatmap(x, c):
    fn = _flatmap_fn(c)
    (got,), _ = run(lambda g, x: FlatMap(x, fn=fn).out, {"x": x})
    expected = O.flat_map(x.data, x.rank, lambda e: fn.apply(None, e))
    same(got, expected, x.rank + c)


@FAST
@given(
    st.integers(0, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from(["rows", "cols"]),
    st.data(),
)
def test_retile_streamify(rank, r, c, split, data):
    x = data.draw(streams(rank=rank, leaf=tile_values(r, c), elem=Tile(int32, r, c)))
    (got,), _ = run(lambda g, x: RetileStreamify(x, split=split).out, {"x": x})
    if split == "rows":
        parts = lambda t: [t[i : i + 1] for i in range(r)]  # noqa: E731
    else:
        parts = lambda t: [t[:, j : j + 1] for j in range(c)]  # noqa: E731
    same(got, O.flat_map(x.data, x.rank, parts), x.rank)


# ---------------------------------------------------------------------------------------------
# Shape operators


@FAST
@given(streams(min_rank=1), st.data())
def test_flatten(x, data):
    lo = data.draw(st.integers(0, x.rank - 1))
    hi = data.draw(st.integers(lo + 1, x.rank))
    (got,), _ = run(lambda g, x: Flatten(x, lo, hi).out, {"x": x})
    same(got, O.flatten(x.data, x.rank, lo, hi), x.rank - (hi - lo))


@FAST
@given(streams(), st.integers(1, 3), st.integers(-5, 5), st.booleans())
def test_reshape_innermost_with_pad(x, chunk, padv, flags):
    pad = O.scalar(padv)

    def build(g, x):
        node = Reshape(x, chunk, 0, pad=pad, pad_flags=flags)
        return node.outputs

    got, _ = run(build, {"x": x})
    exp, exp_flags = O.reshape_inner(x.data, x.rank, chunk, pad)
    same(got[0], exp, x.rank + 1)
    if flags:
        same(
            got[1],
            O.map_leaves(exp_flags, x.rank + 1, lambda f: np.array([[f]], dtype=bool)),
            x.rank + 1,
        )


@st.composite
def reshape_outer_cases(draw):
    rank = draw(st.integers(1, 3))
    b = draw(st.integers(1, rank))
    chunk = draw(st.integers(1, 3))
    k = draw(st.integers(1, 2))
    specs = draw(dim_specs(rank, "x"))
    idx = rank - b
    specs[idx] = DimSpec("static", chunk * k, 0, 0, chunk * k)
    # The split dim must be static, so no ragged empties may sit above it unless the rewrite
    # could land there: rebuild the lower bounds of ragged dims above idx.
    for j in range(1, idx):
        if specs[j].kind == "ragged":
            specs[j] = DimSpec("ragged", 0, 1, specs[j].hi, specs[j].decl)
    raw = gen_nested(draw, specs, values)
    return SD(SCALAR, tuple(s.decl for s in specs), O.canonical(raw, rank), rank), b, chunk


@FAST
@given(reshape_outer_cases())
def test_reshape_outer(case):
    x, b, chunk = case
    (got,), _ = run(lambda g, x: Reshape(x, chunk, b).out, {"x": x})
    same(got, O.reshape_outer(x.data, x.rank, b, chunk), x.rank + 1)


@FAST
@given(streams())
def test_promote_outermost(x):
    (got,), _ = run(lambda g, x: Promote(x).out, {"x": x})
    same(got, O.promote_outer(x.data), x.rank + 1)


@FAST
@given(streams(), st.data())
def test_promote_positional(x, data):
    p = data.draw(st.integers(0, x.rank))
    (got,), _ = run(lambda g, x: Promote(x, p).out, {"x": x})
    same(got, O.promote_at(x.data, x.rank, p), x.rank + 1)


@FAST
@given(streams(min_rank=1, prefix="ref"), st.data())
def test_expand(ref, data):
    b = data.draw(st.integers(1, ref.rank))
    depth = ref.rank + 1 - b
    n = len(O.nodes_at(ref.data, depth))
    vals = iter(data.draw(st.lists(values, min_size=n, max_size=n)))

    def single(_sub: Any) -> Any:
        e: Any = next(vals)
        for _ in range(b):
            e = [e]
        return e

    x = SD(SCALAR, (*ref.shape[:depth], *([1] * b)), O.map_at(ref.data, depth, single), ref.rank)
    (got,), _ = run(lambda g, x, ref: Expand(x, ref, b).out, {"x": x, "ref": ref})
    same(got, O.expand(x.data, ref.data, ref.rank, b), ref.rank)


@FAST
@given(streams(), st.integers(1, 3))
def test_repeat_static(x, count):
    (got,), _ = run(lambda g, x: RepeatStatic(x, count).out, {"x": x})
    same(got, O.repeat_static(x.data, x.rank, count), x.rank + 1)


# ---------------------------------------------------------------------------------------------
# On-chip memory


@FAST
@given(streams(min_rank=1), st.lists(st.integers(1, 2), max_size=2), st.data())
def test_bufferize_streamify_repeat(x, repeat, data):
    b = data.draw(st.integers(1, x.rank))
    (got,), _ = run(lambda g, x: Streamify(Bufferize(x, b).out, repeat=repeat).out, {"x": x})
    same(got, O.bufferize_streamify_repeat(x.data, x.rank, b, repeat), x.rank + len(repeat))


@FAST
@given(streams(min_rank=1), st.integers(0, 2), st.data())
def test_bufferize_streamify_ref(x, c, data):
    b = data.draw(st.integers(1, x.rank))
    depth = x.rank + 1 - b
    # Per buffer, a rank-c reference sub-tensor: it says how often (and in which shape) to read.
    extra = data.draw(dim_specs(c - 1, "rf", outer=(0 if c == 1 else 1, 3))) if c else []

    def ref_sub(_buf: Any) -> Any:
        return gen_nested(data.draw, extra, values)

    rank = x.rank - b + c
    ref_shape = (*x.shape[:depth], *(s.decl for s in extra))
    ref = SD(SCALAR, ref_shape, O.canonical(O.map_at(x.data, depth, ref_sub), rank), rank)
    (got,), _ = run(
        lambda g, x, ref: Streamify(Bufferize(x, b).out, ref=ref).out, {"x": x, "ref": ref}
    )
    same(got, O.bufferize_streamify_ref(x.data, x.rank, b, ref.data, c), ref.rank + b)


@st.composite
def affine_cases(draw):
    rank = draw(st.integers(1, 3))
    b = draw(st.integers(1, rank))
    specs = draw(dim_specs(rank, "x"))
    for j in range(rank + 1 - b, rank + 1):  # buffered dims: static, non-empty
        v = draw(st.integers(1, 3))
        specs[j] = DimSpec("static", v, 0, 0, v)
    for j in range(1, rank + 1 - b):
        if specs[j].kind == "ragged":
            specs[j] = DimSpec("ragged", 0, 1, specs[j].hi, specs[j].decl)
    raw = gen_nested(draw, specs, values)
    size = int(np.prod([s.value for s in specs[rank + 1 - b :]]))
    out_shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    base = draw(st.integers(0, size - 1))
    stride, room = [], size - 1 - base
    for n in out_shape:
        s = draw(st.integers(0, room // (n - 1) if n > 1 else 3))
        stride.append(s)
        room -= (n - 1) * s
    repeat = draw(st.lists(st.integers(1, 2), max_size=1))
    x = SD(SCALAR, tuple(s.decl for s in specs), O.canonical(raw, rank), rank)
    return x, b, out_shape, stride, base, repeat


@FAST
@given(affine_cases())
def test_bufferize_streamify_affine(case):
    x, b, out_shape, stride, base, repeat = case

    def build(g, x):
        return Streamify(
            Bufferize(x, b).out, repeat=repeat, stride=stride, out_shape=out_shape, base=base
        ).out

    (got,), _ = run(build, {"x": x})
    expected = O.map_at(
        x.data,
        x.rank + 1 - b,
        lambda sub: O.grid(
            tuple(repeat), lambda _m: O.affine_read(sub, b, stride, out_shape, base)
        ),
    )
    same(got, expected, x.rank - b + len(repeat) + len(out_shape))


@st.composite
def permuted_cases(draw):
    """A stream whose buffered dims are static (1..3) but for at most one regular dynamic dim
    (0..3), and a permutation of the buffered dims. A read whose dynamic extent 0 is not its
    innermost dim is the empty tensor's canonical form (``docs/semantics.md``, Streamify)."""
    rank = draw(st.integers(1, 3))
    b = draw(st.integers(1, rank))
    specs = draw(dim_specs(rank, "x", kinds=("static", "regular")))
    dyn = draw(st.one_of(st.none(), st.integers(rank + 1 - b, rank)))
    order = draw(st.permutations(range(b)))
    for j in range(rank + 1 - b, rank + 1):
        if j == dyn:
            v = draw(st.integers(0, 3))
            specs[j] = DimSpec("regular", v, 0, 3, regular(f"x_d{j}"))
        else:
            v = draw(st.integers(1, 3))
            specs[j] = DimSpec("static", v, 0, 0, v)
    raw = gen_nested(draw, specs, values)
    repeat = draw(st.lists(st.integers(1, 2), max_size=1))
    x = SD(SCALAR, tuple(s.decl for s in specs), O.canonical(raw, rank), rank)
    extents = tuple(s.value for s in specs[rank + 1 - b :])  # every buffer's: no ragged dim
    return x, b, tuple(order), repeat, extents


def _permuted(sub: Any, extents: tuple[int, ...], order: tuple[int, ...]) -> Any:
    """The oracle of a permuted read: the nested buffer of ``extents`` (its canonical form when
    empty, which does not show them) with its dims reordered."""
    b = len(extents)
    flat = O.leaves(sub, b)
    strides = [int(np.prod(extents[d + 1 :])) for d in range(b)]
    shape = tuple(extents[d] for d in order)
    return O.grid(shape, lambda m: flat[sum(i * strides[d] for i, d in zip(m, order, strict=True))])


@FAST
@given(permuted_cases())
def test_bufferize_streamify_permuted(case):
    """``Streamify(order=)``: each buffer read with its dims permuted, a dynamic dim's extent
    taken from the buffer (0 included)."""
    x, b, order, repeat, extents = case
    (got,), _ = run(lambda g, x: Streamify(Bufferize(x, b).out, repeat=repeat, order=order).out,
                    {"x": x})  # fmt: skip
    expected = O.map_at(
        x.data,
        x.rank + 1 - b,
        lambda sub: O.grid(tuple(repeat), lambda _m: _permuted(sub, extents, order)),
    )
    same(got, expected, x.rank - b + len(repeat) + b)


# ---------------------------------------------------------------------------------------------
# Routing and merging


@st.composite
def partition_cases(draw, one_hot: bool = False):
    x = draw(streams())
    b = draw(st.integers(0, x.rank))
    n = draw(st.integers(1, 3))
    depth = x.rank + 1 - b
    k = len(O.nodes_at(x.data, depth))
    sels = draw(st.lists(selectors(n, one_hot=one_hot), min_size=k, max_size=k))
    sel = SD(Selector(n), x.shape[:depth], O.fill_at(x.data, depth, iter(sels)), x.rank - b)
    return x, sel, b, n


@FAST
@given(partition_cases())
def test_partition(case):
    x, sel, b, n = case
    got, _ = run(lambda g, x, sel: Partition(x, sel, b).outputs, {"x": x, "sel": sel})
    for g_out, e_out in zip(got, O.partition(x.data, x.rank, sel.data, b, n), strict=True):
        same(g_out, e_out, b)


@st.composite
def reassemble_cases(draw):
    n = draw(st.integers(1, 3))
    a = draw(st.integers(0, 2))
    sel_rank = draw(st.integers(0, 2))
    fixed = draw(st.one_of(st.none(), st.integers(1, n)))
    if fixed is not None:
        sel_leaf = st.permutations(range(n)).map(lambda p, k=fixed: np.isin(np.arange(n), p[:k]))
    else:
        sel_leaf = selectors(n, nonzero=a > 0)
    sel = draw(streams(rank=sel_rank, prefix="sel", leaf=sel_leaf, elem=Selector(n), max_len=2))
    picks = [np.asarray(s) for s in O.leaves(sel.data, sel_rank + 1)]
    counts = [int(sum(bool(s[i]) for s in picks)) for i in range(n)]
    specs = draw(dim_specs(a, "in", max_len=2))
    inputs = []
    for i, cnt in enumerate(counts):
        outer = (
            DimSpec("static", cnt, 0, 0, cnt)
            if draw(st.booleans())
            else DimSpec("regular", cnt, 0, 0, regular(f"in{i}_n"))
        )
        sp_i = [outer, *specs[1:]]
        raw = gen_nested(draw, sp_i, values)
        inputs.append(SD(SCALAR, tuple(s.decl for s in sp_i), O.canonical(raw, a), a))
    return sel, inputs, a, fixed


@FAST
@given(reassemble_cases())
def test_reassemble(case):
    sel, inputs, a, fixed = case
    srcs = {f"i{k}": sd for k, sd in enumerate(inputs)}
    srcs["sel"] = sel

    def build(g, sel, **ins):
        return Reassemble([ins[f"i{k}"] for k in range(len(inputs))], sel, count=fixed).out

    (got,), _ = run(build, srcs)
    same(got, O.reassemble([sd.data for sd in inputs], sel.data, sel.rank), sel.rank + 1 + a)


@FAST
@given(partition_cases(one_hot=True))
def test_partition_reassemble_roundtrip(case):
    x, sel, b, _n = case

    def build(g, x, sel):
        parts = Partition(x, sel, b).outputs
        joined = Reassemble(parts, sel, count=1).out
        return [joined, Flatten(joined, b, b + 1).out]

    (joined, flat), _ = run(build, {"x": x, "sel": sel})
    same(joined, O.promote_at(x.data, x.rank, b), x.rank + 1)
    same(flat, x.data, x.rank)


@FAST
@given(streams(), st.integers(1, 3), st.data())
def test_parallelize(x, n, data):
    b = data.draw(st.integers(0, x.rank))
    got, _ = run(lambda g, x: Parallelize(x, n, b).outputs, {"x": x})
    for g_out, e_out in zip(got, O.parallelize(x.data, x.rank, b, n), strict=True):
        same(g_out, e_out, b)


def policies(counts: Sequence[int]):
    """Arrival policies, FixedOrder as a random interleaving of the chunks' sources."""
    order = [i for i, c in enumerate(counts) for _ in range(c)]
    return st.one_of(
        st.just(LowestIndexFirst()),
        st.just(RoundRobin()),
        st.integers(0, 1000).map(RandomArrival),
        st.permutations(order).map(FixedOrder),
    )


@st.composite
def merge_cases(draw):
    n = draw(st.integers(1, 3))
    a = draw(st.integers(0, 2))
    specs = draw(dim_specs(a, "m", max_len=2))
    inputs = []
    for i in range(n):
        cnt = draw(st.integers(0, 3))
        outer = (
            DimSpec("static", cnt, 0, 0, cnt)
            if draw(st.booleans())
            else DimSpec("regular", cnt, 0, 0, regular(f"m{i}_n"))
        )
        sp_i = [outer, *specs[1:]]
        raw = gen_nested(draw, sp_i, values)
        inputs.append(SD(SCALAR, tuple(s.decl for s in sp_i), O.canonical(raw, a), a))
    pol = draw(policies([len(sd.data) for sd in inputs]))
    return inputs, a, pol


@FAST
@given(merge_cases())
def test_eager_merge(case):
    inputs, _a, pol = case
    srcs = {f"i{k}": sd for k, sd in enumerate(inputs)}

    def build(g, **ins):
        return EagerMerge([ins[f"i{k}"] for k in range(len(inputs))]).outputs

    (data, sel), _ = run(build, srcs, policy=pol)
    assert O.merge_consistent([sd.data for sd in inputs], data, sel)
    # The multiset of chunks is preserved.
    assert sorted(map(O.norm, data)) == sorted(O.norm(c) for sd in inputs for c in sd.data)


# ---------------------------------------------------------------------------------------------
# Off-chip memory


@st.composite
def tensors(draw, dtype=np.int32):
    outer = draw(st.lists(st.integers(1, 2), max_size=1))
    tile = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    tr, tc = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape = (*outer, tr * tile[0], tc * tile[1])
    seed = draw(st.integers(0, 2**31 - 1))
    arr = np.random.default_rng(seed).integers(-100, 100, size=shape).astype(dtype)
    return arr, tile


@st.composite
def load_cases(draw):
    arr, tile = draw(tensors())
    n_tiles = len(O.tiles_of(arr, tile))
    out_shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    base = draw(st.integers(0, n_tiles - 1))
    stride, room = [], n_tiles - 1 - base
    for n in out_shape:
        stride.append(draw(st.integers(0, room // (n - 1) if n > 1 else n_tiles)))
        room -= (n - 1) * stride[-1]
    use_ref = draw(st.booleans())
    ref = draw(streams(prefix="ref", max_len=2)) if use_ref else None
    return arr, tile, out_shape, stride, base, ref


@FAST
@given(load_cases())
def test_linear_offchip_load(case):
    arr, tile, out_shape, stride, base, ref = case
    block = O.nest_array(O.linear_load(arr, tile, out_shape, stride, base), len(out_shape))

    def build(g, **ins):
        t = g.tensor("T", arr.shape, "int32")
        return LinearOffChipLoad(
            t, tile=tile, out_shape=out_shape, stride=stride, base=base, ref=ins.get("ref")
        ).out

    srcs = {"ref": ref} if ref is not None else {}
    (got,), _ = run(build, srcs, memory={"T": arr})
    if ref is None:
        same(got, [block], len(out_shape))
    else:
        same(got, O.map_leaves(ref.data, ref.rank, lambda _r: block), ref.rank + len(out_shape))


@FAST
@given(tensors(), st.data())
def test_random_offchip_load(tcase, data):
    arr, tile = tcase
    n_tiles = len(O.tiles_of(arr, tile))
    raddr = data.draw(
        streams(
            prefix="ra",
            leaf=st.integers(0, n_tiles - 1).map(lambda k: O.scalar(k, np.int64)),
            elem=ADDR,
        )
    )

    def build(g, raddr):
        t = g.tensor("T", arr.shape, "int32")
        return RandomOffChipLoad(raddr, t, tile=tile).out

    (got,), _ = run(build, {"raddr": raddr}, memory={"T": arr})
    tiles = O.tiles_of(arr, tile)
    same(got, O.map_leaves(raddr.data, raddr.rank, lambda k: tiles[int(k[0, 0])]), raddr.rank)


@FAST
@given(tensors(), st.data())
def test_random_offchip_store(tcase, data):
    arr, tile = tcase
    n_tiles = len(O.tiles_of(arr, tile))
    waddr = data.draw(
        streams(
            prefix="wa",
            leaf=st.integers(0, n_tiles - 1).map(lambda k: O.scalar(k, np.int64)),
            elem=ADDR,
        )
    )
    n = len(O.leaves(waddr.data, waddr.rank + 1))
    tiles = iter(data.draw(st.lists(tile_values(*tile), min_size=n, max_size=n)))
    wdata = SD(
        Tile(int32, *tile),
        waddr.shape,
        O.map_leaves(waddr.data, waddr.rank, lambda _a: next(tiles)),
        waddr.rank,
    )

    def build(g, waddr, wdata):
        t = g.tensor("T", arr.shape, "int32")
        return RandomOffChipStore(waddr, wdata, t).out

    (ack,), res = run(build, {"waddr": waddr, "wdata": wdata}, memory={"T": arr})
    same(
        ack,
        O.map_leaves(waddr.data, waddr.rank, lambda _a: np.ones((1, 1), dtype=bool)),
        waddr.rank,
    )
    addrs = [int(a[0, 0]) for a in O.leaves(waddr.data, waddr.rank + 1)]
    expected = O.random_store(arr, tile, addrs, O.leaves(wdata.data, wdata.rank + 1))
    assert res.memory["T"].dtype == arr.dtype
    assert np.array_equal(res.memory["T"], expected)


@FAST
@given(st.tuples(st.integers(1, 2), st.integers(1, 2)), st.data())
def test_linear_offchip_store(tile, data):
    x = data.draw(streams(prefix="s", leaf=tile_values(*tile), elem=Tile(int32, *tile)))
    elems = O.leaves(x.data, x.rank + 1)
    assume(elems)
    n = len(elems)
    q = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    shape = ((n // q) * tile[0], q * tile[1])

    def build(g, x):
        LinearOffChipStore(x, g.tensor("Y", shape, "int32"))
        return []

    _, res = run(build, {"x": x})
    assert "Y" in res.written
    assert np.array_equal(res.memory["Y"], O.from_tiles(elems, shape))


# ---------------------------------------------------------------------------------------------
# Required property: stored results do not depend on EagerMerge's arrival policy


@st.composite
def moe_cases(draw):
    n_rows = draw(st.integers(1, 6))
    cols = draw(st.integers(1, 3))
    n_exp = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, size=(n_rows, cols)).astype(np.int32)
    w = rng.integers(-5, 5, size=(1, cols)).astype(np.int32)
    route = draw(st.lists(st.integers(0, n_exp - 1), min_size=n_rows, max_size=n_rows))
    from_memory = draw(st.booleans())
    op = draw(st.sampled_from(["add", "mul"]))
    seeds = draw(st.lists(st.integers(0, 10**6), min_size=2, max_size=3, unique=True))
    interleave = draw(st.permutations(route))
    perm = draw(st.permutations(range(n_exp)))
    return x, w, route, n_exp, from_memory, op, seeds, interleave, perm


@SLOW
@given(moe_cases())
def test_stored_result_independent_of_arrival_policy(case):
    x, w, route, n_exp, from_memory, op, seeds, interleave, perm = case
    n_rows, cols = x.shape
    onehots = [np.eye(n_exp, dtype=bool)[e] for e in route]

    g = Graph("moe")
    tx = g.tensor("X", x.shape, "int32")
    tw = g.tensor("W", w.shape, "int32")
    ty = g.tensor("Y", x.shape, "int32")
    memory = {"X": x, "W": w}
    inputs = {}
    if from_memory:
        ts = g.tensor("R", (n_rows, n_exp), "int32")
        memory["R"] = np.stack(onehots).astype(np.int32)
        sel_tiles = LinearOffChipLoad(ts, tile=(1, n_exp), out_shape=(n_rows,), stride=(1,)).out
        sel = Map(sel_tiles, fn=F.to_selector(n_exp)).out
    else:
        sel = Source(g, StreamType(Selector(n_exp), (1, n_rows)), name="sel").out
        inputs["sel"] = [onehots]
    rows = LinearOffChipLoad(tx, tile=(1, cols), out_shape=(n_rows,), stride=(1,)).out
    branches = Partition(rows, sel, 0).outputs
    merged, msel = EagerMerge(branches).outputs
    weight = LinearOffChipLoad(tw, tile=(1, cols), out_shape=(), stride=(), ref=msel).out
    y = Map(merged, weight, fn=F.add if op == "add" else F.mul).out
    back = Partition(y, msel, 0).outputs
    joined = Reassemble(back, sel, count=1).out
    LinearOffChipStore(joined, ty)

    expected = (x + w if op == "add" else x * w).astype(np.int32)
    pols = [
        LowestIndexFirst(),
        RoundRobin(),
        *(RandomArrival(s) for s in seeds),
        FixedOrder(list(interleave)),
    ]
    if all(e in route for e in range(n_exp)):  # FixedOrder waits for every input it names
        pols.append(FixedOrder(list(perm)))
    orders = set()
    for pol in pols:
        res = interpret(g, memory, inputs=inputs, merge_policy=pol)
        assert np.array_equal(res.memory["Y"], expected), type(pol).__name__
        merged_sel = FixedOrder.from_selectors(res.tokens(msel)).order
        assert sorted(merged_sel) == sorted(route)
        orders.add(tuple(merged_sel))
    assert tuple(interleave) in orders  # FixedOrder really imposed its order


# ---------------------------------------------------------------------------------------------
# A composition: pad, pack, unpack (Reshape + Accum(retile_row) + RetileStreamify(is_pad))


@FAST
@given(st.integers(0, 2), st.integers(1, 3), st.integers(1, 3), st.data())
def test_pad_pack_unpack_roundtrip(rank, cols, chunk, data):
    # An empty innermost vector would give Reshape zero chunks: an empty non-innermost dim, which
    # the canonical form writes as one empty chunk under the static chunk dim, so Accum(retile_row)
    # would emit a 0-row tile where its type promises `chunk` rows. Keep vectors non-empty here.
    x = data.draw(
        streams(
            rank=rank,
            prefix="p",
            leaf=tile_values(1, cols),
            elem=Tile(int32, 1, cols),
            inner_empty=False,
        )
    )
    pad = np.zeros((1, cols), dtype=np.int32)

    def build(g, x):
        padded, flags = Reshape(x, chunk, 0, pad=pad, pad_flags=True).outputs
        packed = Accum(padded, fn=F.retile_row, rank=1).out
        mask = Accum(flags, fn=F.retile_row, rank=1).out
        return RetileStreamify(packed, is_pad=mask).out

    (got,), _ = run(build, {"x": x})
    same(got, x.data, x.rank)


def test_oracle_helpers_selfcheck():
    """The oracle's own pieces agree with each other on a hand example."""
    data = [
        [[O.scalar(1), O.scalar(2)], [O.scalar(3)]],
        [[O.scalar(4)], [O.scalar(5), O.scalar(6), O.scalar(7)]],
    ]
    flat = O.flatten(data, 2, 0, 1)
    assert [[int(e[0, 0]) for e in t] for t in flat] == [[1, 2, 3], [4, 5, 6, 7]]
    acc = O.accum(data, 2, 1, tile_sum)
    assert [[int(e[0, 0]) for e in t] for t in acc] == [[3, 3], [4, 18]]
    assert O.canonical([[], [[]]], 2) == [[[]], [[]]]
    assert list(itertools.chain.from_iterable(O.parallelize([1, 2, 3, 4, 5], 0, 0, 2))) == [
        1,
        3,
        5,
        2,
        4,
    ]
