"""The ``rtl`` profile: the cycle timing of the hardware that ``step_hw`` generates.

Derived from :class:`step_hw.config.HwConfig` and the documented latency and initiation interval
of every hardware block (their docstrings; ``docs/hardware.md``), it predicts the cycles from
``start`` to ``done`` of an elaborated graph run against cocotbext-axi RAMs
(``rtl_tests/cosim.py``). What it models:

* **Streams.** Every token, stop and done tokens included, is one beat on a ready/valid stream
  and takes a queue slot. A queue has the graph's depth (``Graph.set_queue_depth``, else
  ``HwConfig.queue_depth``); a token that enters it in cycle *t* is offered at *t + 2* (*t + 1*
  for depth 1: ``step_hw.queue.Queue``), and a queue of depth 1 or 2 moves one token every two
  cycles. A Feedback is a wire (``step_hw.elaborate`` aliases its output to its input): the
  stream into it has no latency of its own, and the loop's queue is the Feedback output's.
* **Blocks.** A block takes at most one token per input per cycle. Registered blocks (compute
  units, shape operators, ToSelector) offer a result one cycle after the take and one token per
  output per cycle; routers and Broadcast are combinational (latency 0); EagerMerge offers a
  chunk's selector in the cycle it forwards the chunk's first token, and its done tokens the
  cycle after it took the last input's. A MAC array spends ``ceil(M*K*N / lanes)`` cycles per
  tile pair (``compute/matmul.py``), RetileStreamify one cycle per row of a tile, RepeatStatic
  one cycle per copy.
* **Loads** (``memory/load.py``). Entries (tiles and stops) leave the sequencer one per cycle,
  :attr:`RtlProfile.load_start` cycles after start or one cycle after the reference token that
  starts a walk; a tile's bursts issue ``load_issue`` cycles after its entry, one per cycle, at
  most ``max_outstanding`` between AR and the last R beat (a slot is reused the cycle after);
  R beats return ``memory_latency`` cycles after AR, one per cycle per port; a tile is offered
  two cycles after its last beat. Its tile queue (3) and order queue (``max_outstanding + 8``)
  bound how far a load reads ahead of its consumer.
* **Stores** (``memory/store.py``). A tile's AW leaves ``store_issue`` cycles after the take, its
  W beats ``aw_to_w`` cycles after AW, one per cycle; B follows the last beat after
  ``write_response`` cycles; ``done`` rises ``done_latency`` cycles after the last B.
* **The end of the run.** The graph's ``done`` (``step_hw.elaborate``) is the AND of ``running``,
  every LinearStore's sticky ``done`` and, per Sink, a "done token seen" register set at the
  clock edge that ends the cycle the Sink takes its done token. The bench
  (``rtl_tests/cocotb_graph.py``) counts clock edges, the first being the one that ends cycle 0
  (``start`` high), and reads ``done`` after each; cocotb's Verilator loop runs ``RisingEdge``
  callbacks before it evaluates the design on the edge, so it reads the value of the cycle the
  edge ends: the count is the first cycle ``done`` is high, plus one. A Sink that takes its done
  token in cycle *t* ends the run at *t* + ``sink_done`` (2: the register, the bench), as a store
  ends it ``done_latency`` cycles after its last B (which counts the bench's cycle too). Every
  bit is sticky, so the run ends at the latest of them.

The memory constants are cocotbext-axi ``AxiRam``'s, measured on the generated SwiGLU layer
(``docs/validation.md``): AR to the first R beat 2 cycles, last W beat to B 2 cycles. Every
``m_axi`` port has its own RAM front end, so ports do not share bandwidth.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from step_hw.config import HwConfig
from step_lang.graph import Node
from step_lang.tokens import DONE, Stop, is_data, to_tokens

from ..memory import MemoryConfig
from .base import NodeTiming, TimingProfile, WaitFor

__all__ = ["RtlProfile"]

_COMBINATIONAL = ("Broadcast", "Partition", "Reassemble", "EagerMerge", "Parallelize")
_JOINED = ("Map", "Accum", "Scan", "Zip", "FlatMap", "RetileStreamify", "RandomOffChipStore")
_BOUNDARY = 4096  # AXI4 bursts never cross a 4 KiB boundary
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
    slot_release = 1  # a FIFO's `w_rdy` is a register: a slot refills the cycle after the pop
    config: HwConfig = field(default_factory=HwConfig)
    memory_latency: int = 2  # AR handshake to the first R beat (cocotbext-axi AxiRam)
    write_response: int = 2  # last W beat to the B response (AxiRam)
    load_start: int = 2  # start to a load's first sequencer entry (first AR 3 cycles later)
    load_issue: int = 3  # entry to its first AR: address queue (2) and burst generator (1)
    store_issue: int = 3  # a store's take to its AW: address queue (2) and burst generator (1)
    aw_to_w: int = 2  # AW to the first W beat (W-information queue)
    done_latency: int = 4  # last B response to `done` (ack path, done register, bench)
    sink_done: int = 2  # a Sink's take of its done token to `done` (done-seen register, bench)
    # the last graph's streams that feed a Feedback (graph, its node count, stream -> node)
    _feedbacks: tuple[Any, int, dict] = field(
        default=(None, 0, {}), init=False, repr=False, compare=False
    )

    @property
    def channel_depth(self) -> int:  # type: ignore[override]
        return self.config.queue_depth

    @property
    def channel_latency(self) -> int:  # type: ignore[override]
        return 2

    def _feeds_back(self, stream: Any) -> Node | None:
        """The Feedback node that ``stream`` feeds, if any. The hardware aliases a Feedback's
        output to its input (``step_hw.elaborate``): one queue, with the output's depth."""
        g = stream.graph
        graph, size, fbs = self._feedbacks
        if graph is not g or size != len(g.nodes):
            fbs = {n.inputs[0]: n for n in g.nodes.values() if n.kind == "Feedback" and n.inputs}
            self._feedbacks = (g, len(g.nodes), fbs)
        return fbs.get(stream)

    def stream_latency(self, stream: Any, depth: int) -> int:
        if self._feeds_back(stream) is not None:
            return 0  # a Feedback is a wire: the loop's one queue is on the Feedback's output
        return 1 if depth == 1 else 2

    def memory_config(self) -> MemoryConfig:
        return MemoryConfig()  # unused: the memory operators model their AXI ports themselves

    def counts_against_capacity(self, token: Any) -> bool:
        return True

    def compute_bw(self, node: Node) -> int:
        if node.kind in ("Map", "Accum", "Scan"):
            return 2 * self.config.lanes
        return 0

    def _depth(self, node: Node, port: int) -> int:
        s = node.outputs[port]
        while (fb := self._feeds_back(s)) is not None:  # the queue is the Feedback output's
            s = fb.outputs[0]
        return node.graph.queue_depths.get(s.name, self.config.queue_depth)

    def node_timing(self, node: Node, resident: list[bool]) -> NodeTiming:
        kind = node.kind
        if kind == "LinearOffChipLoad":
            return _Load(self, node)
        if kind == "RandomOffChipLoad":
            return _Load(self, node, random=True)
        if kind == "LinearOffChipStore":
            return _Store(self, node)
        if kind == "RandomOffChipStore":
            return _RandomStore(self, node)
        if kind == "Sink":
            return _Sink(self)
        if kind == "Source":
            return _Source()
        if kind == "Feedback":
            return NodeTiming()
        return _Block(self, node)


