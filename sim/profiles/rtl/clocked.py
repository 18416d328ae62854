"""The rtl profile's clocked node timings: the top level's ports (Source, Sink), the clock every
other timing reads (:class:`_Clocked`: output spacing, waits on a shared AXI port) and the blocks
that take input tokens while their node waits to send (:class:`_TakesEarly`)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from step_hw import contract
from step_lang.graph import Node
from step_lang.tokens import DONE

from ..base import NodeTiming
from .ports import Port

if TYPE_CHECKING:
    from .profile import RtlProfile


def _cycles_until(t: float | None, now: float) -> int:
    """Cycles from ``now`` to cycle ``t``: a node's cost to wait for it (0 when ``t`` is None or
    not later)."""
    return math.ceil(t - now) if t is not None and t > now else 0


class _Source(NodeTiming):
    """A Source (a top-level ``src_<node>`` stream, offered every cycle by the bench): its
    ``ready`` is low in the ``start`` cycle (``step_hw.elaborate``), so its first token enters
    its queue in cycle 1; then one token per cycle, as its queue takes them (one every other
    cycle for a queue of depth 1 or 2)."""

    io: Any = None

    def __init__(self, profile: RtlProfile, node: Node):
        self.interval = contract.queue_interval(profile._depth(node, 0))
        self.last = -math.inf

    def attach(self, io: Any) -> None:
        self.io = io

    def on_send(self, port: int, token: Any) -> int:
        now = self.io.engine.now
        t = max(contract.SOURCE_START, self.last + self.interval)
        return _cycles_until(t, now)

    def sent(self, port: int, token: Any) -> None:
        self.last = self.io.engine.now


class _Sink(NodeTiming):
    """A Sink (a top-level ``snk_<node>`` stream, always ready in the bench): its done token
    counts towards ``done`` only ``sink_done`` cycles after the take (the package docstring)."""

    def __init__(self, profile: RtlProfile):
        self.done_cost = profile.sink_done

    def on_recv(self, port: int, token: Any) -> int:
        return self.done_cost if token is DONE else 0


class _Clocked(NodeTiming):
    """A timing that reads the engine's clock and spaces its output beats."""

    io: Any = None

    def __init__(self, profile: RtlProfile, node: Node):
        self.p = profile
        self.node = node
        # A queue of depth 1 or 2 takes a token every other cycle.
        self.spacing = [
            contract.queue_interval(profile._depth(node, j)) for j in range(len(node.outputs))
        ]
        self.last_push = [-math.inf] * len(node.outputs)
        self.flops = 0

    def attach(self, io: Any) -> None:
        self.io = io

    @property
    def now(self) -> float:
        return self.io.engine.now

    def sent(self, port: int, token: Any) -> None:
        self.last_push[port] = self.now

    #: The node's next send was charged already (its cycle worked out by a wrapper of
    #: ``SimIO.send``, ``attach``): its ``on_send`` costs nothing once.
    paid = False

    def _room(self, j: int) -> bool:
        """Whether output queue ``j`` has room now."""
        ch = self.io.outputs[j]
        return ch.occ - sum(1 for f in ch.frees if f <= self.now) < ch.cap

    def _wake_on_inputs(self) -> None:
        """Have a token sent to any input wake the node from the command it yields next."""
        proc = self.io.proc
        for ch in self.io.inputs:
            ch.recv_waiter = (proc, proc.epoch + 1)

    def _wait_output(self, ch: Any, times: list[float], *, inputs: bool, taken: bool) -> Any:
        """Wait while a token waits to leave into queue ``ch``: until the first of ``times``,
        or without any for room in ``ch`` (parked: the deadlock report's wait); sooner when a
        token is sent to any input (``inputs``) or the consumer takes from ``ch`` (``taken``)."""
        if inputs:
            self._wake_on_inputs()
        if taken:
            ch.send_waiter = (self.io.proc, self.io.proc.epoch + 1)
        if times:
            yield ("sleep", math.ceil(min(times) - self.now))
        else:
            yield ("park", f"room on {ch.name}", ("room", ch.name), "stalled_out")

    # -- memory operators on a shared AXI port ---------------------------------------------------

    port: Port | None = None

    def share(self, port: Port | None) -> None:
        self.port = port

    def _wait(self, settled: Any, what: str, earliest: Any = None) -> Any:
        """Sleep until ``settled()``: a result of the shared port that the engine's clock has not
        reached yet (``Port``). The engine has no hook for a node that must wait for time to pass
        before it can tell when it sends or takes a token, so the shared-port nodes wrap their
        ``SimIO.send`` / ``SimIO.recv`` (``attach``) with this. It looks again a cycle later, or,
        with ``earliest``, at the cycle ``earliest()`` names: one before which ``settled()``
        cannot hold (the port is simulated lazily, so looking less often changes nothing else).

        If only such waiting nodes are left and for ``settle`` cycles no shared port has moved and
        no node has started to wait (a port's own latencies are a few cycles), nothing can change
        any more: a deadlock, which the engine reports as usual."""
        if settled():
            return
        run, proc, engine = self.port.run, self.io.proc, self.io.engine
        self._waits_for = f"{what} over the shared AXI port {self.port.name}"
        run.waiting.add(proc.idx)
        run.moved = max(run.moved, self.now)
        try:
            while not settled():
                if self.now - run.moved > self.p.settle and engine.only_waiting(run.waiting):
                    for i in run.waiting:
                        engine.procs[i].waiting = engine.procs[i].timing._waits_for
                    engine._deadlock()
                t = earliest() if earliest is not None else None
                yield (
                    "sleep",
                    math.ceil(t - self.now) if t is not None and t > self.now + 1 else 1,
                )
        finally:
            run.waiting.discard(proc.idx)

    _waits_for = ""


