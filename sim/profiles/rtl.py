"""The ``rtl`` profile: the cycle timing of the hardware that ``step_hw`` generates.

Derived from :class:`step_hw.config.HwConfig` and the documented latency and initiation interval
of every hardware block (their docstrings; ``docs/hardware.md``), it predicts the cycles from
``start`` to ``done`` of an elaborated graph run against cocotbext-axi RAMs
(``step_hw/cosim/harness.py``). What it models:

* **Streams.** Every token, stop and done tokens included, is one beat on a ready/valid stream
  and takes a queue slot. A queue has the graph's depth (``Graph.set_queue_depth``, else
  ``HwConfig.queue_depth``); a token that enters it in cycle *t* is offered at *t + 2* (*t + 1*
  for depth 1: ``step_hw.queue.Queue``), and a queue of depth 1 or 2 moves one token every two
  cycles. A Feedback is a wire (``step_hw.elaborate`` aliases its output to its input): the
  stream into it has no latency of its own, and the loop's queue is the Feedback output's.
* **Blocks.** A block takes at most one token per input per cycle. Registered blocks (compute
  units, shape operators, ToSelector) offer a result one cycle after the take and one token per
  output per cycle. A MAC array spends ``ceil(M*K*N / lanes)`` cycles per tile pair
  (``compute/matmul.py``), from the cycle its operands are offered (its last result may still
  wait in the output register) to the take in the last; RetileStreamify one cycle per row of a
  tile, RepeatStatic one cycle per copy. FlatMap generators, RetileStreamify and RepeatStatic
  write a piece (copy) per cycle as the output register frees and take their element with the
  last (:class:`_Expander`); an Expand walks its reference from the cycle after it loads an
  element, dropping the element's stop meanwhile, and loads the next in the walk's last cycle
  (:class:`_Expand`); a masked RetileStreamify spends a padding row's cycle without the
  register and takes the tile with its last row (:class:`_MaskedRetile`). An Accum folds the
  next group's data while its last token waits in the output register
  (``_Block._fold_while_full``); a Reshape or Promote of rank 0 writes a held ``S1`` (and a short
  chunk's padding) before it takes the input that needs them (``contract.held_stop_chunk``), and
  a Reshape's output and pad flags drain apart.
* **Routers and Broadcast** are combinational (latency 0): a token leaves in the cycle its
  input queue offers it, to each of several outputs in the first cycle that output has room, and
  is taken from its queue only when the (last) output takes it; a selector is taken with what it
  routes; Reassemble writes a group's held closing stop once the next selector token is offered;
  EagerMerge grants the lowest-indexed input offering a token, offers the chunk's selector from
  then until taken, passes the chunk as the data output takes it, and its done tokens the cycle
  after it took the last input's (:class:`_Router`).
* **On-chip buffers** (``memory/buffer.py``: static buffers, and buffers with one dynamic dim,
  sized by its bound). An element is ``contract.buffer_words`` memory words, one per cycle on
  either side. Bufferize takes an element after its writes, the closing stop (and done) once its
  output register is empty, and offers the reference (done) a cycle later; the first element of
  buffer *n* (a dynamic buffer's closing stop too: an empty buffer takes a slot) waits until the
  Streamify reading it released buffer *n* - ``BUFFER_SLOTS`` (``BUFFER_RELEASE`` cycles after).
  Streamify replays its sequencer (``memory/sequence.py``) cycle by cycle: driving-token takes,
  entries committed with credit from its output queue (``STREAMIFY_QUEUE_DEPTH``), each offered
  ``BUFFER_READ_LATENCY`` + 2 cycles after its commit as one beat, or two (an element and its
  stop); a buffer is released when its last entry commits (:class:`_Streamify`). A dynamic
  buffer's walk comes from each buffer's extents (``Streamify.read_extents``): stop entries
  alone for an empty innermost dim, ending with a cycle of no entry for the held stop; nothing
  for an empty read, whose driving token takes a cycle (releasing the slot). Both take their
  inputs at the hardware's cycles while their nodes wait to send (:class:`_TakesEarly`).
* **Loads** (``memory/load.py``). Entries (tiles and stops) leave the sequencer one per cycle,
  :attr:`RtlProfile.load_start` cycles after start or one cycle after the reference token that
  starts a walk; a tile's bursts issue ``load_issue`` cycles after its entry, one per cycle, at
  most ``max_outstanding`` between AR and the last R beat (a slot is reused the cycle after);
  R beats return ``memory_latency`` cycles after AR, one per cycle per port; a tile is offered
  two cycles after its last beat. Its tile queue (3) and order queue (``max_outstanding + 8``)
  bound how far a load reads ahead of its consumer: a tile's last burst is requested only once
  the tile three before it has left the tile queue (the cycle after), so R never waits for the
  load. A tile's entry waits for room in the address queue (3), which frees as the burst
  generator takes a tile (``_Load._issue``). A RandomLoad takes each address from its queue in
  the cycle of its entry, while earlier tiles wait to leave (``_take_ahead``). A RandomLoad with
  ``fetch`` blocks and a LinearLoad with a reference replay their sequencer cycle by cycle
  (:class:`_BlockLoad`; on a shared port ``_Load._more`` plans the same entries): a data token
  taken the cycle after the entry before, then its block's entries (a tile and a stop inside
  the block one entry of two beats), a stop or done taken with its entry, all while earlier
  tiles wait to leave.
* **Stores** (``memory/store.py``). A tile's AW leaves ``store_issue`` cycles after the take, its
  W beats ``aw_to_w`` cycles after AW, one per cycle; B follows the last beat after
  ``write_response`` cycles; ``done`` rises ``done_latency`` cycles after the last B. A
  RandomStore takes its next tiles while earlier acks wait in its order queue (``max_outstanding
  + 8`` entries); an ack leaves ``ACK_AFTER_B`` cycles after its write's last B, in order
  (:class:`_RandomStore`). With ``fetch`` blocks it takes a block's address, tiles and stops one
  per cycle and acknowledges the block after its last B (:class:`_BlockStore`).
* **Shared AXI ports** (``HwConfig.axi_ports``). The memory operators share ports as the
  elaborator assigns them (``step_hw.elaborate.axi_managers``); a port with several is an
  ``AxiReadArbiter`` / ``AxiWriteArbiter`` (``step_hw/memory/arbiter.py``) in front of one
  cocotbext-axi RAM, simulated cycle by cycle (:class:`ReadPort`, :class:`WritePort`). The
  arbiter adds no latency: AR (AW) is round-robin from the manager granted last, combinational,
  and a request the RAM does not take at once stays granted until it does; R beats return in AR
  order, one per cycle for the whole port, so a load's tile-queue back-pressure on a tile's last
  beat stalls every load behind it (and can deadlock the graph, as in hardware); W beats pass in
  AW order, one per cycle. The RAM's AR (AW) queue holds two requests: the RAM's own process
  takes one burst at a time from it, so ``arready`` drops when two wait (``ReadPort``). A port
  with one operator is wires, modelled as above.
* **The end of the run.** The graph's ``done`` (``step_hw.elaborate``) is the AND of ``running``,
  every LinearStore's sticky ``done`` and, per Sink, a "done token seen" register set at the
  clock edge that ends the cycle the Sink takes its done token. The bench
  (``step_hw/cosim/bench.py``) counts clock edges, the first being the one that ends cycle 0
  (``start`` high), and reads ``done`` after each; cocotb's Verilator loop runs ``RisingEdge``
  callbacks before it evaluates the design on the edge, so it reads the value of the cycle the
  edge ends: the count is the first cycle ``done`` is high, plus one. A Sink that takes its done
  token in cycle *t* ends the run at *t* + ``sink_done`` (2: the register, the bench), as a store
  ends it ``done_latency`` cycles after its last B (which counts the bench's cycle too). Every
  bit is sticky, so the run ends at the latest of them, whatever other blocks still do
  (:meth:`RtlProfile.run_cycles`).

The memory is :class:`step_hw.memory_model.MemoryModel` (the fast co-simulation tier builds the
same one, ``step_hw/cosim/fast_top.py``); :meth:`RtlProfile.for_memory` takes its timing. A
memory with a beat interval above 1, a start-up, or a request queue shorter than the
controllers' ``max_outstanding`` (and two) shapes every port, so then every port, also one of a
single operator, takes the cycle-by-cycle port model (``ReadPort``, ``WritePort``). The
defaults are its ``axi_ram`` preset, cocotbext-axi ``AxiRam``'s timing, measured on the generated
SwiGLU layer (``docs/validation.md``): AR to the first R beat 2 cycles, last W beat to B 2
cycles. Every ``m_axi`` port has its own memory front end over one memory, so different ports do
not share bandwidth; the operators on one shared port do.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from step_hw import contract
from step_hw.contract import BLOCKS, HwConfig, Interval
from step_hw.memory_model import REQUEST_QUEUE, MemoryModel
from step_lang import ops
from step_lang.graph import Node
from step_lang.registry import NodeRegistry
from step_lang.stoprules import grid_stop, grid_tokens, partition_closes_chunk
from step_lang.tokens import DONE, Stop, is_data, to_tokens

from ..memory import MemoryConfig
from .base import ElementFlops, NodeTiming, TimingProfile, WaitFor, check_int
from .rtl_ports import Port, PortRun, ReadPort, WritePort

__all__ = ["RTL_TIMING", "RtlProfile"]

_AXI_RAM = MemoryModel.axi_ram()

#: The operators with a timing model of their own under the rtl profile: ``(profile, node) ->
#: NodeTiming`` (the memory operators' AXI pipelines, the on-chip buffers, the top level's ports
#: and wires). Every other operator is timed as a block from its hardware-contract entry
#: (``step_hw.contract.BLOCKS``: latency, input joining, initiation interval).
RTL_TIMING: NodeRegistry = NodeRegistry("rtl-profile timing")
_TILE_QUEUE = contract.TILE_QUEUE_DEPTH
_BOUNDARY = 4096  # AXI4 bursts never cross a 4 KiB boundary
#: Cycles a node that waits a cycle at a time (for a shared port, a buffer slot, room) keeps
#: waiting while only such nodes are left and no shared port moves before the run is a deadlock
#: (a block's own latencies are a few cycles), beyond the memory's own latencies
#: (``RtlProfile.settle``).
_SETTLE = 64
_MAX_BEATS = 256


def _low_pow2(n: int) -> int:
    return n & -n if n else 1 << 30


@dataclass
class RtlProfile(TimingProfile):
    """Timing of the generated RTL; see the module docstring.

    ``config`` is the hardware's :class:`HwConfig`; the other fields are the memory's and the
    memory controllers' fixed latencies in cycles.
    """

    name = "rtl"
    slot_release = contract.QUEUE_SLOT_RELEASE  # a FIFO's `w_rdy` is a register
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
    done_latency: int = 4  # last B response to `done` (ack path, done register, bench)
    sink_done: int = 2  # a Sink's take of its done token to `done` (done-seen register, bench)
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
                     "store_issue", "aw_to_w", "done_latency", "sink_done"):  # fmt: skip
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
        """Whether the memory's own timing shapes every port (module docstring): then every port
        takes the cycle-by-cycle port model."""
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

    def run_cycles(self, graph: Any, finish: dict[str, int], last: int) -> int:
        """The cycle the graph's ``done`` rises: the last of its LinearStores' and Sinks' (each
        node finishes when its ``done`` bit counts, ``done_latency`` and ``sink_done`` charged).
        Blocks still at work then (a masked RetileStreamify stepping through padding rows whose
        done token no store waits for) do not delay it (module docstring)."""
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


class _Source(NodeTiming):
    """A Source (a top-level ``src_<node>`` stream, offered every cycle by the bench): its
    ``ready`` is low in the ``start`` cycle (``step_hw.elaborate``), so its first token enters
    its queue in cycle 1; then one token per cycle, as its queue takes them (one every other
    cycle for a queue of depth 1 or 2)."""

    io: Any = None

    def __init__(self, profile: RtlProfile, node: Node):
        self.interval = contract.queue_interval(profile._depth(node, 0))
        self.last = -math.inf

    def attach(self, io: Any) -> None:
        self.io = io

    def on_send(self, port: int, token: Any) -> int:
        now = self.io.engine.now
        t = max(contract.SOURCE_START, self.last + self.interval)
        return max(0, math.ceil(t - now)) if t > now else 0

    def sent(self, port: int, token: Any) -> None:
        self.last = self.io.engine.now


class _Sink(NodeTiming):
    """A Sink (a top-level ``snk_<node>`` stream, always ready in the bench): its done token
    counts towards ``done`` only ``sink_done`` cycles after the take (module docstring)."""

    def __init__(self, profile: RtlProfile):
        self.done_cost = profile.sink_done

    def on_recv(self, port: int, token: Any) -> int:
        return self.done_cost if token is DONE else 0


class _Clocked(NodeTiming):
    """A timing that reads the engine's clock and spaces its output beats."""

    io: Any = None

    def __init__(self, profile: RtlProfile, node: Node):
        self.p = profile
        self.node = node
        # A queue of depth 1 or 2 takes a token every other cycle.
        self.spacing = [
            contract.queue_interval(profile._depth(node, j)) for j in range(len(node.outputs))
        ]
        self.last_push = [-math.inf] * len(node.outputs)
        self.flops = 0

    def attach(self, io: Any) -> None:
        self.io = io

    @property
    def now(self) -> float:
        return self.io.engine.now

    def sent(self, port: int, token: Any) -> None:
        self.last_push[port] = self.now

    #: The node's next send was charged already (its cycle worked out by a wrapper of
    #: ``SimIO.send``, ``attach``): its ``on_send`` costs nothing once.
    paid = False

    def _room(self, j: int) -> bool:
        """Whether output queue ``j`` has room now."""
        ch = self.io.outputs[j]
        return ch.occ - sum(1 for f in ch.frees if f <= self.now) < ch.cap

    def _wake_on_inputs(self) -> None:
        """Have a token sent to any input wake the node from the command it yields next."""
        proc = self.io.proc
        for ch in self.io.inputs:
            ch.recv_waiter = (proc, proc.epoch + 1)

    def _wait_output(self, ch: Any, times: list[float], *, inputs: bool, taken: bool) -> Any:
        """Wait while a token waits to leave into queue ``ch``: until the first of ``times``,
        or without any for room in ``ch`` (parked: the deadlock report's wait); sooner when a
        token is sent to any input (``inputs``) or the consumer takes from ``ch`` (``taken``)."""
        if inputs:
            self._wake_on_inputs()
        if taken:
            ch.send_waiter = (self.io.proc, self.io.proc.epoch + 1)
        if times:
            yield ("sleep", math.ceil(min(times) - self.now))
        else:
            yield ("park", f"room on {ch.name}", ("room", ch.name), "stalled_out")

    # -- memory operators on a shared AXI port ---------------------------------------------------

    port: Port | None = None

    def share(self, port: Port | None) -> None:
        self.port = port

    def _wait(self, settled: Any, what: str, earliest: Any = None) -> Any:
        """Sleep until ``settled()``: a result of the shared port that the engine's clock has not
        reached yet (``Port``). The engine has no hook for a node that must wait for time to pass
        before it can tell when it sends or takes a token, so the shared-port nodes wrap their
        ``SimIO.send`` / ``SimIO.recv`` (``attach``) with this. It looks again a cycle later, or,
        with ``earliest``, at the cycle ``earliest()`` names: one before which ``settled()``
        cannot hold (the port is simulated lazily, so looking less often changes nothing else).

        If only such waiting nodes are left and for ``settle`` cycles no shared port has moved and no
        node has started to wait (a port's own latencies are a few cycles), nothing can change
        any more: a deadlock, which the engine reports as usual."""
        if settled():
            return
        run, proc, engine = self.port.run, self.io.proc, self.io.engine
        self._waits_for = f"{what} over the shared AXI port {self.port.name}"
        run.waiting.add(proc.idx)
        run.moved = max(run.moved, self.now)
        try:
            while not settled():
                if self.now - run.moved > self.p.settle and engine.only_waiting(run.waiting):
                    for i in run.waiting:
                        engine.procs[i].waiting = engine.procs[i].timing._waits_for
                    engine._deadlock()
                t = earliest() if earliest is not None else None
                yield (
                    "sleep",
                    math.ceil(t - self.now) if t is not None and t > self.now + 1 else 1,
                )
        finally:
            run.waiting.discard(proc.idx)

    _waits_for = ""


def _frees_after(ch: Any, now: float) -> list[float]:
    """The cycles, after ``now``, at which slots of queue ``ch`` taken earlier free."""
    return [f for f in ch.frees if f > now]


