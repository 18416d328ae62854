"""The ``paper`` profile: the timing model of the paper's simulator (STEP_REFERENCE §5).

* Compute (Map, Accum, Scan): per element ``max(load, compute)`` with ``load`` the sum of
  ``ceil(bytes / pmu_bw)`` over inputs whose tiles sit in a memory unit (tiles fresh from an
  off-chip load while ``loads_in_memory``, or from a ``write_back`` node, also when a router
  passes them on; a Streamify pays its buffer's read itself) and ``compute = ceil(FLOPs /
  compute_bw)``. FLOPs come from the actual tile shapes, so dynamic tiles cost what they hold.
* Off-chip loads and stores: one transfer per tile of ``rows x ceil(cols * bytes / 64)``
  requests through the shared memory (:mod:`sim.memory`); a node waits for its tile before it
  sends it (or takes the next one), so one node never overlaps two tiles.
* Partition/Parallelize: per element, a memory-unit read when resident plus ``switch_cycles``;
  Reassemble: ``switch_cycles`` per element; EagerMerge: 1 cycle per element, earliest arrival
  first; RepeatStatic, Expand: 1 cycle per output element; Streamify: ``ceil(bytes / pmu_bw)`` per
  element read; address generators (FlatMap): 1 cycle per output element; RetileStreamify and
  the shape operators: free.
* Bufferize: free, double-buffered (the reference's ``2 * ||buffer||`` bytes, the hardware's two
  slots): it starts filling a buffer only once the reference of the one before has been taken
  from its output queue (the buffer two back has been read), :class:`_DoubleBuffer`.
* Stop and done tokens are fused into the data in the paper's simulator: they cost nothing and
  take no queue slot (``stops_take_slots=True``: they take a slot, as in the generated hardware,
  still at no cost; queue sizing uses it).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from step_hw.contract import is_matmul, read_ports
from step_lang import ops
from step_lang.graph import Node
from step_lang.registry import NodeRegistry
from step_lang.tokens import Stop, is_data

from ..memory import MemoryConfig
from .base import ElementFlops, MemRequest, NodeTiming, Residency, TimingProfile, check_int

__all__ = ["PAPER_TIMING", "PaperProfile"]

#: Each operator's timing under the paper profile: ``(profile, node, resident) -> NodeTiming``.
PAPER_TIMING: NodeRegistry = NodeRegistry("paper-profile timing")

#: Cycles per output of a FlatMap by its function's role (``step_lang.functions.ROLES``;
#: STEP_REFERENCE §5.3): address and metadata generation a fixed cycle, retiling none.
ROLE_CYCLES = {"address": 1, "movement": 0}

#: The operators that may write their results back to a memory unit (``write_back``): compute
#: nodes pay the store in their roofline, Partition and Parallelize per element routed.
WRITES_BACK = (ops.Map, ops.Accum, ops.Scan, ops.Partition, ops.Parallelize)


def nbytes(token: Any) -> int:
    """Bytes of a data token (tiles, selectors, tuples)."""
    if isinstance(token, tuple):
        return sum(nbytes(t) for t in token)
    return int(getattr(token, "nbytes", 0))


def read_cycles(token: Any, resident: Residency, pmu_bw: int) -> int:
    """Cycles to read a data token out of a memory unit: ``ceil(bytes / pmu_bw)`` if it sits
    in one, else 0; a Zip's tuple item by item (each item from its own memory unit)."""
    if isinstance(resident, tuple):
        return sum(read_cycles(t, r, pmu_bw) for t, r in zip(token, resident, strict=True))
    return math.ceil(nbytes(token) / pmu_bw) if resident else 0


