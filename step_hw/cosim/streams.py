"""cocotb building blocks for `amaranth.lib.stream` ports of Verilated Amaranth designs.

Imported only inside cocotb simulations (never by pytest itself): by the whole-graph bench
(:mod:`step_hw.cosim.bench`) and the block-level benches of ``rtl_tests/``. Amaranth flattens a stream
port ``o`` into the Verilog ports ``o__valid``, ``o__ready`` and ``o__payload``.

Every coroutine here works on the same two-phase cycle: after a rising edge it drives its
outputs, then waits for ``ReadOnly`` (all combinational logic settled for this cycle) and samples
the handshake. A transfer is ``valid & ready`` at that point, i.e. at the next rising edge. This
avoids depending on whether the simulator shows pre- or post-edge values right after the edge.
"""

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from cocotb.handle import SimHandleBase
from cocotb.triggers import ReadOnly, RisingEdge

# Shared with the Amaranth-simulator tier, so both tiers use the same traffic.
from step_hw.testing import PATTERNS, Transfer, pauses

__all__ = [
    "PATTERNS",
    "StreamMonitor",
    "StreamSink",
    "StreamSource",
    "Transfer",
    "pauses",
    "reset",
]


async def reset(clk: SimHandleBase, rst: SimHandleBase, *, cycles: int = 2) -> None:
    """Hold the synchronous reset ``rst`` for ``cycles`` rising edges of ``clk``."""
    rst.value = 1
    for _ in range(cycles):
        await RisingEdge(clk)
    rst.value = 0


class StreamSource:
    """Drives ``<prefix>__valid``/``__payload`` and offers payloads in order, with pauses.

    Obeys the stream rules: ``valid`` is not withdrawn and the payload does not change until the
    transfer, and ``valid`` does not depend on ``ready``.
    """

    def __init__(self, dut: SimHandleBase, prefix: str, clk: SimHandleBase, pause: Iterator[bool]):
        self._valid = getattr(dut, f"{prefix}__valid")
        self._ready = getattr(dut, f"{prefix}__ready")
        self._payload = getattr(dut, f"{prefix}__payload")
        self._clk = clk
        self._pause = pause
        self._valid.value = 0

    async def send(self, payloads: Iterable[int]) -> None:
        for payload in payloads:
            while next(self._pause):  # idle cycles before offering this payload
                self._valid.value = 0
                await RisingEdge(self._clk)
            self._valid.value = 1
            self._payload.value = payload
            while True:
                await ReadOnly()
                taken = bool(self._ready.value)
                await RisingEdge(self._clk)
                if taken:
                    break
        self._valid.value = 0


class StreamSink:
    """Drives ``<prefix>__ready`` from a pause pattern, forever (start it with ``start_soon``)."""

    def __init__(self, dut: SimHandleBase, prefix: str, clk: SimHandleBase, pause: Iterator[bool]):
        self._ready = getattr(dut, f"{prefix}__ready")
        self._clk = clk
        self._pause = pause
        self._ready.value = 0

    async def run(self) -> None:
        while True:
            self._ready.value = 0 if next(self._pause) else 1
            await RisingEdge(self._clk)


@dataclass
class StreamMonitor:
    """Records the transfers on a stream and checks the producer's side of the protocol.

    Raises ``AssertionError`` (failing the cocotb test) when ``valid`` drops or the payload
    changes while a payload is offered and not yet taken.
    """

    dut: SimHandleBase
    prefix: str
    clk: SimHandleBase
    transfers: list[Transfer] = field(default_factory=list)

    async def run(self) -> None:
        valid = getattr(self.dut, f"{self.prefix}__valid")
        ready = getattr(self.dut, f"{self.prefix}__ready")
        payload = getattr(self.dut, f"{self.prefix}__payload")
        stalled: int | None = None  # payload offered but not taken in the previous cycle
        for cycle in itertools.count():
            await ReadOnly()
            v, r = bool(valid.value), bool(ready.value)
            p = payload.value.to_unsigned() if v else None
            if stalled is not None:
                assert v, f"{self.prefix}.valid dropped in cycle {cycle} before the transfer"
                assert p == stalled, (
                    f"{self.prefix}.payload changed from {stalled:#x} to {p:#x} in cycle {cycle} "
                    "before the transfer"
                )
            if v and r:
                self.transfers.append(Transfer(cycle, p))
            stalled = p if v and not r else None
            await RisingEdge(self.clk)