def _fn_args(node: Node, toks: list[Any]) -> list[Any]:
    """A FlatMap's function arguments from its input tokens (as ``FlatMap.execute``)."""
    from step_lang.ops.higher_order import _args

    return list(_args(toks, len(node.arg_types)))


def _matmul_steps(node: Node, lanes: int, a: Any, b: Any) -> int:
    """Cycles of a MAC array on tiles ``a`` and ``b`` (``contract.matmul_steps``), with ``M``
    the rows ``a`` actually holds (a dynamic tile's, not its bound)."""
    m, k = a.shape
    n = b.shape[0] if getattr(node.fn, "transpose_b", False) else b.shape[1]
    return contract.matmul_steps(m, k, n, lanes)


class _Block(_Clocked):
    """Compute units and shape operators: registered blocks (see the module docstring). The
    combinational blocks (routers, Broadcast) have models of their own (:class:`_Router`); a
    combinational block without one would be timed here, its input taken when it passes it on."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        block = BLOCKS.entry(node)
        self.latency = block.latency
        self.group = len(node.inputs) if block.joins_inputs else 1
        self.n_in = 0  # tokens of the current group taken so far
        self.last_take = [-math.inf] * len(node.inputs)
        self.busy_until = -math.inf  # the block takes nothing before this cycle
        self.ready_at = -math.inf  # the result of the last take can leave from this cycle
        self.matmul = block.interval is Interval.MAC and contract.is_matmul(node)
        self.steps = 1
        self.retile = block.interval is Interval.PER_ROW
        self.pieces = 1
        self.repeat = node.count if block.interval is Interval.PER_COPY else 1
        self.count_flops = ElementFlops(node) if node.is_compute else None
        self.args: list[Any] = []
        # An Accum with held accumulators: stops of this level or above close a group, whose
        # accumulators leave contract.HELD_EMIT_DELAY cycles later than a plain Accum's.
        held = isinstance(node, ops.Accum) and node.held
        self.held_group = node.rank + node.held if held else None
        # A plain Accum's stop above its rank leaves a stop of its own after the accumulator
        # (``pending`` in ``compute/_unit.py``): the unit does nothing else until it has
        # written it, in the cycle the accumulator leaves the output register.
        self.pending_after = node.rank if isinstance(node, ops.Accum) and not held else None
        self.pending = False
        self.steps_from = -math.inf  # a MAC array's steps start no earlier (``pending``)
        self.popping = False  # taking inputs whose wait was served (``_fold_while_full``)
        self.take_due = None  # the take its steps started for while its last token waited
        # A Reshape that holds each chunk's closing S1 (contract.held_stop_chunk): elements of
        # the current chunk taken and whether its S1 is held (``_write_before_take``).
        self.chunk = contract.held_stop_chunk(node)
        self.pads = getattr(node, "pad", None) is not None
        self.in_chunk = 0
        self.stop_held = False

    def before_recv(self, port: int) -> int | WaitFor:
        if self.popping:
            return 0
        now = self.now
        if self.take_due is not None and self.n_in == 0:
            return max(0, math.ceil(self.take_due - now))
        t = self.last_take[port] + 1
        if self.n_in == 0:
            t = max(t, self.busy_until)
            # A unit takes all its inputs in one cycle, once all are valid...
            for q in range(1, self.group):
                if not self.io.has(q):
                    return WaitFor(q)
            self.steps = 1
            if self.matmul and is_data(self.io.head(port)):
                # ... a MAC array reads its operands in place from the cycle all are offered
                # (its result register may still hold the last result: only the last step
                # writes it) and takes them in its last step.
                heads = [self.io.head(q) for q in range(self.group)]
                self.steps = _matmul_steps(self.node, self.p.config.lanes, heads[0], heads[1])
                offered = max(self.io.inputs[q].q[0][0] for q in range(self.group))
                start = max(t, offered, self.steps_from)
                t = (start if self.held_group is None else max(t, now)) + self.steps - 1
        return max(0, math.ceil(t - now)) if t > now else 0

    def attach(self, io: Any) -> None:
        super().attach(io)
        if len(self.node.outputs) > 1 and self.latency and type(self) is _Block:
            self._drain_apart(io)
        if isinstance(self.node, ops.Accum):
            self._fold_while_full(io)
        if self.chunk is not None:
            self._write_before_take(io)

    def _fold_while_full(self, io: Any) -> None:
        """An Accum's last token of a group waits in its output register (``step_hw.compute.
        _unit``: ``free``) while the unit folds the next group's data and drops the stops inside
        a group: a plain Accum's result (unless a stop is held after it), the stop held after a
        result (written in the cycle the result left: the unit folds from the next), an Accum
        with held accumulators' final stop after its bank. A plain Accum's stop that closes a group, and
        done, wait for the register; with held accumulators the closing stop is taken and the
        bank's emission waits for it. The interpreter's Accum takes nothing before that token has
        left, so the node's send of it takes those inputs meanwhile (its later ``recv`` returns
        them) and waits for room or for the next of them, whichever comes first."""
        recv, send = io.recv, io.send
        held = self.held_group is not None
        inner = self.held_group if held else self.pending_after  # stops below: inside a group
        early: list[deque] = [deque() for _ in self.node.inputs]

        def recv_early(i: int) -> Any:
            if early[i]:
                return early[i].popleft()
            return (yield from recv(i))

        def foldable() -> bool | None:
            """Whether the next input tokens are taken without the register (None: not all
            there yet): data, a stop inside a group, and with held accumulators the stop that
            closes a group (it starts the bank's emission, which then waits for the
            register)."""
            if not all(ch.q for ch in io.inputs):
                return None
            token = io.inputs[0].q[0][1]
            return is_data(token) or (isinstance(token, Stop) and (held or token.level < inner))

        def waits(token: Any) -> bool:
            """Whether sending ``token`` frees the unit to fold on while it waits for room."""
            if any(early):
                return False
            if self.pending:  # the stop held after the result: written as the result left
                return isinstance(token, Stop)
            if held:  # the final stop after the bank
                return isinstance(token, Stop) and token.level >= self.node.held
            return is_data(token)

        def send_folding(j: int, token: Any) -> Any:
            if not waits(token):
                return (yield from send(j, token))
            # the register takes it (and a held unit is done with its bank) the cycle before it
            # can leave, its queue's pace aside
            free_from = max(self.ready_at, self.last_push[j] + 1) if held else -math.inf
            if self.pending:  # the unit is free the cycle after the result left
                free_from = self.steps_from = self.last_push[j] + 1
            t = self.now + self.on_send(j, token)
            ch = io.outputs[j]
            take_at, closed = None, False
            while True:
                now = self.now
                if t <= now and self._room(j):
                    break
                fold = not closed and foldable()
                times = [t] if t > now else _frees_after(ch, now)
                if fold and now < free_from:
                    times.append(free_from)
                elif fold:
                    if take_at is None and max(ch_.q[0][0] for ch_ in io.inputs) <= now:
                        take_at = now + self.before_recv(0)
                    if take_at is not None and take_at <= now:
                        self.popping = True
                        for i in range(len(io.inputs)):
                            early[i].append((yield from recv(i)))
                        self.popping = False
                        take_at = None
                        closed = isinstance(early[0][-1], Stop) and early[0][-1].level >= inner
                        continue
                    times.append(take_at if take_at is not None else
                                 max(ch_.q[0][0] for ch_ in io.inputs))  # fmt: skip
                # an arriving token may be taken; the consumer's next take wakes it
                yield from self._wait_output(
                    ch, times, inputs=fold is None and not closed, taken=t <= now
                )
            self.take_due = take_at  # steps under way go on after the token left
            self.paid = True
            yield from send(j, token)

        io.recv, io.send = recv_early, send_folding

    def _drain_apart(self, io: Any) -> None:
        """Output registers loaded together drain into their queues each on its own
        (``step_hw.shape.Reshape``'s output and pad flags): the node sends a token's outputs in
        port order, which would keep a later output's token behind an earlier output's full
        queue. So its sends of one token are collected and each is pushed once its queue has
        room; the next token waits for all of them, as the block loads its registers only when
        every one is free."""
        send = io.send
        stash: list[deque] = [deque() for _ in self.node.outputs]  # per output, in order

        def send_apart(j: int, token: Any) -> Any:
            stash[j].append(token)
            while all(stash):  # the next token of every output: loaded together
                yield from send_row([(k, q.popleft()) for k, q in enumerate(stash)])

        def send_row(row: list[tuple[int, Any]]) -> Any:
            now = self.now
            loaded = max(self.last_push) + 1  # a register frees in the cycle its token leaves
            ready = [(k, tok, max(now + self.on_send(k, tok), loaded)) for k, tok in row]
            while ready:
                now = self.now
                for item in [x for x in ready if x[2] <= now and self._room(x[0])]:
                    ready.remove(item)
                    self.paid = True
                    yield from send(item[0], item[1])
                if len(ready) == 1:  # the last one waits as any send does
                    k, tok, t = ready.pop()
                    if t > now:
                        yield ("sleep", math.ceil(t - now))
                    self.paid = True
                    yield from send(k, tok)
                elif ready:
                    soon = [t for _, _, t in ready if t > now]
                    for k, _, t in ready:
                        if t <= now:
                            soon += _frees_after(io.outputs[k], now)
                    yield ("sleep", math.ceil(min(soon) - now) if soon else 1)

        io.send = send_apart

    def _count_pieces(self, token: Any) -> int:
        """Output pieces of an expander's element whose first input is ``token`` (the others
        are the heads of the other inputs)."""
        if self.retile:
            shape = getattr(token, "shape", (1, 1))
            return int(shape[0] if self.node.split == "rows" else shape[1])
        if isinstance(self.node, ops.RepeatStatic):
            return self.node.count
        toks = [token] + [self.io.head(q) for q in range(1, self.group)]
        sub = self.node.fn.apply(self.node.out_types[0].elem, *_fn_args(self.node, toks))
        return sum(1 for t in to_tokens(sub, self.node.fn.rank)[:-1] if is_data(t))

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        self.take_due = None
        self.last_take[port] = now
        self.n_in += 1
        if self.count_flops is not None and is_data(token):
            self.args.append(token)
        if self.n_in < self.group:
            return 0
        self.n_in = 0
        data = is_data(token)
        busy = 1
        lat = self.latency
        if self.args:  # a compute node's element: its function's FLOPs, as the paper profile
            self.flops += self.count_flops(self.args)
            self.args = []
        if data and not self.matmul:  # a MAC array took it in the last of its steps
            if self.retile:  # one cycle per row (column) of the tile, masked ones included
                shape = getattr(token, "shape", (1, 1))
                busy = max(1, int(shape[0] if self.node.split == "rows" else shape[1]))
            elif self.repeat > 1:
                busy = self.repeat
        if self.latency:  # routers take each input on its own (per-port spacing only)
            self.busy_until = now + busy
        if (
            self.held_group is not None
            and isinstance(token, Stop)
            and token.level >= self.held_group
        ):
            lat += contract.HELD_EMIT_DELAY
        if (
            self.pending_after is not None
            and isinstance(token, Stop)
            and token.level >= self.pending_after
        ):  # a group's closing stop (one inside a group may be folded while a stop is held)
            self.pending = token.level > self.pending_after
        self.ready_at = now + lat
        if self.chunk is not None:
            self._track_chunk(token)
        return 0

    def _writes_before(self, token: Any) -> tuple[int, bool]:
        """What a held-stop Reshape writes before it takes ``token``
        (``step_hw.shape.Reshape._elaborate_inner``): the pads of a chunk that a stop or done
        ends short, and whether a held S1 goes out (data or done releases it; after padding,
        the S1 closing the padded chunk is held, which a stop absorbs)."""
        short = self.chunk - self.in_chunk if self.in_chunk and self.pads else 0
        if is_data(token):
            return 0, self.stop_held
        if isinstance(token, Stop):
            return short, False
        return short, bool(short) or self.stop_held

    def _write_before_take(self, io: Any) -> None:
        """A held-stop Reshape writes what its next input needs before it takes it: the pads and
        the released S1 (``_writes_before``), each into the output registers as they free, the
        input taken in the cycle the last has left. The interpreter writes them after its take,
        so they are sent here first and the node's own sends of them are dropped."""
        recv, send = io.recv, io.send
        n_out = len(self.node.outputs)
        skip = [0] * n_out

        def recv_after_writes(i: int) -> Any:
            token = yield from io.peek(i)
            wait = self.before_recv(i)
            if wait > 0:
                yield ("sleep", wait)
            pads, s1 = self._writes_before(token)
            rows = [[np.array(self.node.pad, copy=True), np.ones((1, 1), bool)]] if pads else []
            rows = rows * pads + [[Stop(1), Stop(1)]] * s1
            for row in rows:
                self.ready_at = self.now + self.latency
                for j in range(n_out):
                    skip[j] += 1
                    yield from send(j, row[j])
            return (yield from recv(i))

        def send_unless_written(j: int, token: Any) -> Any:
            if skip[j]:
                skip[j] -= 1
                return
            yield from send(j, token)

        io.recv, io.send = recv_after_writes, send_unless_written

    def _track_chunk(self, token: Any) -> None:
        """A held-stop Reshape took ``token``: whether the chunk it closes holds its S1."""
        self.stop_held = False
        if is_data(token):
            self.in_chunk += 1
            if self.in_chunk == self.chunk:
                self.in_chunk, self.stop_held = 0, True
        else:
            self.in_chunk = 0

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        if self.pending and isinstance(token, Stop):  # written as the accumulator left
            self.pending = False
            self.steps_from = self.last_push[port] + 1
        self.last_push[port] = now
        if not self.latency:
            # A combinational block holds its input until the outputs take it: the input queue
            # offers the next token the cycle after.
            self.last_take = [max(t, now) for t in self.last_take]

    def on_send(self, port: int, token: Any) -> int:
        # A registered output leaves one token per cycle. A combinational block passes each
        # token on in the cycle it takes it, so only a slow queue spaces them.
        if self.paid:  # charged by ``_drain_apart`` or ``_fold_while_full`` already
            self.paid = False
            return 0
        gap = self.spacing[port] - (0 if self.latency else 1)
        t = max(self.ready_at, self.last_push[port] + gap)
        return max(0, math.ceil(t - self.now)) if t > self.now else 0


