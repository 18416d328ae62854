"""Shape-aware stream queue: the only block in `step_hw` that touches raw FIFO ports."""

from amaranth.hdl import Module, Shape, ShapeLike
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Queue"]


class Queue(wiring.Component):
    """A first-in first-out queue between two streams of the same payload shape.

    Wraps :class:`amaranth.lib.fifo.SyncFIFOBuffered` (registered read port, so the storage can
    map to block RAM) behind :mod:`amaranth.lib.stream` ports, in the ``sync`` domain.

    Parameters
    ----------
    shape : ShapeLike
        Payload shape, e.g. ``32``, ``signed(8)`` or a :class:`~amaranth.lib.data.Layout` (the
        STeP token layout). Payloads are stored as raw bits and come out as the same shape.
    depth : int
        Capacity in payloads, a positive integer. ``depth`` payloads can be held at once
        (``depth - 1`` in memory plus one in the output register).

    Ports
    -----
    i : In(stream.Signature(shape))
        Payloads to enqueue.
    o : Out(stream.Signature(shape))
        Payloads in arrival order.

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

    def __init__(self, *, shape: ShapeLike, depth: int):
        # `bool` is an `int`, but `depth=True` is certainly a mistake.
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"Queue depth must be a positive integer, not {depth!r}")
        if depth <= 0:
            raise ValueError(f"Queue depth must be a positive integer, not {depth!r}")
        # Raises Amaranth's own TypeError for anything that is not shape-like.
        self._width = Shape.cast(shape).width
        self._shape = shape
        self._depth = depth
        super().__init__(
            {
                "i": In(stream.Signature(shape)),
                "o": Out(stream.Signature(shape)),
            }
        )

    @property
    def shape(self) -> ShapeLike:
        return self._shape

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.fifo = buf = fifo.SyncFIFOBuffered(width=self._width, depth=self._depth)
        # `connect` checks payload widths only, so our `shape` (possibly a Layout) meets the
        # FIFO's `unsigned(width)` streams; the bits pass through untouched.
        wiring.connect(m, wiring.flipped(self.i), buf.w_stream)
        wiring.connect(m, buf.r_stream, wiring.flipped(self.o))
        return m
