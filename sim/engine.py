"""The discrete-event engine.

Every node of the graph is a process: the very generator that defines its semantics
(``Node.execute``), driven through a timed :class:`SimIO`. Every edge is a bounded queue with a
capacity and a latency; a token sent at ``t`` becomes visible to the consumer at ``t + latency``
and a full queue blocks its sender (back-pressure). Processes sleep for the cycles their timing
profile charges and wait for off-chip transfers in the shared fluid memory (:mod:`sim.memory`).
Events are processed in time order, so arbitration (EagerMerge: earliest arrival) and memory
sharing see a consistent global clock.

When no event is left but some process has not finished, the graph is deadlocked:
:class:`~step_lang.errors.SimDeadlock` names each blocked node, what it waits for, and the
occupancy of every queue.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from step_lang.arrival import ArrivalPolicy
from step_lang.errors import SimDeadlock, StepRuntimeError, StepValueError, op_message
from step_lang.graph import Graph, Node, OffChipTensor, Stream
from step_lang.interpret import check_inputs, check_memory, source_tokens
from step_lang.meta import MetaTile
from step_lang.ops.higher_order import Zip
from step_lang.ops.offchip import LOADS, tile_index
from step_lang.passes import lower
from step_lang.races import RaceCheck
from step_lang.tokens import Token

from .memory import FluidMemory
from .profiles.base import MemRequest, NodeTiming, Residency, TimingProfile, WaitFor
from .result import NodeStats, QueueCurve, SimResult

__all__ = ["Engine", "SimIO"]


class _Chan:
    __slots__ = (
        "cap",
        "clocks",
        "first_in",
        "first_out",
        "frees",
        "full_cycles",
        "history",
        "hwm",
        "last_in",
        "latency",
        "merged",
        "n_in",
        "name",
        "occ",
        "q",
        "recv_waiter",
        "release",
        "send_waiter",
        "sends",
    )

    def __init__(self, name: str, cap: int, latency: int, record: bool):
        self.name, self.cap, self.latency = name, cap, latency
        self.q: deque[tuple[float, Token]] = deque()
        self.clocks: deque = deque()  # the senders' clocks, when the run checks for races
        self.merged: int | None = None  # the clock the consumer merged last
        self.occ = 0
        self.hwm = 0
        self.recv_waiter: tuple[_Proc, int] | None = None
        self.send_waiter: tuple[_Proc, int] | None = None
        self.release = 0  # cycles from a token leaving to its slot accepting another
        self.frees: list[float] = []  # when slots of tokens that left free up (a heap)
        self.history: list[Token] | None = [] if record else None
        self.sends: list[float] | None = None  # with trace=True: the cycle each token entered
        # the production/consumption curve of counted tokens (queue sizing), and producer stalls
        self.n_in = 0
        self.first_in: float | None = None
        self.last_in: float | None = None
        self.first_out: float | None = None
        self.full_cycles = 0.0


def _merged(flags: list[Residency]) -> Residency:
    """The residency of a stream merged from streams of residency ``flags``: resident if any
    of them is (item by item for a Zip's tuples; merged inputs have one element type, so the
    flags are all tuples or all bools)."""
    if flags and isinstance(flags[0], tuple):
        return tuple(_merged(list(items)) for items in zip(*flags, strict=True))
    return any(flags)


class _Proc:
    __slots__ = (
        "done",
        "epoch",
        "gen",
        "idx",
        "io",
        "node",
        "since",
        "state",
        "stats",
        "timing",
        "wait_on",
        "waiting",
    )

    def __init__(self, idx: int, node: Node, timing: NodeTiming, stats: NodeStats):
        self.idx, self.node, self.timing, self.stats = idx, node, timing, stats
        self.epoch = 0
        self.state = "stalled_in"
        self.since = 0.0
        self.done = False
        self.waiting = "start"
        self.wait_on: tuple[str, str] | None = None  # ("room" | "token", stream name)
        self.gen: Iterator[Any] | None = None
        self.io: SimIO | None = None


class _EarliestArrival(ArrivalPolicy):
    """EagerMerge in the simulator: the ready input whose head arrived first (ties: lowest index)."""

    def __init__(self, io: SimIO):
        self.io = io

    def fresh(self) -> _EarliestArrival:
        return self

    def choose(self, ready, n_inputs):
        return min(ready, key=lambda i: (self.io.inputs[i].q[0][0], i))


class SimIO:
    """The timed counterpart of the interpreter's ``NodeIO``."""

    def __init__(self, engine: Engine, proc: _Proc, inputs: list[_Chan], outputs: list[_Chan]):
        self.engine, self.proc, self.node = engine, proc, proc.node
        self.inputs, self.outputs = inputs, outputs
        self._timing = timing = proc.timing
        self._races = races = engine.races
        self._index = races.node_index[self.node.name] if races is not None else -1
        # Race checking under a profile that acts on offered tokens (see ``_took``): per input,
        # the (token, clock) pairs the timing took from the queue and the node has not taken
        # yet, and whether the node took the head token before the timing took it.
        self._offered = races is not None and engine.profile.acts_on_offered_tokens
        self._popped: list[deque] = [deque() for _ in inputs]
        self._credited = [False] * len(inputs)
        self._ordered = True  # False inside ``recv_unordered``
        self.visible = 0.0  # when the token last received became visible to this node
        # Optional hooks of timings that model pipelines in absolute time (sim.profiles.rtl);
        # looked up once, so profiles without them pay nothing per token.
        self._before_recv = _hook(timing, "before_recv")
        self._sent = _hook(timing, "sent")
        self._hold = _hook(timing, "hold")
        attach = getattr(timing, "attach", None)
        if attach is not None:
            attach(self)
        if self._offered:
            self.recv = self._crediting(self.recv)  # the timing's wrapper, if any, inside

    # -- streams --------------------------------------------------------------------------------

    def recv(self, i: int) -> Iterator[Any]:
        ch, eng = self.inputs[i], self.engine
        while True:
            if ch.q:
                t = ch.q[0][0]
                if t <= eng.now:
                    if self._before_recv is not None:  # the node cannot take it yet
                        wait = self._before_recv(i)
                        if isinstance(wait, WaitFor):
                            yield from self.peek(wait.port)
                            continue
                        if wait > 0:
                            yield ("sleep", wait)
                    break
                yield ("until", t, ch)
            else:
                yield ("recv", ch)
        self.visible, tok = ch.q.popleft()
        if self._races is not None:
            clock = ch.clocks.popleft()
            if self._offered:
                if self._credited[i]:
                    self._credited[i] = False
                else:
                    self._popped[i].append((tok, clock))
            elif self._ordered and clock is not ch.merged:  # a run of one clock: merged once
                self._races.received(self._index, clock)
                ch.merged = clock
        if eng.counts(tok):
            if ch.release:  # the slot takes a new token only some cycles after this one left
                hold = self._hold(i, tok) if self._hold is not None else 0
                heapq.heappush(ch.frees, eng.now + ch.release + hold)
            else:
                ch.occ -= 1
            if ch.first_out is None:
                ch.first_out = eng.now
            if ch.send_waiter is not None:
                proc, ep = ch.send_waiter
                ch.send_waiter = None
                eng.push(eng.now + ch.release, proc, ep)
        cost = self._timing.on_recv(i, tok)
        if cost:
            yield from self._charge(cost)
        return tok

    def recv_unordered(self, i: int) -> Iterator[Any]:
        """Generator: :meth:`recv` without ordering the node after the token's sender for the
        race check (``step_lang.interpret.NodeIO.recv_unordered``). Under a profile that acts on
        offered tokens the token is not credited; its clock is merged with the next token the
        node takes from that input, whose sender sent it later."""
        self._ordered = False
        try:
            return (yield from self.recv(i))
        finally:
            self._ordered = True

    def peek(self, i: int) -> Iterator[Any]:
        ch, eng = self.inputs[i], self.engine
        while True:
            if ch.q:
                t = ch.q[0][0]
                if t <= eng.now:
                    return ch.q[0][1]
                yield ("until", t, ch)
            else:
                yield ("recv", ch)

    def has(self, i: int) -> bool:
        q = self.inputs[i].q
        return bool(q) and q[0][0] <= self.engine.now

    def head(self, i: int) -> Token:
        return self.inputs[i].q[0][1]

    def send(self, j: int, token: Token) -> Iterator[Any]:
        eng = self.engine
        cost = self._timing.on_send(j, token)
        if cost:
            yield from self._charge(cost)
        ch = self.outputs[j]
        if eng.counts(token):
            while True:
                while ch.frees and ch.frees[0] <= eng.now:
                    heapq.heappop(ch.frees)
                    ch.occ -= 1
                if ch.occ < ch.cap:
                    break
                if ch.frees:  # a slot frees soon
                    yield ("sleep", ch.frees[0] - eng.now)
                else:
                    yield ("send", ch)
            ch.occ += 1
            if ch.occ > ch.hwm:
                ch.hwm = ch.occ
            ch.n_in += 1
            ch.last_in = eng.now
            if ch.first_in is None:
                ch.first_in = eng.now
        visible = eng.now + ch.latency
        ch.q.append((visible, token))
        if self._races is not None:
            clock = self._races.sent(self._index)
            ch.clocks.append(self._forwarded(token, clock) if self._offered else clock)
        if self._sent is not None:
            self._sent(j, token)
        if ch.history is not None:
            ch.history.append(token)
        if ch.sends is not None:
            ch.sends.append(eng.now)
        if ch.recv_waiter is not None:
            proc, ep = ch.recv_waiter
            ch.recv_waiter = None
            eng.push(visible, proc, ep)

    # -- race checking under a profile that acts on offered tokens ------------------------------
    #
    # The rtl profile's timings wrap the node's ``recv`` and ``send`` (``attach``): a block may
    # hand the node a token still in its queue and take it later (routers take a token in the
    # cycle they forward it), take tokens ahead of the node (a load's addresses), or forward a
    # token before the node sends it. The race check must see what the *node* took, as in the
    # interpreter: the queue's clocks are credited when the node's ``recv`` returns the token,
    # found by identity among the tokens the timing took and the head of the queue.

    def _crediting(self, recv: Any) -> Any:
        def take(i: int) -> Iterator[Any]:
            token = yield from recv(i)
            if self._ordered:
                self._took(i, token)
            return token

        return take

    def _took(self, i: int, token: Any) -> None:
        """The node's ``recv`` returned ``token`` from input ``i``: merge its clock (and those of
        tokens the timing took before it, which the node can only have passed over)."""
        races, me, popped = self._races, self._index, self._popped[i]
        while popped:
            taken, clock = popped.popleft()
            races.received(me, clock)
            if taken is token:
                return
        # Not among them: the head, which the node took before the timing did (or, should the
        # timing have handed the node a token of its own making, the one it stands for).
        ch = self.inputs[i]
        if ch.q and not self._credited[i] and ch.q[0][0] <= self.engine.now:
            races.received(me, ch.clocks[0])
            self._credited[i] = True

    def _forwarded(self, token: Any, clock: int) -> int:
        """The clock of ``token`` sent now: the node's, and that of the same token on an input
        if the timing forwards it before the node took it."""
        for i, ch in enumerate(self.inputs):
            for taken, theirs in self._popped[i]:
                if taken is token:
                    return self._races.join(clock, theirs)
            if ch.q and ch.q[0][1] is token and not self._credited[i]:
                return self._races.join(clock, ch.clocks[0])
        return clock

    def _charge(self, cost: int | MemRequest) -> Iterator[Any]:
        if isinstance(cost, MemRequest):
            yield ("mem", cost)
        else:
            yield ("sleep", cost)

    # -- memory and context ---------------------------------------------------------------------

    def read_tile(self, t: OffChipTensor, tile: tuple[int, int], k: int) -> Any:
        if self._races is not None:
            self._races.read(self._index, t, tile, k)
        arr = self.engine.memory[t.name]
        if isinstance(arr, _MetaTensor):
            return MetaTile(tile, t.dtype.numpy)
        return np.array(arr[tile_index(t.shape, tile, k)], copy=True)

    def write_tile(self, t: OffChipTensor, tile: tuple[int, int], k: int, value: Any) -> None:
        if self._races is not None:
            self._races.write(self._index, t, tile, k)
        arr = self.engine.memory[t.name]
        if isinstance(arr, _MetaTensor) or isinstance(value, MetaTile):
            if not isinstance(arr, _MetaTensor):
                raise self.fail(
                    None, f"shape-only data written to tensor '{t.name}', which holds real values"
                )
            return
        arr[tile_index(t.shape, tile, k)] = value

    def check_tile(self, token: Any, shape: tuple[int, int], port: str) -> Any:
        if (
            not hasattr(token, "shape")
            or isinstance(token, tuple)
            or tuple(token.shape) != tuple(shape)
        ):
            raise self.fail(
                port, f"expected a {shape[0]}x{shape[1]} tile, got {type(token).__name__}"
            )
        return token

    def fail(self, port: str | None, text: str) -> StepRuntimeError:
        return StepRuntimeError(op_message(self.node.kind, self.node.name, port, text))

    def policy(self) -> ArrivalPolicy:
        return _EarliestArrival(self)

    def source_tokens(self) -> list[Token]:
        return self.engine.source_tokens(self.node)


