"""AXI4 arbiters: several managers (the memory controllers) share one AXI4 port.

Reads and writes are arbitrated separately (:class:`AxiReadArbiter`, :class:`AxiWriteArbiter`),
so a graph's loads and stores can be put on different ports. Both prefix every ID with the
manager's index: the shared port's ID is ``{index, id}`` (``id`` in the low
``config.axi_id_width`` bits), ``config.axi_id_width + ceil(log2 n)`` bits wide, and responses
(R, B) find their manager by that prefix. Responses of different managers may therefore return in
any order, and interleaved, as AXI4 allows between IDs; each manager's own responses come back in
the subordinate's order for its IDs, with the ID it issued.
"""

from __future__ import annotations

from typing import Any

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from ..config import HwConfig
from .axi import AXI4Signature

__all__ = ["AxiReadArbiter", "AxiWriteArbiter"]


def _count(who: str, what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{who} {what} must be a positive integer, not {value!r}")
    if value < 1:
        raise ValueError(f"{who} {what} must be a positive integer, not {value!r}")
    return value


def _config(who: str, config: object) -> HwConfig:
    if not isinstance(config, HwConfig):
        raise TypeError(f"{who} config must be a HwConfig, not {config!r}")
    return config


def _index_bits(n: int) -> int:
    """Bits of a manager index, ``ceil(log2 n)`` (0 for one manager)."""
    return (n - 1).bit_length()


class _Arbiter(wiring.Component):
    """Shared constructor: ``n`` managers of one half (read or write) onto one port."""

    _who = ""
    _read = True

    def __init__(self, *, n: int, config: HwConfig):
        who = self._who
        self._n = n = _count(who, "manager count", n)
        self._config = config = _config(who, config)
        read, write = self._read, not self._read
        manager = AXI4Signature.for_config(config, read=read, write=write)
        port = AXI4Signature(
            addr_width=config.axi_addr_width,
            data_width=config.axi_data_width,
            id_width=config.axi_id_width + _index_bits(n),
            read=read,
            write=write,
        )
        super().__init__({"managers": In(manager).array(n), "axi": Out(port)})

    @property
    def n(self) -> int:
        return self._n

    def _grant(self, m: Module, prefix: str, room: Any = 1) -> tuple[Any, Any]:
        """Round-robin on the address channel ``prefix`` (``"ar"`` or ``"aw"``), offering a request
        only while ``room``; returns ``(grant, handshake)``.

        The pick is combinational from the managers' ``valid`` and the last grant; once offered
        and not taken, the grant is held (``locked``) so that the payload stays stable although a
        manager with a higher priority may raise ``valid`` meanwhile (AXI4 A3.2.1).
        """
        n, port = self._n, self.axi
        valids = [getattr(mgr, f"{prefix}valid") for mgr in self.managers]
        last = Signal(range(n), init=n - 1, name=f"{prefix}_last")
        pick = Signal(range(n), name=f"{prefix}_pick")
        with m.Switch(last):
            for prev in range(n):
                with m.Case(prev):
                    # Lowest priority first: the last assignment that applies wins.
                    for k in range(n, 0, -1):
                        with m.If(valids[(prev + k) % n]):
                            m.d.comb += pick.eq((prev + k) % n)
        locked = Signal(name=f"{prefix}_locked")
        held = Signal(range(n), name=f"{prefix}_held")
        grant = Signal(range(n), name=f"{prefix}_grant")
        m.d.comb += grant.eq(Mux(locked, held, pick))
        valid, ready = getattr(port, f"{prefix}valid"), getattr(port, f"{prefix}ready")
        fields = ("addr", "len", "size", "burst")
        with m.Switch(grant):
            for i, mgr in enumerate(self.managers):
                with m.Case(i):
                    m.d.comb += [
                        valid.eq(getattr(mgr, f"{prefix}valid") & room),
                        getattr(mgr, f"{prefix}ready").eq(ready & room),
                        getattr(port, f"{prefix}id").eq(
                            Cat(getattr(mgr, f"{prefix}id"), Const(i, _index_bits(n)))
                        ),
                        *(getattr(port, prefix + f).eq(getattr(mgr, prefix + f)) for f in fields),
                    ]
        done = valid & ready
        with m.If(done):
            m.d.sync += [locked.eq(0), last.eq(grant)]
        with m.Elif(valid):
            m.d.sync += [locked.eq(1), held.eq(grant)]
        return grant, done

    def _route(self, m: Module, prefix: str, broadcast: tuple[str, ...]) -> None:
        """Responses on channel ``prefix`` (``"r"`` or ``"b"``) to the manager named by the ID's
        index bits, with the manager's own ID bits; ``broadcast`` signals go to every manager.
        An ID whose index names no manager (only a faulty subordinate sends one) stalls."""
        port, idw = self.axi, self._config.axi_id_width
        rid = getattr(port, f"{prefix}id")
        for mgr in self.managers:
            m.d.comb += getattr(mgr, f"{prefix}id").eq(rid[:idw])
            m.d.comb += [getattr(mgr, prefix + s).eq(getattr(port, prefix + s)) for s in broadcast]
        with m.Switch(rid[idw:]):
            for i, mgr in enumerate(self.managers):
                with m.Case(i):
                    m.d.comb += [
                        getattr(mgr, f"{prefix}valid").eq(getattr(port, f"{prefix}valid")),
                        getattr(port, f"{prefix}ready").eq(getattr(mgr, f"{prefix}ready")),
                    ]


class AxiReadArbiter(_Arbiter):
    """``n`` AXI4 read managers onto one AXI4 read port.

    Parameters (keyword-only)
    -------------------------
    n : int
        Managers, a positive integer.
    config : HwConfig
        ``axi_addr_width``, ``axi_data_width`` and ``axi_id_width`` (the managers' ID width).

    Ports
    -----
    managers : In(AXI4Signature(read only)).array(n)
        The managers (e.g. :class:`~step_hw.memory.LinearLoad`'s ``axi``), ``axi_id_width``-bit IDs.
    axi : Out(AXI4Signature(read only))
        The shared port, ``axi_id_width + ceil(log2 n)``-bit IDs (``{index, id}``).

    Protocol
        AR: round-robin among the managers with ``arvalid``; the request offered on ``axi`` is
        held until taken. R: each beat goes to the manager named by ``rid``'s index bits, with
        the manager's ID; ``rready`` is that manager's ``rready``. Nothing is buffered: no beat
        is lost, duplicated or reordered, and R beats of different managers may arrive in any
        order or interleaved. With ``n == 1`` the arbiter is wires.
    Latency
        None: AR and R pass combinationally (``arvalid``/``rvalid`` to the other side in the same
        cycle; no path from a ``ready`` to a ``valid``).
    Throughput
        One AR and one R beat per cycle.
    Fairness
        Round-robin from the last manager granted: a waiting manager is granted within ``n``
        AR handshakes.
    """

    _who = "AxiReadArbiter"
    _read = True

    def __init__(self, *, n: int, config: HwConfig):
        super().__init__(n=n, config=config)

    def elaborate(self, platform) -> Module:
        m = Module()
        if self._n == 1:
            wiring.connect(m, wiring.flipped(self.managers[0]), wiring.flipped(self.axi))
            return m
        self._grant(m, "ar")
        self._route(m, "r", ("data", "resp", "last"))
        return m


class AxiWriteArbiter(_Arbiter):
    """``n`` AXI4 write managers onto one AXI4 write port.

    Parameters (keyword-only)
    -------------------------
    n : int
        Managers, a positive integer.
    config : HwConfig
        ``axi_addr_width``, ``axi_data_width`` and ``axi_id_width`` (the managers' ID width).
    max_outstanding : int
        Bursts granted on AW whose W beats have not all passed (default
        ``n * config.max_outstanding``, at least 2): the depth of the order FIFO.

    Ports
    -----
    managers : In(AXI4Signature(write only)).array(n)
        The managers (e.g. :class:`~step_hw.memory.LinearStore`'s ``axi``).
    axi : Out(AXI4Signature(write only))
        The shared port, ``axi_id_width + ceil(log2 n)``-bit IDs (``{index, id}``).

    Protocol
        AW: round-robin among the managers with ``awvalid`` while the order FIFO has room; the
        granted manager's index enters the FIFO. W: AXI4 forbids interleaving write data, so W
        beats come only from the manager at the FIFO's head, in AW order, until its ``wlast``;
        another manager's beats wait (a manager may offer W before its AW, but they pass only
        after the AW is granted). B: routed by ``bid``'s index bits, as R in
        :class:`AxiReadArbiter`. With ``n == 1`` the arbiter is wires. Since no W beat leaves
        before its AW handshake, the subordinate must not wait for ``wvalid`` before raising
        ``awready`` (AXI4 A3.3.1 allows it to); the project's stores make the same assumption,
        and cocotbext-axi's ``AxiRamWrite`` and the usual interconnects do not wait.
    Latency
        AW and B: none (combinational). W: a burst's first beat can pass the cycle after its AW
        handshake (the FIFO is registers; the project's :class:`~step_hw.queue.Queue` would add
        a second cycle); within a burst, none.
    Throughput
        One AW and one W beat per cycle; W keeps one beat per cycle across bursts when the next
        burst's AW was granted before the current burst's last beat.
    Fairness
        Round-robin on AW as :class:`AxiReadArbiter`; W follows AW.
    """

    _who = "AxiWriteArbiter"
    _read = False

    def __init__(self, *, n: int, config: HwConfig, max_outstanding: int | None = None):
        super().__init__(n=n, config=config)
        if max_outstanding is None:
            max_outstanding = max(2, self._n * self._config.max_outstanding)
        self._depth = _count(self._who, "max_outstanding", max_outstanding)

    @property
    def max_outstanding(self) -> int:
        return self._depth

    def elaborate(self, platform) -> Module:
        m = Module()
        n, port = self._n, self.axi
        if n == 1:
            wiring.connect(m, wiring.flipped(self.managers[0]), wiring.flipped(self.axi))
            return m
        # lib.fifo.SyncFIFO rather than Queue: its head is readable the cycle after a push (the
        # buffered FIFO behind Queue takes two), and a few bits of registers need no block RAM.
        m.submodules.order = order = fifo.SyncFIFO(width=_index_bits(n), depth=self._depth)
        grant, aw_done = self._grant(m, "aw", room=order.w_rdy)
        m.d.comb += [order.w_data.eq(grant), order.w_en.eq(aw_done)]

        head = order.r_data
        with m.Switch(head):
            for i, mgr in enumerate(self.managers):
                with m.Case(i):
                    m.d.comb += [
                        port.wvalid.eq(order.r_rdy & mgr.wvalid),
                        mgr.wready.eq(order.r_rdy & port.wready),
                        port.wdata.eq(mgr.wdata),
                        port.wstrb.eq(mgr.wstrb),
                        port.wlast.eq(mgr.wlast),
                    ]
        m.d.comb += order.r_en.eq(port.wvalid & port.wready & port.wlast)
        self._route(m, "b", ("resp",))
        return m
