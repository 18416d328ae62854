"""An independent tensor-level oracle of the STeP operators.

Everything here works on *nested Python lists* (a rank-``r`` stream is a list of ``r``-dimensional
tensors, i.e. nested lists of depth ``r + 1`` whose leaves are the elements) and never on stop
tokens. The property tests compare the interpreter's decoded output with these functions, so this
module deliberately does not import ``step_lang``: the only shared notion is the canonical form of
nested data (an empty non-innermost dimension is written as one empty innermost vector), which is
re-implemented here as :func:`canonical`.

Conventions: ``depth`` counts list levels from the stream list (depth 0); the tensors are the items
at depth 1. In a rank-``r`` stream the rank-``k`` sub-tensors are the nodes at depth ``r + 1 - k``.
Ranks are counted from the innermost dimension (rank 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# Generic helpers on nested lists


def canonical(nested: Sequence[Any], rank: int) -> list[Any]:
    """Rewrite empty non-innermost dims as one empty innermost vector (the writable form)."""

    def fix(sub: Any, k: int) -> Any:  # sub is a rank-k sub-tensor, k >= 1
        if k == 1:
            return list(sub)
        if not sub:
            return [fix([], k - 1)]
        return [fix(c, k - 1) for c in sub]

    if rank == 0:
        return list(nested)
    return [fix(t, rank) for t in nested]


def leaves(node: Any, depth: int) -> list[Any]:
    """The elements under ``node`` (a list ``depth`` levels above its elements), in order."""
    if depth == 0:
        return [node]
    return [x for c in node for x in leaves(c, depth - 1)]


def nodes_at(nested: Any, depth: int) -> list[Any]:
    """Every node ``depth`` levels below ``nested`` (depth 0 is ``nested`` itself), in order."""
    if depth == 0:
        return [nested]
    return [x for c in nested for x in nodes_at(c, depth - 1)]


def map_at(nested: Any, depth: int, fn: Callable[[Any], Any]) -> Any:
    """Replace every node ``depth`` levels below ``nested`` by ``fn(node)``."""
    if depth == 0:
        return fn(nested)
    return [map_at(c, depth - 1, fn) for c in nested]


def fill_at(nested: Any, depth: int, values: Iterator[Any]) -> Any:
    """Replace every node at ``depth`` by the next item of ``values`` (structure kept)."""
    return map_at(nested, depth, lambda _node: next(values))


def map_leaves(nested: Any, rank: int, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every element of a rank-``rank`` stream."""
    return map_at(nested, rank + 1, fn)


def zip_leaves(a: Any, b: Any, rank: int, fn: Callable[[Any, Any], Any]) -> Any:
    """Combine two same-shaped streams element by element."""

    def go(x: Any, y: Any, depth: int) -> Any:
        if depth == 0:
            return fn(x, y)
        if len(x) != len(y):
            raise ValueError("streams differ in shape")
        return [go(p, q, depth - 1) for p, q in zip(x, y, strict=True)]

    return go(a, b, rank + 1)


def nest_leaves(dims: Sequence[int], leaf: Callable[[], Any]) -> Any:
    """Nested lists of shape ``dims`` (a static stream's data), ``leaf()`` at each leaf in order."""
    if not dims:
        return leaf()
    return [nest_leaves(dims[1:], leaf) for _ in range(dims[0])]


def nest_array(array: np.ndarray, depth: int) -> Any:
    """Split the leading ``depth`` axes of ``array`` into nested lists."""
    if depth == 0:
        return array
    return [nest_array(array[i], depth - 1) for i in range(array.shape[0])]


def norm(x: Any) -> Any:
    """A comparable, hashable rendering of nested data (arrays keep dtype, shape and values)."""
    if isinstance(x, list):
        return ("L", tuple(norm(c) for c in x))
    if isinstance(x, tuple):
        return ("T", tuple(norm(c) for c in x))
    if isinstance(x, np.ndarray):
        return ("A", str(x.dtype), x.shape, tuple(x.reshape(-1).tolist()))
    if isinstance(x, (bool, np.bool_)):
        return ("b", bool(x))
    raise TypeError(f"cannot normalise {type(x).__name__}")