class _Source(NodeTiming):
    """A Source (a top-level ``src_<node>`` stream, offered every cycle by the bench): its
    ``ready`` is low in the ``start`` cycle (``step_hw.elaborate``), so its first token enters
    its queue in cycle 1."""

    def __init__(self):
        self.started = False

    def on_send(self, port: int, token: Any) -> int:
        if self.started:
            return 0
        self.started = True
        return 1


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
        self.spacing = [2 if profile._depth(node, j) <= 2 else 1 for j in range(len(node.outputs))]
        self.last_push = [-math.inf] * len(node.outputs)
        self.flops = 0

    def attach(self, io: Any) -> None:
        self.io = io

    @property
    def now(self) -> float:
        return self.io.engine.now

    def sent(self, port: int, token: Any) -> None:
        self.last_push[port] = self.now


def _fn_args(node: Node, toks: list[Any]) -> list[Any]:
    """A FlatMap's function arguments from its input tokens (as ``FlatMap.execute``)."""
    from step_lang.ops.higher_order import _args

    return list(_args(toks, len(node.arg_types)))


def _is_matmul(node: Node) -> bool:
    return "matmul" in (getattr(getattr(node, "fn", None), "name", "") or "")


def _matmul_steps(node: Node, lanes: int, a: Any, b: Any) -> int:
    """Cycles of a MAC array on tiles ``a`` and ``b``: ``max(1, ceil(M*K*N / lanes))``, with
    ``M`` the rows ``a`` actually holds (a dynamic tile's, not its bound)."""
    m, k = a.shape
    n = b.shape[0] if getattr(node.fn, "transpose_b", False) else b.shape[1]
    return max(1, math.ceil(m * k * n / lanes))