@dataclass
class PaperProfile(TimingProfile):
    """The paper's timing model; defaults are the evaluation's settings (§5.6)."""

    name = "paper"
    compute_bw_default: int = 4096
    compute_bw_overrides: dict[str, int] = field(default_factory=dict)
    pmu_bw: int = 64
    switch_cycles: int = 1
    channel_depth: int = 2
    channel_latency: int = 1
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    onchip_convention: str = "artifact"
    write_back: frozenset[str] = frozenset()  # nodes whose results are written to a memory unit
    # True: an off-chip load leaves its tiles in a memory unit and its consumers pay the read
    # (the paper's mapping); False: it hands them to a queue, as the generated hardware's loads
    # do (STEP_REFERENCE §11 item 10 leaves this per-edge mapping to the mapper; docs/simulator.md)
    loads_in_memory: bool = True
    stops_take_slots: bool = False  # True: stop and done tokens occupy queue slots, as in hardware
    # Cycles per element of a compute node whose function is not a matmul (None: FLOPs over
    # the compute bandwidth, the paper's rule); 1 is the generated hardware's element-wise units.
    elementwise_cycles: int | None = None

    def __post_init__(self):
        for name in ("compute_bw_default", "pmu_bw", "channel_depth"):
            check_int("PaperProfile", name, getattr(self, name), 1)
        for name in ("channel_latency", "switch_cycles"):
            check_int("PaperProfile", name, getattr(self, name), 0)
        if self.onchip_convention not in ("paper", "artifact"):
            raise ValueError(
                "PaperProfile: onchip_convention must be 'paper' or 'artifact', "
                f"not {self.onchip_convention!r}"
            )
        for name in ("loads_in_memory", "stops_take_slots"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"PaperProfile: {name} must be True or False, not {getattr(self, name)!r}"
                )
        if not isinstance(self.memory, MemoryConfig):
            raise TypeError(f"PaperProfile: memory must be a MemoryConfig, not {self.memory!r}")
        # A bare string is a collection of its characters: refused, not read as one name.
        if (
            isinstance(self.write_back, (str, bytes))
            or not isinstance(self.write_back, Collection)
            or not all(isinstance(n, str) for n in self.write_back)
        ):
            raise TypeError(
                "PaperProfile: write_back must be a set of node names, e.g. frozenset({'op'}), "
                f"not {self.write_back!r}"
            )
        if not isinstance(self.compute_bw_overrides, Mapping):
            raise TypeError(
                "PaperProfile: compute_bw_overrides must be a mapping of compute node names to "
                f"FLOPs per cycle, not {self.compute_bw_overrides!r}"
            )
        for node, bw in self.compute_bw_overrides.items():
            check_int("PaperProfile", f"compute_bw_overrides[{node!r}]", bw, 1)
        if self.elementwise_cycles is not None:
            check_int("PaperProfile", "elementwise_cycles", self.elementwise_cycles, 0)

    def check_graph(self, graph: Any) -> None:
        compute = {n.name for n in graph.nodes.values() if n.is_compute}
        for name in sorted(set(self.compute_bw_overrides) - compute):
            raise ValueError(
                f"PaperProfile: compute_bw_overrides names {name!r}, which is no compute node "
                f"(Map, Accum, Scan) of graph '{graph.name}'"
            )
        for name in sorted(set(self.write_back) - set(graph.nodes)):
            raise ValueError(
                f"PaperProfile: write_back names {name!r}, which is no node of graph '{graph.name}'"
            )
        for name in sorted(self.write_back):
            node = graph.nodes[name]
            if not isinstance(node, WRITES_BACK):
                raise ValueError(
                    f"PaperProfile: write_back names {name!r}, a {node.kind}; only "
                    f"{', '.join(k.__name__ for k in WRITES_BACK)} write their results to a "
                    "memory unit (STEP_REFERENCE §5.2, §5.5)"
                )

    @classmethod
    def hdl_validation(cls) -> PaperProfile:
        """The settings of the paper's HDL-validation runs (Fig. 8)."""
        return cls(pmu_bw=256, channel_depth=1, memory=MemoryConfig(channels=8, dispatch=4))

    @classmethod
    def for_rtl(
        cls, config: Any, memory: Any, *, channels: int | None = None, graph: Any = None
    ) -> PaperProfile:
        """The paper's model with the generated hardware's rates (``make validate``): a
        :class:`~step_hw.config.HwConfig` ``config`` and the
        :class:`~step_hw.memory_model.MemoryModel` ``memory`` of the fast co-simulation tier.

        * compute: a MAC array's ``2 * lanes`` FLOPs per cycle for matmul functions, one cycle
          per tile for the element-wise units (``elementwise_cycles=1``);
        * on-chip memory: ``mem_port_elems`` elements per cycle (``pmu_bw`` in bytes), paid
          where the hardware has memory: a Streamify reading its buffer. An off-chip load's
          tiles go to a queue (``loads_in_memory=False``), so its consumers pay no read, as
          the hardware's loads write their bursts into the consumer's queue;
        * off-chip: ``channels`` channels (default :func:`step_hw.contract.read_ports` of
          ``graph``, or ``config.axi_ports`` without a graph; one must be given), each of one
          ``axi_data_width`` beat per ``beat_interval`` cycles, ``memory.latency`` to the first
          beat and ``memory.start_up`` before a channel's first, shared by every load and store
          as in the paper's model;
        * queues of ``config.queue_depth``.
        """
        if channels is not None:  # given: checked, never replaced by the default
            check_int("PaperProfile.for_rtl", "channels", channels, 1)
        else:
            channels = config.axi_ports if graph is None else read_ports(graph, config)
        if not channels:
            raise ValueError(
                "PaperProfile.for_rtl: give channels when config.axi_ports is None (the paper's "
                "model shares its memory channels between operators)"
            )
        return cls(
            compute_bw_default=2 * config.lanes,
            elementwise_cycles=1,
            pmu_bw=config.mem_port_elems * config.elem.nbytes,
            loads_in_memory=False,
            channel_depth=config.queue_depth,
            memory=MemoryConfig(
                channels=channels,
                request_bytes=config.axi_data_width // 8,
                interval=memory.beat_interval,
                latency=memory.latency,
                startup=memory.start_up,
            ),
        )

    def memory_config(self) -> MemoryConfig:
        return self.memory

    def counts_against_capacity(self, token: Any) -> bool:
        return self.stops_take_slots or is_data(token)

    def writes_back(self, node: Node) -> bool:
        return node.name in self.write_back

    def tiles_in_memory(self, node: Node) -> bool:
        return (node.tiles_in_memory and self.loads_in_memory) or self.writes_back(node)

    def compute_bw(self, node: Node) -> int:
        if node.is_compute:
            return self.compute_bw_overrides.get(node.name, self.compute_bw_default)
        return 0

    def node_timing(self, node: Node, resident: list[bool]) -> NodeTiming:
        return PAPER_TIMING.entry(node)(self, node, resident)


