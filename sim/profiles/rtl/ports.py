"""Shared AXI ports of the ``rtl`` profile (:mod:`sim.profiles.rtl`), cycle by cycle.

With ``HwConfig.axi_ports`` several loads (stores) share one AXI read (write) port behind an
``AxiReadArbiter`` (``AxiWriteArbiter``, ``step_hw/memory/arbiter.py``) and one cocotbext-axi
RAM. A :class:`ReadPort` / :class:`WritePort` steps the arbiter's grant (:class:`Arbiter`), the
RAM's request queue and its one-beat-per-cycle data channel a cycle at a time, as far as the
engine's clock allows; the loads and stores behind it (``loads._Load``, ``stores._Store``)
offer their requests and take their beats through it. A port with one operator is plain wires
and is not modelled here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from step_hw.memory_model import POP_LEAD

if TYPE_CHECKING:
    from .profile import RtlProfile

__all__ = ["Arbiter", "Port", "PortRun", "ReadPort", "WritePort"]


class PortRun:
    """The shared AXI ports of one simulation run: the nodes waiting for a port's schedule (their
    engine process indices) and the last cycle any of the ports moved, to tell a deadlock (only
    waiting nodes left, nothing moving) from a wait."""

    def __init__(self):
        self.waiting: set[int] = set()
        self.moved = 0.0


class Arbiter:
    """The address-channel grant of ``AxiReadArbiter`` / ``AxiWriteArbiter``
    (``step_hw/memory/arbiter.py``, ``Arbiter._grant``): combinational, so a request can be taken
    in the cycle it is offered; round-robin from the manager granted last (first pick: manager
    0); a request offered while the subordinate is not ready stays granted (``locked``) until it is
    taken, even if a manager of higher priority raises ``valid`` meanwhile."""

    def __init__(self, n: int):
        self.n = n
        self.last = n - 1
        self.locked = False
        self.held = 0

    def step(self, valid: list[bool], ready: bool) -> int | None:
        """One cycle: the manager whose request the subordinate takes, if any."""
        if self.locked:
            grant = self.held
        else:
            n, last = self.n, self.last
            grant = next((g for g in ((last + k) % n for k in range(1, n + 1)) if valid[g]), None)
            if grant is None:
                return None
        if ready:
            self.locked, self.last = False, grant
            return grant
        self.locked, self.held = True, grant
        return None


class Port:
    """A shared AXI port, simulated cycle by cycle (``advance``) behind the engine's clock.

    Its managers' requests depend on what other nodes do (a load's queues drain as its consumer
    takes tiles, a store's tiles arrive): the port is simulated up to the latest cycle those
    cannot change any more, and a manager that needs a result beyond it waits (its node sleeps,
    ``_Clocked._wait``) until the engine's clock gets there.
    """

    lead = 0  # cycles beyond the engine's clock that the managers' requests are already known

    def __init__(self, profile: RtlProfile, name: str, n: int, run: PortRun):
        self.p = profile
        self.name = name
        self.managers: list[Any] = [None] * n
        self.arbiter = Arbiter(n)
        self.run = run
        self.cycle = 0  # the next cycle to simulate

    def advance(self, now: float) -> None:
        """Simulate the cycles up to ``now`` plus ``lead``, skipping those in which nothing can
        happen (``_next``)."""
        end = math.floor(now) + self.lead
        c = self.cycle
        while c <= end:
            skip_to = self._next(c)
            if skip_to > c:
                skip_to = end + 1 if skip_to > end else math.ceil(skip_to)
                self._skipped(c, skip_to)
                c = skip_to
                continue
            if self._step(c):
                self.run.moved = c
            c += 1
        self.cycle = c

    def _step(self, c: int) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _next(self, c: int) -> float:
        """The first cycle from ``c`` on in which a handshake may happen, from what the managers
        know at the engine's clock (a request they cannot tell yet is not offered before it)."""
        if self.arbiter.locked:
            return c
        return min(m.offered_from(c) for m in self.managers)

    def _skipped(self, c: int, to: int) -> None:
        """Cycles ``c`` to ``to - 1`` passed without a handshake."""


