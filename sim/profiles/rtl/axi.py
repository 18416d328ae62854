"""What the rtl profile's loads and stores share: the bursts of a tensor's tiles
(``step_hw.memory.axi`` rules; :func:`_geometry`) and one AXI port's outstanding-burst slots and
data channel (:class:`_Axi`)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from step_hw import contract
from step_hw.contract import HwConfig
from step_lang.graph import Node

if TYPE_CHECKING:
    pass


_TILE_QUEUE = contract.TILE_QUEUE_DEPTH


_BOUNDARY = 4096  # AXI4 bursts never cross a 4 KiB boundary


_MAX_BEATS = 256


def _low_pow2(n: int) -> int:
    return n & -n if n else 1 << 30


def _geometry(node: Node, config: HwConfig) -> tuple[list[list[int]], int]:
    """Beats of each burst of every tile of ``node``'s tensor (``step_hw.memory.axi`` rules),
    and the tile count per tensor row, as a function of the tile index."""
    t = node.tensor
    eb = t.dtype.nbytes
    cols = t.shape[-1]
    rows = math.prod(t.shape[:-1])
    tr, tc = node.tile
    bus = config.axi_data_width // 8
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
        out.append(bursts)
    return out, n_tiles


class _Axi:
    """One AXI port's outstanding-burst slots and its serial data channel."""

    def __init__(self, outstanding: int):
        self.slots: deque[float] = deque([-math.inf] * outstanding)  # when each slot frees
        self.last_issue = -math.inf
        self.data_free = -math.inf  # next cycle the R (W) channel can move a beat
