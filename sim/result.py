"""What a simulation reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["NodeStats", "QueueCurve", "SimResult"]


@dataclass
class NodeStats:
    """Cycle accounting of one node: every cycle until the end of the run is in exactly one bin."""

    name: str
    kind: str
    busy: int = 0  # computing or waiting for its own off-chip transfers
    stalled_in: int = 0  # waiting for an input token
    stalled_out: int = 0  # waiting for room in an output queue
    idle: int = 0  # finished before the run ended
    flops: int = 0
    compute_bw: int = 0
    footprint_bytes: int = 0  # largest on-chip bytes held at once
    finish: int = 0


@dataclass(frozen=True)
class QueueCurve:
    """The production/consumption curve of one queue, in counted tokens (queue sizing).

    ``n`` tokens entered, the first at ``first_in`` and the last at ``last_in``; the consumer took
    its first at ``first_out`` (``None``: never).
    """

    n: int
    first_in: float | None
    last_in: float | None
    first_out: float | None

    @property
    def rate(self) -> float:
        """Tokens per cycle while the producer was producing (``n`` if all came at once)."""
        if self.n <= 1 or self.first_in is None or self.last_in is None:
            return float(self.n)
        span = self.last_in - self.first_in
        return (self.n - 1) / span if span > 0 else float(self.n)


@dataclass
class SimResult:
    """The outcome of :func:`sim.simulate`.

    Attributes:
        cycles: the run's cycles as the profile ends it (``TimingProfile.run_cycles``): when
            the last node finished (the paper profile), or when the graph's ``done`` rises (the
            rtl profile: a node may still be at work then, and its statistics run on to its end).
        nodes: per-node statistics by name.
        offchip_read_bytes / offchip_write_bytes: traffic counted per tile (the cost model's bytes).
        queue_high_water: largest occupancy (data tokens) seen on each stream, by stream name.
        queue_full_cycles: cycles the producer of each stream spent waiting for room in its queue.
        queue_curves: each queue's production/consumption curve (:class:`QueueCurve`).
        memory: off-chip tensors after the run (functional mode; float tensors are absent in
            timing-only mode).
        streams: tokens of every stream (functional mode only).
        events: number of engine events processed.
        profile: the name of the timing profile that ran (``"paper"``, ``"rtl"``).
        sends: with ``trace=True``, the cycle each token (stop and done tokens included) entered
            each stream's queue, by stream name (the simulator's side of the RTL's per-queue
            handshake trace, ``step_hw.cosim.run(..., trace=True)``); empty otherwise.
        spans: with ``trace=True``, each node's busy, stalled and idle spans
            ``(node, state, start, end)`` (:func:`sim.trace.to_trace_events`); empty otherwise.
        traced: whether the run was ``simulate(..., trace=True)``.

    FLOPs are the functions' FLOPs on the tiles each compute node (Map, Accum, Scan) actually
    received, under every profile. On-chip footprints (``peak_onchip_bytes``) are a paper-profile
    figure (staging tiles, accumulators); the ``rtl`` profile models queues and pipelines, not
    on-chip storage, and reports none (queue storage: ``step size-queues``; area: ``make bench``).
    """

    cycles: int
    nodes: dict[str, NodeStats]
    offchip_read_bytes: int
    offchip_write_bytes: int
    queue_high_water: dict[str, int]
    memory: dict[str, np.ndarray] = field(repr=False)
    streams: dict[str, list[Any]] = field(repr=False)
    events: int = 0
    queue_full_cycles: dict[str, int] = field(default_factory=dict)
    queue_curves: dict[str, QueueCurve] = field(default_factory=dict, repr=False)
    spans: list[tuple[str, str, int, int]] = field(default_factory=list, repr=False)
    profile: str = ""
    sends: dict[str, list[float]] = field(default_factory=dict, repr=False)
    traced: bool = False

    @property
    def offchip_bytes(self) -> int:
        return self.offchip_read_bytes + self.offchip_write_bytes

    @property
    def flops(self) -> int:
        return sum(n.flops for n in self.nodes.values())

    @property
    def allocated_compute(self) -> int:
        """FLOPs per cycle allocated to all compute nodes."""
        return sum(n.compute_bw for n in self.nodes.values())

    @property
    def compute_utilization(self) -> float:
        """Achieved FLOPs per cycle over allocated FLOPs per cycle."""
        alloc = self.allocated_compute
        return self.flops / (self.cycles * alloc) if self.cycles and alloc else 0.0

    @property
    def peak_onchip_bytes(self) -> int:
        """Sum over nodes of the largest on-chip footprint each held (all assumed live at once)."""
        return sum(n.footprint_bytes for n in self.nodes.values())

    def summary(self) -> str:
        """A short human-readable report."""
        lines = [
            f"cycles            {self.cycles}",
            f"off-chip read     {self.offchip_read_bytes} B",
            f"off-chip written  {self.offchip_write_bytes} B",
            f"FLOPs             {self.flops}",
            f"compute util.     {self.compute_utilization:.3f}",
            f"peak on-chip      {self.peak_onchip_bytes} B"
            if self.profile != "rtl"
            else "peak on-chip      not modelled by the rtl profile (see step size-queues)",
        ]
        top = sorted(self.nodes.values(), key=lambda n: -n.busy)[:5]
        lines.append("busiest nodes     " + ", ".join(f"{n.name} ({n.busy})" for n in top))
        return "\n".join(lines)