class ReadPort(Port):
    """``m_axi_rd<i>`` with several loads: an ``AxiReadArbiter`` and cocotbext-axi's
    ``AxiRamRead`` (module docstring).

    Below, the calibrated RAM (``MemoryModel.axi_ram``). Another ``MemoryModel`` (the fast
    co-simulation tier's memory, ``step_hw/cosim/fast_top.py``, follows the same rules) changes
    three numbers: the AR queue holds ``memory_outstanding`` requests (AR ``j`` needs
    ``pop(j - memory_outstanding) <= c - 2``), a beat follows the previous one's handshake after
    ``beat_interval`` cycles, and the port's first burst waits ``start_up`` cycles more.

    The RAM (cocotbext-axi ``axi_slave.py``, ``AxiSlaveRead``; ``stream.py``): an AR sink whose
    queue holds 2 requests (``queue_occupancy_limit``; at each clock edge it samples the
    handshake and sets ``arready`` for the next cycle from its queue's fill), a process that
    takes one burst at a time from that queue and puts its beats into the R source's queue (also
    2), and the source, which drives a beat put at the edge ending cycle ``t`` from ``t + 2`` at
    the earliest, one beat per cycle. In cycles, with the port's bursts and beats in AR order,
    ``a(j)`` the AR handshake of burst ``j``, ``d(k)`` the cycle beat ``k`` is first offered and
    ``r(k)`` its handshake: the process takes burst ``j`` at ``pop(j) = max(a(j), put(j - 1))``,
    where burst ``j - 1``'s last beat ``L`` entered the R queue at ``put(j - 1) = max(pop(j - 1),
    d(L - 2) - 1)`` (the queue had room once beat ``L - 2`` left it); AR ``j`` is taken in cycle
    ``c`` only if ``pop(j - 2) <= c - 2`` (the sink sets ``arready`` before the process empties
    its queue at the same edge); ``d(k) = max(a(j) + 2, r(k - 1) + 1)`` for a burst's first beat,
    ``r(k - 1) + 1`` for the others (the R queue never makes a gap). ``rready`` is the owner's:
    low on a tile's last beat while the load's tile queue is full, which stalls every load
    behind it (the arbiter routes R by ID, but the RAM returns bursts in AR order).
    """

    def __init__(self, profile: RtlProfile, name: str, n: int, run: PortRun):
        super().__init__(profile, name, n, run)
        self.ar: list[int] = []  # AR handshake cycle of each burst
        self.owner: list[tuple[int, int]] = []  # (manager, its burst number) of each burst
        self.ends: list[int] = []  # index of the beat after each burst's last
        self.pops: list[int] = []  # cycle the RAM took each burst from its AR queue
        self.offered: list[int] = []  # cycle each beat is first offered (d)
        self.r: list[int] = []  # R handshake cycle of each beat
        self.head = 0  # the burst of the next beat
        self.bursts_of: list[list[int]] = [[] for _ in range(n)]  # per manager: its bursts' numbers

    def earliest_last_beat(self, g: int, n: int, beats: int) -> int:
        """A cycle before which the last R beat of manager ``g``'s burst ``n`` (``beats`` beats
        long) cannot be taken, from the cycles simulated so far (``advance``): beats leave in AR
        order, ``beat_interval`` cycles apart at the least, and a burst not requested yet is
        requested in the next cycle at the earliest and returns its first beat
        ``memory_latency`` cycles later. Lets a manager's node sleep until then (``_wait``)."""
        step, k = self.p.beat_interval, len(self.r)  # k: the next beat
        after = max(self.cycle, self.offered[k]) if k < len(self.offered) else self.cycle
        mine = self.bursts_of[g]
        if n < len(mine):
            return after + (self.ends[mine[n]] - 1 - k) * step
        ahead = self.ends[-1] - k if self.ends else 0  # beats requested and not yet taken
        first = max(after + ahead * step, self.cycle + self.p.memory_latency)
        return first + (beats - 1) * step

    def trace(self) -> dict[str, list[int]]:
        return {"ar": self.ar, "r": self.r}

    def _next(self, c: int) -> float:
        k = len(self.r)
        if self.head < len(self.ar):
            if k == len(self.offered) or self.offered[k] <= c:
                return c
            return min(self.offered[k], super()._next(c))
        return super()._next(c)

    def _pop(self, j: int) -> int | None:
        while len(self.pops) <= j:
            i = len(self.pops)
            t = self.ar[i]
            if i:
                t = max(t, self.pops[i - 1])
                k = self.ends[i - 1] - 1 - POP_LEAD  # POP_LEAD beats before burst i - 1's last
                if k >= 0:
                    if k >= len(self.offered):
                        return None  # not offered yet: after the current cycle
                    t = max(t, self.offered[k] - 1)
            self.pops.append(t)
        return self.pops[j]

    def _step(self, c: int) -> bool:
        moved = False
        # R: the next beat in AR order.
        k, j = len(self.r), self.head
        if j < len(self.ar):
            start = self.ends[j - 1] if j else 0
            if len(self.offered) == k:
                p = self.p
                d = self.r[-1] + p.beat_interval if k else -math.inf
                if k == start:
                    d = max(d, self.ar[j] + p.memory_latency + (p.start_up if j == 0 else 0))
                self.offered.append(d)
            if self.offered[k] <= c:
                g, n = self.owner[j]
                last = k == self.ends[j] - 1
                if not last or self.managers[g].r_ready(n, c):
                    self.r.append(c)
                    moved = True
                    if last:
                        self.head += 1
                        self.managers[g].r_done(n, c)
        # AR: the arbiter's pick, if the RAM's AR queue has room.
        valid = [m.ar_valid(c) for m in self.managers]
        if any(valid) or self.arbiter.locked:
            j = len(self.ar)
            q = self.p.memory_outstanding
            pop = self._pop(j - q) if j >= q else -math.inf
            g = self.arbiter.step(valid, pop is not None and pop <= c - 2)
            if g is not None:
                m = self.managers[g]
                n = len(m.ar)
                self.owner.append((g, n))
                self.bursts_of[g].append(len(self.ar))
                self.ar.append(c)
                self.ends.append((self.ends[-1] if self.ends else 0) + m.ar_done(c))
                moved = True
        return moved