class _Block(_Clocked):
    """Compute units, routers and shape operators (see the module docstring)."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        kind = node.kind
        self.latency = 0 if kind in _COMBINATIONAL else 1
        self.group = len(node.inputs) if kind in _JOINED else 1
        self.n_in = 0  # tokens of the current group taken so far
        self.last_take = [-math.inf] * len(node.inputs)
        self.busy_until = -math.inf  # the block takes nothing before this cycle
        self.ready_at = -math.inf  # the result of the last take can leave from this cycle
        self.matmul = kind in ("Map", "Accum", "Scan") and _is_matmul(node)
        self.steps = 1
        self.retile = kind == "RetileStreamify"
        self.expander = kind in ("FlatMap", "RetileStreamify")
        self.pieces = 1
        self.repeat = getattr(node, "count", 1) if kind == "RepeatStatic" else 1
        # EagerMerge offers a chunk's selector with its first token (``step_hw.router``).
        self.merge = kind == "EagerMerge"

    def before_recv(self, port: int) -> int | WaitFor:
        now = self.now
        t = self.last_take[port] + 1
        if self.n_in == 0:
            t = max(t, self.busy_until)
            # A unit takes all its inputs in one cycle, once all are valid...
            for q in range(1, self.group):
                if not self.io.has(q):
                    return WaitFor(q)
            self.steps = 1
            if self.matmul and is_data(self.io.head(port)):
                # ... a MAC array reads its operands in place and takes them in its last step.
                heads = [self.io.head(q) for q in range(self.group)]
                self.steps = _matmul_steps(self.node, self.p.config.lanes, heads[0], heads[1])
                t = max(t, now) + self.steps - 1
        return max(0, math.ceil(t - now)) if t > now else 0

    def hold(self, port: int, token: Any) -> int:
        """An expander (FlatMap, RetileStreamify) takes its inputs with the element's last
        piece: their slots stay taken while the pieces go out."""
        if not self.expander or not is_data(token):
            return 0
        if self.n_in == 0:  # the first input of the group: count the element's pieces
            if self.retile:
                shape = getattr(token, "shape", (1, 1))
                self.pieces = int(shape[0] if self.node.split == "rows" else shape[1])
            else:
                toks = [token] + [self.io.head(q) for q in range(1, self.group)]
                sub = self.node.fn.apply(self.node.out_types[0].elem, *_fn_args(self.node, toks))
                self.pieces = sum(1 for t in to_tokens(sub, self.node.fn.rank)[:-1] if is_data(t))
        return max(0, self.pieces - 1)

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        self.last_take[port] = now
        self.n_in += 1
        if self.n_in < self.group:
            return 0
        self.n_in = 0
        data = is_data(token)
        busy = 1
        lat = self.latency
        if data:
            if self.matmul:  # taken in the last of its steps (before_recv)
                self.flops += 2 * self.steps * self.p.config.lanes
            elif self.retile:  # one cycle per row (column) of the tile, masked ones included
                shape = getattr(token, "shape", (1, 1))
                busy = max(1, int(shape[0] if self.node.split == "rows" else shape[1]))
            elif self.repeat > 1:
                busy = self.repeat
        if self.latency:  # routers take each input on its own (per-port spacing only)
            self.busy_until = now + busy
        self.ready_at = now + lat
        return 0

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        self.last_push[port] = now
        if self.merge and port == 1:
            return  # a selector holds no input: the chunk's first token goes in the same cycle
        if not self.latency:
            # A combinational block holds its input until the outputs take it: the input queue
            # offers the next token the cycle after.
            self.last_take = [max(t, now) for t in self.last_take]

    def on_send(self, port: int, token: Any) -> int:
        # A registered output leaves one token per cycle. A combinational block passes each
        # token on in the cycle it takes it; the engine may send tokens it took earlier later
        # (Reassemble reads a whole group first), so only a slow queue spaces them.
        gap = self.spacing[port] - (0 if self.latency else 1)
        t = max(self.ready_at, self.last_push[port] + gap)
        if self.merge and port == 1 and is_data(token):
            # A chunk starts the cycle after the previous one's last token.
            t = max(t, self.last_push[0] + 1)
        elif self.merge and token is DONE and port == 0:
            # The done tokens follow the cycle the last input's done token was taken in.
            t = max(t, max(self.last_take) + 1)
        return max(0, math.ceil(t - self.now)) if t > self.now else 0


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


class _Load(_Clocked):
    """LinearLoad / RandomLoad: the TileReader pipeline in absolute time (module docstring)."""

    def __init__(self, profile: RtlProfile, node: Node, random: bool = False):
        super().__init__(profile, node)
        self.random = random
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(profile.config.max_outstanding)
        self.order_depth = profile.config.max_outstanding + 8
        self.entry = profile.load_start - 1.0  # the sequencer's last entry
        self.walk = 0  # tiles of the current walk (LinearLoad)
        self.out_pops: list[float] = []  # output beats, for the order queue's room
        self.tile_pops: list[float] = []  # tiles taken from the tile queue
        self.pending: deque[float] = deque()  # ready times of tiles read ahead
        self.tiles_sent = 0
        self.entries = 0
        self.walk_start = None if node.inputs else profile.load_start
        self.idx = self._indices()
        self.rand_k = 0

    def _indices(self):
        n = self.node
        if self.random:
            return None
        out_shape, stride, base = n.out_shape, n.stride, n.base
        idx = []
        for flat in range(math.prod(out_shape)):
            k, rem = base, flat
            for d in range(len(out_shape) - 1, -1, -1):
                rem, m = divmod(rem, out_shape[d])
                k += m * stride[d]
            idx.append(k)
        return idx

    def on_recv(self, port: int, token: Any) -> int:
        # A reference token starts the sequencer one cycle after it is seen; an address is a
        # command of the tile reader at once.
        self.walk_start = self.io.visible + (0 if self.random else 1)
        if self.random and is_data(token):
            k = int(token.reshape(-1)[0])
            self.rand_k = k if 0 <= k < len(self.bursts) else 0
        return 0

    def _entry_time(self) -> float:
        """Cycle of the sequencer's next entry (one per cycle; the order queue bounds it)."""
        t = self.entry + 1
        if self.walk_start is not None:
            t = max(t, self.walk_start)
        j = self.entries - self.order_depth
        if j >= 0 and j < len(self.out_pops):
            t = max(t, self.out_pops[j] + 1)
        self.entries += 1
        self.entry = t
        return t

    def _read_tile(self, k: int) -> float:
        """Issue tile ``k``'s bursts; the cycle the tile is offered on the output."""
        p, axi = self.p, self.axi
        self.offchip_read += self.tile_bytes
        t = self._entry_time() + p.load_issue
        last = t
        bursts = self.bursts[k]
        for i, beats in enumerate(bursts):
            ar = max(t + i, axi.last_issue + 1, axi.slots[0])
            axi.last_issue = ar
            first = max(ar + p.memory_latency, axi.data_free)
            last = first + beats - 1
            if i == len(bursts) - 1:
                # The last beat waits for room in the tile queue (depth 3).
                j = self.tiles_sent + len(self.pending) - 3
                if 0 <= j < len(self.tile_pops):
                    last = max(last, self.tile_pops[j] + 1)
            axi.data_free = last + 1
            axi.slots.popleft()
            axi.slots.append(last + 1)
        return last + 2

    def on_send(self, port: int, token: Any) -> int:
        now = self.now
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
            if not isinstance(token, Stop) or self.node.inputs:
                self._entry_time()
            # A RandomLoad's stop or done is a command of its own, through the order queue.
            t = max(
                self.entry + (2 if self.random else 1), self.last_push[port] + self.spacing[port]
            )
        return max(0, math.ceil(t - now)) if t > now else 0

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        self.last_push[port] = now
        self.out_pops.append(now)
        if is_data(token):
            self.tile_pops.append(now)
            self.tiles_sent += 1


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
        t = self.last_take + 1
        if is_data(self.io.head(port)) and self.k >= 3:
            t = max(t, self.w_last[self.k - 3] + 1)  # the tile queue (3) has room
        return max(0, math.ceil(t - self.now)) if t > self.now else 0

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        self.last_take = now
        if token is DONE:
            return max(0, math.ceil(max(self.last_b + self.p.done_latency, now) - now))
        if not is_data(token):
            return 0
        self._write(self.k % len(self.bursts))
        return 0

    def _write(self, index: int) -> float:
        """AW, W and B of tile ``index`` taken now; the cycle of its last B response."""
        p, axi = self.p, self.axi
        bursts = self.bursts[index]
        self.offchip_written += self.tile_bytes
        self.k += 1
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


