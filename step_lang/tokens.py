"""Tokens of a stream and converters between nested data and token lists.

A stream is a sequence of data tokens interleaved with stop tokens, ended by one done token:

* a data token is an element (a numpy tile, a selector, a buffer value or a tuple);
* ``Stop(k)`` (``k >= 1``) closes the innermost ``k`` dimensions at that point; when several
  dimensions close at once only the highest stop is written;
* ``DONE`` ends the stream (it closes the outermost dimension).

Canonical form (decision recorded in ``docs/semantics.md``): every stop closes exactly one
innermost vector, possibly empty, together with ``k - 1`` enclosing levels. A lone ``Stop(k)``
therefore decodes as one empty innermost vector wrapped in singletons, and a non-innermost
dimension of extent 0 cannot be written. :func:`to_tokens` rejects such data;
:func:`canonical` rewrites it into the canonical form.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import StepValueError
from .integers import is_integer

__all__ = [
    "DONE",
    "Stop",
    "Token",
    "array_to_tokens",
    "canonical",
    "format_tokens",
    "from_tokens",
    "is_data",
    "to_tokens",
    "tokens_to_array",
]


@dataclass(frozen=True)
class Stop:
    """A stop token closing the innermost ``level`` dimensions."""

    level: int

    def __post_init__(self):
        if isinstance(self.level, bool) or not isinstance(self.level, int) or self.level < 1:
            raise StepValueError(f"stop level must be a positive integer, not {self.level!r}")

    def __repr__(self) -> str:
        return f"S{self.level}"


class _Done:
    """The done token; use the singleton :data:`DONE`."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "D"

    def __reduce__(self):
        return (_Done, ())


DONE = _Done()

Token = Any  # a data element, a Stop or DONE


def is_data(token: Token) -> bool:
    """True for data tokens (anything that is neither a stop nor done)."""
    return not isinstance(token, Stop) and token is not DONE


