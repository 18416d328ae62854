"""The off-chip memory that co-simulation attaches to an elaborated graph, and that the simulator's
``rtl`` profile models.

One description, two readers: the fast co-simulation tier (:mod:`step_hw.cosim.fast_top`) builds
its behavioural memory from a :class:`MemoryModel`, and :meth:`sim.profiles.RtlProfile.for_memory`
takes its latencies from the same object. No Amaranth here (``import sim`` loads none).

The model, per AXI port (``HwConfig.axi_ports`` sets the number of ports, the *channels*;
``HwConfig.axi_data_width`` the bytes per beat; one beat per cycle per channel, so a channel's
peak is ``axi_data_width / 8`` bytes per cycle):

* **reads**: an AR request is taken while the memory's request queue has room (``outstanding``
  bursts; two in cocotbext-axi's ``AxiRamRead``, which the timing was calibrated against: AR
  ``j`` is taken in cycle ``c`` only if burst ``j - outstanding`` left the queue by cycle
  ``c - 2``; the memory takes a burst from the queue once the beat two before the previous
  burst's last has been offered, so about ``outstanding + 1`` bursts are in flight and their
  latencies overlap); a burst's first R beat is offered ``latency`` cycles after its AR
  handshake at the earliest (``latency + start_up`` for the channel's first burst), the others
  ``beat_interval`` cycles after the previous beat's handshake, in AR order;
* **writes**: AW likewise (``outstanding`` requests); W beats are taken once their burst's AW was
  taken, at most one every ``beat_interval`` cycles; B follows a burst's last W beat after
  ``write_response`` cycles (``write_response + start_up`` for the channel's first burst), in AW
  order, at most one per cycle;
* **back-pressure** (a run's pattern, not part of the model): ``always`` (none), ``periodic``
  (one cycle in four) or ``random`` (each cycle with probability 1/2, from a seeded LFSR per
  channel) pauses on every ready and valid the memory drives, and on the graph's Source and Sink
  streams;
* an access outside the memory map's extent, or a burst type other than INCR, is answered with
  ``SLVERR`` and raises the memory's sticky error flag.

A channel's peak is ``axi_data_width / 8 / beat_interval`` bytes per cycle
(:meth:`MemoryModel.peak_bytes_per_cycle`).

Presets: :meth:`MemoryModel.axi_ram` (the default: latency 2, write response 2, two requests,
cocotbext-axi's RAM); :meth:`MemoryModel.hbm` (an HBM-like latency: 64 cycles to the first read
beat and to the write response, about 100 ns at 600 MHz, with 16 requests queued so that a
controller with enough bursts in flight still streams a beat per cycle); :meth:`MemoryModel.paper`
(the paper artifact's ``HBMConfig`` channel, ``STEP_REFERENCE.md`` §5.4: latency 2, one 64-byte
request every 2 cycles, 14 cycles of start-up before a channel's first answer; its
``outstanding`` is unused, i.e. unbounded, here the largest queue, 16).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MAX_BEAT_INTERVAL",
    "MAX_OUTSTANDING",
    "POP_LEAD",
    "PRESETS",
    "REQUEST_QUEUE",
    "MemoryModel",
]

#: Requests an AR (AW) queue of cocotbext-axi's RAM holds (its ``queue_occupancy_limit``).
REQUEST_QUEUE = 2
#: The memory takes a read burst from its request queue once the beat ``POP_LEAD`` before the
#: previous burst's last has been offered (cocotbext-axi's ``AxiRamRead``).
POP_LEAD = 2
#: The largest ``outstanding`` (the fast tier's ring of bursts holds twice as many).
MAX_OUTSTANDING = 16
#: The presets' names (``MemoryModel.<name>()``), as the command line offers them.
PRESETS = ("axi_ram", "hbm", "paper")
#: The largest ``beat_interval``.
MAX_BEAT_INTERVAL = 16

# field -> (smallest, largest)
_RANGES = {
    "latency": (1, 2**16 - 1),
    "write_response": (1, 2**16 - 1),
    "outstanding": (1, MAX_OUTSTANDING),
    "beat_interval": (1, MAX_BEAT_INTERVAL),
    "start_up": (0, 2**16 - 1),
}


@dataclass(frozen=True)
class MemoryModel:
    """Timing of the co-simulated memory, per channel (AXI port), in cycles (module docstring).

    Attributes:
        latency: AR handshake to the first R beat of its burst (1 to 65535).
        write_response: a burst's last W beat to its B response (1 to 65535).
        outstanding: requests the AR (AW) queue holds (1 to 16).
        beat_interval: cycles per R (W) beat at the most (1 to 16): the channel's bandwidth.
        start_up: extra cycles before a channel's first R beat and first B response (0 to 65535).
    """

    latency: int = 2
    write_response: int = 2
    outstanding: int = REQUEST_QUEUE
    beat_interval: int = 1
    start_up: int = 0

    def __post_init__(self):
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(
                    f"MemoryModel.{name} must be an integer in [{low}, {high}], not {value!r}"
                )

    @classmethod
    def axi_ram(cls) -> MemoryModel:
        """cocotbext-axi's ``AxiRam`` timing (2 cycles to the first beat and to B)."""
        return cls(latency=2, write_response=2)

    @classmethod
    def hbm(cls) -> MemoryModel:
        """An HBM-like latency: 64 cycles to the first read beat and to the write response,
        16 requests queued."""
        return cls(latency=64, write_response=64, outstanding=MAX_OUTSTANDING)

    @classmethod
    def paper(cls) -> MemoryModel:
        """A channel of the paper artifact's ``HBMConfig(64, n, 2, 2, 1, 14)``: latency 2, a
        request every 2 cycles (with 64-byte beats, ``axi_data_width=512``, its 32 bytes per
        cycle), 14 cycles of start-up; requests unbounded there, 16 here."""
        return cls(
            latency=2, write_response=2, outstanding=MAX_OUTSTANDING, beat_interval=2, start_up=14
        )

    def peak_bytes_per_cycle(self, axi_data_width: int) -> float:
        """A channel's peak bandwidth with ``axi_data_width``-bit beats."""
        return axi_data_width / 8 / self.beat_interval

    @property
    def tag(self) -> str:
        """A short name for run folders: ``l2w2``, with ``o<outstanding>``, ``i<beat_interval>``
        and ``s<start_up>`` when they are not the default."""
        tag = f"l{self.latency}w{self.write_response}"
        if self.outstanding != REQUEST_QUEUE:
            tag += f"o{self.outstanding}"
        if self.beat_interval != 1:
            tag += f"i{self.beat_interval}"
        if self.start_up:
            tag += f"s{self.start_up}"
        return tag
