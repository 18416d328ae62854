"""The hardware contract: every fact about the generated hardware that more than one reader needs.

The elaborator (:mod:`step_hw.elaborate` and the blocks it builds) and the simulator's ``rtl``
timing profile (:mod:`sim.profiles.rtl`) both read this module; neither re-types a number of it.
It imports no Amaranth (``import sim`` loads none), only :mod:`step_lang`, the configuration
(:class:`~step_hw.config.HwConfig`) and the token format (:class:`~step_hw.payload.TokenFormat`,
whose Amaranth layout is built on demand).

What it holds:

* the configuration and token formats (re-exported);
* queues (:class:`~step_hw.queue.Queue`): the default depth, latency and initiation interval per
  depth, when a slot refills; which queue carries a stream (a Feedback is a wire);
* per operator class (:data:`BLOCKS`), the block's timing: registered or combinational, whether
  it takes all its inputs together, what sets its initiation interval;
* the memory controllers' internal queues and pipeline latencies (``memory/load.py``,
  ``memory/store.py``);
* the on-chip buffers (``memory/buffer.py``): slots, words per element, Streamify's output
  queue and the latencies of its sequencer and read port;
* the graph's ports: which memory operators share which AXI port (:func:`axi_managers`), where
  each off-chip tensor lies in the one address space (:func:`memory_map`), when Sources start and
  Sinks count as done.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from step_lang import ops
from step_lang.graph import Graph, Node, Stream
from step_lang.ops.offchip import LOADS, STORES
from step_lang.registry import NodeRegistry, Unsupported

from .config import HwConfig
from .payload import KIND_BITS, Kind, TokenFormat

__all__ = [
    "BLOCKS",
    "BUFFER_SLOTS",
    "HELD_EMIT_DELAY",
    "KIND_BITS",
    "STREAMIFY_QUEUE_DEPTH",
    "TENSOR_ALIGN",
    "Block",
    "HwConfig",
    "Interval",
    "Kind",
    "TokenFormat",
    "axi_managers",
    "buffer_words",
    "feedback_input",
    "held_stop_chunk",
    "is_load",
    "is_memory_operator",
    "is_store",
    "matmul_steps",
    "memory_map",
    "queue_capacity",
    "queue_depth",
    "queue_interval",
    "queue_latency",
    "read_ports",
    "segment_bursts",
    "streamify_first_element",
    "tile_segments",
    "transfer_bytes",
]

# -- queues (step_hw/queue.py) ------------------------------------------------------------------

#: Cycles from a token leaving a queue to its slot taking another (``w_rdy`` is a register).
QUEUE_SLOT_RELEASE = 1


def queue_latency(depth: int) -> int:
    """Cycles from a token entering a queue of ``depth`` to the queue offering it: 2 (a memory
    and the output register), 1 for depth 1 (a single register)."""
    return 1 if depth == 1 else 2


def queue_interval(depth: int) -> int:
    """Cycles between tokens through a queue of ``depth``: a queue of depth 1 or 2 cannot refill
    a slot in the cycle it empties it, so it moves one token every 2 cycles."""
    return 2 if depth <= 2 else 1


def feedback_input(stream: Stream) -> Stream:
    """The stream whose queue carries ``stream``: a Feedback is a wire (the elaborator aliases
    its output to its input), so a Feedback's output is carried by what the Feedback reads."""
    while stream.node.is_feedback:
        stream = stream.node.inputs[0]
    return stream


def queue_depth(graph: Graph, stream: Stream | str, config: HwConfig) -> int:
    """Depth of the queue of ``stream`` in the lowered ``graph`` (:func:`step_lang.passes.lower`):
    the graph's depth for it, else ``config.queue_depth`` (times its ``Graph.queue_scale``)."""
    name = stream if isinstance(stream, str) else stream.name
    return graph.queue_depth(name, config.queue_depth)


def queue_capacity(stream: Stream | str, config: HwConfig) -> int | None:
    """The capacity of ``stream``'s queue if its depth is a run-time setting (its entry in
    ``config.queue_capacity``), else ``None`` (its depth, :func:`queue_depth`, is built in)."""
    name = stream if isinstance(stream, str) else stream.name
    return dict(config.queue_capacity).get(name)


# -- blocks -------------------------------------------------------------------------------------


class Interval(enum.Enum):
    """What sets a block's initiation interval (cycles per input element)."""

    ONE = "one element per cycle"
    MAC = "ceil(M*K*N / lanes) cycles per tile pair for a matmul function, else 1"
    PER_ROW = "one cycle per row (column, for split='cols') of each tile"
    PER_COPY = "one cycle per copy (RepeatStatic's count)"