def _check_rank(rank: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise StepValueError(f"stream rank must be a non-negative integer, not {rank!r}")


def _sub_tokens(sub: Any, k: int, path: str) -> list[Token]:
    """Tokens of one rank-``k`` sub-tensor (``k >= 1``), ending with ``Stop(k)``."""
    if not isinstance(sub, (list, tuple)):
        raise StepValueError(
            f"expected a nested list of depth {k} at {path}, got {type(sub).__name__}"
        )
    out: list[Token] = []
    if k == 1:
        for i, x in enumerate(sub):
            if isinstance(x, Stop) or x is DONE:
                raise StepValueError(f"element {path}[{i}] is a token, not data")
            out.append(x)
        out.append(Stop(1))
        return out
    if len(sub) == 0:
        raise StepValueError(
            f"dimension of rank {k - 1} at {path} is empty; stop tokens can only write an empty "
            "innermost dimension or an empty stream (use step_lang.tokens.canonical to rewrite it "
            "as one empty innermost vector)"
        )
    for i, child in enumerate(sub):
        out.extend(_sub_tokens(child, k - 1, f"{path}[{i}]"))
    out[-1] = Stop(k)  # the child's closing stop is absorbed into ours
    return out


def to_tokens(nested: Sequence[Any], rank: int) -> list[Token]:
    """Tokens (ending with ``DONE``) of a rank-``rank`` stream given as nested lists.

    ``nested`` has depth ``rank + 1``: the outer list holds the stream's tensors. Leaves are the
    stream's elements and are not inspected.
    """
    _check_rank(rank)
    if not isinstance(nested, (list, tuple)):
        raise StepValueError(f"expected a list of tensors, got {type(nested).__name__}")
    out: list[Token] = []
    if rank == 0:
        out.extend(nested)
    else:
        for i, sub in enumerate(nested):
            out.extend(_sub_tokens(sub, rank, f"[{i}]"))
    out.append(DONE)
    return out


def from_tokens(tokens: Iterable[Token], rank: int) -> list[Any]:
    """Decode a complete token list (ending with ``DONE``) into canonical nested lists."""
    _check_rank(rank)
    root: list[Any] = []
    stack: list[list[Any]] = [root]
    done = False
    for pos, tok in enumerate(tokens):
        if done:
            raise StepValueError(f"token #{pos} ({tok!r}) follows the done token")
        if tok is DONE:
            if len(stack) != 1:
                raise StepValueError(
                    f"done token #{pos} arrives inside an open rank-{len(stack) - 1} sub-tensor; "
                    f"a rank-{rank} stream closes each tensor with S{rank} first"
                )
            done = True
            continue
        if isinstance(tok, Stop) and tok.level > rank:
            raise StepValueError(f"token #{pos} is {tok!r} but the stream has rank {rank}")
        while len(stack) < rank + 1:  # open containers down to the innermost vector
            child: list[Any] = []
            stack[-1].append(child)
            stack.append(child)
        if isinstance(tok, Stop):
            del stack[len(stack) - tok.level :]
        else:
            stack[-1].append(tok)
    if not done:
        raise StepValueError("token list does not end with the done token")
    return root


def canonical(nested: Sequence[Any], rank: int) -> list[Any]:
    """Rewrite nested data into the canonical form: empty non-innermost dims become one empty vector."""
    _check_rank(rank)

    def fix(sub: Any, k: int) -> Any:
        if k == 1:
            return list(sub)
        if len(sub) == 0:
            return [fix([], k - 1)]
        return [fix(c, k - 1) for c in sub]

    if rank == 0:
        return list(nested)
    return [fix(t, rank) for t in nested]


def array_to_tokens(array: np.ndarray, rank: int, elem_ndim: int = 2) -> list[Token]:
    """Tokens of a regular stream held in one array of shape ``stream_shape + elem_shape``.

    ``elem_ndim`` trailing axes form each element (2 for tiles, 0 for scalars).
    """
    array = np.asarray(array)
    if array.ndim != rank + 1 + elem_ndim:
        raise StepValueError(
            f"array of shape {array.shape} cannot hold a rank-{rank} stream of "
            f"{elem_ndim}-d elements (needs {rank + 1 + elem_ndim} axes)"
        )

    def nest(a: np.ndarray, depth: int) -> Any:
        if depth == 0:
            return a
        return [nest(a[i], depth - 1) for i in range(a.shape[0])]

    return to_tokens(nest(array, rank + 1), rank)


def _extents(nested: list[Any], depth: int) -> tuple[list[int], tuple[int, int, int] | None]:
    """The extents of a nested list of ``depth`` levels, down to the first empty level, and the
    first ragged level as ``(level, extent, other extent)`` (``None`` when regular)."""
    extents: list[int] = []
    level = [nested]
    for k in range(depth):
        sizes = [len(sub) for sub in level]
        other = next((n for n in sizes if n != sizes[0]), None)
        if other is not None:
            return extents, (k, sizes[0], other)
        extents.append(sizes[0])
        if extents[-1] == 0:
            break
        level = [child for sub in level for child in sub]
    return extents, None


def _canonical_extents(shape: tuple[int, ...]) -> list[int]:
    """The extents :func:`_extents` reads from the canonical tokens of a grid of ``shape``: a
    non-innermost dim of extent 0 inside a tensor becomes one empty innermost vector."""
    out: list[int] = []
    for i, d in enumerate(shape):
        if d == 0:
            if 0 < i < len(shape) - 1:
                return [*out, *[1] * (len(shape) - 1 - i), 0]
            return [*out, 0]
        out.append(d)
    return out


def tokens_to_array(tokens: Iterable[Token], rank: int, shape: Sequence[int]) -> np.ndarray:
    """Stack the elements of a regular stream into one array of ``shape + elem_shape``.

    ``shape`` is the stream's shape: the tokens' stops must delimit exactly that grid (in the
    canonical form, so a non-innermost dim of extent 0 reads as one empty innermost vector).
    """
    tokens = list(tokens)
    nested = from_tokens(tokens, rank)  # validates the structure
    elems = [t for t in tokens if is_data(t)]
    shape = tuple(shape)
    if len(shape) != rank + 1:
        raise StepValueError(
            f"shape {shape} has {len(shape)} entries; a rank-{rank} stream needs {rank + 1}"
        )
    if not all(is_integer(d) for d in shape) or any(d < 0 for d in shape):
        raise StepValueError(f"tokens_to_array: shape {shape} must hold non-negative integers")
    shape = tuple(int(d) for d in shape)
    count = int(np.prod(shape))
    if len(elems) != count:
        raise StepValueError(f"stream holds {len(elems)} elements, shape {shape} needs {count}")
    have, ragged = _extents(nested, rank + 1)
    if ragged is not None:
        k, a, b = ragged
        raise StepValueError(
            f"tokens_to_array: the tokens are ragged (dim {k} has extents {a} and {b}), "
            f"not of shape {shape}"
        )
    want = _canonical_extents(shape)
    if have != want:
        shown = have + ["?"] * (rank + 1 - len(have))  # dims below an empty one are unknown
        raise StepValueError(
            f"tokens_to_array: the tokens have shape [{', '.join(map(str, shown))}], not {shape}"
        )
    if count == 0:
        return np.zeros(shape)
    stacked = np.stack([np.asarray(e) for e in elems])
    return stacked.reshape(shape + stacked.shape[1:])


def format_tokens(tokens: Iterable[Token], fmt=None) -> str:
    """Render tokens in the paper's notation, e.g. ``1 2 S1 3 S2 D``."""
    parts = []
    for t in tokens:
        if isinstance(t, Stop) or t is DONE:
            parts.append(repr(t))
        else:
            parts.append(fmt(t) if fmt else str(t))
    return " ".join(parts)
