"""The off-chip memory that co-simulation attaches to an elaborated graph, and that the simulator's
``rtl`` profile models.

One description, two readers: the fast co-simulation tier (:mod:`step_hw.cosim.fast_top`) builds
its behavioural memory from a :class:`MemoryModel`, and :meth:`sim.profiles.RtlProfile.for_memory`
takes its latencies from the same object. No Amaranth here (``import sim`` loads none).

The model, per AXI port (``HwConfig.axi_ports`` sets the number of ports, the *channels*;
``HwConfig.axi_data_width`` the bytes per beat; one beat per cycle per channel, so a channel's
peak is ``axi_data_width / 8`` bytes per cycle):

* **reads**: an AR request is taken while the memory's request queue has room (two bursts, as
  cocotbext-axi's ``AxiRamRead``, which the timing was calibrated against: AR ``j`` is taken in
  cycle ``c`` only if burst ``j - 2`` left the queue by cycle ``c - 2``); a burst's first R beat
  is offered ``latency`` cycles after its AR handshake at the earliest, the others one per cycle
  after the previous beat's handshake, in AR order;
* **writes**: AW likewise (two requests); W beats are taken one per cycle once their burst's AW
  was taken; B follows a burst's last W beat after ``write_response`` cycles, in AW order;
* **back-pressure** (a run's pattern, not part of the model): ``always`` (none), ``periodic``
  (one cycle in four) or ``random`` (each cycle with probability 1/2, from a seeded LFSR per
  channel) pauses on every ready and valid the memory drives, and on the graph's Source and Sink
  streams;
* an access outside the memory map's extent, or a burst type other than INCR, is answered with
  ``SLVERR`` and raises the memory's sticky error flag.

Presets: :meth:`MemoryModel.axi_ram` (the default: latency 2, write response 2, cocotbext-axi's
RAM) and :meth:`MemoryModel.hbm` (an HBM-like latency: 64 cycles to the first read beat and to the
write response, about 100 ns at 600 MHz; bandwidth stays the ports' one beat per cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["REQUEST_QUEUE", "MemoryModel"]

#: Requests an AR (AW) queue of the memory holds (cocotbext-axi's ``queue_occupancy_limit``).
REQUEST_QUEUE = 2


@dataclass(frozen=True)
class MemoryModel:
    """Latencies of the co-simulated memory, in cycles (module docstring).

    Attributes:
        latency: AR handshake to the first R beat of its burst (at least 1).
        write_response: a burst's last W beat to its B response (at least 1).
    """

    latency: int = 2
    write_response: int = 2

    def __post_init__(self):
        for name in ("latency", "write_response"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**16:
                raise ValueError(
                    f"MemoryModel.{name} must be an integer in [1, 65535], not {value!r}"
                )

    @classmethod
    def axi_ram(cls) -> MemoryModel:
        """cocotbext-axi's ``AxiRam`` timing (2 cycles to the first beat and to B)."""
        return cls(latency=2, write_response=2)

    @classmethod
    def hbm(cls) -> MemoryModel:
        """An HBM-like latency: 64 cycles to the first read beat and to the write response."""
        return cls(latency=64, write_response=64)

    @property
    def tag(self) -> str:
        """A short name for run folders: ``l2w2``."""
        return f"l{self.latency}w{self.write_response}"