def _hook(timing: Any, name: str) -> Any:
    """``timing.<name>`` when its class overrides :class:`NodeTiming`'s no-op, else ``None``."""
    method = getattr(type(timing), name, None)
    if method is None or method is getattr(NodeTiming, name, None):
        return None
    return getattr(timing, name)


class _MetaTensor:
    """Stands for a float tensor whose values a timing-only run does not need."""


class Engine:
    """One simulation run; use :func:`sim.simulate`."""

    def __init__(
        self,
        graph: Graph,
        profile: TimingProfile,
        memory: Mapping[str, np.ndarray] | None,
        *,
        functional: bool,
        inputs: Mapping[str, Any] | None,
        queue_depths: Mapping[str, int] | None = None,
        trace: bool = False,
    ):
        # Overrides are part of the lowered graph: a read stream's depth reaches the Broadcast
        # outputs inserted for it, and every profile sees the same depths (the rtl profile's
        # queue spacing included).
        graph = lower(graph, queue_depths)
        profile.check_graph(graph)
        self.graph, self.profile, self.functional, self.trace = graph, profile, functional, trace
        self.inputs = check_inputs(graph, inputs)
        self.memory = self._prepare_memory(memory or {})
        self.mem = FluidMemory(profile.memory_config())
        self.mem_version = 0
        self.now = 0.0
        self.heap: list[tuple[float, int, int, int]] = []
        # What ``only_waiting`` reads instead of scanning the heap: the processes with a live
        # event in it (one whose epoch is the process's), entries pushed for an epoch the
        # process has not reached yet, and how many memory events the heap holds.
        self.scheduled: set[int] = set()
        self._future: dict[int, set[int]] = {}
        self.memory_events = 0
        self.seq = 0
        self.events = 0
        self.read_bytes = 0
        self.write_bytes = 0
        self.spans: list[tuple[str, str, int, int]] = []
        self.counts = profile.counts_against_capacity
        self.races = RaceCheck.for_graph(graph)
        order = graph.topo_order()
        self.chans: dict[Stream, _Chan] = {}
        for node in order:
            for s in node.outputs:
                cap = graph.queue_depth(s, profile.channel_depth)
                if not isinstance(cap, int) or cap < 1:
                    raise StepValueError(
                        f"queue depth of {s.name} must be a positive integer, not {cap!r}"
                    )
                latency = getattr(profile, "stream_latency", None)
                self.chans[s] = _Chan(
                    s.name,
                    cap,
                    latency(s, cap) if latency else profile.channel_latency,
                    record=functional,
                )
                self.chans[s].release = getattr(profile, "slot_release", 0)
                if trace:
                    self.chans[s].sends = []
        self.chan_by_name = {ch.name: ch for ch in self.chans.values()}
        resident = self._residency(order)
        self.procs: list[_Proc] = []
        for idx, node in enumerate(order):
            flags = [resident[s] for s in node.inputs]
            stats = NodeStats(node.name, node.kind, compute_bw=profile.compute_bw(node))
            proc = _Proc(idx, node, profile.node_timing(node, flags), stats)
            proc.io = SimIO(
                self,
                proc,
                [self.chans[s] for s in node.inputs],
                [self.chans[s] for s in node.outputs],
            )
            proc.gen = node.execute(proc.io)
            self.procs.append(proc)

    # -- set-up ---------------------------------------------------------------------------------

    def _prepare_memory(self, memory: Mapping[str, np.ndarray]) -> dict[str, Any]:
        g = self.graph
        given = check_memory(g, memory)
        read = {n.tensor.name for n in g.nodes.values() if isinstance(n, LOADS)}
        out: dict[str, Any] = {}
        for name, t in g.tensors.items():
            if name in given:
                out[name] = np.array(given[name], copy=True)
            elif not self.functional and t.dtype.is_float:
                out[name] = _MetaTensor()
            elif not self.functional and name in read:
                raise StepValueError(
                    f"timing-only simulation needs the values of tensor '{name}' ({t.dtype}): "
                    "integer and bool tensors steer routing"
                )
            else:
                out[name] = np.zeros(t.shape, dtype=t.dtype.numpy)
        return out

    def _residency(self, order: list[Node]) -> dict[Stream, Residency]:
        """Whether each stream's tiles sit in a memory unit (fresh from memory or passed on):
        a Zip's tuples item by item; a merge's output if any merged input's do. A stream has
        one flag where the reference flags each tile (STEP_REFERENCE §5.2), so a merge of
        resident and other tiles charges every merged tile the read (the paper's layers merge
        KV-cache tiles from memory with the few rows a compute unit appended)."""
        res: dict[Stream, Residency] = {}
        for node in order:
            for s in node.outputs:
                if self.profile.tiles_in_memory(node):
                    res[s] = True
                elif isinstance(node, Zip):
                    res[s] = tuple(res.get(x, False) for x in node.inputs)
                elif node.forwards_tiles and node.inputs:
                    res[s] = _merged(
                        [res.get(node.inputs[i], False) for i in node.forwarded_inputs()]
                    )
                else:
                    res[s] = False
        for node in order:  # feedback edges were not known in the first pass
            if node.is_feedback and node.inputs:
                res[node.outputs[0]] = res.get(node.inputs[0], False)
        return res

    def source_tokens(self, node: Node) -> list[Token]:
        return source_tokens(node, self.inputs)

    # -- the event loop -------------------------------------------------------------------------

    def push(self, t: float, proc: _Proc, epoch: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, proc.idx, epoch))
        if epoch == proc.epoch:
            if not proc.done:
                self.scheduled.add(proc.idx)
        elif epoch > proc.epoch:  # a waiter registered for the command the process yields next
            self._future.setdefault(proc.idx, set()).add(epoch)

    def _next_epoch(self, proc: _Proc) -> int:
        """Give ``proc`` its next epoch: its pending events go stale, except those pushed for it."""
        proc.epoch += 1
        self.scheduled.discard(proc.idx)
        future = self._future.get(proc.idx)
        if future:
            if proc.epoch in future:
                self.scheduled.add(proc.idx)
            future.difference_update([e for e in future if e <= proc.epoch])
        return proc.epoch

    def only_waiting(self, waiting: set[int]) -> bool:
        """Whether every pending event wakes a process in ``waiting`` (process indices): no memory
        event is pending and no other process is scheduled. The running process counts as
        pending only through ``waiting``, which the callers add it to."""
        return self.memory_events == 0 and self.scheduled <= waiting

    def _schedule_memory(self) -> None:
        self.mem_version += 1
        t = self.mem.next_completion()
        if t is not None:
            self.seq += 1
            heapq.heappush(self.heap, (max(t, self.now), self.seq, -1, self.mem_version))
            self.memory_events += 1

    def _set_state(self, proc: _Proc, state: str) -> None:
        dt = self.now - proc.since
        if dt > 0:
            setattr(proc.stats, proc.state, getattr(proc.stats, proc.state) + dt)
            if proc.state == "stalled_out" and proc.wait_on and proc.wait_on[0] == "room":
                self.chan_by_name[proc.wait_on[1]].full_cycles += dt
            if self.trace:
                self.spans.append((proc.node.name, proc.state, proc.since, self.now))
        proc.state, proc.since = state, self.now

    def run(self) -> SimResult:
        for proc in self.procs:
            self.push(0.0, proc, 0)
        finished = 0
        heap = self.heap
        while heap:
            t, _, idx, epoch = heapq.heappop(heap)
            self.now = t
            self.events += 1
            if idx < 0:
                self.memory_events -= 1
                if epoch == self.mem_version:
                    self.mem.complete_due(t)
                    self._schedule_memory()
                continue
            proc = self.procs[idx]
            if proc.done or proc.epoch != epoch:
                continue
            finished += self._resume(proc)
        if finished != len(self.procs):
            self._deadlock()
        return self._result()

    def _resume(self, proc: _Proc) -> int:
        while True:
            try:
                cmd = next(proc.gen)
            except StopIteration:
                self._set_state(proc, "idle")
                proc.done = True
                self.scheduled.discard(proc.idx)
                proc.stats.finish = math.ceil(self.now)
                return 1
            except StepRuntimeError as exc:
                node = proc.node
                if str(exc).startswith(f"{node.kind} '{node.name}'"):
                    raise
                raise StepRuntimeError(op_message(node.kind, node.name, None, str(exc))) from exc
            ep = self._next_epoch(proc)
            if isinstance(cmd, str):  # EagerMerge waits for any input
                self._set_state(proc, "stalled_in")
                proc.waiting = cmd
                soonest = None
                for ch in proc.io.inputs:
                    if ch.q:
                        soonest = ch.q[0][0] if soonest is None else min(soonest, ch.q[0][0])
                    else:
                        ch.recv_waiter = (proc, ep)
                if soonest is not None:
                    self.push(max(soonest, self.now), proc, ep)
                return 0
            op = cmd[0]
            if op == "sleep":
                self._set_state(proc, "busy")
                proc.wait_on = None  # whatever it waits for, not a token or room of a queue
                self.push(self.now + cmd[1], proc, ep)
            elif op == "park":  # woken by the waiters it set on its channels (``SimIO``);
                # ("park", waiting, wait_on[, state]): the state it is counted in, "busy" unless said
                self._set_state(proc, cmd[3] if len(cmd) > 3 else "busy")
                proc.waiting, proc.wait_on = cmd[1], cmd[2]
            elif op == "until":
                self._set_state(proc, "stalled_in")
                proc.waiting = f"a token on {cmd[2].name} visible at {cmd[1]}"
                proc.wait_on = None  # the token is there: a wait that ends by itself
                self.push(cmd[1], proc, ep)
            elif op == "recv":
                self._set_state(proc, "stalled_in")
                proc.waiting = f"a token on {cmd[1].name}"
                proc.wait_on = ("token", cmd[1].name)
                cmd[1].recv_waiter = (proc, ep)
            elif op == "send":
                self._set_state(proc, "stalled_out")
                proc.waiting = f"room on {cmd[1].name}"
                proc.wait_on = ("room", cmd[1].name)
                cmd[1].send_waiter = (proc, ep)
            elif op == "mem":
                req: MemRequest = cmd[1]
                self._set_state(proc, "busy")
                proc.waiting = "its off-chip transfer"
                proc.wait_on = None
                if req.write:
                    self.write_bytes += req.bytes
                else:
                    self.read_bytes += req.bytes
                self.mem.start(
                    self.now, req.bus_bytes, lambda tt, proc=proc, ep=ep: self.push(tt, proc, ep)
                )
                self._schedule_memory()
            else:  # pragma: no cover - engine bug
                raise RuntimeError(f"unknown command {cmd!r}")
            return 0

    def _deadlock(self) -> None:
        blocked = {p.node.name: p.waiting for p in self.procs if not p.done}
        queues = {ch.name: len(ch.q) for ch in self.chans.values()}
        lines = [
            f"  {p.node.kind} '{p.node.name}' waits for {p.waiting}"
            for p in self.procs
            if not p.done
        ]
        full = [f"  {name}: {n} token(s)" for name, n in queues.items() if n]
        msg = (
            f"graph '{self.graph.name}' deadlocked at cycle {math.ceil(self.now)}; blocked nodes:\n"
            + "\n".join(lines)
        )
        if full:
            msg += "\nqueues holding tokens:\n" + "\n".join(full)
        waits = {p.node.name: p.wait_on for p in self.procs if not p.done and p.wait_on}
        probe = SimDeadlock(msg, blocked=blocked, queues=queues, cycle=math.ceil(self.now))
        probe.waits = waits
        from .sizing import diagnose  # the engine's own report of reconvergent paths

        causes = diagnose(self.graph, probe)
        if causes:
            msg += "\nlikely cause (reconvergent paths):\n" + "\n".join(f"  {c}" for c in causes)
        err = SimDeadlock(msg, blocked=blocked, queues=queues, cycle=math.ceil(self.now))
        err.waits = waits
        err.capacity = {ch.name: ch.cap for ch in self.chans.values()}
        err.causes = causes
        raise err

    def _result(self) -> SimResult:
        end = math.ceil(self.now)
        nodes = {}
        for p in self.procs:
            self._set_state(p, p.state)
            st = p.stats
            st.idle += end - math.ceil(self.now)
            st.flops = int(p.timing.flops)
            st.footprint_bytes = int(p.timing.footprint)
            st.busy, st.stalled_in, st.stalled_out, st.idle = (
                round(st.busy),
                round(st.stalled_in),
                round(st.stalled_out),
                round(st.idle),
            )
            nodes[p.node.name] = st
        memory = {k: v for k, v in self.memory.items() if not isinstance(v, _MetaTensor)}
        streams = {ch.name: ch.history for ch in self.chans.values() if ch.history is not None}
        finish = {p.node.name: p.stats.finish for p in self.procs}
        return SimResult(
            cycles=self.profile.run_cycles(self.graph, finish, end),
            nodes=nodes,
            offchip_read_bytes=self.read_bytes + sum(p.timing.offchip_read for p in self.procs),
            offchip_write_bytes=self.write_bytes
            + sum(p.timing.offchip_written for p in self.procs),
            queue_high_water={ch.name: ch.hwm for ch in self.chans.values()},
            queue_full_cycles={ch.name: round(ch.full_cycles) for ch in self.chans.values()},
            queue_curves={
                ch.name: QueueCurve(ch.n_in, ch.first_in, ch.last_in, ch.first_out)
                for ch in self.chans.values()
            },
            memory=memory,
            streams=streams,
            events=self.events,
            spans=self.spans,
            profile=self.profile.name,
            sends={ch.name: ch.sends for ch in self.chans.values() if ch.sends is not None},
            traced=self.trace,
        )