class _Expander(_Block):
    """A FlatMap generator, an unmasked RetileStreamify or a RepeatStatic (``step_hw.addrgen``,
    ``compute/retile.py``, ``shape.py``): an element is read in place while its pieces (copies)
    are written into the output register, each in the cycle the register frees (the token before
    leaves it), and its inputs are taken with the last piece's write: in the cycle the token
    before the last piece leaves the register (at once for an element of no pieces). Without
    back-pressure that is ``pieces - 1`` cycles after the take (as ``_Block.hold``); with it,
    later. The node's ``recv`` of an element's inputs is wrapped to leave them in their queues
    until then (``attach``). An element of no pieces needs no register: the unit takes it in
    the cycle it is offered after the take before, also while the last piece or a stop waits in
    the register to leave (``_push_taking_empty``)."""

    #: Whether an element may have no pieces: a FlatMap's may (its function says how many), a
    #: RepeatStatic's or an unmasked RetileStreamify's never.
    may_be_empty = False

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send = io.recv, io.send
        self.in_place: list[int] = []  # inputs of the element in hand, still in their queues
        self.to_write = 0  # pieces of it not written into the output register yet
        self.popping = False
        self.early: list[deque] = [deque() for _ in self.node.inputs]
        self.taken = -math.inf  # the cycle of the last element's take
        self.may_be_empty = self.may_be_empty or isinstance(self.node, ops.FlatMap)
        self.empty_memo: tuple[Any, bool] = (None, False)  # (head, whether it has no pieces)

        def take_in_place(i: int) -> Any:
            if self.early[i]:  # taken while the node still sent the element before
                return self.early[i].popleft()
            token = yield from io.peek(i)
            if not is_data(token):
                return (yield from recv(i))
            # as SimIO.recv waits for this block to take it (only this node takes from input i)
            wait = self.before_recv(i)
            while isinstance(wait, WaitFor):
                yield from io.peek(wait.port)
                wait = self.before_recv(i)
            if wait > 0:
                yield ("sleep", wait)
            if self.n_in == 0:
                self.pieces = self._count_pieces(token)
            self.in_place.append(i)
            self.on_recv(i, token)
            if self.n_in == 0:  # the element is in hand
                self.to_write = self.pieces
                if self.to_write <= 0:  # no piece
                    yield from self._take_empty()
            return token

        def send_piece(j: int, token: Any) -> Any:
            if is_data(token) and self.in_place:
                yield from self._send_piece(j, token)
            else:
                yield from self._send_other(j, token)
            if is_data(token) and self.to_write > 0:
                self.to_write -= 1

        self._recv_now, self._send_now = recv, send
        io.recv, io.send = take_in_place, send_piece

    def _take_empty(self) -> Any:
        """An element of no pieces: taken at once."""
        yield from self._take()

    def _send_other(self, j: int, token: Any) -> Any:
        """Send a stop or done token (taken as it is written)."""
        yield from self._push_taking_empty(j, token)

    def _send_piece(self, j: int, token: Any) -> Any:
        """Send a piece of the element in hand; the last is written as the token before it
        leaves the register (the node sends each token once the one before has left), the
        element taken with it."""
        if self.to_write != 1:
            return (yield from self._send_now(j, token))
        yield from self._take()
        yield from self._push_taking_empty(j, token)

    def _take(self) -> Any:
        """Take the element's inputs from their queues, now."""
        self.taken = self.now
        self.popping = True
        for i in self.in_place:
            yield from self._recv_now(i)
        self.popping = False
        self.in_place = []

    def _push_taking_empty(self, j: int, token: Any) -> Any:
        """Push a token written into the output register (an element's last piece, a stop);
        meanwhile the unit takes the elements after it that have no pieces (they need no
        register), each in its cycle (``_empty_due``). The node's ``recv`` returns them
        later."""
        if not self.may_be_empty:
            return (yield from self._send_now(j, token))
        ch = self.io.outputs[j]
        gap = self.spacing[j] - (0 if self.latency else 1)
        while True:
            now = self.now
            beat = max(self.ready_at, self.last_push[j] + gap)
            if beat <= now and self._room(j):
                break
            due = self._empty_due()
            if due is not None and due <= now:
                self.taken = now
                self.popping = True
                for i in range(self.group):
                    self.last_take[i] = now
                    self.early[i].append((yield from self._recv_now(i)))
                self.popping = False
                continue
            soon = [beat] if beat > now else _frees_after(ch, now)
            if due is not None:
                soon.append(due)
            # an arriving element may have no pieces; the consumer's next take wakes it
            arriving = due is None and not all(c.q for c in self.io.inputs)
            yield from self._wait_output(ch, soon, inputs=arriving, taken=beat <= now)
        yield from self._send_now(j, token)

    def _empty_due(self) -> float | None:
        """When the element at the heads of the inputs is taken, if it has no pieces: the
        cycle all its inputs are offered, after the last take."""
        if not all(c.q for c in self.io.inputs):
            return None
        token = self.io.inputs[0].q[0][1]
        if not is_data(token):
            return None
        if self.empty_memo[0] is not token:
            self.empty_memo = (token, self._count_pieces(token) <= 0)
        if not self.empty_memo[1]:
            return None
        return self._offered_after_take()

    def _offered_after_take(self) -> float:
        """The cycle the unit has the element at the heads of the inputs: once all are offered,
        the cycle after the last take (an element's, or a stop's)."""
        offered = max(c.q[0][0] for c in self.io.inputs)
        return max(offered, max(self.taken, *self.last_take) + 1)

    def before_recv(self, port: int) -> int | WaitFor:
        return 0 if self.popping else super().before_recv(port)

    def on_recv(self, port: int, token: Any) -> int:
        return 0 if self.popping else super().on_recv(port, token)


class _MaskedRetile(_Expander):
    """A RetileStreamify that drops padding rows (``compute/retile.py``, ``masked``): it steps
    through a tile's rows one per cycle from the cycle the tile and its mask are offered; a kept
    row is written into the output register when the register frees (the row before it left), a
    padding row takes its cycle without the register, and the tile is taken in the cycle of its
    last row. So a kept row is written ``max(w + d, p)`` for the kept row before it written at
    ``w``, ``d`` rows earlier, and pushed at ``p``; the first in the cycle its rows reach it
    (the element offered at ``s``: ``s + i`` for row ``i``), once the register is free; the
    tile is taken its trailing padding rows after its last kept row's write, whether or not that
    row has left the register (``s + R - 1`` for a tile of padding only). The node sends only
    the kept rows, so their sends are timed here (``_send_piece``)."""

    may_be_empty = True  # a tile of padding rows only

    def attach(self, io: Any) -> None:
        super().attach(io)
        self.kept: list[int] = []  # the element's kept rows
        self.rows = 0
        self.start = -math.inf  # the cycle its rows start (row i in start + i)
        self.written = -math.inf  # when the element's last kept row so far was written

    def _count_pieces(self, token: Any) -> int:
        mask = np.asarray(self.io.head(1))
        self.rows = int(mask.shape[0])
        self.kept = [i for i in range(self.rows) if not mask[i, 0]]
        self.start = self._offered_after_take()  # its first row
        return len(self.kept)

    def _take(self) -> Any:
        self.busy_until = self.now + 1
        yield from super()._take()

    def on_recv(self, port: int, token: Any) -> int:
        out = super().on_recv(port, token)
        if is_data(token) and not self.popping:  # its rows, not the cycle it came in hand
            self.busy_until = self.start + self.rows
        return out

    def _take_empty(self) -> Any:
        # a tile of padding rows only: taken in the cycle of its last row
        wait = self.start + self.rows - 1 - self.now
        if wait > 0:
            yield ("sleep", math.ceil(wait))
        yield from self._take()

    def _send_piece(self, j: int, token: Any) -> Any:
        k = len(self.kept) - self.to_write  # which kept row
        row = self.kept[k]
        free = self.last_push[j]  # the register frees in the cycle its token leaves
        if k == 0:
            write = max(self.start + row, free)
        else:
            write = max(self.written + row - self.kept[k - 1], free)
        self.written = write
        self.ready_at = write + self.latency
        if k < len(self.kept) - 1:
            return (yield from self._send_now(j, token))
        take_at = write + self.rows - 1 - row  # the tile's last row
        ch, proc = self.io.outputs[j], self.io.proc
        while self.in_place:  # the take and the push, each at its own cycle
            now = self.now
            if take_at <= now:
                yield from self._take()
                break
            if self.ready_at <= now and self._room(j):
                yield from self._send_now(j, token)
                token = None
                break
            soon = [take_at, self.ready_at] if self.ready_at > now else [take_at]
            if self.ready_at <= now:  # the consumer's next take wakes it
                soon += _frees_after(ch, now)
                ch.send_waiter = (proc, proc.epoch + 1)
            yield ("sleep", math.ceil(min(soon) - now))
        if token is None:  # pushed first: the take is due
            wait = take_at - self.now
            if wait > 0:
                yield ("sleep", math.ceil(wait))
            yield from self._take()
        else:
            yield from self._push_taking_empty(j, token)

    def _empty_due(self) -> float | None:
        """When the element at the heads of the inputs is taken, if it is all padding rows: in
        the cycle of its last row."""
        if not all(c.q for c in self.io.inputs):
            return None
        token, mask = (c.q[0][1] for c in self.io.inputs)
        if not is_data(token) or not np.asarray(mask).all():
            return None
        return self._offered_after_take() + np.asarray(mask).shape[0] - 1


# -- routers (step_hw/broadcast.py, step_hw/router.py) ------------------------------------------

_NONE = object()  # no token held on an input


def _same_token(a: Any, b: Any) -> bool:
    return a is b or (isinstance(a, Stop) and isinstance(b, Stop) and a.level == b.level)


class _Router(_Clocked):
    """A combinational block (``Block.latency == 0``): Broadcast, Partition, Reassemble,
    EagerMerge, Parallelize, as ``step_hw.broadcast`` and ``step_hw.router`` build them.

    The hardware offers a token on its outputs in the cycle its input queue offers it, and takes
    it from the input (``ready``) only in the cycle its output (the last of the outputs it goes
    to: ``fork``, each output taking it in the first cycle it has room) takes it; a selector is
    taken with the chunk it routes; the next token of an input is offered the cycle after
    (``last_pop + 1``). The interpreter's node takes a token, then sends it to its outputs in
    order, and reads some chunks whole before forwarding them. So the node's ``recv`` and
    ``send`` are wrapped (``attach``): ``recv`` returns the head of the input queue without
    taking it (the token is *held*, its slot stays taken), and the node's ``send`` of it pushes it
    to every output it goes to at once, each when it has room, and takes the held inputs the
    hardware consumes with it. Tokens the hardware passes on before the node sends them (the
    other outputs of a fork, a held stop written early, a chunk read whole) are pushed at the
    hardware's cycle and the node's later ``send`` of each is a no-op (checked to be the same
    token). Subclasses say what is held and what each send consumes.
    """

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        n = len(node.inputs)
        self.held: list[Any] = [_NONE] * n
        self.last_pop = [-math.inf] * n
        self.not_before = [-math.inf] * n  # a block's own earliest take of each input
        self.early: list[deque] = [deque() for _ in node.outputs]  # pushed before the node sends
        self.background: list[tuple[int, Any]] = []  # (output, token) to push when there is room

    def attach(self, io: Any) -> None:
        super().attach(io)
        self._recv, self._send = io.recv, io.send
        io.recv, io.send = self.node_recv, self.node_send

    # -- the node's calls --------------------------------------------------------------------

    def node_recv(self, i: int) -> Any:
        raise NotImplementedError

    def node_send(self, j: int, token: Any) -> Any:
        if self.early[j]:
            early = self.early[j].popleft()
            if not _same_token(early, token):
                raise RuntimeError(
                    f"rtl profile: {self.node.kind} '{self.node.name}' sends {token!r} on output "
                    f"{j}, the hardware model pushed {early!r}"
                )
            return
        yield from self.forward(j, token)

    def forward(self, j: int, token: Any) -> Any:
        """The node sends ``token`` on output ``j`` (not pushed before)."""
        raise NotImplementedError

    # -- cycles --------------------------------------------------------------------------------

    def takeable(self, i: int) -> bool:
        """Whether input ``i``'s queue offers its head token this cycle."""
        ch, now = self.io.inputs[i], self.now
        return (
            bool(ch.q)
            and ch.q[0][0] <= now
            and now >= self.last_pop[i] + 1
            and now >= self.not_before[i]
        )

    def room(self, j: int) -> bool:
        """Whether output ``j``'s queue takes a token this cycle (``w_rdy``)."""
        ch, now = self.io.outputs[j], self.now
        if now < self.last_push[j] + self.spacing[j]:
            return False
        return ch.occ - sum(1 for f in ch.frees if f <= now) < ch.cap

    def wait(self, inputs: Any = (), outputs: Any = ()) -> Any:
        """Sleep until one of ``inputs`` may offer a token or one of ``outputs`` may have room
        (the time each will, when known; else until its producer sends or consumer takes)."""
        yield from self.service()
        io, now = self.io, self.now
        ep = io.proc.epoch + 1  # the epoch the engine gives the command yielded below
        t, park = math.inf, None
        outputs = [*outputs, *(j for j, _ in self.background)]
        if not inputs and not outputs:
            return  # the background tokens just left
        for i in inputs:
            ch = io.inputs[i]
            t0 = max(self.last_pop[i] + 1, self.not_before[i])
            if ch.q:
                t0 = max(t0, ch.q[0][0])
            elif t0 <= now:
                ch.recv_waiter = (io.proc, ep)
                park = ("recv", ch)
                continue
            if t0 > now:
                t = min(t, t0)
        for j in outputs:
            ch = io.outputs[j]
            t0 = self.last_push[j] + self.spacing[j]
            if t0 > now:
                t = min(t, t0)
                continue
            frees = _frees_after(ch, now)
            if frees:
                t = min(t, min(frees))
            else:
                ch.send_waiter = (io.proc, ep)
                park = ("send", ch)
        if t < math.inf:
            yield ("sleep", t - now)
        elif park is not None:
            yield park
        else:  # pragma: no cover - nothing can change: a bug of the model
            raise RuntimeError(f"rtl profile: {self.node.name} waits for nothing")
        yield from self.service()

    def service(self) -> Any:
        """Push the background tokens whose output has room now."""
        for item in list(self.background):
            if self.room(item[0]):
                self.background.remove(item)
                yield from self._send(*item)

    def take_when_offered(self, i: int) -> Any:
        """Wait until input ``i`` offers its head token; return it (still in the queue)."""
        while not self.takeable(i):
            yield from self.wait(inputs=[i])
        return self.io.inputs[i].q[0][1]

    def pop(self, i: int) -> Any:
        """Take input ``i``'s head token now (it is offered)."""
        token = yield from self._recv(i)
        self.last_pop[i] = self.now
        self.held[i] = _NONE
        return token

    def fork(self, token: Any, targets: Any, sent: int | None = None) -> Any:
        """Offer ``token`` to every output in ``targets``, each taking it in the first cycle it
        has room (``step_hw.broadcast.fork``); return when the last has. Every target but
        ``sent`` (the node's own send) is recorded as pushed early."""
        left = list(targets)
        yield from self.service()
        while True:
            for j in list(left):
                if self.room(j):
                    left.remove(j)
                    yield from self._send(j, token)
                    if j != sent:
                        self.early[j].append(token)
            if not left:
                return
            yield from self.wait(outputs=left)


class _Broadcast(_Router):
    """Broadcast: each output takes a token at its own pace; the input advances when the last
    has (``step_hw.broadcast.Broadcast``)."""

    def node_recv(self, i: int) -> Any:
        token = yield from self.take_when_offered(i)
        self.held[i] = token
        return token

    def forward(self, j: int, token: Any) -> Any:
        yield from self.fork(token, range(len(self.node.outputs)), j)
        yield from self.pop(0)


