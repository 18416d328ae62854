"""Shape-aware stream queue: the only block in `step_hw` that touches raw FIFO ports."""

from amaranth.hdl import Elaboratable, Module, Mux, Shape, ShapeLike, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["LimitedFIFO", "Queue"]


def _positive(what: str, value: object) -> None:
    # `bool` is an `int`, but `depth=True` is certainly a mistake.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Queue {what} must be a positive integer, not {value!r}")
    if value <= 0:
        raise ValueError(f"Queue {what} must be a positive integer, not {value!r}")


class LimitedFIFO(Elaboratable):
    """A FIFO of ``capacity`` entries whose depth is a run-time setting, ``limit``: for each
    ``limit`` in ``1..capacity``, cycle for cycle the :class:`amaranth.lib.fifo.SyncFIFOBuffered`
    of ``depth=limit`` (same ``w_rdy``, ``r_rdy``, ``level`` in every cycle and, when readable,
    ``r_data``, for any ``w_en``/``r_en``), so that one build serves every depth up to its
    capacity.

    It keeps that FIFO's structure: ``capacity - 1`` entries of memory whose registered read port
    is the output register, ``w_rdy`` while the memory holds fewer than ``limit - 1`` entries.
    For ``limit == 1``, where ``SyncFIFOBuffered`` is a single register (a payload written in
    cycle *t* is readable in *t + 1*, not *t + 2*), the read port is that register: a write also
    reads its own address, which the port's transparency passes through. The output's payload
    comes straight from the read port as in ``SyncFIFOBuffered`` (a multiplexer there, on tiles
    thousands of bits wide, made Verilator's simulation of the paper-scale attention 1.7 times
    slower; this one runs as fast as the built-in depths).

    ``limit`` must be in ``1..capacity`` and held while the FIFO holds payloads (set it before
    the design starts; a change with payloads inside loses them). The ports are those of
    ``SyncFIFOBuffered`` (``w_data``, ``w_en``, ``w_rdy``, ``r_data``, ``r_en``, ``r_rdy``,
    ``level``) plus ``limit``. ``capacity`` is 2 or more (a queue of capacity 1 has depth 1:
    :class:`Queue` builds ``SyncFIFOBuffered(depth=1)``).
    """

    def __init__(self, *, width: int, capacity: int):
        _positive("capacity", capacity)
        if capacity < 2:
            raise ValueError(f"LimitedFIFO capacity must be 2 or more, not {capacity!r} (depth 1 "
                             "is SyncFIFOBuffered(depth=1))")  # fmt: skip
        self.width, self.capacity = width, capacity
        self.w_data = Signal(width)
        self.w_en = Signal()
        self.w_rdy = Signal()
        self.r_data = Signal(width)
        self.r_en = Signal()
        self.r_rdy = Signal()
        self.level = Signal(range(capacity + 1))
        self.limit = Signal(range(capacity + 1), init=capacity)

    def elaborate(self, platform) -> Module:
        m = Module()
        do_write = self.w_rdy & self.w_en
        do_read = self.r_rdy & self.r_en
        out_full = Signal()  # the output register holds a payload
        m.d.comb += self.r_rdy.eq(out_full)

        # SyncFIFOBuffered(depth=limit) for limit >= 2: its inner memory of capacity - 1
        # entries (the pointers wrap at the capacity, which moves where a payload is kept, not
        # when), full at limit - 1 entries, and its registered read port as the output register.
        # For limit == 1 the read port is the single register: a write reads its own address
        # through the port's transparency, so the payload is readable the next cycle. (With
        # limit >= 2 the port never reads the address being written: the memory would be full.)
        single = Signal()
        inner_depth = self.capacity - 1
        inner_level = Signal(range(inner_depth + 1))
        m.d.comb += single.eq(self.limit == 1)
        do_inner_read = (inner_level != 0) & (~out_full | self.r_en)
        storage = m.submodules.storage = Memory(shape=self.width, depth=inner_depth, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="sync", transparent_for=(w_port,))
        produce = Signal(range(inner_depth))
        consume = Signal(range(inner_depth))
        buffered_write = do_write & ~single
        m.d.comb += [
            w_port.addr.eq(produce),
            w_port.data.eq(self.w_data),
            w_port.en.eq(do_write),
            r_port.addr.eq(Mux(single, produce, consume)),
            r_port.en.eq(Mux(single, do_write, do_inner_read)),
            self.r_data.eq(r_port.data),
        ]
        with m.If(buffered_write):
            m.d.sync += produce.eq(Mux(produce == inner_depth - 1, 0, produce + 1))
        with m.If(do_inner_read):
            m.d.sync += consume.eq(Mux(consume == inner_depth - 1, 0, consume + 1))
        with m.If(buffered_write & ~do_inner_read):
            m.d.sync += inner_level.eq(inner_level + 1)
        with m.If(do_inner_read & ~buffered_write):
            m.d.sync += inner_level.eq(inner_level - 1)
        with m.If(single):
            with m.If(do_write):
                m.d.sync += out_full.eq(1)
            with m.Elif(do_read):
                m.d.sync += out_full.eq(0)
        with m.Elif(do_inner_read):
            m.d.sync += out_full.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += out_full.eq(0)
        m.d.comb += [
            self.w_rdy.eq(Mux(single, ~out_full, inner_level + 1 < self.limit)),
            self.level.eq(inner_level + out_full),
        ]
        return m