def recv_early_first(recv: Any, early: list[deque]) -> Any:
    """A node's ``recv`` for a block that takes input tokens before its node asks for them:
    input ``i``'s tokens taken early (``early[i]``, oldest first) come first, then ``recv``'s."""

    def recv_early(i: int) -> Any:
        if early[i]:
            return early[i].popleft()
        return (yield from recv(i))

    return recv_early


def _frees_after(ch: Any, now: float) -> list[float]:
    """The cycles, after ``now``, at which slots of queue ``ch`` taken earlier free."""
    return [f for f in ch.frees if f > now]


class _TakesEarly(_Clocked):
    """A block that takes input tokens while earlier results wait to leave, unlike its node.

    The interpreter's Bufferize sends a buffer reference (and the stop after it) before it takes
    the next element; the hardware's output register holds them while its input goes on. The
    interpreter's Streamify takes a driving token only once it has sent the block before; the
    hardware's sequencer takes it as soon as its walk is done (the output queue holds the rest).
    The node's ``send`` is wrapped (``attach``) to take input tokens at the hardware's cycles
    while it waits to send (for its cycle, or for room), and its ``recv`` returns those first:
    the input queues' slots free when they do in hardware. A subclass says when the hardware
    takes the next input token (``_next_take``) and sends the next token (``_beat_time``).

    While it waits, the block looks again every cycle, unless ``_next_take`` depends only on
    its input queues (``input_driven``): then it sleeps until the next cycle something it knows
    of happens (its beat's cycle, a known take, a slot of its output queue freeing) or an input
    token arrives or its consumer takes a token, whichever is first.
    """

    #: Whether the next take depends only on the tokens sent to the block so far (not on
    #: another node's state, as a Bufferize's on its reader's releases).
    input_driven = False

    def _next_take(self) -> tuple[int, int | None]:
        """The port and cycle of the next input token the hardware takes before the node asks
        for it (None: not known now)."""
        raise NotImplementedError

    def _more_inputs(self) -> bool:
        """Whether the hardware may still take an input token before the node asks for it."""
        raise NotImplementedError

    def _beat_time(self, port: int, token: Any) -> float | None:
        """The first cycle ``token`` can leave on output ``port``, room permitting (None: not
        known yet, as a write's B response on a shared port before the port simulated it)."""
        raise NotImplementedError

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send, has = io.recv, io.send, io.has
        self.early: list[deque] = [deque() for _ in self.node.inputs]
        self.offered = has  # whether input i's queue offers a token now (not taken early)

        def has_early(i: int) -> bool:
            return bool(self.early[i]) or has(i)

        def send_taking(j: int, token: Any) -> Any:
            t = self._beat_time(j, token)
            polled = self.now
            while True:
                now = self.now
                if t is None:  # not known yet: looked for again every cycle
                    t = self._beat_time(j, token)
                port, c = self._next_take()
                if c is not None and c <= (now if t is None else max(now, t - 1)):
                    if c > now:
                        yield ("sleep", c - now)
                    self.early[port].append((yield from recv(port)))
                    continue
                more = c is None and self._more_inputs()  # a take may become known
                if t is None:
                    yield ("sleep", 1)
                    continue
                if t > now:
                    if more and self.input_driven:
                        self._wake_on_inputs()
                        more = False
                    yield ("sleep", 1 if more else t - now)
                    continue
                if self._room(j) or (not more and c is None):
                    break
                if self.input_driven:
                    yield from self._wait_for_room(j, c, more)
                    continue
                if self._stuck(polled):
                    break
                yield ("sleep", 1)  # no room yet: the hardware may take an input meanwhile
            self.p._buffer_waiting.discard(self.io.proc.idx)
            yield from send(j, token)

        io.recv, io.send, io.has = recv_early_first(recv, self.early), send_taking, has_early

    def _beat_cost(self, port: int, token: Any) -> int:
        """Cycles from now to ``token``'s beat time (0 once there): the subclasses' ``on_send``."""
        t = self._beat_time(port, token)
        return _cycles_until(t, self.now)

    def _wait_for_room(self, j: int, c: int | None, more: bool) -> Any:
        """Sleep until output ``j`` may have room (a slot frees, or the consumer takes a token)
        or an input may be taken (at ``c``; with ``more``, once a token arrives)."""
        io, now = self.io, self.now
        ch = io.outputs[j]
        ch.send_waiter = (io.proc, io.proc.epoch + 1)
        if more:
            self._wake_on_inputs()
        times = _frees_after(ch, now)
        if c is not None:
            times.append(c)
        if times:
            yield ("sleep", min(times) - now)
        else:
            yield ("park", f"room on {ch.name}", ("room", ch.name))

    def _stuck(self, since: float) -> bool:
        """Whether only waiting nodes are left (for ``settle`` cycles, no shared port moving): then
        the node waits for room as the engine does, which reports the deadlock."""
        waiting = self.p._buffer_waiting
        waiting.add(self.io.proc.idx)
        return self.p.quiet_since(since, self.now) and self.io.engine.only_waiting(waiting)
