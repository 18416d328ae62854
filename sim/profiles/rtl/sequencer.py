"""The walks of a load's sequencer (``step_hw/memory/sequence.py``) in the rtl profile: a
LinearLoad's tiles (:func:`_walk_tiles`) and the block per input token (:class:`_Blocks`)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from step_hw.block_rules import fetch_tile
from step_lang import ops
from step_lang.graph import Node
from step_lang.stoprules import grid_stop
from step_lang.tokens import DONE, Stop, is_data

if TYPE_CHECKING:
    pass


def _walk_tiles(node: Node) -> list[int]:
    """A LinearLoad's walk: the tensor tile of each element of ``out_shape``, row-major."""
    return [node.tile_number(m) for m in itertools.product(*map(range, node.out_shape))]


class _Blocks:
    """The block a load's sequencer (``memory/sequence.py``) walks per data token of its input:
    a RandomLoad's ``fetch`` block of each address, or a LinearLoad's walk per reference
    element. ``stops[i]``: the level of the stop that the entry of the block's tile ``i`` writes
    after the tile (0: none, the entry is one beat): a stop inside the block, or the closing
    ``S_k`` of a block driven by a rank-0 stream, which the sequencer writes at once
    (``eager``); otherwise the closing ``S_k`` is held (``holds``) until the next input token:
    an input stop merges with it, a data token or done releases it as an entry of its own.
    ``steps`` gives the sequencer's steps per input token, the one rule both timings of such a
    load (:class:`_BlockLoad`, :class:`_Load`) follow."""

    def __init__(self, node: Node):
        if isinstance(node, ops.RandomOffChipLoad):
            self.shape: tuple[int, ...] = tuple(node.fetch)
            self.linear: list[int] | None = None
            self.n_addresses = node.n_addresses
        else:  # a LinearLoad's walk
            self.shape = tuple(node.out_shape)
            self.linear = _walk_tiles(node)
        k = len(self.shape)
        self.eager = node.inputs[0].rank == 0
        self.stops = [grid_stop(m, self.shape) for m in itertools.product(*map(range, self.shape))]
        if not self.eager:
            self.stops[-1] = 0
        self.holds = not self.eager and k > 0
        self.held = False  # the last block's closing S_k is held

    def steps(self, token: Any) -> list[tuple]:
        """The sequencer's steps for the next input token ``token``, in order: ``("entry",
        stop, takes)``, an entry that writes ``stop`` (a stop or done) and reads no tile: the
        held ``S_k`` that a data token or done releases, or the token's own (an input stop
        merged with the held ``S_k``, or done: ``takes``, the token is taken with it);
        ``("take",)``, a data token's take, a cycle of its own
        (:data:`~step_hw.contract.SEQUENCER_TAKE`); ``("tile", t, level)``, an entry that reads
        tensor tile ``t`` of its block (None: a zero tile, for an address out of range) and
        writes a stop of ``level`` after it (0: none; else the entry's second beat)."""
        steps: list[tuple] = []
        k = len(self.shape)
        if self.held and not isinstance(token, Stop):
            steps.append(("entry", Stop(k), False))
        self.held = False
        if not is_data(token):
            steps.append(("entry", token if token is DONE else Stop(token.level + k), True))
            return steps
        steps.append(("take",))
        steps += [
            ("tile", t, level) for t, level in zip(self.tiles(token), self.stops, strict=True)
        ]
        self.held = self.holds
        return steps

    def tiles(self, token: Any) -> list[int | None]:
        """The tensor tiles the block of data token ``token`` reads, in order (None: a zero
        tile, for an address out of range)."""
        if self.linear is not None:
            return self.linear
        n = len(self.stops)
        a = int(token.reshape(-1)[0])
        return [fetch_tile(a, i, n) if 0 <= a < self.n_addresses else None for i in range(n)]