class Queue(wiring.Component):
    """A first-in first-out queue between two streams of the same payload shape.

    Wraps :class:`amaranth.lib.fifo.SyncFIFOBuffered` (registered read port, so the storage can
    map to block RAM) behind :mod:`amaranth.lib.stream` ports, in the ``sync`` domain; or, given
    a ``capacity`` instead of a ``depth``, a :class:`LimitedFIFO` whose depth is the run-time
    input ``limit`` (cycle for cycle the ``SyncFIFOBuffered`` of that depth).

    Parameters
    ----------
    shape : ShapeLike
        Payload shape, e.g. ``32``, ``signed(8)`` or a :class:`~amaranth.lib.data.Layout` (the
        STeP token layout). Payloads are stored as raw bits and come out as the same shape.
    depth : int
        Capacity in payloads, a positive integer. ``depth`` payloads can be held at once
        (``depth - 1`` in memory plus one in the output register).
    capacity : int
        Instead of ``depth``: the largest depth the ``limit`` input may set.

    Ports
    -----
    i : In(stream.Signature(shape))
        Payloads to enqueue.
    o : Out(stream.Signature(shape))
        Payloads in arrival order.
    limit : In(range(capacity + 1))
        With ``capacity`` >= 2 only: the depth, ``1..capacity``, held while the queue holds
        payloads (set before the design starts).

    Protocol
    --------
    Both ports follow the :mod:`amaranth.lib.stream` rules: a transfer happens in a cycle where
    ``valid & ready``; once ``o.valid`` is asserted, ``o.payload`` stays stable until taken.
    ``o.valid`` and ``i.ready`` are driven from registers only: there is no combinational path
    from ``o.ready`` to ``i.ready`` nor from ``i.valid`` to ``o.valid``, so queues can be chained
    freely and break timing paths.

    Latency
        A payload accepted on ``i`` in cycle *t* is offered on ``o`` in cycle *t + 2* at the
        earliest (``t + 1`` for ``depth=1``, a single register).
    Throughput
        Initiation interval 1 (one transfer per cycle on each side) for ``depth >= 3``. With
        ``depth=1`` (a single register) or ``depth=2`` (a one-entry memory before the output
        register) a slot cannot be refilled in the cycle it is emptied, so the queue moves one
        payload every *2* cycles: use ``depth >= 3`` on any path that must keep up.

    Stop tokens
        The queue is payload-agnostic: tiles, stop tokens (of any level) and done tokens pass
        through unchanged and in order.
    """

    def __init__(self, *, shape: ShapeLike, depth: int | None = None, capacity: int | None = None):
        if (depth is None) == (capacity is None):
            raise TypeError("Queue needs a depth or a capacity (a run-time depth), not both")
        _positive("depth", depth) if capacity is None else _positive("capacity", capacity)
        # Raises Amaranth's own TypeError for anything that is not shape-like.
        self._width = Shape.cast(shape).width
        self._shape = shape
        self._depth = depth
        self._capacity = capacity
        members = {
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        }
        if capacity is not None and capacity > 1:
            members["limit"] = In(range(capacity + 1), init=capacity)
        super().__init__(members)

    @property
    def shape(self) -> ShapeLike:
        return self._shape

    @property
    def depth(self) -> int | None:
        """The fixed depth, or None for a run-time depth (``capacity``)."""
        return self._depth

    @property
    def capacity(self) -> int:
        """The most payloads the queue can hold: its depth, or its run-time depth's bound."""
        return self._depth if self._capacity is None else self._capacity

    def elaborate(self, platform) -> Module:
        m = Module()
        if self._capacity is None or self._capacity == 1:
            # capacity 1: the only depth is 1
            depth = self._depth or 1
            m.submodules.fifo = buf = fifo.SyncFIFOBuffered(width=self._width, depth=depth)
            # `connect` checks payload widths only, so our `shape` (possibly a Layout) meets the
            # FIFO's `unsigned(width)` streams; the bits pass through untouched.
            wiring.connect(m, wiring.flipped(self.i), buf.w_stream)
            wiring.connect(m, buf.r_stream, wiring.flipped(self.o))
            return m
        m.submodules.fifo = buf = LimitedFIFO(width=self._width, capacity=self._capacity)
        m.d.comb += [
            buf.limit.eq(self.limit),
            buf.w_data.eq(self.i.payload),
            buf.w_en.eq(self.i.valid),
            self.i.ready.eq(buf.w_rdy),
            self.o.payload.eq(buf.r_data),
            self.o.valid.eq(buf.r_rdy),
            buf.r_en.eq(self.o.ready),
        ]
        return m
