"""What the rtl profile's loads and stores share: the bursts of a tensor's tiles
(``step_hw.memory.axi`` rules; :func:`_geometry`) and one AXI port's outstanding-burst slots and
data channel (:class:`_Axi`)."""

from __future__ import annotations

import functools
import math
from collections import deque

from step_hw import contract
from step_hw.contract import HwConfig
from step_lang.graph import Node

_TILE_QUEUE = contract.TILE_QUEUE_DEPTH


def _geometry(node: Node, config: HwConfig) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Beats of each burst of every tile of ``node``'s tensor by tile index
    (``step_hw.memory.axi`` rules), and the tensor's tile count. Worked out once per
    tensor shape, element size, tile and bus width in a process (:func:`_bursts`): queue sizing
    simulates one graph a hundred times and more, the loads of one graph often read tensors of
    one shape, and a tensor of many small tiles took most of a short run's set-up."""
    t = node.tensor
    return _bursts(tuple(t.shape), t.dtype.nbytes, tuple(node.tile), config.axi_data_width // 8)


@functools.lru_cache(maxsize=256)
def _bursts(
    shape: tuple[int, ...], eb: int, tile: tuple[int, int], bus: int
) -> tuple[tuple[tuple[int, ...], ...], int]:
    """:func:`_geometry` of a tensor of ``shape`` with ``eb``-byte elements in ``tile`` tiles on a
    bus of ``bus`` bytes (immutable: every load and store of that geometry shares it)."""
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    tr, tc = tile
    # a tensor starts at a multiple of contract.TENSOR_ALIGN, which every transfer divides
    transfer = contract.transfer_bytes(bus, tc * eb)
    segments = contract.tile_segments(tile, cols)
    seg_bytes = tr * tc * eb // segments
    per_row = cols // tc
    n_tiles = (rows // tr) * per_row
    out = []
    for k in range(n_tiles):
        q, r = divmod(k, per_row)
        base = (q * tr * cols + r * tc) * eb
        plan = contract.segment_bursts(base, segments, seg_bytes, cols * eb, transfer)
        out.append(tuple(beats for _, beats in plan))
    return tuple(out), n_tiles


class _Axi:
    """One AXI port's outstanding-burst slots and its serial data channel."""

    def __init__(self, outstanding: int):
        self.slots: deque[float] = deque([-math.inf] * outstanding)  # when each slot frees
        self.last_issue = -math.inf
        self.data_free = -math.inf  # next cycle the R (W) channel can move a beat