@dataclass(frozen=True)
class Block:
    """The timing contract of one operator's block.

    Attributes:
        latency: cycles from taking an input to offering the result (0: combinational, the
            block holds its input until its outputs take it).
        joins_inputs: the block takes one token from every input in the same cycle, once all are
            valid (compute units, Zip, address generators).
        interval: what sets the initiation interval (:class:`Interval`).
        expands: the block emits several tokens per input element and holds its inputs until the
            last one leaves (FlatMap, RetileStreamify).
        selector_with_first_token: EagerMerge offers a chunk's selector in the cycle it forwards
            the chunk's first token, and its done tokens the cycle after it took the last input's.
    """

    latency: int = 1
    joins_inputs: bool = False
    interval: Interval = Interval.ONE
    expands: bool = False
    selector_with_first_token: bool = False

    @property
    def combinational(self) -> bool:
        return self.latency == 0


#: Each operator's block timing. The memory operators' own pipelines are described by the
#: constants below; Source, Sink and Feedback are ports and wires of the top level.
BLOCKS: NodeRegistry[Block] = NodeRegistry("hardware contract")

BLOCKS.add(Block(latency=0), ops.Broadcast, ops.Partition, ops.Reassemble, ops.Parallelize)
BLOCKS.add(Block(latency=0, selector_with_first_token=True), ops.EagerMerge)
BLOCKS.add(Block(joins_inputs=True, interval=Interval.MAC), ops.Map, ops.Accum, ops.Scan)
BLOCKS.add(Block(joins_inputs=True), ops.Zip)
BLOCKS.add(Block(joins_inputs=True, expands=True), ops.FlatMap)
BLOCKS.add(Block(joins_inputs=True, expands=True, interval=Interval.PER_ROW), ops.RetileStreamify)
BLOCKS.add(Block(), ops.Flatten, ops.Reshape, ops.Promote, ops.Expand)
BLOCKS.add(Block(interval=Interval.PER_COPY), ops.RepeatStatic)
# Bufferize and Streamify share a memory (``memory/buffer.py``); the rtl profile models their
# memory ports, slots and Streamify's output queue from the constants under "on-chip buffers".
BLOCKS.add(Block(), ops.Bufferize, ops.Streamify)
BLOCKS.add(Block(joins_inputs=True), ops.RandomOffChipStore)

#: An Accum with held accumulators (``Accum(held=h)``, ``step_hw.compute.AccumUnit``) offers its
#: first accumulator this many cycles later than a plain Accum after taking the stop that closes
#: a group (the group's last position is written to the bank first); then one beat per cycle
#: (accumulators and the stops between the held dims), taking no input until the last.
HELD_EMIT_DELAY = 1


def held_stop_chunk(node: Node) -> int | None:
    """The chunk of a block that holds back each chunk's closing ``S1`` (BlockWriter in
    ``step_hw.shape``: a Reshape, or a Promote (chunks of one), of ``rank = 0`` on an input of
    rank 1 or more): the held stop is written in the cycle the next input is offered, and a
    data or done input that releases it is taken the cycle after (a stop absorbs it and is
    taken at once); a stop or done that ends a Reshape's chunk short is taken after the
    padding is written, one pad per cycle. None for any other node."""
    if getattr(node, "rank", None) != 0 or not node.inputs or node.inputs[0].rank == 0:
        return None
    if isinstance(node, ops.Reshape):
        return node.chunk
    if isinstance(node, ops.Promote):
        return 1
    return None


BLOCKS.add(Block(), ops.LinearOffChipLoad, ops.RandomOffChipLoad, ops.LinearOffChipStore)
BLOCKS.add(Unsupported("is a top-level port, not a block"), ops.Source, ops.Sink)
BLOCKS.add(Unsupported("is a wire (its output aliases its input), not a block"), ops.Feedback)


def is_matmul(node: Node) -> bool:
    """Whether ``node``'s function is a matmul (a MAC array in hardware, :data:`Interval.MAC`)."""
    return "matmul" in (getattr(getattr(node, "fn", None), "name", "") or "")


