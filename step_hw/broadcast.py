"""Broadcast: copy one token stream to ``n`` outputs with independent back-pressure.

Also home of :func:`fork`, the "offer one token to several outputs, each takes it once" logic
that Broadcast is made of and that the routers in :mod:`step_hw.router` reuse for multicast and
for ending every output with a done token.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_lang import ops
from step_lang.errors import StepTypeError
from step_lang.graph import Node

from .checks import check_format, check_int, check_node_class, where
from .config import HwConfig
from .payload import Kind, TokenFormat
from .payload_fields import put
from .tuple_format import TupleFormat, stream_format

__all__ = ["Broadcast", "fork", "node_format", "token"]


def fork(
    m: Module, *, offer: Value, want: Value, ports: Sequence[stream.Interface], name: str
) -> Signal:
    """Offer one token to the ``ports`` selected by the bits of ``want``; each takes it once.

    Drives ``ports[j].valid`` (``offer & want[j]`` until port ``j`` has taken the token) and
    returns ``done``, high in the cycle in which the last wanted port takes it (at once when
    ``want`` is zero): the producer advances on ``done``. ``offer`` and ``want`` must stay stable
    while a token is offered, as the stream rules demand of any payload. The caller drives the
    ports' payloads. ``valid`` never depends on ``ready``; ``done`` does.
    """
    n = len(ports)
    taken = Signal(n, name=f"{name}_taken")  # ports that took the current token already
    done = Signal(name=f"{name}_done")
    pending = [want[j] & ~taken[j] for j in range(n)]
    m.d.comb += [p.valid.eq(offer & pending[j]) for j, p in enumerate(ports)]
    m.d.comb += done.eq(offer & Cat(~pending[j] | p.ready for j, p in enumerate(ports)).all())
    with m.If(done):
        m.d.sync += taken.eq(0)
    with m.Else():
        m.d.sync += taken.eq(taken | Cat(p.valid & p.ready for p in ports))
    return done


def token(fmt: TokenFormat, kind: Kind, level: Value | int = 0) -> Value:
    """The payload bits of a STOP (with ``level``, truncated to the level field) or DONE token."""
    return put(fmt, kind=kind, level=level)


def node_format(
    node: Node, config: HwConfig, port: int, *, output: bool = False
) -> TokenFormat | TupleFormat:
    """The token format of one port of a step_lang node (a :class:`TupleFormat` for a Zip's
    tuples, which the blocks that call this move without looking into); :class:`StepTypeError`
    naming the node and port when the stream has no hardware encoding or its stops do not fit
    the level field."""
    names, stypes = (
        (node.output_names, node.out_types)
        if output
        else (node.input_names, [s.type for s in node.inputs])
    )
    at = where(node, names[port])
    stype = stypes[port]
    fmt = stream_format(stype.elem, config, where=at)
    if stype.rank > config.max_level:
        raise StepTypeError(
            f"{at}: a rank-{stype.rank} stream needs stop levels up to S{stype.rank}; "
            f"HwConfig.level_bits={config.level_bits} holds levels up to S{config.max_level}"
        )
    return fmt


class Broadcast(wiring.Component):
    """Copy every token of ``i`` to each of the ``n`` outputs ``o[0..n-1]``.

    The hardware form of ``step_lang.ops.routing.Broadcast`` (inserted for fan-out).

    Parameters
    ----------
    fmt : TokenFormat or TupleFormat
        Token format of the input and of every output (a Zip's tuples are copied whole).
    n : int
        Number of outputs, a positive integer.

    Ports
    -----
    i : In(fmt.signature())
        The stream to copy.
    o : Out(fmt.signature()).array(n)
        The copies, in the order of the step_lang node's outputs ``out0 .. out{n-1}``.

    Protocol
    --------
    :mod:`amaranth.lib.stream` rules on every port. Each output takes each token exactly once and
    at its own pace: an output that has taken the current token drops ``valid`` until ``i``
    advances, which happens in the cycle in which the last output takes it. ``o[j].valid``
    depends on ``i.valid`` and a register, never on any ``ready``; ``i.ready`` depends
    combinationally on the outputs' ``ready``.

    Latency
        0 cycles: a token is offered on the outputs in the cycle it is offered on ``i`` (a
        combinational path; an edge :class:`~step_hw.queue.Queue` registers it).
    Throughput
        Initiation interval 1 when no output stalls; otherwise the slowest output sets the pace
        (there is no storage: an output that took the current token is offered the next one
        only once every output has taken it).

    Stop tokens
        Tiles, stop tokens and the done token are copied unchanged and in order.
    """

    def __init__(self, *, fmt: TokenFormat | TupleFormat, n: int):
        check_format(type(self).__name__, "fmt", fmt, types=(TokenFormat, TupleFormat))
        check_int(type(self).__name__, "n", n)
        self._fmt = fmt
        self._n = n
        sig = fmt.signature()
        super().__init__({"i": In(sig), "o": Out(sig).array(n)})

    @classmethod
    def from_node(cls, node: ops.Broadcast, config: HwConfig) -> Broadcast:
        """The block for a step_lang Broadcast node under ``config``."""
        check_node_class(node, ops.Broadcast, cls.__name__)
        return cls(fmt=node_format(node, config, 0), n=node.n)

    @property
    def fmt(self) -> TokenFormat | TupleFormat:
        return self._fmt

    @property
    def n(self) -> int:
        return self._n

    @property
    def in_ports(self) -> list[stream.Interface]:
        """Input streams in the order of the step_lang node's inputs: ``[i]``."""
        return [self.i]

    @property
    def out_ports(self) -> list[stream.Interface]:
        """Output streams in the order of the step_lang node's outputs: ``o[0..n-1]``."""
        return list(self.o)

    def elaborate(self, platform) -> Module:
        m = Module()
        done = fork(
            m, offer=self.i.valid, want=Const(2**self._n - 1, self._n), ports=self.o, name="copy"
        )
        m.d.comb += self.i.ready.eq(done)
        for o in self.o:
            m.d.comb += o.payload.eq(self.i.payload)
        return m
