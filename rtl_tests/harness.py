"""The cocotb stream drivers of the block-level benches (``cocotb_queue.py``, ``cocotb_axi.py``,
``cocotb_arbiter.py``): they live in :mod:`step_hw.cosim.streams`, shared with the whole-graph
bench (:mod:`step_hw.cosim.bench`). Imported only inside cocotb simulations."""

from step_hw.cosim.streams import (
    PATTERNS,
    StreamMonitor,
    StreamSink,
    StreamSource,
    Transfer,
    pauses,
    reset,
)

__all__ = [
    "PATTERNS",
    "StreamMonitor",
    "StreamSink",
    "StreamSource",
    "Transfer",
    "pauses",
    "reset",
]
