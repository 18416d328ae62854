"""The ``rtl`` profile (:class:`RtlProfile`): the hardware's configuration and the memory's
latencies, the queues' latencies, the shared AXI ports, and each node's timing (the package's
docstring says what it models)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from step_hw import contract
from step_hw.contract import BLOCKS, HwConfig, Interval
from step_hw.graph_rules import check_graph
from step_hw.memory_model import REQUEST_QUEUE, MemoryModel
from step_lang import ops
from step_lang.graph import Node

from ...memory import MemoryConfig
from ..base import NodeTiming, TimingProfile, check_int
from .blocks import _Block, _Expander, _MaskedRetile
from .loads import _Load
from .ports import Port, PortRun, ReadPort, WritePort
from .registry import RTL_TIMING
from .stores import _Store

_AXI_RAM = MemoryModel.axi_ram()


#: Cycles a node that waits a cycle at a time (for a shared port, a buffer slot, room) keeps
#: waiting while only such nodes are left and no shared port moves before the run is a deadlock
#: (a block's own latencies are a few cycles), beyond the memory's own latencies
#: (``RtlProfile.settle``).
_SETTLE = 64


@dataclass
class RtlProfile(TimingProfile):
    """Timing of the generated RTL; see the package docstring (:mod:`sim.profiles.rtl`).

    ``config`` is the hardware's :class:`HwConfig`; the other fields are the memory's and the
    memory controllers' fixed latencies in cycles.
    """

    name = "rtl"
    slot_release = contract.QUEUE_SLOT_RELEASE  # a FIFO's `w_rdy` is a register
    acts_on_offered_tokens = True  # routers forward a token in the cycle they take it, loads
    # take addresses ahead of the node
    config: HwConfig = field(default_factory=HwConfig)
    memory_latency: int = _AXI_RAM.latency  # AR handshake to the first R beat
    write_response: int = _AXI_RAM.write_response  # last W beat to the B response
    memory_outstanding: int = _AXI_RAM.outstanding  # requests the memory's AR (AW) queue holds
    beat_interval: int = _AXI_RAM.beat_interval  # cycles per R (W) beat at the most, per port
    start_up: int = _AXI_RAM.start_up  # extra cycles to a port's first R beat and first B
    load_start: int = contract.LOAD_START  # start to a load's first sequencer entry
    load_issue: int = contract.LOAD_ISSUE  # entry to its first AR
    store_issue: int = contract.STORE_ISSUE  # a store's take to its AW
    aw_to_w: int = contract.AW_TO_W  # AW to the first W beat (W-information queue)
    done_latency: int = contract.DONE_AFTER_B  # last B response to `done`
    sink_done: int = contract.DONE_AFTER_SINK  # a Sink's take of its done token to `done`
    # the last graph's streams that feed a Feedback (graph, its node count, stream -> node)
    _feedbacks: tuple[Any, int, dict] = field(
        default=(None, 0, {}), init=False, repr=False, compare=False
    )
    # the last graph's shared AXI ports: (graph, its node count, node -> (port, index, managers),
    # port -> the current run's port model, the current run)
    _axi: tuple[Any, int, dict, dict, Any] = field(
        default=(None, 0, {}, {}, None), init=False, repr=False, compare=False
    )
    # Bufferize node name -> the timing of the Streamify that reads it (the current run's), and
    # the engine processes of Bufferizes waiting for a slot's release
    _buffer_readers: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _buffer_waiting: set = field(default_factory=set, init=False, repr=False, compare=False)
    # Ports with at least this many operators get the cycle-by-cycle port model (tests set 1 to
    # check that the port model of one manager is the per-operator model).
    _port_model_from = 2

    @classmethod
    def for_memory(
        cls, memory: MemoryModel, config: HwConfig | None = None, **fields: Any
    ) -> RtlProfile:
        """The profile of ``config`` on ``memory`` (the fast co-simulation tier's memory model)."""
        if not isinstance(memory, MemoryModel):
            raise TypeError(f"RtlProfile.for_memory: memory must be a MemoryModel, not {memory!r}")
        return cls(
            config or HwConfig(),
            memory_latency=memory.latency,
            write_response=memory.write_response,
            memory_outstanding=memory.outstanding,
            beat_interval=memory.beat_interval,
            start_up=memory.start_up,
            **fields,
        )

    def __post_init__(self):
        if not isinstance(self.config, HwConfig):
            raise TypeError(f"RtlProfile: config must be a HwConfig, not {self.config!r}")
        for name in ("memory_latency", "write_response", "load_start", "load_issue",
                     "store_issue", "aw_to_w", "done_latency", "sink_done",
                     "start_up"):  # fmt: skip
            check_int("RtlProfile", name, getattr(self, name), 0)
        for name in ("memory_outstanding", "beat_interval"):
            check_int("RtlProfile", name, getattr(self, name), 1)

    @property
    def settle(self) -> int:
        """Cycles without progress after which waiting nodes are a deadlock: ``_SETTLE`` beyond
        the memory's latencies (a port may be still for a whole read latency)."""
        return _SETTLE + self.memory_latency + self.write_response + self.start_up

    def quiet_since(self, since: float, now: float) -> bool:
        """Whether ``settle`` cycles passed since ``since`` and since a shared port last moved."""
        run = self._axi[4] if self._axi is not None else None
        moved = run.moved if run is not None else -math.inf
        return now - max(since, moved) > self.settle

    @property
    def memory_shapes_ports(self) -> bool:
        """Whether the memory's own timing shapes every port (the package docstring): then every
        port takes the cycle-by-cycle port model."""
        queue = min(REQUEST_QUEUE, self.config.max_outstanding)
        return self.beat_interval > 1 or self.start_up > 0 or self.memory_outstanding < queue

    @property
    def channel_depth(self) -> int:  # type: ignore[override]
        return self.config.queue_depth

    @property
    def channel_latency(self) -> int:  # type: ignore[override]
        return contract.queue_latency(self.config.queue_depth)

    def _feeds_back(self, stream: Any) -> Node | None:
        """The Feedback node that ``stream`` feeds, if any. The hardware aliases a Feedback's
        output to its input (``step_hw.elaborate``): one queue, with the output's depth."""
        g = stream.graph
        graph, size, fbs = self._feedbacks
        if graph is not g or size != len(g.nodes):
            fbs = {n.inputs[0]: n for n in g.nodes.values() if n.is_feedback and n.inputs}
            self._feedbacks = (g, len(g.nodes), fbs)
        return fbs.get(stream)

    def stream_latency(self, stream: Any, depth: int) -> int:
        if self._feeds_back(stream) is not None:
            return 0  # a Feedback is a wire: the loop's one queue is on the Feedback's output
        return contract.queue_latency(depth)

    def memory_config(self) -> MemoryConfig:
        return MemoryConfig()  # unused: the memory operators model their AXI ports themselves

    def counts_against_capacity(self, token: Any) -> bool:
        return True

    def compute_bw(self, node: Node) -> int:
        return 2 * self.config.lanes if node.is_compute else 0

    def _depth(self, node: Node, port: int) -> int:
        s = node.outputs[port]
        while (fb := self._feeds_back(s)) is not None:  # the queue is the Feedback output's
            s = fb.outputs[0]
        return contract.queue_depth(node.graph, s, self.config)

    def _shared_port(self, node: Node, timing: _Load | _Store) -> Port | None:
        """Register ``timing`` with the model of the AXI port it shares with other memory
        operators (``step_hw.elaborate.axi_managers``: the elaborator's own assignment), if any."""
        g = node.graph
        graph, size, where, ports, run = self._axi
        if graph is not g or size != len(g.nodes):
            where = {
                name: (port, i, len(names))
                for port, names in contract.axi_managers(g, self.config).items()
                for i, name in enumerate(names)
            }
            graph, size, ports, run = g, len(g.nodes), {}, PortRun()
        port_name, index, n = where.get(node.name, (None, 0, 1))
        if n < self._port_model_from and not self.memory_shapes_ports:
            return None  # a port of its own (an arbiter of one manager is wires)
        port = ports.get(port_name)
        if port is not None and port.managers[index] is not None:
            ports, run, port = {}, PortRun(), None  # this node again: a new run, idle ports
        if port is None:
            kind = ReadPort if isinstance(timing, _Load) else WritePort
            port = ports[port_name] = kind(self, port_name, n, run)
        port.managers[index] = timing
        self._axi = (graph, size, where, ports, run)
        return port

    def shared_ports(self) -> dict[str, list[str]]:
        """The last run's shared AXI ports and their memory operators, in arbiter order (as
        ``step_hw.elaborate.axi_managers``, without the ports of one operator)."""
        return {name: [m.node.name for m in port.managers] for name, port in self._axi[3].items()}

    def axi_trace(self) -> dict[str, list[int]]:
        """Handshake cycles on the shared AXI ports of the last run, keyed as
        ``step_hw.cosim.run(..., trace=True)`` keys its AXI channels (``"m_axi_rd0.ar"``,
        ``"m_axi_rd0.r"``, ``"m_axi_wr0.aw"``, ``"m_axi_wr0.w"``, ``"m_axi_wr0.b"``), for
        comparison with the RTL. Ports of one operator are not listed."""
        out: dict[str, list[int]] = {}
        for name, port in self._axi[3].items():
            for channel, cycles in port.trace().items():
                out[f"{name}.{channel}"] = list(cycles)
        return out

    def check_graph(self, graph: Any) -> None:
        """Refuse a graph the hardware cannot build under ``config``
        (:func:`step_hw.graph_rules.check_graph`, the elaborator's rules): no cycle count for
        hardware that does not exist."""
        check_graph(graph, self.config)

    def run_cycles(self, graph: Any, finish: dict[str, int], last: int) -> int:
        """The cycle the graph's ``done`` rises: the last of its LinearStores' and Sinks' (each
        node finishes when its ``done`` bit counts, ``done_latency`` and ``sink_done`` charged).
        Blocks still at work then (a masked RetileStreamify stepping through padding rows whose
        done token no store waits for) do not delay it (the package docstring)."""
        ends = [finish[n.name] for n in graph.nodes.values()
                if isinstance(n, (ops.LinearOffChipStore, ops.Sink))]  # fmt: skip
        return max(ends) if ends else last

    def node_timing(self, node: Node, resident: list[bool]) -> NodeTiming:
        own = RTL_TIMING.get(node)
        if own is not None:
            return RTL_TIMING.entry(node)(self, node)
        block = BLOCKS.entry(node)
        if block.expands and node.fn.name == "retile_rows_masked":
            return _MaskedRetile(self, node)
        if block.interval is Interval.PER_COPY or block.expands:
            return _Expander(self, node)
        return _Block(self, node)  # timed from its hardware-contract entry (BLOCKS.entry)