class _RandomStore(_Store):
    """RandomStore: LinearStore's write path for the tile at each address; an ack (or the
    address stream's stop or done) leaves one cycle after the tile's last B response (two after
    the take of a stop or done: the order queue)."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.addr = 0
        self.ack_at = -math.inf

    def before_recv(self, port: int) -> int | WaitFor:
        if port == 0 and not self.io.has(1):
            return WaitFor(1)  # address and data are taken together
        return super().before_recv(1) if port == 1 else 0

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 0:
            if is_data(token):
                k = int(token.reshape(-1)[0])
                self.addr = k if 0 <= k < len(self.bursts) else 0
            return 0
        self.last_take = now
        if is_data(token):
            self.ack_at = max(self.ack_at, self._write(self.addr) + 1)
        else:
            self.ack_at = max(self.ack_at, now + 2)
        return 0

    def on_send(self, port: int, token: Any) -> int:
        # The RTL takes the next tile while earlier ones are written (an order queue keeps the
        # acks in order); the interpreter sends each ack before taking the next tile. So acks
        # leave at once, and the done token carries the wait for the last B response: exact
        # for acks that go to a sink (as in the examples), early for acks another block reads.
        t = self.last_push[port] + self.spacing[port]
        if token is DONE:
            t = max(t, self.ack_at)
        return max(0, math.ceil(t - self.now)) if t > self.now else 0
