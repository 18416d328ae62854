"""Memory blocks: AXI4 load/store controllers and on-chip buffers (Bufferize, Streamify).

Every block has a keyword-only constructor, a ``from_node(node, config)`` class method that builds
it from a step_lang node, and ``in_ports`` / ``out_ports`` listing its stream ports in the node's
order (AXI4 ports, ``axi``, and status signals are separate).
"""

from .arbiter import AxiReadArbiter, AxiWriteArbiter
from .axi import AXI4Signature, BurstGenerator, TileGeometry, axi_ports
from .buffer import BufferGeometry, Bufferize, BufferPortSignature, Streamify
from .load import LinearLoad, RandomLoad
from .store import LinearStore, RandomStore

__all__ = [
    "AXI4Signature",
    "AxiReadArbiter",
    "AxiWriteArbiter",
    "BufferGeometry",
    "BufferPortSignature",
    "Bufferize",
    "BurstGenerator",
    "LinearLoad",
    "LinearStore",
    "RandomLoad",
    "RandomStore",
    "Streamify",
    "TileGeometry",
    "axi_ports",
]
