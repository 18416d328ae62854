"""Off-chip memory as a shared fluid server.

The paper's memory node has ``channels`` channels; each accepts a ``request_bytes`` request every
``interval`` cycles and answers ``latency`` cycles later; the first request waits ``startup``
cycles more. Peak bandwidth is ``channels * request_bytes / interval`` bytes per cycle (32 x 64 B /
2 = 1024 B/cycle in the paper's evaluation).

Instead of one event per 64-byte request, a transfer (one tile) is a fluid flow: every active
transfer is served at ``min(cap, bandwidth / n_active)`` bytes per cycle, where ``cap`` is what
one load or store node can issue (``dispatch`` requests per cycle). All transfers share one cap,
so the share is equal and the model keeps one virtual clock of service per transfer: starting or
finishing a transfer costs ``O(log n)``. A transfer completes when its bytes are served, plus
``latency`` (and ``startup`` while the memory is cold).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from .checks import check_int

__all__ = ["FluidMemory", "MemoryConfig"]


#: Each :class:`MemoryConfig` field's smallest value.
_MINIMUM = {
    "channels": 1,
    "request_bytes": 1,
    "interval": 1,
    "latency": 0,
    "startup": 0,
    "dispatch": 1,
}


@dataclass(frozen=True)
class MemoryConfig:
    """Parameters of the off-chip memory model (defaults: the paper's evaluation)."""

    channels: int = 32
    request_bytes: int = 64
    interval: int = 2
    latency: int = 2
    startup: int = 14
    dispatch: int = 1  # requests one memory operator issues per cycle

    def __post_init__(self):
        # Counts and divisors (channels, bytes, cycles per request, requests per cycle) must be
        # positive, latencies non-negative; all are whole numbers (cycles and bytes), and a bool
        # is no number here.
        for name, low in _MINIMUM.items():
            check_int("MemoryConfig", name, getattr(self, name), low)

    @property
    def bandwidth(self) -> float:
        """Peak bytes per cycle."""
        return self.channels * self.request_bytes / self.interval

    @property
    def node_cap(self) -> float:
        """Bytes per cycle one memory operator can move."""
        return self.dispatch * self.request_bytes

    def request_bytes_of_tile(self, rows: int, cols: int, elem_bytes: int) -> int:
        """Bytes a tile occupies on the bus: every row rounds up to whole requests."""
        return rows * math.ceil(cols * elem_bytes / self.request_bytes) * self.request_bytes


class FluidMemory:
    """Processor-sharing model of the memory channels; see the module docstring."""

    def __init__(self, config: MemoryConfig):
        self.config = config
        self._served = 0.0  # bytes each active transfer has received since time 0 (virtual clock)
        self._t = 0.0
        self._active: list[
            tuple[float, int, float, Callable[[float], None]]
        ] = []  # (mark, id, delay, done)
        self._next_id = 0
        self._cold_until: float | None = None
        self.busy_bytes = 0

    def _rate(self) -> float:
        n = len(self._active)
        return min(self.config.node_cap, self.config.bandwidth / n) if n else 0.0

    def _advance(self, now: float) -> None:
        if now > self._t and self._active:
            self._served += self._rate() * (now - self._t)
        self._t = max(self._t, now)

    def start(self, now: float, nbytes: int, done: Callable[[float], None]) -> None:
        """Begin moving ``nbytes`` at ``now``; ``done(t)`` is called with the completion time."""
        self._advance(now)
        if self._cold_until is None:
            self._cold_until = now + self.config.startup
        # Requests issued while the channels start up pay the start-up time once.
        delay = self.config.latency + (self.config.startup if now < self._cold_until else 0)
        self.busy_bytes += nbytes
        heapq.heappush(self._active, (self._served + max(nbytes, 0), self._next_id, delay, done))
        self._next_id += 1

    def next_completion(self) -> float | None:
        """When the first active transfer will have been served, at the current sharing."""
        if not self._active:
            return None
        mark = self._active[0][0]
        rate = self._rate()
        return self._t + max(0.0, mark - self._served) / rate

    def complete_due(self, now: float) -> None:
        """Finish every transfer served by ``now`` and report their completion times."""
        self._advance(now)
        eps = 1e-6
        while self._active and self._active[0][0] <= self._served + eps:
            _, _, delay, done = heapq.heappop(self._active)
            done(now + delay)
