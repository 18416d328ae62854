"""Stop-token rules of the operators, as small named functions.

The interpreter, the simulator and the tests share these, so that an operator's treatment of stop
tokens is written exactly once. Levels are the ``k`` of ``Stop(k)``; ``None`` means "no token".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from .tokens import DONE, Stop, Token

__all__ = [
    "BlockWriter",
    "accum_stop",
    "block_stop",
    "bufferize_stop",
    "flatten_stop",
    "grid_stop",
    "grid_tokens",
    "held_stop",
    "partition_closes_chunk",
    "promote_stop",
    "reshape_outer_stop",
]


def accum_stop(level: int, rank: int) -> int | None:
    """Accum/Bufferize over ``rank`` inner dims: a stop ``level >= rank`` emits, leaving ``level - rank``."""
    return level - rank if level > rank else None


bufferize_stop = accum_stop


def held_stop(index: int, shape: tuple[int, ...]) -> int:
    """An Accum's held accumulators are emitted in the row-major order of their dims ``shape``:
    the level of the stop after the one at ``index`` (``0``: none), the number of innermost dims
    that end there. (After the last, the group's stop ``s`` leaves ``accum_stop(s, rank)``.)"""
    closed = 0
    for extent in reversed(shape):
        index, digit = divmod(index, extent)
        if digit != extent - 1:
            break
        closed += 1
    return closed


def flatten_stop(level: int, lo: int, hi: int) -> int | None:
    """Flatten dims of ranks ``lo..hi``: levels in ``(lo, hi]`` collapse to ``lo``, higher ones drop by ``hi - lo``."""
    if level <= lo:
        return level
    if level <= hi:
        return lo if lo > 0 else None
    return level - (hi - lo)


def promote_stop(level: int, rank: int) -> int:
    """Positional Promote inserting a size-1 dim at ``rank``: levels ``>= rank`` rise by one."""
    return level + 1 if level >= rank else level


def partition_closes_chunk(level: int, rank: int) -> bool:
    """A chunk of ``rank`` inner dims ends at a stop of level ``>= rank``.

    The chunks of Partition, Reassemble, EagerMerge and Parallelize, Accum/Scan/Bufferize groups,
    Expand's elements and Streamify's reference blocks. Also works on Amaranth values (``>=``).
    """
    return level >= rank


def block_stop(level: int, inner: int) -> int:
    """An input stop after elements that each expanded into ``inner`` new inner dims."""
    return level + inner


def grid_stop(index: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """Stop level after the element at ``index`` of a row-major walk over a static ``shape``.

    The level counts the trailing dims that are at their last index; 0 means no stop.
    """
    level = 0
    for i, n in zip(reversed(index), reversed(shape), strict=True):
        if i != n - 1:
            break
        level += 1
    return level


def reshape_outer_stop(level: int, rank: int, seen: int, chunk: int) -> tuple[int, int]:
    """Reshape of a non-innermost dim ``rank`` into chunks of ``chunk`` rank-``rank`` sub-tensors.

    ``seen`` counts the sub-tensors closed so far in the current chunk. Returns the output level and
    the new count: the stop closing every ``chunk``-th sub-tensor rises by one, as do stops above
    ``rank`` (they always fall on a chunk boundary because the split dim is divisible).
    """
    if level < rank:
        return level, seen
    if level > rank:
        return level + 1, 0
    seen += 1
    if seen == chunk:
        return level + 1, 0
    return level, seen


class BlockWriter:
    """Writes the output of an operator that expands each input element into a block of ``inner`` dims.

    A block's closing ``Stop(inner)`` is held back: if the next input token is ``Stop(s)`` it merges
    into ``Stop(s + inner)`` (only the highest stop is written); a data token or the end of the stream
    releases it unchanged. Used by RepeatStatic, Streamify, LinearOffChipLoad with a reference,
    FlatMap, Reshape and Promote. ``put`` and every method are generators (sending may block in
    the simulator): call them with ``yield from``.
    """

    def __init__(
        self, put: Callable[[Token], Iterator[Any]], inner: int, *, input_rank: int | None = None
    ):
        self._put = put
        self.inner = inner
        self._pending = False
        # A rank-0 input has no stops, so nothing can merge with a block's closing stop: write it
        # at once rather than on the next token (which, inside a feedback loop, may never come).
        self._eager = input_rank == 0

    def _flush(self) -> Iterator[Any]:
        if self._pending:
            yield from self._put(Stop(self.inner))
            self._pending = False

    def data(self, token: Token) -> Iterator[Any]:
        """Write a data token (releasing a held stop first)."""
        yield from self._flush()
        yield from self._put(token)

    def inner_stop(self, level: int) -> Iterator[Any]:
        """Write a stop inside the current block (releasing a held stop first)."""
        yield from self._flush()
        yield from self._put(Stop(level))

    def end_block(self) -> Iterator[Any]:
        """Close the current block; its ``Stop(inner)`` is held back."""
        if self.inner > 0:
            yield from self._flush()
            self._pending = True
            if self._eager:
                yield from self._flush()

    def block(self, tokens: list[Token]) -> Iterator[Any]:
        """Write a complete block given as tokens; a final ``Stop(inner)`` is held back."""
        if not tokens:
            return  # an empty block (e.g. a FlatMap element with no sub-tensors) must keep a held stop held
        yield from self._flush()
        if self.inner > 0 and tokens and tokens[-1] == Stop(self.inner):
            for t in tokens[:-1]:
                yield from self._put(t)
            self._pending = True
            if self._eager:
                yield from self._flush()
        else:
            for t in tokens:
                yield from self._put(t)

    def outer_stop(self, level: int) -> Iterator[Any]:
        """An input ``Stop(level)``: written as ``Stop(level + inner)``, absorbing a held stop."""
        self._pending = False
        yield from self._put(Stop(block_stop(level, self.inner)))

    def done(self) -> Iterator[Any]:
        """End of input: release a held stop and write ``DONE``."""
        yield from self._flush()
        yield from self._put(DONE)


def grid_tokens(
    shape: tuple[int, ...], block: Callable[[tuple[int, ...]], list[Token]], sub: int = 0
) -> list[Token]:
    """Tokens of a row-major walk over a static ``shape``, each position expanded by ``block``.

    ``block(index)`` returns the tokens at that position: one element when ``sub == 0``, or a
    rank-``sub`` block ending with ``Stop(sub)``. Stops of the walk merge with the block's own.
    The result ends with ``Stop(sub + len(shape))`` when that is positive.

    An empty grid, with ``sub == 0``, is written in the canonical form (``docs/semantics.md``,
    ``tokens.canonical``): with its first extent 0 at dim ``z``, one empty sub-tensor per
    position of the dims outside it, each its closing stop alone, ``Stop(len(shape) - z +
    grid_stop(outer))``: one empty innermost vector per outer position when only the innermost
    extent is 0, the closing stop alone when the outermost is.
    """
    if sub == 0 and 0 in shape:
        z = shape.index(0)
        outer = shape[:z]
        return [
            Stop(len(shape) - z + grid_stop(index, outer))
            for index in itertools.product(*map(range, outer))
        ]
    out: list[Token] = []
    for index in itertools.product(*(range(n) for n in shape)):
        toks = list(block(index))  # with sub > 0 never empty: an empty read is its stops
        level = grid_stop(index, shape)
        if level > 0:
            if sub > 0:
                toks[-1] = Stop(sub + level)
            else:
                toks.append(Stop(level))
        out.extend(toks)
    return out