def matmul_steps(m: int, k: int, n: int, lanes: int) -> int:
    """Cycles a MAC array of ``lanes`` spends on an ``m x k`` by ``k x n`` tile pair."""
    return max(1, -(-(m * k * n) // lanes))


# -- memory controllers (memory/load.py, memory/store.py) ---------------------------------------

#: Depth of a load's (store's) tile queue: tiles read ahead of (taken before) their handshake.
TILE_QUEUE_DEPTH = 3
#: Depth of a load's (store's) address queue.
ADDR_QUEUE_DEPTH = 3
#: A load's (store's) order queue holds ``max_outstanding + ORDER_QUEUE_SLACK`` entries.
ORDER_QUEUE_SLACK = 8


def order_queue_depth(max_outstanding: int) -> int:
    """Depth of a memory controller's order queue (entries between sequencer and output)."""
    return max_outstanding + ORDER_QUEUE_SLACK


#: Cycles from ``start`` to a linear load's first sequencer entry.
LOAD_START = 2
#: Cycles from a sequencer entry to its first AR: the address queue and the burst generator.
LOAD_ISSUE = queue_latency(ADDR_QUEUE_DEPTH) + 1
#: Cycles from a store's take of a tile to its AW: the address queue and the burst generator.
STORE_ISSUE = queue_latency(ADDR_QUEUE_DEPTH) + 1


def store_info_depth(max_outstanding: int) -> int:
    """Depth of a store's W- and B-information queues: an entry per granted burst, at least 3."""
    return max(3, max_outstanding + 1)


#: Cycles from AW to the first W beat: the W-information queue's latency (the same at every
#: depth it takes, 3 or more).
AW_TO_W = queue_latency(store_info_depth(1))
#: Cycles from a store's last B response of a tile to its acknowledgement on the output (the
#: count of completed tiles is a register).
ACK_AFTER_B = 1
#: Cycles from a graph's last B response to its ``done`` as the benches count it (the store's ack
#: path, the done register, the bench's sample).
DONE_AFTER_B = 4
#: Cycles from a Sink's take of its done token to ``done`` (the done-seen register, the bench).
DONE_AFTER_SINK = 2

# -- on-chip buffers (memory/buffer.py, memory/sequence.py) -----------------------------------

#: Buffers (slots) in a Bufferize's memory: one fills while the other drains. Bufferize stalls
#: its input's elements while every slot holds a complete buffer that Streamify has not released.
BUFFER_SLOTS = 2
#: Cycles from Streamify's release pulse (the cycle it takes the last entry of a buffer's reads)
#: to Bufferize writing into the freed slot: the count of full slots is a register.
BUFFER_RELEASE = 1
#: Cycles from Bufferize taking the stop that closes a buffer (or its done token) to offering
#: the buffer reference (done token) from its output register; a stop that follows the
#: reference is offered the cycle after the reference is taken.
BUFFER_REF_LATENCY = 1
#: Cycles of a sequencer's take of a driving token that starts a block (no entry that cycle).
SEQUENCER_TAKE = 1
#: Cycles from Streamify's last memory word of an entry (the entry's commit) to the entry
#: entering its output queue: a synchronous read port.
BUFFER_READ_LATENCY = 1
#: Depth of Streamify's credit-managed output queue: an entry commits only while fewer than this
#: many committed entries have not left it.
STREAMIFY_QUEUE_DEPTH = 5


def buffer_words(fmt: TokenFormat, port_elems: int) -> int:
    """Memory words per element of ``fmt`` (``HwConfig.mem_port_elems`` tile elements per word):
    ``ceil(rows * cols / port_elems)`` for a tile, 1 for a selector. Bufferize writes, and
    Streamify reads, one word per cycle."""
    if fmt.kind != "tile":
        return 1
    return -(-fmt.rows * fmt.cols // port_elems)


def streamify_first_element(words: int) -> int:
    """Cycles from a buffer reference offered to an idle Streamify to the buffer's first element
    offered on its output: the take (:data:`SEQUENCER_TAKE`), ``words`` reads (the last one in the
    cycle the entry commits, so ``words - 1`` after the first), the read port
    (:data:`BUFFER_READ_LATENCY`) and the output queue (:func:`queue_latency`). ``3 + words``."""
    return SEQUENCER_TAKE + words - 1 + BUFFER_READ_LATENCY + queue_latency(STREAMIFY_QUEUE_DEPTH)


# -- the graph's ports (elaborate.py) -----------------------------------------------------------

#: A Source's ``ready`` is low until this many cycles after ``start`` (a queue held in reset may
#: show ``ready`` and forget what it took).
SOURCE_START = 1


def axi_managers(graph: Graph, config: HwConfig) -> dict[str, list[str]]:
    """AXI port name -> the memory operators behind it, in graph (topological) order.

    With ``config.axi_ports`` unset, one ``m_axi_<node>`` port per memory operator; with
    ``axi_ports = k``, the loads round-robin over ``m_axi_rd0`` .. ``m_axi_rd<k-1>`` and the stores
    over ``m_axi_wr0`` .. ``m_axi_wr<k-1>`` (only the ports that get an operator). A port's list
    order is its arbiter's manager order (manager ``i`` is ``ID`` prefix ``i``). ``graph`` is a
    lowered graph (:func:`step_lang.passes.lower`).
    """
    memory = [n for n in graph.topo_order() if isinstance(n, LOADS + STORES)]
    if config.axi_ports is None:
        return {f"m_axi_{n.name}": [n.name] for n in memory}
    out: dict[str, list[str]] = {}
    for half, read in (("rd", True), ("wr", False)):
        names = [n.name for n in memory if isinstance(n, LOADS) == read]
        for j, name in enumerate(names):
            out.setdefault(f"m_axi_{half}{j % config.axi_ports}", []).append(name)
    return out


def read_ports(graph: Graph, config: HwConfig) -> int:
    """The AXI ports that carry ``graph``'s reads (:func:`axi_managers`): one per load, or the
    ``m_axi_rd<i>`` ports that get a load (at most ``config.axi_ports``); at least 1. The
    channels of the paper profile's shared memory (``PaperProfile.for_rtl``) and of the AXI
    efficiency's peak (``make validate``)."""
    loads = {n.name for n in graph.nodes.values() if isinstance(n, LOADS)}
    return sum(names[0] in loads for names in axi_managers(graph, config).values()) or 1


#: AXI4 INCR bursts hold at most this many beats and never cross a boundary of this many bytes
#: (the memory controllers, ``step_hw.memory.axi``, and the rtl profile's bursts).
AXI_MAX_BURST_BEATS = 256
AXI_BOUNDARY = 4096


def _low_pow2(n: int) -> int:
    """The largest power of two dividing ``n`` (``n > 0``); ``0`` divides by everything."""
    return n & -n if n else 1 << 62


def transfer_bytes(bus_bytes: int, tile_row_bytes: int, addr: int = 0) -> int:
    """Bytes per beat of a tile's bursts: the widest power of two that fits the bus and divides
    a tile row's bytes and the tensor's address."""
    return min(bus_bytes, _low_pow2(tile_row_bytes), _low_pow2(addr))


def tile_segments(tile: tuple[int, int], cols: int) -> int:
    """Contiguous pieces of one tile of a tensor ``cols`` wide: its rows, or 1 when they are
    adjacent (the tile spans the tensor's width, or is one row high)."""
    return 1 if tile[1] == cols or tile[0] == 1 else tile[0]


def segment_bursts(
    start: int, segments: int, segment_bytes: int, row_bytes: int, transfer: int
) -> list[tuple[int, int]]:
    """The ``(address, beats)`` INCR bursts that move ``segments`` pieces of ``segment_bytes``,
    ``row_bytes`` apart from ``start``, in beats of ``transfer`` bytes: each piece split at the
    4 KiB boundaries (:data:`AXI_BOUNDARY`) and at :data:`AXI_MAX_BURST_BEATS`. The memory
    controllers' burst generator (``step_hw.memory.axi.TileGeometry``) and the rtl profile
    both move a tile so."""
    out = []
    for s in range(segments):
        a, left = start + s * row_bytes, segment_bytes // transfer
        while left:
            n = min(left, (AXI_BOUNDARY - a % AXI_BOUNDARY) // transfer, AXI_MAX_BURST_BEATS)
            out.append((a, n))
            a += n * transfer
            left -= n
    return out


#: Off-chip tensors start at multiples of this many bytes, the first one here (address 0 is left
#: unused, so a zero address is never a tensor's).
TENSOR_ALIGN = 4096


def memory_map(graph: Graph) -> dict[str, dict[str, Any]]:
    """Tensor name -> ``addr`` (its first byte), ``shape``, ``dtype`` (name) and ``bytes``: the
    off-chip tensors of ``graph`` one after another in declaration order, each at a multiple of
    :data:`TENSOR_ALIGN`. The memory operators' base addresses, the co-simulation's memory image
    and the address-space rule (``step_hw.graph_rules``) all read it."""
    out, addr = {}, TENSOR_ALIGN
    for name, t in graph.tensors.items():
        out[name] = {
            "addr": addr,
            "shape": list(t.shape),
            "dtype": t.dtype.name,
            "bytes": t.size_bytes,
        }
        addr += -(-t.size_bytes // TENSOR_ALIGN) * TENSOR_ALIGN
    return out


def is_memory_operator(node: Node) -> bool:
    """Whether ``node`` is an off-chip load or store (it gets an AXI port)."""
    return isinstance(node, LOADS + STORES)


def is_load(node: Node) -> bool:
    """Whether ``node`` is an off-chip load (it gets a read port)."""
    return isinstance(node, LOADS)


def is_store(node: Node) -> bool:
    """Whether ``node`` is an off-chip store (it gets a write port)."""
    return isinstance(node, STORES)