def scalar(v: int, dtype: Any = np.int32) -> np.ndarray:
    """A [1,1] tile holding ``v``."""
    return np.array([[v]], dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Higher-order operators


def map_unary(data: Any, rank: int, fn: Callable[[Any], Any]) -> Any:
    return map_leaves(data, rank, fn)


def map_binary(a: Any, b: Any, rank: int, fn: Callable[[Any, Any], Any]) -> Any:
    return zip_leaves(a, b, rank, fn)


def zip_streams(a: Any, b: Any, rank: int) -> Any:
    return zip_leaves(a, b, rank, lambda x, y: (x, y))


def accum(data: Any, rank: int, b: int, fold: Callable[[list[Any]], Any]) -> Any:
    """Reduce every rank-``b`` sub-tensor to ``fold(its elements in order)``."""
    return map_at(data, rank + 1 - b, lambda sub: fold(leaves(sub, b)))


def scan(data: Any, rank: int, b: int, step: Callable[[Any, Any], Any]) -> Any:
    """Running fold inside every rank-``b`` sub-tensor; the shape is unchanged."""

    def one(sub: Any) -> Any:
        elems = leaves(sub, b)
        running, acc = [], None
        for e in elems:
            acc = e if acc is None else step(acc, e)
            running.append(acc)
        return fill_at(sub, b, iter(running))

    return map_at(data, rank + 1 - b, one)


def sum_tiles(elems: list[np.ndarray], shape: tuple[int, int], dtype: Any = np.int32) -> np.ndarray:
    """Sum of tiles (zero tile for none), computed in int64 and cast back."""
    total = np.zeros(shape, dtype=np.int64)
    for e in elems:
        total = total + e.astype(np.int64)
    return total.astype(dtype)


def stack_rows(elems: list[np.ndarray], cols: int, dtype: Any = np.int32) -> np.ndarray:
    """Row-concatenate [1, C] tiles into an [n, C] tile (an empty group gives [0, C])."""
    if not elems:
        return np.zeros((0, cols), dtype=dtype)
    return np.concatenate(elems, axis=0).astype(dtype)


def flat_map(data: Any, rank: int, fn: Callable[[Any], list[Any]]) -> Any:
    """Each element becomes a list of sub-tensors; an innermost vector concatenates its lists."""

    def vec(v: list[Any]) -> list[Any]:
        return [s for e in v for s in fn(e)]

    if rank == 0:
        return vec(data)
    return map_at(data, rank, vec)


# ---------------------------------------------------------------------------------------------
# Shape operators


def flatten(data: Any, rank: int, lo: int, hi: int) -> Any:
    """Merge the dims of ranks ``lo..hi``: the items of the rank-``lo`` dims are concatenated."""

    def merge(node: Any, k: int) -> list[Any]:
        if k == 0:
            return list(node)
        return [x for c in node for x in merge(c, k - 1)]

    return map_at(data, rank - hi, lambda node: merge(node, hi - lo))


def reshape_inner(data: Any, rank: int, chunk: int, pad: Any) -> tuple[Any, Any]:
    """Split every innermost vector into ``chunk``-sized vectors, padding the last one.

    Returns the data and the padding flags (``True`` for padding), both of rank ``rank + 1``.
    """

    def split(vec: list[Any]) -> tuple[list[Any], list[Any]]:
        out, flags = [], []
        for i in range(0, len(vec), chunk):
            part = list(vec[i : i + chunk])
            fl = [False] * len(part)
            while len(part) < chunk:
                part.append(pad)
                fl.append(True)
            out.append(part)
            flags.append(fl)
        return out, flags

    pairs = split(data) if rank == 0 else map_at(data, rank, split)
    if rank == 0:
        return pairs[0], pairs[1]
    return map_at(pairs, rank, lambda p: p[0]), map_at(pairs, rank, lambda p: p[1])


def reshape_outer(data: Any, rank: int, b: int, chunk: int) -> Any:
    """Split the (divisible) dim of rank ``b > 0`` into ``(D / chunk, chunk)``."""

    def split(node: list[Any]) -> list[Any]:
        if len(node) % chunk:
            raise ValueError("dim not divisible")
        return [list(node[i : i + chunk]) for i in range(0, len(node), chunk)]

    return map_at(data, rank - b, split)


def promote_outer(data: Any) -> Any:
    """The paper's Promote: a new outermost dim of size ``1 if D > 0 else 0``."""
    return [list(data)] if data else []


def promote_at(data: Any, rank: int, p: int) -> Any:
    """Insert a size-1 dim at rank ``p``: every rank-``(p-1)`` item (or element) is wrapped."""
    return map_at(data, rank + 1 - p, lambda x: [x])


def expand(x: Any, ref: Any, rank: int, b: int) -> Any:
    """Fill each rank-``b`` sub-tensor of ``ref`` with the matching (single) element of ``x``."""
    xs = iter(nodes_at(x, rank + 1 - b))

    def fill(sub: Any) -> Any:
        elem = leaves(next(xs), b)
        if len(elem) != 1:
            raise ValueError("inner dims of x must be 1")
        return map_at(sub, b, lambda _r: elem[0])

    return map_at(ref, rank + 1 - b, fill)


def repeat_static(data: Any, rank: int, count: int) -> Any:
    return map_leaves(data, rank, lambda e: [e] * count)


def grid(shape: Sequence[int], at: Callable[[tuple[int, ...]], Any]) -> Any:
    """Nested lists of ``at(index)`` over a static row-major ``shape``."""
    if not shape:
        return at(())
    return [grid(shape[1:], lambda m, i=i: at((i, *m))) for i in range(shape[0])]


# ---------------------------------------------------------------------------------------------
# On-chip memory: Bufferize followed by Streamify


def bufferize_streamify_repeat(data: Any, rank: int, b: int, repeat: Sequence[int]) -> Any:
    """Each rank-``b`` sub-tensor is replayed ``prod(repeat)`` times in new dims ``repeat``."""
    return map_at(data, rank + 1 - b, lambda sub: grid(tuple(repeat), lambda _m: sub))


def affine_read(
    sub: Any, b: int, stride: Sequence[int], out_shape: Sequence[int], base: int
) -> Any:
    elems = leaves(sub, b)
    return grid(
        tuple(out_shape), lambda m: elems[base + sum(i * s for i, s in zip(m, stride, strict=True))]
    )


def bufferize_streamify_ref(data: Any, rank: int, b: int, ref: Any, c: int) -> Any:
    """Each element of ``ref`` (``c`` dims below each buffer) becomes a replay of its buffer."""
    bufs = iter(nodes_at(data, rank + 1 - b))

    def replay(refsub: Any) -> Any:
        buf = next(bufs)
        return map_at(refsub, c, lambda _r: buf)

    return map_at(ref, rank + 1 - b, replay)


# ---------------------------------------------------------------------------------------------
# Routing and merging


def partition(x: Any, rank: int, sel: Any, b: int, n: int) -> list[list[Any]]:
    """Chunk ``k`` (a rank-``b`` sub-tensor) goes to every output selected by selector ``k``."""
    chunks = nodes_at(x, rank + 1 - b)
    sels = leaves(sel, rank - b + 1)
    if len(chunks) != len(sels):
        raise ValueError("selector does not cover the chunks")
    outs: list[list[Any]] = [[] for _ in range(n)]
    for c, s in zip(chunks, sels, strict=True):
        for j in np.flatnonzero(np.asarray(s)):
            outs[int(j)].append(c)
    return outs


def reassemble(inputs: Sequence[list[Any]], sel: Any, sel_rank: int) -> Any:
    """Per selector, one outermost slice of every selected input (index order) forms a new dim."""
    its = [iter(x) for x in inputs]

    def gather(s: Any) -> list[Any]:
        return [next(its[int(j)]) for j in np.flatnonzero(np.asarray(s))]

    out = map_leaves(sel, sel_rank, gather)
    for i, it in enumerate(its):
        if next(it, None) is not None:
            raise ValueError(f"input {i} has slices left over")
    return out


def parallelize(x: Any, rank: int, b: int, n: int) -> list[list[Any]]:
    """Rank-``b`` chunks dealt round-robin over ``n`` outputs."""
    chunks = nodes_at(x, rank + 1 - b)
    return [chunks[i::n] for i in range(n)]


def merge_consistent(inputs: Sequence[list[Any]], data: list[Any], sel: list[Any]) -> bool:
    """EagerMerge's contract: one-hot selectors naming, in order, where each chunk came from."""
    if len(data) != len(sel) or len(data) != sum(len(x) for x in inputs):
        return False
    got: list[list[Any]] = [[] for _ in inputs]
    for chunk, s in zip(data, sel, strict=True):
        hot = np.flatnonzero(np.asarray(s))
        if len(hot) != 1:
            return False
        got[int(hot[0])].append(norm(chunk))
    return all(g == [norm(c) for c in x] for g, x in zip(got, inputs, strict=True))


# ---------------------------------------------------------------------------------------------
# Off-chip memory (numpy on whole tensors)


def tiles_of(tensor: np.ndarray, tile: tuple[int, int]) -> np.ndarray:
    """All ``tile``-shaped tiles of ``tensor`` numbered row-major over the tiled shape."""
    *outer, r, c = tensor.shape
    tr, tc = tile
    out = []
    for idx in itertools.product(*(range(n) for n in outer)):
        mat = tensor[idx] if idx else tensor
        for i in range(r // tr):
            for j in range(c // tc):
                out.append(mat[i * tr : (i + 1) * tr, j * tc : (j + 1) * tc])
    return np.stack(out) if out else np.zeros((0, tr, tc), dtype=tensor.dtype)


def from_tiles(tiles: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`tiles_of`."""
    *outer, r, c = shape
    tr, tc = tiles[0].shape
    out = np.zeros(shape, dtype=tiles[0].dtype)
    k = 0
    for idx in itertools.product(*(range(n) for n in outer)):
        for i in range(r // tr):
            for j in range(c // tc):
                sl = (*idx, slice(i * tr, (i + 1) * tr), slice(j * tc, (j + 1) * tc))
                out[sl] = tiles[k]
                k += 1
    return out


def linear_load(
    tensor: np.ndarray,
    tile: tuple[int, int],
    out_shape: Sequence[int],
    stride: Sequence[int],
    base: int,
) -> np.ndarray:
    """The affine read as one array ``[*out_shape, tr, tc]`` (numpy fancy indexing)."""
    tiles = tiles_of(tensor, tile)
    idx = np.indices(tuple(out_shape), dtype=np.int64)
    k = (
        base + np.tensordot(np.asarray(stride, dtype=np.int64), idx, axes=1)
        if out_shape
        else np.int64(base)
    )
    return tiles[k]


def random_store(
    tensor: np.ndarray, tile: tuple[int, int], addrs: list[int], data: list[np.ndarray]
) -> np.ndarray:
    """Sequential tile writes (later writes win)."""
    tiles = list(tiles_of(tensor, tile))
    for a, d in zip(addrs, data, strict=True):
        tiles[a] = d
    return from_tiles(tiles, tensor.shape)