class WritePort(Port):
    """``m_axi_wr<i>`` with several stores: an ``AxiWriteArbiter`` and cocotbext-axi's
    ``AxiRamWrite`` (module docstring).

    Another ``MemoryModel`` (as ``ReadPort``): the AW queue holds ``memory_outstanding``
    requests, W beats are taken ``beat_interval`` cycles apart, the port's first B waits
    ``start_up`` cycles more, and B responses leave in AW order, one per cycle.

    W beats pass in AW order (the arbiter's order FIFO: a burst's first beat the cycle after its
    AW at the earliest; the store's own W path needs ``aw_to_w``), one per cycle; ``wready`` is
    always high (``AxiSlaveWrite``'s process takes each W beat as it comes, having taken the
    burst's AW before) and B follows a burst's last W beat after ``write_response`` cycles. The
    RAM's AW sink holds 2 requests, as AR: AW ``j`` is taken in cycle ``c`` only if the process
    took burst ``j - 2`` by ``c - 2``, which it does at ``max(aw(j - 2), last W beat of burst
    j - 3)``. A store's requests are known ``store_issue - 1`` cycles beyond the engine's clock
    (its AW leaves ``store_issue`` cycles after the take).
    """

    def __init__(self, profile: RtlProfile, name: str, n: int, run: PortRun):
        super().__init__(profile, name, n, run)
        self.lead = profile.store_issue - 1
        self.aw: list[int] = []
        self.w_last: list[int] = []  # last W beat of each burst
        self.w: list[int] = []
        self.b: list[int] = []
        self.w_free = -math.inf

    def trace(self) -> dict[str, list[int]]:
        return {"aw": self.aw, "w": self.w, "b": self.b}

    def _skipped(self, c: int, to: int) -> None:
        if self.b and c <= self.b[-1]:  # W beats and B responses still to come
            self.run.moved = min(to - 1, self.b[-1])

    def _step(self, c: int) -> bool:
        busy = bool(self.b) and c <= self.b[-1]  # W beats and B responses still to come
        valid = [m.aw_valid(c) for m in self.managers]
        if not (any(valid) or self.arbiter.locked):
            return busy
        j = len(self.aw)
        q = self.p.memory_outstanding
        ready = (
            j < q or max(self.aw[j - q], self.w_last[j - q - 1] if j > q else -math.inf) <= c - 2
        )
        g = self.arbiter.step(valid, ready)
        if g is None:
            return busy
        p, m = self.p, self.managers[g]
        step = p.beat_interval
        first = max(c + p.aw_to_w, self.w_free)
        last = first + (m.aw_beats() - 1) * step
        self.w_free = last + step
        b = last + p.write_response + (p.start_up if not self.b else 0)
        if self.b:
            b = max(b, self.b[-1] + 1)  # B in AW order, one per cycle
        self.aw.append(c)
        self.w_last.append(last)
        self.w.extend(range(first, last + 1, step))
        self.b.append(b)
        m.aw_done(c, last, b)
        return True