# -- each operator's timing ----------------------------------------------------------------------


@PAPER_TIMING.register(ops.LinearOffChipLoad, ops.RandomOffChipLoad)
def _load(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _OffChipTiming(profile, node, send_port=0, recv_port=None)


@PAPER_TIMING.register(ops.LinearOffChipStore, ops.RandomOffChipStore)
def _store(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    # a store's tiles are on its last input (RandomOffChipStore: after the addresses)
    return _OffChipTiming(profile, node, send_port=None, recv_port=len(node.inputs) - 1)


@PAPER_TIMING.register(ops.Map, ops.Accum, ops.Scan)
def _compute(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _ComputeTiming(profile, node, resident)


@PAPER_TIMING.register(ops.Partition, ops.Parallelize)
def _switch_in(profile: PaperProfile, node: Node, resident: list[Residency]) -> NodeTiming:
    pmu, store = profile.pmu_bw, profile.writes_back(node)

    def per_element(tok: Any) -> int:  # its read, its switch, its write (STEP_REFERENCE §5.5)
        write = math.ceil(nbytes(tok) / pmu) if store else 0
        return read_cycles(tok, resident[0], pmu) + profile.switch_cycles + write

    return _RecvCost(per_element, port=0)


@PAPER_TIMING.register(ops.Reassemble)
def _switch_out(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _SendCost(lambda tok: profile.switch_cycles)


@PAPER_TIMING.register(ops.EagerMerge)
def _merge(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _SendCost(lambda tok: 1, port=0)


@PAPER_TIMING.register(ops.RepeatStatic, ops.Expand)
def _repeat(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _SendCost(lambda tok: 1, footprint=True)


@PAPER_TIMING.register(ops.Streamify)
def _streamify(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _SendCost(lambda tok: math.ceil(nbytes(tok) / profile.pmu_bw))


@PAPER_TIMING.register(ops.FlatMap)
def _flat_map(profile: PaperProfile, node: Node, resident: list[Residency]) -> NodeTiming:
    cycles = ROLE_CYCLES[node.fn.role]  # an address generator's 1 per output; a retile's 0
    return _SendCost(lambda tok: cycles)


# Free: shape operators, RetileStreamify, Broadcast, Zip, and the graph's plumbing.
PAPER_TIMING.add(
    lambda profile, node, resident: NodeTiming(),
    ops.Broadcast, ops.Flatten, ops.Reshape, ops.Promote, ops.Zip, ops.RetileStreamify,
    ops.Source, ops.Sink, ops.Feedback,
)  # fmt: skip


@PAPER_TIMING.register(ops.Bufferize)
def _bufferize(profile: PaperProfile, node: Node, resident: list[bool]) -> NodeTiming:
    return _DoubleBuffer(node.rank)


class _DoubleBuffer(NodeTiming):
    """Bufferize (free; its Streamify pays the reads) with two buffers: the first element of a
    buffer is taken only when no reference waits in the output queue, so at most two buffers
    are held, one being read and one filled (``docs/simulator.md``)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.filling = False  # elements of the current buffer have been taken

    def attach(self, io: Any) -> None:
        recv, out = io.recv, io.outputs[0]

        def recv_double_buffered(i: int) -> Any:
            token = yield from io.peek(i)
            if is_data(token) and not self.filling:
                while any(is_data(t) for _, t in out.q):
                    yield ("send", out)  # woken when the reader takes a token
            token = yield from recv(i)
            if is_data(token):
                self.filling = True
            elif not (isinstance(token, Stop) and token.level < self.rank):
                self.filling = False  # the buffer closed
            return token

        io.recv = recv_double_buffered


class _SendCost(NodeTiming):
    def __init__(self, cost, port: int | None = None, footprint: bool = False):
        self.cost, self.port, self.track = cost, port, footprint
        self.footprint = 0

    def on_send(self, port: int, token: Any) -> int:
        if not is_data(token) or (self.port is not None and port != self.port):
            return 0
        if self.track:
            self.footprint = max(self.footprint, nbytes(token))
        return self.cost(token)


class _RecvCost(NodeTiming):
    def __init__(self, cost, port: int):
        self.cost, self.port = cost, port

    def on_recv(self, port: int, token: Any) -> int:
        return self.cost(token) if port == self.port and is_data(token) else 0


class _OffChipTiming(NodeTiming):
    def __init__(
        self, profile: PaperProfile, node: Node, send_port: int | None, recv_port: int | None
    ):
        self.mem = profile.memory
        self.node = node
        self.send_port, self.recv_port = send_port, recv_port
        self.elem_bytes = (
            node.elem_bytes if node.elem_bytes is not None else node.tensor.dtype.nbytes
        )
        self.staging = 2 if profile.onchip_convention == "paper" else 1
        self.footprint = 0
        # A ``fetch`` block of nr x nc tiles is one transfer: a load's with its first tile, a
        # store's with its last (the other tiles of the block are staged on chip).
        self.block = node.fetch or (1, 1)
        self.count = 0

    def _request(self, token: Any, write: bool) -> int | MemRequest:
        n = self.block[0] * self.block[1]
        k, self.count = self.count, self.count + 1
        if k % n != (n - 1 if write else 0):
            return 0
        rows, cols = self.node.tile[0] * self.block[0], self.node.tile[1] * self.block[1]
        counted = rows * cols * self.elem_bytes
        self.footprint = self.staging * counted
        return MemRequest(
            self.mem.request_bytes_of_tile(rows, cols, self.elem_bytes), counted, write
        )

    def on_send(self, port: int, token: Any) -> int | MemRequest:
        if port == self.send_port and is_data(token):
            return self._request(token, write=False)
        return 0

    def on_recv(self, port: int, token: Any) -> int | MemRequest:
        if port == self.recv_port and is_data(token):
            return self._request(token, write=True)
        return 0


class _ComputeTiming(NodeTiming):
    def __init__(self, profile: PaperProfile, node: Node, resident: list[bool]):
        self.node = node
        self.resident = resident
        self.pmu = profile.pmu_bw
        self.bw = profile.compute_bw(node)
        self.fixed = None if is_matmul(node) else profile.elementwise_cycles
        self.last = len(node.inputs) - 1
        self.store = profile.writes_back(node)
        self.charged = 0
        self.load = 0
        self.args: list[Any] = []
        self.flops = 0
        self.footprint = 0
        self._flops_of = ElementFlops(node)

    def on_recv(self, port: int, token: Any) -> int:
        if not is_data(token):
            return 0
        self.load += read_cycles(token, self.resident[port], self.pmu)
        self.args.append(token)
        if port != self.last:
            return 0
        flops = self._flops_of(self.args)  # ElementFlops
        self.flops += flops
        if self.fixed is not None:
            compute = self.fixed
        else:
            compute = math.ceil(flops / self.bw) if self.bw else 0
        cycles = max(self.load, compute)
        self.load, self.args, self.charged = 0, [], cycles
        return cycles

    def on_send(self, port: int, token: Any) -> int:
        if not is_data(token):
            return 0
        self.footprint = max(self.footprint, nbytes(token))
        if self.store:  # the roofline's third term: max(load, compute, store)
            # the element's cycles cover its first result's store; the results after it (a
            # held Accum's, an empty group's) pay theirs whole
            extra = max(0, math.ceil(nbytes(token) / self.pmu) - self.charged)
            self.charged = 0
            return extra
        return 0
