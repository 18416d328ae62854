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


_BOUNDARY = contract.AXI_BOUNDARY  # AXI4 bursts never cross a 4 KiB boundary


_MAX_BEATS = contract.AXI_MAX_BURST_BEATS


def _low_pow2(n: int) -> int:
    return n & -n if n else 1 << 30


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
    transfer = min(bus, _low_pow2(tc * eb))
    segments = 1 if tc == cols or tr == 1 else tr
    seg_bytes = tr * tc * eb // segments
    per_row = cols // tc
    n_tiles = (rows // tr) * per_row
    out = []
    for k in range(n_tiles):
        q, r = divmod(k, per_row)
        base = (q * tr * cols + r * tc) * eb
        bursts = []
        for s in range(segments):
            addr, left = base + s * cols * eb, seg_bytes
            while left:
                room = min(left, _BOUNDARY - addr % _BOUNDARY, _MAX_BEATS * transfer)
                bursts.append(room // transfer)
                addr += room
                left -= room
        out.append(tuple(bursts))
    return tuple(out), n_tiles


class _Axi:
    """One AXI port's outstanding-burst slots and its serial data channel."""

    def __init__(self, outstanding: int):
        self.slots: deque[float] = deque([-math.inf] * outstanding)  # when each slot frees
        self.last_issue = -math.inf
        self.data_free = -math.inf  # next cycle the R (W) channel can move a beat