class _Partition(_Router):
    """Partition (``step_hw.router.Partition``): each token of a chunk goes to every selected
    output at its own pace and is taken when the last has; the selector is taken with the
    element (rank 0) or with the chunk's closing stop (rank >= 1); a chunk for no output is
    taken a token per cycle; a selector stop of rank >= 1 takes a cycle of its own, one of rank 0
    is taken with the input's stop. On the selector's done token every output takes a done
    token, then both done tokens are taken together, the cycle after at the earliest."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.rank = node.rank

    def _consumes_selector(self, x: Any) -> bool:
        return self.rank == 0 or (isinstance(x, Stop) and x.level >= self.rank)

    def _drop(self) -> Any:
        """A held input token that went to no output: taken in the cycle it was offered."""
        x = self.held[0]
        if x is not _NONE:
            yield from self.pop(0)
            if self._consumes_selector(x):
                yield from self.pop(1)

    def node_recv(self, i: int) -> Any:
        yield from self._drop()
        sel = self.held[1]
        token = yield from self.take_when_offered(i)
        if i == 1:
            if isinstance(token, Stop) and self.rank > 0:
                return (yield from self.pop(1))
            self.held[1] = token
        elif sel is DONE or isinstance(sel, Stop):  # taken together with the selector's
            yield from self.pop(0)
            yield from self.pop(1)
        else:
            self.held[0] = token
        return token

    def forward(self, j: int, token: Any) -> Any:
        sel = self.held[1]
        if sel is DONE:
            yield from self.fork(token, range(len(self.node.outputs)), j)
            self.not_before[0] = self.now + 1  # `closed` is a register
            return
        targets = [int(k) for k in np.flatnonzero(np.asarray(sel).reshape(-1))]
        yield from self.fork(token, targets, j)
        x = self.held[0]
        yield from self.pop(0)
        if self._consumes_selector(x):
            yield from self.pop(1)


class _Reassemble(_Router):
    """Reassemble (``step_hw.router.Reassemble``): the selector is taken in the group's first
    cycle (with the first chunk's first token), each input token when the output takes it. The
    group's closing stop is written once the last chunk has passed (its closing stop, for chunks
    of rank >= 1, is taken with it), not in the group's first cycle, and, with a selector of
    rank >= 1, only once the next selector token is offered: merged with it if that is a stop
    (both taken), else written alone, and that selector token is taken the cycle after at the
    earliest (the interpreter writes it with the next group's first token). A selector stop
    outside a group is a merged stop of its own. The done token is written, then every input's
    done token is taken, from the cycle after, the selector's with the last."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.n = len(node.inputs) - 1
        self.a = node.chunk_rank
        self.q = node.inputs[-1].rank
        self.left = 0  # chunks of the current group not yet (fully) read
        self.pending = False  # the group's closing stop is held back for the next selector
        self.close_from = -math.inf  # the group's closing stop is written from this cycle
        self.closing_input = None  # input whose held closing stop the group's stop replaces

    def node_recv(self, i: int) -> Any:
        if i < self.n:
            token = yield from self.take_when_offered(i)
            if self.held[self.n] is DONE:  # the done phase: all inputs' done tokens
                yield from self.pop(i)
                if i == self.n - 1:
                    yield from self.pop(self.n)
                return token
            closes = (
                is_data(token) if self.a == 0 else isinstance(token, Stop) and token.level >= self.a
            )
            if closes:
                self.left -= 1
                if self.left == 0 and self.a > 0:  # replaced by the group's closing stop
                    self.closing_input = i
                    self.pending = True
            self.held[i] = token
            return token
        if self.pending and self.q > 0:
            s = yield from self.take_when_offered(i)
            if not isinstance(s, Stop):  # the held stop is written alone, now
                stop = Stop(self.a + 1)
                while self.now < self.close_from:
                    yield ("sleep", self.close_from - self.now)
                yield from self.fork(stop, [0])
                yield from self._closed()
        s = yield from self.take_when_offered(i)
        if is_data(s):
            yield from self.pop(i)
            self.left = int(np.count_nonzero(np.asarray(s)))
            self.close_from = self.now + 1
            self.pending = self.left == 0
        else:  # a stop (merged into the closing stop) or done: taken with what it writes
            self.held[i] = s
        return s

    def _closed(self) -> Any:
        """The group's closing stop was written: take what it consumes; the next selector token
        is taken from the next cycle (``idle`` is a register)."""
        self.pending = False
        self.not_before[self.n] = self.now + 1
        if self.closing_input is not None:
            yield from self.pop(self.closing_input)
            self.closing_input = None

    def forward(self, j: int, token: Any) -> Any:
        if token is DONE:
            yield from self.fork(token, [0], 0)
            for i in range(self.n):
                self.not_before[i] = self.now + 1
            return
        if isinstance(token, Stop) and token.level > self.a:  # the group's closing stop
            while self.now < self.close_from:
                yield ("sleep", self.close_from - self.now)
            yield from self.fork(token, [0], 0)
            yield from self._closed()
            if isinstance(self.held[self.n], Stop):
                yield from self.pop(self.n)
            return
        # a token of a chunk (for chunks of rank >= 1, a stop between chunks)
        i = next(k for k in range(self.n) if self.held[k] is not _NONE)
        yield from self.fork(token, [0], 0)
        yield from self.pop(i)
        if self.a == 0 and self.left == 0:
            self.pending = True
            self.close_from = max(self.close_from, self.now + 1)


class _EagerMerge(_Router):
    """EagerMerge (``step_hw.router.EagerMerge``): when idle, the lowest-indexed input that
    offers a token is granted; its selector is offered from that cycle until taken, and the
    chunk's tokens pass as the data output takes them (independently of the selector). The next
    chunk is granted the cycle after both the selector and the chunk's last token were taken. An
    input's done token is taken in the first cycle it is offered (not being forwarded); the
    outputs' done tokens are offered the cycle after the last was, each taken at its own pace."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.a = node.chunk_rank
        self.done_taken = -math.inf
        self.cur: int | None = None  # the input granted last
        self.idle_from = -math.inf  # the cycle `busy` is clear after the last chunk

    def attach(self, io: Any) -> None:
        super().attach(io)
        from step_lang.arrival import LowestIndexFirst

        io.policy = LowestIndexFirst  # the grant among the inputs offering a token

    def node_recv(self, i: int) -> Any:
        ch = self.io.inputs[i]
        if ch.q and ch.q[0][1] is DONE and self.held[i] is _NONE:
            # taken as soon as offered, unless its input's chunk is still being forwarded: the
            # node looks for done tokens only between chunks
            at = max(ch.q[0][0], self.last_pop[i] + 1)
            if i == self.cur:
                at = max(at, self.idle_from)
            yield from self.take_when_offered(i)
            token = yield from self.pop(i)
            self.done_taken = max(self.done_taken, at)
            return token
        if self.held[i] is not _NONE:  # the node reads a whole chunk: forward what it holds
            token = self.held[i]
            yield from self.fork(token, [0])
            yield from self.pop(i)
        token = yield from self.take_when_offered(i)
        self.held[i] = token
        self.cur = i
        return token

    def forward(self, j: int, token: Any) -> Any:
        if token is DONE:  # the outputs' done tokens, the cycle after the last input's
            t = self.done_taken + 1
            if t > self.now:
                yield ("sleep", t - self.now)
            yield from self.fork(DONE, [0, 1], j)
            return
        if j == 1:  # the selector: offered from the grant, taken whenever the output has room
            self.background.append((1, token))
            yield from self.service()
            return
        yield from self.fork(token, [0], 0)
        yield from self.pop(self.cur)
        if self.a == 0 or (isinstance(token, Stop) and token.level >= self.a):  # chunk passed
            while self.background:
                yield from self.wait()
            self.idle_from = self.now + 1
            yield ("sleep", 1)  # `busy` clears at the end of this cycle: the next grant


class _Parallelize(_Router):
    """Parallelize (``step_hw.router.Parallelize``): each token goes to the output whose turn it
    is as that output takes it (the interpreter reads a chunk of rank >= 1 whole first), a
    dropped stop (rank 0) takes a cycle, the done token goes to every output at its own pace."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.b = node.rank
        self.turn = 0

    def node_recv(self, i: int) -> Any:
        if self.held[0] is not _NONE:  # a chunk read whole: forward the token before
            token = self.held[0]
            yield from self.fork(token, [self.turn])
            yield from self.pop(0)
        token = yield from self.take_when_offered(0)
        if self.b == 0 and isinstance(token, Stop):
            return (yield from self.pop(0))  # dropped
        self.held[0] = token
        return token

    def forward(self, j: int, token: Any) -> Any:
        if token is DONE:
            yield from self.fork(token, range(len(self.node.outputs)), j)
            yield from self.pop(0)
            return
        yield from self.fork(token, [j], j)
        yield from self.pop(0)
        if self.b > 0:
            self.turn = (j + 1) % len(self.node.outputs) if isinstance(token, Stop) else j


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
        return [a * n + i if 0 <= a < self.n_addresses else None for i in range(n)]


class _Axi:
    """One AXI port's outstanding-burst slots and its serial data channel."""

    def __init__(self, outstanding: int):
        self.slots: deque[float] = deque([-math.inf] * outstanding)  # when each slot frees
        self.last_issue = -math.inf
        self.data_free = -math.inf  # next cycle the R (W) channel can move a beat


class _Load(_Clocked):
    """LinearLoad / RandomLoad: the TileReader pipeline in absolute time (module docstring).

    On a port of its own: a LinearLoad without a reference, or a RandomLoad without ``fetch``
    blocks (the others are :class:`_BlockLoad`). On a shared port: every load, its entries
    planned from its walk or input tokens (``_more``)."""

    def __init__(self, profile: RtlProfile, node: Node, random: bool = False):
        super().__init__(profile, node)
        self.random = random
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(profile.config.max_outstanding)
        self.order_depth = contract.order_queue_depth(profile.config.max_outstanding)
        self.entry = profile.load_start - 1.0  # the sequencer's last entry
        self.walk = 0  # tiles of the current walk (LinearLoad)
        self.out_pops: list[float] = []  # output beats, for the order queue's room
        self.tile_pops: list[float] = []  # tiles taken from the tile queue
        self.tiles_sent = 0
        self.entries = 0
        self.walk_start = None if node.inputs else profile.load_start
        self.idx = None if random else _walk_tiles(node)
        self.rand_k = 0
        self.ahead_entries: deque = deque()  # entries of addresses taken ahead (_take_ahead)
        self.taking_ahead = False
        # Per tile read, in order: its entry and tensor tile once known, and once its bursts are
        # issued (``_issue``) the cycle the burst generator took it and the cycle it is offered.
        self.read_entry: list[float] = []
        self.read_k: list[int] = []
        self.generator_take: list[float] = []
        self.read_ready: list[float] = []
        self.bursts_issued = 0  # of the tile being issued
        self.last_beat = 0.0  # of the last burst issued

    def on_recv(self, port: int, token: Any) -> int:
        if self.port is not None:
            self.refs.append((self.io.visible, token))
            return 0
        if self.taking_ahead:  # its node asks for it later (``_take_ahead``)
            return 0
        # On a port of its own only a RandomLoad without fetch blocks has an input here (the
        # others are ``_BlockLoad``s): an address is a command of the tile reader at once.
        self.walk_start = self.io.visible
        if is_data(token):
            k = int(token.reshape(-1)[0])
            self.rand_k = k if 0 <= k < len(self.bursts) else 0
        return 0

    def _entry_time(self, read: int | None = None) -> float:
        """Cycle of the sequencer's next entry (one per cycle; the order queue bounds it, and
        the address queue a tile ``read``'s); an address taken ahead (``_take_ahead``) has its
        entry already."""
        if self.ahead_entries:
            return self.ahead_entries.popleft()
        t = self._next_entry(self.walk_start, read)
        self.entries += 1
        self.entry = t
        return t

    def _next_entry(self, start: float | None, read: int | None = None) -> float | None:
        """The cycle of the next entry, its command there from ``start`` (None: the order queue
        is full until a token that has not left yet leaves, or the address queue until the
        burst generator takes a tile it cannot take yet). ``read``: the entry reads this tile,
        and needs the slot of the address queue that tile ``read - ADDR_QUEUE_DEPTH`` frees
        in the cycle after the generator takes it."""
        t = self.entry + 1
        if start is not None:
            t = max(t, start)
        j = self.entries - self.order_depth
        if j >= 0:
            if j >= len(self.out_pops):
                return None
            t = max(t, self.out_pops[j] + 1)
        w = -1 if read is None else read - contract.ADDR_QUEUE_DEPTH
        if w >= 0:
            while len(self.generator_take) <= w:
                if not self._issue() and len(self.generator_take) <= w:
                    return None
            t = max(t, self.generator_take[w] + contract.QUEUE_SLOT_RELEASE)
        return t

    def _issue(self) -> bool:
        """Issue the bursts of the next tile read whose entry is known, in the cycles the
        hardware does: the burst generator takes the tile (``generator_take``), then its bursts
        leave one a cycle; False if its entry, or the tile-queue slot its last burst waits for,
        is not known yet (then it goes on from there at the next call)."""
        w = len(self.read_ready)
        if w >= len(self.read_entry):
            return False
        p, axi = self.p, self.axi
        t = self.read_entry[w] + p.load_issue
        if len(self.generator_take) == w:
            self.generator_take.append(max(t - 1, axi.last_issue))
            self.bursts_issued = 0
        bursts = self.bursts[self.read_k[w]]
        j = w - _TILE_QUEUE
        while self.bursts_issued < len(bursts):
            i = self.bursts_issued
            ar = max(t + i, axi.last_issue + 1, axi.slots[0])
            if i == len(bursts) - 1 and j >= 0:  # the tile queue will have room for the tile
                if j >= len(self.tile_pops):
                    return False
                ar = max(ar, self.tile_pops[j] + 1)
            axi.last_issue = ar
            first = max(ar + p.memory_latency, axi.data_free)
            self.last_beat = first + bursts[i] - 1
            axi.data_free = self.last_beat + 1
            axi.slots.popleft()
            axi.slots.append(self.last_beat + 1)
            self.bursts_issued += 1
        self.read_ready.append(self.last_beat + 2)
        return True

    def _read_tile(self, k: int) -> float:
        """The cycle the next tile (tensor tile ``k``) is offered on the output: its entry, then
        its bursts (``_issue``; issued already if a later entry needed its generator take)."""
        self.offchip_read += self.tile_bytes
        w = self.tiles_sent
        entry = self._entry_time(w)
        if w == len(self.read_entry):  # not taken ahead
            self.read_entry.append(entry)
            self.read_k.append(k)
        while len(self.read_ready) <= w:
            if not self._issue():
                raise RuntimeError(f"rtl profile: '{self.node.name}' cannot read tile {w} yet")
        return self.read_ready[w]

    def on_send(self, port: int, token: Any) -> int:
        now = self.now
        if self.paid:  # charged by ``_take_ahead``'s send already
            self.paid = False
            return 0
        if self.port is not None:
            i = len(self.out_pops)  # this token's command (``_more``)
            w = self.cmd_tile[i]
            if w is not None:
                self.offchip_read += self.tile_bytes
                ready = self.tile_r[w] + 2  # known: ``attach`` waited for it
            else:  # a stop or done (of a walk without input: with its tile's entry)
                ready = self._entry(self.cmd_entry[i]) + (2 if self.node.inputs else 1)
            t = max(ready, self.last_push[port] + self.spacing[port])
            return max(0, math.ceil(t - now)) if t > now else 0
        if is_data(token):
            if self.random:
                ready = self._read_tile(self.rand_k)
            else:
                k = self.idx[self.walk % len(self.idx)]
                self.walk += 1
                ready = self._read_tile(k)
            t = max(ready, self.last_push[port] + self.spacing[port])
        else:
            # Stops and done leave the output stage one per cycle (stops of a walk follow their
            # tile's entry; a reference's stops are entries of their own).
            entry = self.entry
            if not isinstance(token, Stop) or self.node.inputs:
                entry = self._entry_time()
            # A RandomLoad's stop or done is a command of its own, through the order queue.
            t = max(entry + (2 if self.random else 1), self.last_push[port] + self.spacing[port])
        return max(0, math.ceil(t - now)) if t > now else 0

    # -- on a shared read port (``ReadPort``) ---------------------------------------------------
    #
    # The port is simulated in time order, so a load's requests must be known before its node
    # gets to send the tiles (it reads ahead): its commands (one per output token; ``_more``)
    # come from its walk, and from the reference or address tokens it has taken (``refs``) and
    # those waiting in its input queue, as ``LinearOffChipLoad.execute`` would turn them into
    # tokens; sequencer entries, bursts and R beats follow as above.

    def share(self, port: Port | None) -> None:
        self.port = port
        if port is None:
            return
        self.mo = self.p.config.max_outstanding
        self.refs: list[tuple[float, Any]] = []  # input tokens taken, with their visible cycle
        self.used = 0  # input tokens turned into commands
        self.cmd_tile: list[int | None] = []  # per output token: its tile (number), if any
        self.cmd_entry: list[int] = []  # per output token: the last sequencer entry so far
        self.cmd_last: list[bool] = []  # per output token: the last beat of its entry
        self.entry_start: list[float] = []  # per entry: the cycle its input token allows
        self.entry_gap: list[int] = []  # per entry: cycles at least after the entry before
        self.entry_at: list[float] = []  # per entry: its cycle (a prefix: ``_entry``)
        self.entry_pops: list[float] = []  # per entry: the cycle its last beat left
        # Per input token: when the sequencer takes it (``_take_cycle``): ``(entry, None)`` in
        # the cycle of that entry, ``(entry, visible)`` the cycle after it, once visible.
        self.in_take: list[tuple[int, float | None]] = []
        self.tile_k: list[int] = []  # per tile: the tensor tile it reads
        self.tile_entry: list[int] = []  # per tile: its entry
        self.entry_tile: dict[int, int] = {}  # per entry of a tile read: the tile
        self.tile_last_burst: list[int] = []  # per tile: its last burst (once known)
        self.burst_of: list[tuple[int, int, int, bool]] = []  # (tile, index, beats, closes it)
        self.ar: list[int] = []  # per burst: AR handshake
        self.ar_from = (-1, 0)  # (burst, the cycle it is offered from), once that is known
        self.r_last: list[int] = []  # per burst: last R beat
        self.tile_r: list[int] = []  # per tile: last R beat
        if self.node.inputs and (not self.random or self.node.fetch is not None):
            self.blocks = _Blocks(self.node)

    def attach(self, io: Any) -> None:
        super().attach(io)
        if self.port is not None:
            self._port_take_ahead(io)
        elif self.random:
            self._take_ahead(io)

    # -- a RandomLoad takes its addresses ahead ------------------------------------------------
    #
    # Its node takes an address, sends the tile, then takes the next; the hardware's tile reader
    # takes an address as a command in the cycle of its sequencer entry (one per cycle, while
    # the order queue has room) and reads while earlier tiles wait to leave. The entries were
    # always timed from the cycle each address became visible, but the address queue's slot
    # freed only when the node took it: with a queue of depth 1 the next address then arrived
    # late. So while the node waits to send, its ``send`` takes the next addresses at their
    # entries (their timing kept for the node's ``recv`` of each, in order).

    def _take_ahead(self, io: Any) -> None:
        recv, send = io.recv, io.send
        self.ahead: deque = deque()  # (token, visible) taken ahead of the node's recv

        def recv_ahead(i: int) -> Any:
            if self.ahead:
                token, io.visible = self.ahead.popleft()
                self.on_recv(i, token)
                return token
            return (yield from recv(i))

        def send_taking(j: int, token: Any) -> Any:
            cost = self.on_send(j, token)
            t, self.paid = self.now + cost, True
            ch = io.inputs[0]
            while True:
                now = self.now
                read = None
                if ch.q and is_data(ch.q[0][1]):
                    read = len(self.read_entry)
                e = self._next_entry(ch.q[0][0], read) if ch.q else None
                if e is not None and e <= now:
                    self.taking_ahead = True
                    self.ahead.append(((yield from recv(0)), io.visible))
                    self.taking_ahead = False
                    if read is not None:
                        k = int(self.ahead[-1][0].reshape(-1)[0])
                        self.read_entry.append(e)
                        self.read_k.append(k if 0 <= k < len(self.bursts) else 0)
                    self.entries += 1
                    self.entry = e
                    self.ahead_entries.append(e)
                    continue
                if now < t:
                    if not ch.q:  # an address that arrives meanwhile wakes the node
                        ch.recv_waiter = (io.proc, io.proc.epoch + 1)
                    yield ("sleep", min(x for x in (e, t) if x is not None) - now)
                    continue
                if e is None or self._room(j):
                    break  # SimIO.send waits for room from here
                # no room yet: the next address may be taken meanwhile
                frees = _frees_after(io.outputs[j], now)
                yield ("sleep", min(e, *frees) - now if frees else 1)
            yield from send(j, token)

        io.recv, io.send = recv_ahead, send_taking

    def _port_take_ahead(self, io: Any) -> None:
        """On a shared port: the node's ``send`` waits for the tile's last beat (``_wait``), then
        for the cycle its token is offered and for room; a load with an input takes its next
        input tokens meanwhile, each in the cycle its sequencer takes it (``_take_cycle``), as
        ``_take_ahead`` and ``_BlockLoad`` do for a load on a port of its own."""
        recv, send = io.recv, io.send
        ahead = bool(self.node.inputs)
        taken: deque = deque()  # taken ahead of the node's recv (``on_recv`` has seen them)

        def due() -> bool | None:
            """Whether the next input token's take has come (None: not known yet)."""
            if not ahead or not io.inputs[0].q:
                return None
            e = self._take_cycle(len(self.refs))
            return None if e is None else e <= self.now

        def take_due() -> Any:
            while due():
                taken.append((yield from recv(0)))

        def recv_ahead(i: int) -> Any:
            if taken:
                return taken.popleft()
            return (yield from recv(i))

        def next_take() -> float:
            """When to look again for the next input token's take."""
            if not ahead:
                return math.inf
            if not io.inputs[0].q:  # a token that arrives meanwhile wakes the node
                io.inputs[0].recv_waiter = (io.proc, io.proc.epoch + 1)
                return math.inf
            e = self._take_cycle(len(self.refs))  # None: it may become known any cycle
            return self.now + 1 if e is None else max(e, self.now + 1)

        def next_look() -> float:
            """When to look again for the tile or the next input token's take."""
            return min(self._tile_due(), next_take())

        def send_when_read(j: int, token: Any) -> Any:
            while True:
                yield from take_due()
                yield from self._wait(lambda: due() or self._tile_read(token), "a tile", next_look)
                if not due():
                    break
            t, self.paid = self.now + self.on_send(j, token), True
            while self.now < t:  # until the token is offered: take inputs meanwhile
                yield from take_due()
                yield ("sleep", math.ceil(min(t, next_take()) - self.now))
            yield from take_due()
            yield from wait_for_room(j)
            yield from send(j, token)

        def wait_for_room(j: int) -> Any:
            """Until output ``j`` has room, take input tokens at their cycles (a token that
            arrives meanwhile, a slot that frees or the consumer's take wakes the node)."""
            out, ch = io.outputs[j], io.inputs[0] if ahead else None
            while not self._room(j):
                if ch is None or (not ch.q and self.refs and self.refs[-1][1] is DONE):
                    return  # nothing more to take: SimIO.send waits for room
                out.send_waiter = (io.proc, io.proc.epoch + 1)
                wake = [*_frees_after(out, self.now), next_take()]
                if min(wake) < math.inf:
                    yield ("sleep", math.ceil(min(wake) - self.now))
                else:
                    yield ("park", f"room on {out.name}", ("room", out.name), "stalled_out")
                yield from take_due()

        io.recv, io.send = recv_ahead, send_when_read

    def _tile_read(self, token: Any) -> bool:
        i = len(self.out_pops)
        while i >= len(self.cmd_tile):
            if not self._more():
                raise RuntimeError(f"rtl profile: no command for token {i} of '{self.node.name}'")
        w = self.cmd_tile[i]
        if (w is None) != (not is_data(token)):
            raise RuntimeError(f"rtl profile: token {i} of '{self.node.name}' is not its command's")
        if w is None or w < len(self.tile_r):
            return True
        self.port.advance(self.now)
        return w < len(self.tile_r)

    def _tile_due(self) -> int:
        """A cycle before which the next output token's tile cannot have been read
        (``ReadPort.earliest_last_beat`` of its last burst)."""
        w = self.cmd_tile[len(self.out_pops)]
        bo = self.burst_of
        if bo and bo[-1][0] >= w:  # its bursts are known: the last one
            n = len(bo) - 1
            while bo[n][0] > w:
                n -= 1
            beats = bo[n][2]
        else:  # none requested yet: all its beats still to come
            n, beats = len(bo), sum(self.bursts[self.tile_k[w]])
        return self.port.earliest_last_beat(self.port.managers.index(self), n, beats)

    def _walk(self) -> list[Any]:
        """The tokens of a LinearLoad's one walk (without a reference), tiles as their tensor
        tile numbers."""
        tiles = iter(self.idx)
        return grid_tokens(self.node.out_shape, lambda m: [next(tiles)])

    def _command(self, token: Any, start: float, entry: bool, gap: int = 1) -> None:
        """Output token ``token``: a sequencer entry of its own, earliest at ``start`` and
        ``gap`` cycles after the entry before, or (not ``entry``) the second beat of the last."""
        if entry:
            self.entry_start.append(start)
            self.entry_gap.append(gap)
        else:
            self.cmd_last[-1] = False
        e = len(self.entry_start) - 1
        self.cmd_entry.append(e)
        self.cmd_last.append(True)
        if is_data(token):
            self.cmd_tile.append(len(self.tile_k))
            self.entry_tile[e] = len(self.tile_k)
            self.tile_k.append(token)
            self.tile_entry.append(e)
        else:
            self.cmd_tile.append(None)

    def _more(self) -> bool:
        """Commands for the next input token (without inputs: the walk); False if that token has
        not been sent yet."""
        node = self.node
        if not node.inputs:
            if self.cmd_tile:
                return False
            for t in [*self._walk(), DONE]:  # stops leave with their tile's entry
                self._command(t, self.p.load_start, not isinstance(t, Stop))
            return True
        i, taken = self.used, len(self.refs)
        queue = self.io.inputs[0].q
        if i < taken:
            visible, token = self.refs[i]
        elif i - taken < len(queue):
            visible, token = queue[i - taken]
        else:
            return False
        self.used += 1
        if self.random and node.fetch is None:
            # An address is a command at once; stops and done are commands too.
            if is_data(token):
                k = int(token.reshape(-1)[0])
                token = k if 0 <= k < len(self.bursts) else 0
            self.in_take.append((len(self.entry_start), None))
            self._command(token, visible, True)
            return True
        # The sequencer's steps (``_Blocks.steps``) as commands: a data token is taken the
        # cycle after the entry before (a cycle of its own), its block's entries follow; a stop
        # or done is taken with its entry.
        gap = 1
        for step in self.blocks.steps(token):
            if step[0] == "entry":
                _, stop, takes = step
                if takes:
                    self.in_take.append((len(self.entry_start), None))
                self._command(stop, visible, True)
            elif step[0] == "take":
                self.in_take.append((len(self.entry_start) - 1, visible))
                gap = 1 + contract.SEQUENCER_TAKE
            else:
                _, t, level = step
                # (an address out of range, a zero tile in hardware, fails in the node first)
                self._command(0 if t is None else t, visible + contract.SEQUENCER_TAKE, True, gap)
                gap = 1
                if level:
                    self._command(Stop(level), visible, False)
        return True

    def _take_cycle(self, i: int) -> float | None:
        """The cycle the sequencer takes input token ``i`` from its queue (None: not known
        yet; the port is simulated up to the engine's clock first, for the AR handshakes its
        entries may wait for)."""
        while i >= len(self.in_take):
            if not self._more():
                return None
        e, visible = self.in_take[i]
        if e < 0:
            return visible
        at = self._entry(e)
        if at is None:
            self.port.advance(self.now)
            at = self._entry(e)
        if at is None or visible is None:
            return at
        return max(at + 1, visible)

    def _entry(self, e: int) -> float | None:
        """Cycle of sequencer entry ``e`` (as ``_entry_time``), or None while the token whose
        departure frees its order-queue slot has not left, or, for a tile read, while the burst
        generator has not taken the tile whose address-queue slot it needs (in the cycle of
        the tile before's last AR at the latest, ``_generator_took``)."""
        at = self.entry_at
        while len(at) <= e:
            x = len(at)
            while x >= len(self.entry_start):
                if not self._more():
                    return None
            t = max(at[-1] + self.entry_gap[x] if at else self.p.load_start, self.entry_start[x])
            j = x - self.order_depth
            if j >= 0:
                if j >= len(self.entry_pops):
                    return None
                t = max(t, self.entry_pops[j] + contract.QUEUE_SLOT_RELEASE)
            w = self.entry_tile.get(x, -1) - contract.ADDR_QUEUE_DEPTH
            if w >= 0:
                g = self._generator_took(w)
                if g is None:
                    return None
                t = max(t, g + contract.QUEUE_SLOT_RELEASE)
            at.append(t)
        return at[e]

    def _generator_took(self, w: int) -> float | None:
        """The cycle the burst generator took tile ``w`` (None: not known yet)."""
        g = self.entry_at[self.tile_entry[w]] + self.p.load_issue - 1
        if w:
            if w - 1 >= len(self.tile_last_burst) or self.tile_last_burst[w - 1] >= len(self.ar):
                return None
            g = max(g, self.ar[self.tile_last_burst[w - 1]])
        return g

    def ar_valid(self, c: int) -> bool:
        """Whether the load offers its next burst in cycle ``c``."""
        n = len(self.ar)
        if self.ar_from[0] == n:
            return self.ar_from[1] <= c
        while n >= len(self.burst_of):
            w = self.burst_of[-1][0] + 1 if self.burst_of else 0
            while w >= len(self.tile_k):
                if not self._more():
                    return False
            bursts = self.bursts[self.tile_k[w]]
            for b, beats in enumerate(bursts):
                self.burst_of.append((w, b, beats, b == len(bursts) - 1))
            self.tile_last_burst.append(len(self.burst_of) - 1)
        w, b, _, closes = self.burst_of[n]
        e = self._entry(self.tile_entry[w])
        if e is None:
            return False
        t = e + self.p.load_issue + b
        if n:
            t = max(t, self.ar[n - 1] + 1)
        j = w - _TILE_QUEUE
        if closes and j >= 0:  # a tile's last burst waits for room in the tile queue
            if j >= len(self.tile_pops):
                return False
            t = max(t, self.tile_pops[j] + 1)
        if n >= self.mo:  # a slot frees the cycle after a burst's last beat
            if n - self.mo >= len(self.r_last):
                return False
            t = max(t, self.r_last[n - self.mo] + 1)
        self.ar_from = (n, t)  # from known cycles only: it stays so
        return t <= c

    def offered_from(self, c: int) -> float:
        """The cycle, ``c`` or later, from which the next burst is offered; infinity while that
        is not known (it then waits for something after the engine's clock)."""
        if self.ar_valid(c):
            return c
        n, t = self.ar_from
        return t if n == len(self.ar) else math.inf

    def ar_done(self, c: int) -> int:
        """The next burst's AR was taken in cycle ``c``; its beats."""
        self.ar.append(c)
        return self.burst_of[len(self.ar) - 1][2]

    def r_ready(self, n: int, c: int) -> bool:
        """``rready`` for the last beat of burst ``n`` in cycle ``c``: always, since a tile's
        last burst is requested only once the tile queue will have room (``ar_valid``)."""
        return True

    def r_done(self, n: int, c: int) -> None:
        self.r_last.append(c)
        if self.burst_of[n][3]:
            self.tile_r.append(c)

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        self.last_push[port] = now
        if self.port is not None and self.cmd_last[len(self.out_pops)]:
            self.entry_pops.append(now)
        self.out_pops.append(now)
        if is_data(token):
            self.tile_pops.append(now)
            self.tiles_sent += 1


class _TakesEarly(_Clocked):
    """A block that takes input tokens while earlier results wait to leave, unlike its node.

    The interpreter's Bufferize sends a buffer reference (and the stop after it) before it takes
    the next element; the hardware's output register holds them while its input goes on. The
    interpreter's Streamify takes a driving token only once it has sent the block before; the
    hardware's sequencer takes it as soon as its walk is done (the output queue holds the rest).
    The node's ``send`` is wrapped (``attach``) to take input tokens at the hardware's cycles
    while it waits to send (for its cycle, or for room), and its ``recv`` returns those first:
    the input queues' slots free when they do in hardware. A subclass says when the hardware
    takes the next input token (``_next_take``) and sends the next token (``_beat_time``).

    While it waits, the block looks again every cycle, unless ``_next_take`` depends only on
    its input queues (``input_driven``): then it sleeps until the next cycle something it knows
    of happens (its beat's cycle, a known take, a slot of its output queue freeing) or an input
    token arrives or its consumer takes a token, whichever is first.
    """

    #: Whether the next take depends only on the tokens sent to the block so far (not on
    #: another node's state, as a Bufferize's on its reader's releases).
    input_driven = False

    def _next_take(self) -> tuple[int, int | None]:
        """The port and cycle of the next input token the hardware takes before the node asks
        for it (None: not known now)."""
        raise NotImplementedError

    def _more_inputs(self) -> bool:
        """Whether the hardware may still take an input token before the node asks for it."""
        raise NotImplementedError

    def _beat_time(self, port: int, token: Any) -> float | None:
        """The first cycle ``token`` can leave on output ``port``, room permitting (None: not
        known yet, as a write's B response on a shared port before the port simulated it)."""
        raise NotImplementedError

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send, has = io.recv, io.send, io.has
        self.early: list[deque] = [deque() for _ in self.node.inputs]
        self.offered = has  # whether input i's queue offers a token now (not taken early)

        def recv_early(i: int) -> Any:
            if self.early[i]:
                return self.early[i].popleft()
            return (yield from recv(i))

        def has_early(i: int) -> bool:
            return bool(self.early[i]) or has(i)

        def send_taking(j: int, token: Any) -> Any:
            t = self._beat_time(j, token)
            polled = self.now
            while True:
                now = self.now
                if t is None:  # not known yet: looked for again every cycle
                    t = self._beat_time(j, token)
                port, c = self._next_take()
                if c is not None and c <= (now if t is None else max(now, t - 1)):
                    if c > now:
                        yield ("sleep", c - now)
                    self.early[port].append((yield from recv(port)))
                    continue
                more = c is None and self._more_inputs()  # a take may become known
                if t is None:
                    yield ("sleep", 1)
                    continue
                if t > now:
                    if more and self.input_driven:
                        self._wake_on_inputs()
                        more = False
                    yield ("sleep", 1 if more else t - now)
                    continue
                if self._room(j) or (not more and c is None):
                    break
                if self.input_driven:
                    yield from self._wait_for_room(j, c, more)
                    continue
                if self._stuck(polled):
                    break
                yield ("sleep", 1)  # no room yet: the hardware may take an input meanwhile
            self.p._buffer_waiting.discard(self.io.proc.idx)
            yield from send(j, token)

        io.recv, io.send, io.has = recv_early, send_taking, has_early

    def _beat_cost(self, port: int, token: Any) -> int:
        """Cycles from now to ``token``'s beat time (0 once there): the subclasses' ``on_send``."""
        t = self._beat_time(port, token)
        return max(0, math.ceil(t - self.now)) if t > self.now else 0

    def _wait_for_room(self, j: int, c: int | None, more: bool) -> Any:
        """Sleep until output ``j`` may have room (a slot frees, or the consumer takes a token)
        or an input may be taken (at ``c``; with ``more``, once a token arrives)."""
        io, now = self.io, self.now
        ch = io.outputs[j]
        ch.send_waiter = (io.proc, io.proc.epoch + 1)
        if more:
            self._wake_on_inputs()
        times = _frees_after(ch, now)
        if c is not None:
            times.append(c)
        if times:
            yield ("sleep", min(times) - now)
        else:
            yield ("park", f"room on {ch.name}", ("room", ch.name))

    def _stuck(self, since: float) -> bool:
        """Whether only waiting nodes are left (for ``settle`` cycles, no shared port moving): then
        the node waits for room as the engine does, which reports the deadlock."""
        waiting = self.p._buffer_waiting
        waiting.add(self.io.proc.idx)
        return self.p.quiet_since(since, self.now) and self.io.engine.only_waiting(waiting)


class _Store(_Clocked):
    """LinearStore: AW, W and B of every tile in absolute time (module docstring)."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(profile.config.max_outstanding)
        self.k = 0
        self.last_take = -math.inf
        self.w_last: list[float] = []  # last W beat of every tile (its tile-queue slot frees)
        self.last_b = -math.inf

    def before_recv(self, port: int) -> int:
        t = max(self.last_take + 1, self._tile_room(self.io.head(port)))
        return max(0, math.ceil(t - self.now)) if t > self.now else 0

    def _tile_room(self, token: Any) -> float | None:
        """The first cycle the tile queue takes ``token`` (None: a write before it that the shared
        port has not simulated yet frees the slot)."""
        if not is_data(token) or self.k < _TILE_QUEUE:
            return -math.inf
        i = self.k - _TILE_QUEUE
        if i >= len(self.w_last) and self.port is not None:
            self.port.advance(self.now)
        return self.w_last[i] + 1 if i < len(self.w_last) else None

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        self.last_take = now
        if token is DONE:
            return max(0, math.ceil(max(self.last_b + self.p.done_latency, now) - now))
        if not is_data(token):
            return 0
        self._write(self.k % len(self.bursts))
        return 0

    def _write(self, index: int) -> float | None:
        """AW, W and B of tile ``index`` taken now; the cycle of its last B response (None on a
        shared port: the port simulates them later, ``aw_done``)."""
        p, axi = self.p, self.axi
        bursts = self.bursts[index]
        self.offchip_written += self.tile_bytes
        self.k += 1
        if self.port is not None:
            w = len(self.takes)
            self.takes.append(self.now)
            self.burst_of += [(w, b, n, b == len(bursts) - 1) for b, n in enumerate(bursts)]
            return None
        t = self.now + p.store_issue
        last = t
        for i, beats in enumerate(bursts):
            aw = max(t + i, axi.last_issue + 1, axi.slots[0])
            axi.last_issue = aw
            first = max(aw + p.aw_to_w, axi.data_free)
            last = first + beats - 1
            axi.data_free = last + 1
            b = last + p.write_response
            self.last_b = max(self.last_b, b)
            axi.slots.popleft()
            axi.slots.append(b + 1)
        self.w_last.append(last)
        return b

    # -- on a shared write port (``WritePort``) -------------------------------------------------
    #
    # A take registers the tile's bursts (``_write``); the port issues them in time order. The
    # node waits (``attach``) before it takes a tile that needs a slot of the tile queue freed
    # by a write the port has not simulated yet, or its done token while a write is pending.

    data_port = 0

    def share(self, port: Port | None) -> None:
        self.port = port
        if port is None:
            return
        self.mo = self.p.config.max_outstanding
        self.takes: list[float] = []  # per tile: the cycle it was taken
        self.burst_of: list[tuple[int, int, int, bool]] = []  # (tile, index, beats, closes it)
        self.aw: list[int] = []  # per burst: AW handshake
        self.aw_from = (-1, 0)  # (burst, the cycle it is offered from), once that is known
        self.b_resp: list[int] = []  # per burst: B response
        self.tile_b: list[int] = []  # per tile: its last B response

    def attach(self, io: Any) -> None:
        super().attach(io)
        if self.port is not None:
            recv, data = io.recv, self.data_port

            def recv_when_written(i: int) -> Any:
                if i == data:
                    token = yield from io.peek(i)
                    yield from self._wait(lambda: self._written(token), "a write")
                return (yield from recv(i))

            io.recv = recv_when_written

    def _written(self, token: Any) -> bool:
        """Whether the port has simulated the writes that taking ``token`` depends on: the one
        that frees its tile-queue slot, and for done all of them."""
        if token is not DONE:
            return self._tile_room(token) is not None
        if len(self.aw) < len(self.burst_of):
            self.port.advance(self.now)
        return len(self.aw) == len(self.burst_of)

    def aw_valid(self, c: int) -> bool:
        """Whether the store offers its next burst in cycle ``c``."""
        n = len(self.aw)
        if self.aw_from[0] == n:
            return self.aw_from[1] <= c
        if n >= len(self.burst_of):
            return False
        w, b, _, _ = self.burst_of[n]
        t = self.takes[w] + self.p.store_issue + b
        if n:
            t = max(t, self.aw[n - 1] + 1)
        if n >= self.mo:  # a slot frees the cycle after a burst's B response
            t = max(t, self.b_resp[n - self.mo] + 1)
        self.aw_from = (n, t)  # from known cycles only: it stays so
        return t <= c

    def offered_from(self, c: int) -> float:
        """The cycle, ``c`` or later, from which the next burst is offered; infinity while that
        is not known (no tile taken for it yet)."""
        if self.aw_valid(c):
            return c
        n, t = self.aw_from
        return t if n == len(self.aw) else math.inf

    def aw_beats(self) -> int:
        return self.burst_of[len(self.aw)][2]

    def aw_done(self, c: int, w_last: int, b: int) -> None:
        """The next burst's AW was taken in cycle ``c``; its last W beat and its B response."""
        n = len(self.aw)
        self.aw.append(c)
        self.b_resp.append(b)
        self.last_b = max(self.last_b, b)
        if self.burst_of[n][3]:
            self.w_last.append(w_last)
            self.tile_b.append(b)


class _RandomStore(_TakesEarly, _Store):
    """RandomStore: LinearStore's write path for the tile at each address, and its ack stream.

    The hardware takes an address with its tile (or stop, or done) in one cycle, at most one
    take per cycle, while earlier writes are still under way. Every take is an entry of the
    writer's order queue (``contract.order_queue_depth`` entries): a take waits for the slot of
    the entry that many takes back, free the cycle after that entry's token left. The entries
    leave in order as the ack stream, one per cycle (every other cycle into a queue of depth 1
    or 2), room permitting: an ack ``ACK_AFTER_B`` cycles after its tile's last B response at
    the earliest, a stop or done ``queue_latency`` of the order queue after its take. The node
    sends each ack before it takes the next tile, so it takes the hardware's tiles while it
    waits to send (:class:`_TakesEarly`): whoever reads the acks sees them when the
    hardware's reader would.
    """

    # The next take depends on the input queues only, except for the tile queue's room on a
    # shared port, which the port knows once it has simulated the writes (``share``).
    input_driven = True

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.addr = 0
        self.order_depth = contract.order_queue_depth(profile.config.max_outstanding)
        self.order_latency = contract.queue_latency(self.order_depth)
        # Per order entry (ack-stream token), the earliest cycle the hardware offers it:
        # (None, cycle), or (tile, None) for an ack ``ACK_AFTER_B`` after the last B response of
        # this store's ``tile``-th tile on a shared port (known once the port has simulated it).
        self.marks: list[tuple[int | None, float | None]] = []
        self.pops: list[float] = []  # per entry that left: the cycle its token did
        self.half = False  # an address was taken; its wdata token goes in the same cycle
        self.ended = False  # done was taken
        self.waits_on = ""  # why the next take is not known ("inputs", "port", "order")

    def share(self, port: Port | None) -> None:
        super().share(port)
        self.input_driven = port is None

    # -- the takes -------------------------------------------------------------------------------

    def before_recv(self, port: int) -> int | WaitFor:
        if port == 0 and not self.offered(1):
            return WaitFor(1)  # address and data are taken together
        return super().before_recv(1) if port == 1 else 0

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 0:
            self.half = True
            if is_data(token):
                k = int(token.reshape(-1)[0])
                self.addr = k if 0 <= k < len(self.bursts) else 0
            return 0
        self.half = False
        self.last_take = now
        if is_data(token):
            tile = self.k
            b = self._write(self.addr)
            self._enter(now, tile, b)
        else:
            self.ended = token is DONE
            self._enter(now)
        return 0

    def _enter(self, now: float, tile: int | None = None, b: float | None = None) -> None:
        """An order entry taken ``now``: a write's ack (its ``tile`` and last B response, None
        while a shared port has not simulated it), or without ``tile`` a token that waits for
        no write."""
        if tile is None:
            self.marks.append((None, now + self.order_latency))
        else:
            self.marks.append((tile, None) if b is None else (None, b + contract.ACK_AFTER_B))

    def _order_room(self) -> float | None:
        """The first cycle the next order entry finds a slot (None: its slot's token has not
        left yet)."""
        i = len(self.marks) - self.order_depth
        if i < 0:
            return -math.inf
        return self.pops[i] + contract.QUEUE_SLOT_RELEASE if i < len(self.pops) else None

    def _written(self, token: Any) -> bool:
        return self._tile_room(token) is not None  # done waits for no write

    def _next_take(self) -> tuple[int, int | None]:
        if self.half:
            return 1, math.ceil(self.now)
        self.waits_on = ""
        if self.ended:
            return 0, None
        q0, q1 = (ch.q for ch in self.io.inputs)
        if not q0 or not q1:
            self.waits_on = "inputs"
            return 0, None
        _, t = self._take_cycle(
            0, (self._order_room(), "order"), (self._tile_room(q1[0][1]), "port")
        )
        return 0, None if t is None else math.ceil(max(t, q0[0][0], q1[0][0]))

    def _take_cycle(self, port: int, *after: tuple[float | None, str]) -> tuple[int, float | None]:
        """``port`` and the first cycle after the last take and every cycle of ``after``, pairs
        of a cycle and what ``waits_on`` says while that cycle is not known (None)."""
        t = self.last_take + 1
        for at, why in after:
            if at is None:
                self.waits_on = why
                return port, None
            t = max(t, at)
        return port, t

    def _more_inputs(self) -> bool:
        return self.waits_on in ("inputs", "port")

    # -- the acks --------------------------------------------------------------------------------

    def _beat_time(self, port: int, token: Any) -> float | None:
        tile, at = self.marks[len(self.pops)]
        if tile is not None:
            if tile >= len(self.tile_b):
                self.port.advance(self.now)
            if tile >= len(self.tile_b):
                return None
            at = self.tile_b[tile] + contract.ACK_AFTER_B
        return max(at, self.last_push[port] + self.spacing[port])

    def sent(self, port: int, token: Any) -> None:
        super().sent(port, token)
        self.pops.append(self.now)

    data_port = 1


class _BlockLoad(_Clocked):
    """A load whose sequencer walks a block per input token, on a port of its own: a
    RandomLoad with ``fetch`` blocks (the block of each address) or a LinearLoad with a
    reference (its walk per reference element). Its sequencer, TileReader and output stage in
    absolute time.

    The sequencer (``memory/sequence.py``) acts at most once a cycle: the take of a data token
    that starts a block (a cycle of its own, :data:`~step_hw.contract.SEQUENCER_TAKE`), then
    one ``ELEM`` entry per tile of the block; a ``STOP`` entry for an input stop (merging
    the held closing ``S_k``), for a held ``S_k`` that a data token or done releases, and a
    ``DONE`` entry. An entry waits for room in the order queue (``contract.order_queue_depth``; a slot
    frees the cycle after its entry's last beat left) and, for a read, in the address queue
    (``contract.ADDR_QUEUE_DEPTH``; a slot frees the cycle after the burst generator took it).
    The burst generator takes a tile ``LOAD_ISSUE - 1`` cycles after its entry, or in the cycle
    of the previous tile's last AR; bursts, R beats and the tile queue as :class:`_Load`. An
    entry's tile (a zero tile: no read) or stop is offered when the order queue offers it
    (``queue_latency``) or its tile was assembled; the stop after a tile in the same entry (a
    stop inside the block, the closing ``S_k`` of a block driven by a rank-0 stream) the cycle
    after the tile.

    The sequencer runs ahead of the outputs: it takes the next input token from its queue in
    the cycle it gets to it, while the block before still leaves. So the input tokens are
    planned as they become visible (``_plan``), the entries worked out as far as the beats
    already sent allow (``_advance``), and each token taken from its queue in its cycle, also
    while the node still sends the block before (``attach``: the node's ``recv`` then returns
    it).
    """

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        mo = profile.config.max_outstanding
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(mo)
        self.order_depth = contract.order_queue_depth(mo)
        self.order_latency = contract.queue_latency(self.order_depth)
        self.tile_latency = contract.queue_latency(_TILE_QUEUE)
        self.blocks = _Blocks(node)
        self.seq_t = 0.0  # the first cycle the sequencer may act
        self.plan: deque[tuple] = deque()  # per output beat (and take): what the hardware does
        self.beats: deque[tuple] = deque()  # per output beat worked out: (ready, pops, read)
        self.takes: deque[float | None] = deque()  # the token planned, not taken: its take
        self.entries = 0
        self.order_pop: list[float] = []  # per entry: the cycle its last beat left
        self.read_entry: list[float] = []  # per read tile: its entry
        self.read_k: list[int] = []  # per read tile: the tensor tile
        self.gen_take: list[float] = []  # per read tile: the burst generator's take
        self.gen_free = -math.inf  # the previous tile's last AR: the generator takes the next
        self.ar = -math.inf  # the last AR issued
        self.bursts_issued = 0  # of the tile being issued
        self.last_beat = -math.inf
        self.read_ready: list[float] = []  # per read tile: the cycle it is offered
        self.tile_pops: list[float] = []  # per read tile: its departure from the tile queue
        self.pops: bool = False  # the beat being sent completes an entry
        self.read = False  # the beat being sent is a tile read from memory

    # -- the sequencer -------------------------------------------------------------------------

    def _plan(self, token: Any, v: float) -> None:
        """The sequencer's steps for input token ``token``, visible from cycle ``v``; the step
        that takes it from its queue is marked."""
        plan = self.plan
        self.takes.append(None)
        for step in self.blocks.steps(token):  # (``_Blocks.steps``)
            if step[0] == "entry":
                plan.append(("entry", v, False, None, False, step[2]))
            elif step[0] == "take":
                plan.append(("take", v))
            else:
                _, k, level = step
                plan.append(("entry", v, True, k, level > 0, False))
                if level:
                    plan.append(("beat2",))

    def _took(self, t: float) -> None:
        self.takes[self.takes.index(None)] = t

    def _advance(self) -> None:
        """Work out the plan's steps in order, as far as the beats sent so far allow."""
        plan = self.plan
        while plan:
            step = plan[0]
            if step[0] == "take":
                self._took(max(step[1], self.seq_t))
                self.seq_t = max(step[1], self.seq_t) + contract.SEQUENCER_TAKE
            elif step[0] == "beat2":
                self.beats.append((-math.inf, True, None))
            else:
                _, v, elem, k, two, takes = step
                x = self.entries - self.order_depth
                if x >= 0 and x >= len(self.order_pop):
                    return  # the order queue is full until a beat not sent yet leaves
                w = len(self.read_entry) - contract.ADDR_QUEUE_DEPTH
                if k is not None and w >= 0:
                    while len(self.gen_take) <= w and self._issue():
                        pass
                    if len(self.gen_take) <= w:
                        return  # the address queue is full until the generator takes a tile
                c = self._emit(v, k is not None)
                if takes:
                    self._took(c)
                if k is None:
                    self.beats.append((c + self.order_latency, not (elem and two), None))
                else:
                    self.offchip_read += self.tile_bytes
                    self.beats.append((None, not (elem and two), len(self.read_entry)))
                    self.read_entry.append(c)
                    self.read_k.append(k)
            plan.popleft()

    def _emit(self, earliest: float, read: bool) -> float:
        """The cycle of the sequencer's next entry (``read``: a tile read, which needs room in
        the address queue)."""
        c = max(earliest, self.seq_t)
        x, w = self.entries, len(self.read_entry)
        if x >= self.order_depth:
            c = max(c, self.order_pop[x - self.order_depth] + contract.QUEUE_SLOT_RELEASE)
        if read and w >= contract.ADDR_QUEUE_DEPTH:
            c = max(c, self.gen_take[w - contract.ADDR_QUEUE_DEPTH] + contract.QUEUE_SLOT_RELEASE)
        self.entries += 1
        self.seq_t = c + 1
        return c

    def _issue(self) -> bool:
        """Issue the bursts of the next tile read whose entry is known: the burst generator
        takes the tile ``LOAD_ISSUE - 1`` cycles after its entry or in the cycle of the previous
        tile's last AR (``gen_take``), then its bursts leave one a cycle; False if its entry, or
        the tile-queue slot its last burst waits for, is not known yet (it goes on from there at
        the next call)."""
        w = len(self.read_ready)
        if w >= len(self.read_entry):
            return False
        p, axi = self.p, self.axi
        if len(self.gen_take) == w:
            self.gen_take.append(max(self.read_entry[w] + p.load_issue - 1, self.gen_free))
            self.ar, self.bursts_issued = self.gen_take[w], 0
        bursts = self.bursts[self.read_k[w]]
        while self.bursts_issued < len(bursts):
            i = self.bursts_issued
            ar = max(self.ar + 1, axi.slots[0])
            if i == len(bursts) - 1 and w >= _TILE_QUEUE:  # room in the tile queue
                if w - _TILE_QUEUE >= len(self.tile_pops):
                    return False
                ar = max(ar, self.tile_pops[w - _TILE_QUEUE] + 1)
            first = max(ar + p.memory_latency, axi.data_free)
            self.last_beat = first + bursts[i] - 1
            axi.data_free = self.last_beat + 1
            axi.slots.popleft()
            axi.slots.append(self.last_beat + 1)
            self.ar = ar
            self.bursts_issued += 1
        self.gen_free = self.ar
        self.read_ready.append(self.last_beat + self.tile_latency)
        return True

    # -- the node ------------------------------------------------------------------------------

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send = io.recv, io.send
        ahead: deque = deque()  # (token, visible) taken while the node sent the block before

        def take_due() -> float | None:
            """The cycle the head of the input queue is taken (None: not known yet); plans it
            once it is visible."""
            ch = io.inputs[0]
            if not self.takes and ch.q and ch.q[0][0] <= self.now:
                self._plan(ch.q[0][1], ch.q[0][0])
            if not self.takes:
                return None
            self._advance()
            return self.takes[0]

        def take() -> Any:
            self.takes.popleft()
            ahead.append(((yield from recv(0)), io.visible))

        def recv_planned(i: int) -> Any:
            if not ahead:
                yield from io.peek(0)
                t = take_due()
                if t > self.now:
                    yield ("sleep", math.ceil(t - self.now))
                yield from take()
            token, io.visible = ahead.popleft()
            return token

        def send_taking(j: int, token: Any) -> Any:
            t, self.paid = self.now + self.on_send(j, token), True
            ch = io.inputs[0]
            while True:
                now = self.now
                due = take_due()
                if due is not None and due <= now:
                    yield from take()
                    continue
                # an address that becomes visible meanwhile is planned then
                soon = [x for x in (due, ch.q[0][0] if ch.q and not self.takes else None)
                        if x is not None and x > now]  # fmt: skip
                if now >= t and (self._room(j) or not (soon or not ch.q)):
                    break  # SimIO.send waits for room from here
                if not ch.q:  # an address that arrives meanwhile wakes the node
                    ch.recv_waiter = (io.proc, io.proc.epoch + 1)
                if now < t:
                    yield ("sleep", math.ceil(min([t, *soon]) - now))
                    continue
                out = io.outputs[j]
                out.send_waiter = (io.proc, io.proc.epoch + 1)  # the consumer's take wakes it
                wake = [*soon, *_frees_after(out, now)]
                if wake:
                    yield ("sleep", math.ceil(min(wake) - now))
                else:
                    yield ("park", f"room on {out.name}", ("room", out.name), "stalled_out")
            yield from send(j, token)

        io.recv, io.send = recv_planned, send_taking

    def on_send(self, port: int, token: Any) -> int:
        if self.paid:  # charged by ``send_taking`` already
            self.paid = False
            return 0
        self._advance()
        ready, self.pops, w = self.beats.popleft()
        self.read = w is not None
        if self.read:
            while len(self.read_ready) <= w:
                if not self._issue():
                    raise RuntimeError(f"rtl profile: '{self.node.name}' cannot read tile {w} yet")
            ready = self.read_ready[w]
        t = max(ready, self.last_push[port] + self.spacing[port])
        return max(0, math.ceil(t - self.now)) if t > self.now else 0

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        self.last_push[port] = now
        if self.pops:
            self.order_pop.append(now)
        if self.read:
            self.tile_pops.append(now)
            self.read = False


class _BlockStore(_RandomStore):
    """RandomStore with ``fetch`` blocks: the address alone, then the block's tokens from
    ``wdata``, one take per cycle (stores as :class:`_Store`; an out-of-range block writes
    nothing); ``waddr``'s stop announced by the block's closing stop is taken alone, another
    with ``wdata``'s. The order entries and acks are :class:`_RandomStore`'s, one per block (at
    the take of its last tile: after the block's last B response, or a false ack through the
    order queue) and one per ``waddr`` stop and done; the block's other tiles and stops take
    no entry.
    """

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.nr = node.fetch[0]
        self.n = node.fetch[0] * node.fetch[1]
        self.first: int | None = None  # the current block's first tile (None: out of range)
        self.k_in = 0  # tiles of the current block taken
        self.left = 0  # wdata tokens of the current block not taken yet (tiles, S1s, its close)
        self.merged = 0  # the closing stop stood for waddr's S_merged (0: none)
        self.pair: float | None = None  # the cycle a waddr stop or done was taken (with wdata's)

    def _take_at(self, port: int, token: Any) -> tuple[int, float | None]:
        """The first cycle the hardware takes ``token``, the head of ``port`` (visibility
        aside), as ``_take_cycle``."""
        if port == 0:
            if is_data(token):
                return self._take_cycle(0)
            return self._take_cycle(0, (self._order_room(), "order"))  # a stop's entry
        if self.pair is not None:
            return 1, self.pair  # with waddr's stop or done
        after = []
        if is_data(token):
            after.append((self._tile_room(token), "port"))
            if self.k_in == self.n - 1:  # the block's last tile: its ack's entry
                after.append((self._order_room(), "order"))
        return self._take_cycle(1, *after)

    def before_recv(self, port: int) -> int | WaitFor:
        head = self.io.head(port)
        if port == 0 and not is_data(head) and not self.merged and not self.offered(1):
            return WaitFor(1)  # taken with wdata's stop or done
        _, t = self._take_at(port, head)
        if t is None:  # the node takes a token only once what it waits for is known
            raise RuntimeError(f"rtl profile: '{self.node.name}' takes before {self.waits_on}")
        return max(0, math.ceil(t - self.now)) if t > self.now else 0

    def _next_take(self) -> tuple[int, int | None]:
        self.waits_on = ""
        if self.ended:
            return 0, None
        port = 1 if self.left or self.pair is not None else 0
        q = self.io.inputs[port].q
        visible = q[0][0] if q else None
        if q and port == 0 and not is_data(q[0][1]) and not self.merged:
            q1 = self.io.inputs[1].q
            visible = max(visible, q1[0][0]) if q1 else None
        if visible is None:
            self.waits_on = "inputs"
            return port, None
        port, t = self._take_at(port, q[0][1])
        return port, None if t is None else math.ceil(max(t, visible))

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 0:
            if is_data(token):
                self.last_take = now
                a = int(token.reshape(-1)[0])
                self.first = a * self.n if 0 <= a < self.node.n_addresses else None
                self.k_in = 0
                self.left = self.n + self.nr  # the tiles, the S1s between rows, the close
            elif self.merged:
                self.last_take = now
                self.merged = 0
                self._enter(now)
            else:
                self.pair = now
            return 0
        self.last_take = now
        if self.left:
            self.left -= 1
        if self.pair is not None:
            self.pair = None
            self.ended = token is DONE
            self._enter(now)
        elif is_data(token):
            b = None
            if self.first is not None:
                b = self._write(self.first + self.k_in)
            self.k_in += 1
            if self.k_in == self.n:
                if self.first is None:  # a false ack, through the order queue
                    self._enter(now)
                else:  # after the block's last B (on a shared port: once the port knows it)
                    self._enter(now, self.k - 1, b)
        elif isinstance(token, Stop) and token.level >= 2:
            self.merged = token.level - 2
        return 0

    def _tile_room(self, token: Any) -> float | None:
        if self.first is None:
            return -math.inf  # an out-of-range block writes nothing
        return super()._tile_room(token)


# -- on-chip buffers (``step_hw/memory/buffer.py``, ``sequence.py``) -----------------------------


class _Expand(_TakesEarly):
    """Expand (``step_hw.shape.Expand``): an element register, a walk of the reference into the
    output register, and the element's closing stop dropped meanwhile.

    The block loads an element (``load``) once its last closing stop was dropped and the walk
    before has ended (in the walk's last cycle at the earliest); it drops the element's closing
    stop from the cycle after the load (``dropped``), in parallel with the walk; it walks a
    reference token per cycle from the cycle after the load, each when the output register is
    free (the cycle its last token left), the walk ending with a stop that closes a chunk
    (``walk_end``); done takes both done tokens together, after the walk and the drop, into a
    free register. A token written into the register leaves the cycle after, room permitting.
    The interpreter's node takes the element's closing stop whenever it is there while it walks
    (``before_recv`` holds it to the cycle the RTL drops it), and the next element only once it
    has sent the walk's last token: that one is taken early, in the cycle the RTL loads it, and
    so is a stop that arrives while the node waits to send (:class:`_TakesEarly`)."""

    input_driven = True

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.rank = node.rank
        self.load = -math.inf  # the cycle the current element was loaded
        self.dropped = -math.inf  # the cycle its closing stop was dropped (inf: not yet)
        self.walk_end = -math.inf  # the cycle the last walk's closing stop was taken
        self.walking = False  # a walk is under way (``have``)
        self.last_walk = -math.inf  # the cycle of the last reference token's take
        self.freed = -math.inf  # the cycle the output register last freed (its token left)
        self.done_at = None  # the cycle both done tokens are taken

    def _take_time(self, port: int) -> float | WaitFor | None:
        """The cycle the RTL takes the head of input ``port`` (None: nothing there)."""
        q = self.io.inputs[port].q
        if not q:
            return None
        visible, token = q[0]
        if port == 1:
            if token is DONE and self.done_at is not None:
                return self.done_at
            return max(visible, self.load + 1, self.freed, self.last_walk + 1)
        if is_data(token):
            return max(visible, self.dropped + 1, self.walk_end)
        if token is not DONE:  # the element's closing stop
            return max(visible, self.load + 1)
        ref = self.io.inputs[1].q
        if not ref:
            return WaitFor(1)
        return max(visible, ref[0][0], self.dropped + 1, self.walk_end + 1, self.freed)

    def _next_take(self) -> tuple[int, int | None]:
        """The next element once the walk before has ended, and its closing stop once it is
        loaded: the RTL takes them while the walk's last tokens still leave."""
        q = self.io.inputs[0].q
        if not q or q[0][1] is DONE:
            return 0, None
        if is_data(q[0][1]) and (self.walking or self.dropped == math.inf):
            return 0, None  # the walk goes on, or the element's stop is still to be dropped
        if not is_data(q[0][1]) and self.dropped < math.inf:
            return 0, None  # no element loaded whose stop it could be
        t = self._take_time(0)
        return 0, None if isinstance(t, WaitFor) or t is None else math.ceil(t)

    def _more_inputs(self) -> bool:
        return self.done_at is None

    def _beat_time(self, port: int, token: Any) -> float:
        source = self.done_at if token is DONE else self.last_walk
        return max(source + 1, self.last_push[port] + self.spacing[port])

    def before_recv(self, port: int) -> int | WaitFor:
        t = self._take_time(port)
        if isinstance(t, WaitFor):
            return t
        return max(0, math.ceil(t - self.now)) if t is not None and t > self.now else 0

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 1:
            if token is not DONE:
                self.last_walk = now
                if isinstance(token, Stop) and partition_closes_chunk(token.level, self.rank):
                    self.walk_end, self.walking = now, False
        elif is_data(token):
            self.load, self.dropped, self.walking = now, math.inf, True
        elif token is DONE:
            self.done_at = now
        else:
            self.dropped = now
        return 0

    def on_send(self, port: int, token: Any) -> int:
        return self._beat_cost(port, token)

    def sent(self, port: int, token: Any) -> None:
        super().sent(port, token)
        self.freed = self.now


def _static_shape(shape: Any) -> tuple[int, ...] | None:
    shape = tuple(shape)
    return shape if all(isinstance(d, int) and not isinstance(d, bool) for d in shape) else None


#: An element of a walk whose value does not matter (only the stops do).
_CELL = 0


def _cell(index: tuple[int, ...]) -> list[Any]:
    return [_CELL]


def _buffer_words(profile: RtlProfile, node: Node) -> int:
    """Memory words per element of the buffers ``node`` (a Bufferize or Streamify) moves."""
    elem = node.inputs[0].elem if isinstance(node, ops.Bufferize) else node.inputs[0].elem.tile
    fmt = contract.TokenFormat.for_elem(elem, profile.config)
    return contract.buffer_words(fmt, profile.config.mem_port_elems)


class _Streamify(_TakesEarly):
    """Streamify: its sequencer, memory reads and credit-managed output queue in absolute time.

    The sequencer (``memory/sequence.py``) is replayed as the hardware runs it, one action per
    cycle at most: taking a driving token that starts a block (a cycle of its own), and entries
    (``ELEM``, ``STOP``, ``DONE``), each taken (committed) when the output queue has credit,
    an element after its ``words`` memory reads (the reads before the last need no credit). A
    committed entry enters the output queue ``BUFFER_READ_LATENCY`` cycles later and leaves as
    one beat, or two (an element and the stop after it). The replay goes as far as what is known:
    the input tokens sent so far (with the cycles they became visible) and the beats that left
    (credit). The output beats are the node's tokens; the slot of a buffer is released when the
    last entry of its reads commits (``release``), which Bufferize waits for.
    """

    input_driven = True

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.words = _buffer_words(profile, node)
        self.ref = len(node.inputs) > 1
        read = tuple(node.read_shape) if node.affine else tuple(node.read_dims)
        if self.ref:
            self.c = node.ref_inner
            self.repeat, self.eager = (), node.inputs[1].rank == 0
        else:
            self.c = None
            self.repeat, self.eager = tuple(node.repeat), node.inputs[0].rank == 0
        self.k = len(self.repeat) + len(read)
        shape = _static_shape((*self.repeat, *read))
        # A static buffer's reads are the same for every buffer; a dynamic one's per buffer.
        self.static_walk = None if shape is None else self._walk_of(grid_tokens(shape, _cell))
        self.depth = contract.STREAMIFY_QUEUE_DEPTH
        self.queue_latency = contract.BUFFER_READ_LATENCY + contract.queue_latency(self.depth)
        # the replay: the sequencer's state and the cycle of its next action
        self.state, self.t, self.pos, self.pending = "IDLE", 0, 0, False
        self.walk: list[tuple[str, int]] | None = None  # the block being walked
        self.buffer_walk: list[tuple[str, int]] | None = None  # with a reference: the buffer's
        self.walks: dict[int, list[tuple[str, int]] | None] = {}  # per buffer-stream token
        self.taken = [0] * len(node.inputs)  # input tokens the hardware has taken, per port
        self.takes: list[list[int]] = [[] for _ in node.inputs]  # their cycles
        self.got: list[list[tuple[float, Any]]] = [[] for _ in node.inputs]  # the node's takes
        self.commit: list[int] = []  # per entry
        self.beats: list[int] = []  # per entry: 1, or 2 for an element with a stop after it
        self.pops: list[float] = []  # per entry: the cycle its last beat left
        self.releases: list[int] = []
        self.entry_of: list[tuple[int, int]] = []  # per output token: (entry, beat)
        self.sent_tokens = 0
        # The Bufferize waiting for a release this replay does not know yet: woken when the
        # replay learns more (``sent``; with a reference stream it looks every cycle instead).
        self.watcher: tuple[Any, int] | None = None

    # -- what is known ---------------------------------------------------------------------------

    def _input(self, port: int) -> tuple[float, Any] | None:
        """The next input token the hardware takes on ``port`` with its visible cycle, if sent."""
        k, got = self.taken[port], self.got[port]
        if k < len(got):
            return got[k]
        q = self.io.inputs[port].q
        return q[k - len(got)] if k - len(got) < len(q) else None

    def _credit(self, j: int) -> float | None:
        """The first cycle entry ``j`` may commit for credit (None: not known yet)."""
        if j < self.depth:
            return -math.inf
        i = j - self.depth
        return self.pops[i] + 1 if i < len(self.pops) else None

    # -- the blocks --------------------------------------------------------------------------------

    def _walk_of(self, tokens: list[Any]) -> list[tuple[str, int]] | None:
        """The sequencer's steps for one block's tokens: ``("elem", level)`` (an element and the
        stop after it, 0 for none), ``("stop", level)``, and for the block's closing ``S_k``
        held back (``pending``; not with an eager, rank-0 driving stream) either the level 0
        of the last element or, after stops alone, ``("held", 0)``: a cycle without an entry.
        None for an empty block (no walk: its driving token is taken, nothing written)."""
        steps: list[tuple[str, int]] = []
        for t in tokens:
            if isinstance(t, Stop):
                if steps and steps[-1] == ("elem", 0):
                    steps[-1] = ("elem", t.level)
                else:
                    steps.append(("stop", t.level))
            else:
                steps.append(("elem", 0))
        if not steps:
            return None
        if self.k and not self.eager:
            kind, _ = steps[-1]
            steps[-1] = ("elem", 0) if kind == "elem" else ("held", 0)
        return steps

    def _block(self, buffer: int, value: Any) -> list[tuple[str, int]] | None:
        """The steps of one read (with ``repeat``, all the reads) of buffer number ``buffer``
        of the buffer stream (``value`` its reference): the walk over the buffer's extents
        (``Streamify.read_extents``) in ``order``, as ``step_lang.stoprules.grid_tokens``
        writes it, or for a stored-order read the interpreter's replay of the buffer."""
        if self.static_walk is not None:
            return self.static_walk
        if buffer not in self.walks:
            node = self.node
            if node.order is not None:
                extents = node.read_extents(self.io, value)
                shape = (*self.repeat, *(extents[d] for d in node.order))
                tokens = grid_tokens(shape, _cell)
            else:
                read = [_CELL if is_data(t) else t for t in value.tokens]
                tokens = grid_tokens(self.repeat, lambda m: read, sub=len(node.read_dims))
            self.walks[buffer] = self._walk_of(tokens)
        return self.walks[buffer]

    # -- the replay ------------------------------------------------------------------------------

    def _take(self, port: int, cycle: int) -> None:
        self.taken[port] += 1
        self.takes[port].append(cycle)

    def _entry(self, at: float, level: int = 0, elem: bool = False, limit: float = math.inf):
        """Commit the next entry at ``at`` or when it has credit; its cycle, or None if that is
        not known or beyond ``limit``."""
        credit = self._credit(len(self.commit))
        if credit is None:
            return None
        c = int(max(at, credit))
        if c > limit:
            return None
        self.commit.append(c)
        beats = 2 if elem and level else 1
        self.beats.append(beats)
        self.entry_of += [(len(self.commit) - 1, b) for b in range(beats)]
        self.t = c + 1
        return c

    def _step(self, limit: float) -> bool:
        """One action of the sequencer, if it is known and no later than ``limit``."""
        s, c, k = self.state, self.c, self.k
        if s == "END":
            return False
        if s == "WALK":
            kind, level = self.walk[self.pos]
            if kind == "held":  # the held S_k after stops alone: a cycle without an entry
                if self.t > limit:
                    return False
                done, self.t = self.t, self.t + 1
            else:
                at = self.t + self.words - 1 if kind == "elem" else self.t
                done = self._entry(at, level, elem=kind == "elem", limit=limit)
                if done is None:
                    return False
            self.pos += 1
            if self.pos == len(self.walk):
                self.pos = 0
                self.pending = k > 0 and not self.eager
                if c is None or c == 0:
                    self.releases.append(done)
                    self.state = "IDLE"
                else:
                    self.state = "BUF"
            return True
        port = 1 if s == "BUF" else 0
        head = self._input(port)
        if head is None:
            return False
        x = max(self.t, int(head[0]))
        if x > limit:
            return False
        tok = head[1]
        if s == "SKIP":  # the buffer stream's stop that a reference stop above c pairs with
            self._take(0, x)
            self.state, self.t = "IDLE", x + 1
            return True
        walk = None
        if s == "BUF":
            walk = self.buffer_walk
        elif is_data(tok):
            walk = self._block(self.taken[0], tok)
        # an empty read (reads start in BUF with a reference) leaves a held S_k held
        empty = is_data(tok) and walk is None and (s == "BUF" or c is None or c == 0)
        if self.pending and (is_data(tok) or tok is DONE) and not empty:  # write S_k first
            if self._entry(x, k, limit=limit) is None:
                return False
            self.pending = False
            return True
        if s == "BUF":
            if is_data(tok):  # a read of the buffer
                self._take(1, x)
                if walk is None:  # an empty read: nothing
                    self.t = x + contract.SEQUENCER_TAKE
                    return True
                self.walk = walk
                self.state, self.t = "WALK", x + contract.SEQUENCER_TAKE
                return True
            if isinstance(tok, Stop):
                at = self._entry(x, tok.level + k, limit=limit)
                if at is None:
                    return False
                self._take(1, at)
                self.pending = False  # merged into this stop
                if tok.level >= c:
                    self.releases.append(at)
                    self.state = "SKIP" if tok.level > c else "IDLE"
                return True
            self._take(1, x)  # the reference ended inside a buffer (an error in hardware)
            self.releases.append(x)
            self.state, self.t = "IDLE", x + 1
            return True
        # IDLE: a buffer reference, a stop or done of the buffer stream
        if isinstance(tok, Stop) and c is not None and c > 0:  # an error: consumed at once
            self._take(0, x)
            self.t = x + 1
            return True
        both = c == 0 or (tok is DONE and self.ref)
        if both:  # taken together with the reference stream's token
            ref = self._input(1)
            if ref is None:
                return False
            x = max(x, int(ref[0]))
            if x > limit:
                return False
        if is_data(tok):
            self._take(0, x)
            if both:
                self._take(1, x)
            self.t = x + contract.SEQUENCER_TAKE
            if c is not None and c > 0:
                self.buffer_walk, self.state = walk, "BUF"
            elif walk is None:  # an empty read: the slot is free at once
                self.releases.append(x)
            else:
                self.walk, self.state = walk, "WALK"
            return True
        at = self._entry(x, tok.level + k if isinstance(tok, Stop) else 0, limit=limit)
        if at is None:
            return False
        self._take(0, at)
        if both:
            self._take(1, at)
        self.pending = False  # merged into this stop
        if tok is DONE:
            self.state = "END"
        return True

    def advance(self, limit: float) -> None:
        """Replay the sequencer up to cycle ``limit`` (or as far as is known)."""
        while self._step(limit):
            pass

    def released(self, n: int, limit: float) -> int | None:
        """The cycle buffer ``n`` was released, if known by cycle ``limit``."""
        if n >= len(self.releases):
            self.advance(limit)
        return self.releases[n] if n < len(self.releases) else None

    # -- the node (``_TakesEarly``) -------------------------------------------------------------

    def _next_take(self) -> tuple[int, int | None]:
        while self._step(math.inf):
            pass
        best: tuple[int, int | None] = (0, None)
        for port, takes in enumerate(self.takes):
            n = len(self.got[port])
            if n < len(takes) and (best[1] is None or takes[n] < best[1]):
                best = (port, takes[n])
        return best

    def _more_inputs(self) -> bool:
        return self.state != "END"

    def _beat_time(self, port: int, token: Any) -> float:
        i = self.sent_tokens
        while len(self.entry_of) <= i and self._step(math.inf):
            pass
        if len(self.entry_of) <= i:
            raise RuntimeError(f"rtl profile: no entry for token {i} of '{self.node.name}'")
        j, beat = self.entry_of[i]
        t = self.last_push[port] + self.spacing[port]
        if beat == 0:
            t = max(t, self.commit[j] + self.queue_latency)
        return t

    def before_recv(self, port: int) -> int:
        n = len(self.got[port])
        while len(self.takes[port]) <= n and self._step(math.inf):
            pass
        if len(self.takes[port]) <= n:
            return 0
        t = self.takes[port][n]
        return max(0, math.ceil(t - self.now)) if t > self.now else 0

    def on_recv(self, port: int, token: Any) -> int:
        self.got[port].append((self.io.visible, token))
        return 0

    def on_send(self, port: int, token: Any) -> int:
        return self._beat_cost(port, token)

    def sent(self, port: int, token: Any) -> None:
        super().sent(port, token)
        j, beat = self.entry_of[self.sent_tokens]
        self.sent_tokens += 1
        if beat == self.beats[j] - 1:
            self.pops.append(self.now)
            if self.watcher is not None:  # credit: the replay may go on
                proc, epoch = self.watcher
                self.watcher = None
                self.io.engine.push(self.now, proc, epoch)


class _Bufferize(_TakesEarly):
    """Bufferize: ``words`` cycles per element written; the stop that closes a buffer (and the
    done token) is taken once the output register is empty, and the buffer reference leaves
    ``BUFFER_REF_LATENCY`` cycles later, a stop after it the cycle after its take; elements of
    buffer ``n`` wait until ``BUFFER_SLOTS`` buffers ago was released by the Streamify that reads
    this one (:class:`_Streamify`), plus ``BUFFER_RELEASE``."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.words = _buffer_words(profile, node)
        self.slots = contract.BUFFER_SLOTS
        self.rank = node.rank
        # A buffer with a dynamic dim may be empty: its closing stop waits for a slot too.
        self.dynamic = _static_shape(node.out_types[0].elem.shape) is None
        self.closed = 0  # buffers closed (their closing stops taken)
        self.last_take = -math.inf
        self.last_close = -math.inf  # the take of the last closing stop or done token
        self.reader: _Streamify | None = None

    def _reader(self) -> _Streamify | None:
        """The Streamify of this run that reads the buffers (the hardware's ``rd`` port)."""
        if self.reader is None:
            reader = self.p._buffer_readers.get(self.node.name)
            if reader is not None and reader.io is not None and reader.io.engine is self.io.engine:
                self.reader = reader
        return self.reader

    def _release(self) -> float | None:
        """When the slot for the next buffer's elements is free (None: not known yet)."""
        n = self.closed - self.slots
        if n < 0:
            return -math.inf
        reader = self._reader()
        if reader is None:
            return None  # nothing releases the slot: the hardware stalls
        r = reader.released(n, self.now - 1)
        return None if r is None else r + contract.BUFFER_RELEASE

    def attach(self, io: Any) -> None:
        super().attach(io)  # ``_TakesEarly``
        recv = io.recv

        def recv_when_free(i: int) -> Any:
            if not self.early[i]:
                token = yield from io.peek(i)
                if self._needs_slot(token) and self._release() is None:
                    yield from self._wait_release()
            return (yield from recv(i))

        io.recv = recv_when_free

    def _wait_release(self) -> Any:
        """Wait until the reader's release of the slot is known. The reader's replay is taken as
        far as what is known (it does so itself whenever it runs; a release it has committed to
        is final); if that is not enough, the replay waits for credit, which comes with the
        reader's next output beat (``_Streamify.sent``), and this node sleeps until then. A
        reader with a reference stream also learns from that stream: this node then looks a
        cycle at a time (the engine cannot wake a node on another node's state), a deadlock
        when only such waiting nodes are left for ``settle`` cycles and no shared port moves."""
        engine, proc = self.io.engine, self.io.proc
        reader = self._reader()
        if reader is not None and not reader.ref:
            while self._release() is None:
                reader.advance(math.inf)
                if self._release() is not None:
                    break
                reader.watcher = (proc, proc.epoch + 1)
                yield ("park", "the release of a buffer slot by its Streamify", None)
            return
        waiting = self.p._buffer_waiting
        waiting.add(proc.idx)
        since = self.now
        try:
            while self._release() is None:
                run = self.p._axi[4]
                ports = run.waiting if run is not None else set()
                if self.p.quiet_since(since, self.now) and engine.only_waiting(waiting | ports):
                    proc.waiting = "the release of a buffer slot by its Streamify"
                    engine._deadlock()
                yield ("sleep", 1)
        finally:
            waiting.discard(proc.idx)

    def _closes(self, token: Any) -> bool:
        """Whether ``token`` closes a buffer (a stop of level ``rank`` or above) or is done."""
        return not is_data(token) and not (isinstance(token, Stop) and token.level < self.rank)

    def _needs_slot(self, token: Any) -> bool:
        """Whether ``token`` waits for a free slot: an element, or a dynamic buffer's closing
        stop (an empty buffer takes a slot without an element)."""
        return is_data(token) or (
            self.dynamic and isinstance(token, Stop) and token.level >= self.rank
        )

    def _take_time(self, visible: float, token: Any) -> float | None:
        """The cycle the hardware takes ``token`` (None: the release it waits for is not known):
        an element after its ``words`` writes, once its slot is free; a stop inside a buffer at
        once; a closing stop or done once the output register is empty (a dynamic buffer's
        closing stop, once it has a slot)."""
        t = max(visible, self.last_take + 1)
        if self._needs_slot(token):
            release = self._release()
            if release is None:
                return None
            if is_data(token):
                return max(t, release) + self.words - 1
            t = max(t, release)
        if self._closes(token):
            t = max(t, self.last_push[0] + 1)
        return t

    def _next_take(self) -> tuple[int, int | None]:
        q = self.io.inputs[0].q
        if not q or self._closes(q[0][1]):  # not while the output register is full
            return 0, None
        t = self._take_time(*q[0])
        return 0, None if t is None else math.ceil(t)

    def _more_inputs(self) -> bool:
        q = self.io.inputs[0].q
        return not q or not self._closes(q[0][1])

    def before_recv(self, port: int) -> int:
        now = self.now
        visible, token = self.io.inputs[port].q[0]
        t = self._take_time(visible, token)
        t = now if t is None else t
        return max(0, math.ceil(t - now)) if t > now else 0

    def on_recv(self, port: int, token: Any) -> int:
        self.last_take = self.now
        if self._closes(token):
            self.last_close = self.now
            self.closed += isinstance(token, Stop)  # the buffer's slot is full from now on
        return 0

    def _beat_time(self, port: int, token: Any) -> float:
        t = self.last_push[port] + self.spacing[port]
        if not isinstance(token, Stop):  # a reference or done: from the closing take
            t = max(t, self.last_close + contract.BUFFER_REF_LATENCY)
        return t

    def on_send(self, port: int, token: Any) -> int:
        return self._beat_cost(port, token)


def _buffer_pair(kind: type) -> Any:
    """The timing of a Bufferize (``_Bufferize``) or Streamify (``_Streamify``) that the
    hardware builds: a buffer with at most one dynamic dim (the hardware sizes it by the dim's
    bound), read by one Streamify straight from its Bufferize (``step_hw.elaborate``).
    Anything else has no hardware: timed as a plain block."""

    def make(profile: RtlProfile, node: Node) -> NodeTiming:
        if kind is _Bufferize:
            buffers = node.outputs[0]
            readers = [
                n
                for n in node.graph.nodes.values()
                if isinstance(n, ops.Streamify) and contract.feedback_input(n.inputs[0]) == buffers
            ]
            paired = len(readers) == 1
        else:
            buffers = node.inputs[0]
            paired = isinstance(contract.feedback_input(buffers).node, ops.Bufferize)
        dynamic = [d for d in buffers.elem.shape if not isinstance(d, int)]
        if not paired or len(dynamic) > 1:
            return _Block(profile, node)
        timing = kind(profile, node)
        if kind is _Streamify:
            profile._buffer_readers[contract.feedback_input(buffers).node.name] = timing
        return timing

    return make


# -- each operator's timing ----------------------------------------------------------------------


def _load(profile: RtlProfile, node: Node) -> NodeTiming:
    random = isinstance(node, ops.RandomOffChipLoad)
    load = _Load(profile, node, random=random)
    port = profile._shared_port(node, load)
    if port is None and (node.fetch is not None if random else bool(node.inputs)):
        return _BlockLoad(profile, node)
    load.share(port)
    return load


def _store(profile: RtlProfile, node: Node) -> NodeTiming:
    kind = _RandomStore if isinstance(node, ops.RandomOffChipStore) else _Store
    if kind is _RandomStore and node.fetch is not None:
        kind = _BlockStore
    store = kind(profile, node)
    store.share(profile._shared_port(node, store))
    return store


RTL_TIMING.add(_load, ops.LinearOffChipLoad, ops.RandomOffChipLoad)
RTL_TIMING.add(_store, ops.LinearOffChipStore, ops.RandomOffChipStore)
RTL_TIMING.add(lambda profile, node: _Sink(profile), ops.Sink)
RTL_TIMING.add(_Source, ops.Source)
RTL_TIMING.add(lambda profile, node: NodeTiming(), ops.Feedback)  # a wire: no timing of its own
RTL_TIMING.add(_buffer_pair(_Bufferize), ops.Bufferize)
RTL_TIMING.add(_buffer_pair(_Streamify), ops.Streamify)
RTL_TIMING.add(_Broadcast, ops.Broadcast)
RTL_TIMING.add(_Partition, ops.Partition)
RTL_TIMING.add(_Reassemble, ops.Reassemble)
RTL_TIMING.add(_EagerMerge, ops.EagerMerge)
RTL_TIMING.add(_Parallelize, ops.Parallelize)
RTL_TIMING.add(_Expand, ops.Expand)
# Every other operator is timed as the block its hardware-contract entry describes
# (``step_hw.contract.BLOCKS``; ``_Block``): a new operator needs no entry here.
