"""The rtl profile's combinational blocks (``step_hw/broadcast.py``, ``step_hw/router.py``):
Broadcast, Partition, Reassemble, EagerMerge and Parallelize (:class:`_Router`)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from step_lang.graph import Node
from step_lang.tokens import DONE, Stop, is_data

from .clocked import _Clocked, _frees_after

if TYPE_CHECKING:
    from .profile import RtlProfile


_NONE = object()  # no token held on an input


def _same_token(a: Any, b: Any) -> bool:
    return a is b or (isinstance(a, Stop) and isinstance(b, Stop) and a.level == b.level)


class _Router(_Clocked):
    """A combinational block (``Block.latency == 0``): Broadcast, Partition, Reassemble,
    EagerMerge, Parallelize, as ``step_hw.broadcast`` and ``step_hw.router`` build them.

    The hardware offers a token on its outputs in the cycle its input queue offers it, and takes
    it from the input (``ready``) only in the cycle its output (the last of the outputs it goes
    to: ``fork``, each output taking it in the first cycle it has room) takes it; a selector is
    taken with the chunk it routes; the next token of an input is offered the cycle after
    (``last_pop + 1``). The interpreter's node takes a token, then sends it to its outputs in
    order, and reads some chunks whole before forwarding them. So the node's ``recv`` and
    ``send`` are wrapped (``attach``): ``recv`` returns the head of the input queue without
    taking it (the token is *held*, its slot stays taken), and the node's ``send`` of it pushes it
    to every output it goes to at once, each when it has room, and takes the held inputs the
    hardware consumes with it. Tokens the hardware passes on before the node sends them (the
    other outputs of a fork, a held stop written early, a chunk read whole) are pushed at the
    hardware's cycle and the node's later ``send`` of each is a no-op (checked to be the same
    token). Subclasses say what is held and what each send consumes.
    """

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        n = len(node.inputs)
        self.held: list[Any] = [_NONE] * n
        self.last_pop = [-math.inf] * n
        self.not_before = [-math.inf] * n  # a block's own earliest take of each input
        self.early: list[deque] = [deque() for _ in node.outputs]  # pushed before the node sends
        self.background: list[tuple[int, Any]] = []  # (output, token) to push when there is room

    def attach(self, io: Any) -> None:
        super().attach(io)
        self._recv, self._send = io.recv, io.send
        io.recv, io.send = self.node_recv, self.node_send

    # -- the node's calls --------------------------------------------------------------------

    def node_recv(self, i: int) -> Any:
        raise NotImplementedError

    def node_send(self, j: int, token: Any) -> Any:
        if self.early[j]:
            early = self.early[j].popleft()
            if not _same_token(early, token):
                raise RuntimeError(
                    f"rtl profile: {self.node.kind} '{self.node.name}' sends {token!r} on output "
                    f"{j}, the hardware model pushed {early!r}"
                )
            return
        yield from self.forward(j, token)

    def forward(self, j: int, token: Any) -> Any:
        """The node sends ``token`` on output ``j`` (not pushed before)."""
        raise NotImplementedError

    # -- cycles --------------------------------------------------------------------------------

    def takeable(self, i: int) -> bool:
        """Whether input ``i``'s queue offers its head token this cycle."""
        ch, now = self.io.inputs[i], self.now
        return (
            bool(ch.q)
            and ch.q[0][0] <= now
            and now >= self.last_pop[i] + 1
            and now >= self.not_before[i]
        )

    def room(self, j: int) -> bool:
        """Whether output ``j``'s queue takes a token this cycle (``w_rdy``)."""
        ch, now = self.io.outputs[j], self.now
        if now < self.last_push[j] + self.spacing[j]:
            return False
        return ch.occ - sum(1 for f in ch.frees if f <= now) < ch.cap

    def wait(self, inputs: Any = (), outputs: Any = ()) -> Any:
        """Sleep until one of ``inputs`` may offer a token or one of ``outputs`` may have room
        (the time each will, when known; else until its producer sends or consumer takes)."""
        yield from self.service()
        io, now = self.io, self.now
        ep = io.proc.epoch + 1  # the epoch the engine gives the command yielded below
        t, park = math.inf, None
        outputs = [*outputs, *(j for j, _ in self.background)]
        if not inputs and not outputs:
            return  # the background tokens just left
        for i in inputs:
            ch = io.inputs[i]
            t0 = max(self.last_pop[i] + 1, self.not_before[i])
            if ch.q:
                t0 = max(t0, ch.q[0][0])
            elif t0 <= now:
                ch.recv_waiter = (io.proc, ep)
                park = ("recv", ch)
                continue
            if t0 > now:
                t = min(t, t0)
        for j in outputs:
            ch = io.outputs[j]
            t0 = self.last_push[j] + self.spacing[j]
            if t0 > now:
                t = min(t, t0)
                continue
            frees = _frees_after(ch, now)
            if frees:
                t = min(t, min(frees))
            else:
                ch.send_waiter = (io.proc, ep)
                park = ("send", ch)
        if t < math.inf:
            yield ("sleep", t - now)
        elif park is not None:
            yield park
        else:  # pragma: no cover - nothing can change: a bug of the model
            raise RuntimeError(f"rtl profile: {self.node.name} waits for nothing")
        yield from self.service()

    def service(self) -> Any:
        """Push the background tokens whose output has room now."""
        for item in list(self.background):
            if self.room(item[0]):
                self.background.remove(item)
                yield from self._send(*item)

    def take_when_offered(self, i: int) -> Any:
        """Wait until input ``i`` offers its head token; return it (still in the queue)."""
        while not self.takeable(i):
            yield from self.wait(inputs=[i])
        return self.io.inputs[i].q[0][1]

    def pop(self, i: int) -> Any:
        """Take input ``i``'s head token now (it is offered)."""
        token = yield from self._recv(i)
        self.last_pop[i] = self.now
        self.held[i] = _NONE
        return token

    def fork(self, token: Any, targets: Any, sent: int | None = None) -> Any:
        """Offer ``token`` to every output in ``targets``, each taking it in the first cycle it
        has room (``step_hw.broadcast.fork``); return when the last has. Every target but
        ``sent`` (the node's own send) is recorded as pushed early."""
        left = list(targets)
        yield from self.service()
        while True:
            for j in list(left):
                if self.room(j):
                    left.remove(j)
                    yield from self._send(j, token)
                    if j != sent:
                        self.early[j].append(token)
            if not left:
                return
            yield from self.wait(outputs=left)


class _Broadcast(_Router):
    """Broadcast: each output takes a token at its own pace; the input advances when the last
    has (``step_hw.broadcast.Broadcast``)."""

    def node_recv(self, i: int) -> Any:
        token = yield from self.take_when_offered(i)
        self.held[i] = token
        return token

    def forward(self, j: int, token: Any) -> Any:
        yield from self.fork(token, range(len(self.node.outputs)), j)
        yield from self.pop(0)


class _Partition(_Router):
    """Partition (``step_hw.router.Partition``): each token of a chunk goes to every selected
    output at its own pace and is taken when the last has; the selector is taken with the
    element (rank 0) or with the chunk's closing stop (rank >= 1); a chunk for no output is
    taken a token per cycle; a selector stop of rank >= 1 takes a cycle of its own, one of rank 0
    is taken with the input's stop. On the selector's done token every output takes a done
    token, then both done tokens are taken together, the cycle after at the earliest."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.rank = node.rank

    def _consumes_selector(self, x: Any) -> bool:
        return self.rank == 0 or (isinstance(x, Stop) and x.level >= self.rank)

    def _drop(self) -> Any:
        """A held input token that went to no output: taken in the cycle it was offered."""
        x = self.held[0]
        if x is not _NONE:
            yield from self.pop(0)
            if self._consumes_selector(x):
                yield from self.pop(1)

    def node_recv(self, i: int) -> Any:
        yield from self._drop()
        sel = self.held[1]
        token = yield from self.take_when_offered(i)
        if i == 1:
            if isinstance(token, Stop) and self.rank > 0:
                return (yield from self.pop(1))
            self.held[1] = token
        elif sel is DONE or isinstance(sel, Stop):  # taken together with the selector's
            yield from self.pop(0)
            yield from self.pop(1)
        else:
            self.held[0] = token
        return token

    def forward(self, j: int, token: Any) -> Any:
        sel = self.held[1]
        if sel is DONE:
            yield from self.fork(token, range(len(self.node.outputs)), j)
            self.not_before[0] = self.now + 1  # `closed` is a register
            return
        targets = [int(k) for k in np.flatnonzero(np.asarray(sel).reshape(-1))]
        yield from self.fork(token, targets, j)
        x = self.held[0]
        yield from self.pop(0)
        if self._consumes_selector(x):
            yield from self.pop(1)


class _Reassemble(_Router):
    """Reassemble (``step_hw.router.Reassemble``): the selector is taken in the group's first
    cycle (with the first chunk's first token), each input token when the output takes it. The
    group's closing stop is written once the last chunk has passed (its closing stop, for chunks
    of rank >= 1, is taken with it), not in the group's first cycle, and, with a selector of
    rank >= 1, only once the next selector token is offered: merged with it if that is a stop
    (both taken), else written alone, and that selector token is taken the cycle after at the
    earliest (the interpreter writes it with the next group's first token). A selector stop
    outside a group is a merged stop of its own. The done token is written, then every input's
    done token is taken, from the cycle after, the selector's with the last."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.n = len(node.inputs) - 1
        self.a = node.chunk_rank
        self.q = node.inputs[-1].rank
        self.left = 0  # chunks of the current group not yet (fully) read
        self.pending = False  # the group's closing stop is held back for the next selector
        self.close_from = -math.inf  # the group's closing stop is written from this cycle
        self.closing_input = None  # input whose held closing stop the group's stop replaces

    def node_recv(self, i: int) -> Any:
        if i < self.n:
            token = yield from self.take_when_offered(i)
            if self.held[self.n] is DONE:  # the done phase: all inputs' done tokens
                yield from self.pop(i)
                if i == self.n - 1:
                    yield from self.pop(self.n)
                return token
            closes = (
                is_data(token) if self.a == 0 else isinstance(token, Stop) and token.level >= self.a
            )
            if closes:
                self.left -= 1
                if self.left == 0 and self.a > 0:  # replaced by the group's closing stop
                    self.closing_input = i
                    self.pending = True
            self.held[i] = token
            return token
        if self.pending and self.q > 0:
            s = yield from self.take_when_offered(i)
            if not isinstance(s, Stop):  # the held stop is written alone, now
                stop = Stop(self.a + 1)
                while self.now < self.close_from:
                    yield ("sleep", self.close_from - self.now)
                yield from self.fork(stop, [0])
                yield from self._closed()
        s = yield from self.take_when_offered(i)
        if is_data(s):
            yield from self.pop(i)
            self.left = int(np.count_nonzero(np.asarray(s)))
            self.close_from = self.now + 1
            self.pending = self.left == 0
        else:  # a stop (merged into the closing stop) or done: taken with what it writes
            self.held[i] = s
        return s

    def _closed(self) -> Any:
        """The group's closing stop was written: take what it consumes; the next selector token
        is taken from the next cycle (``idle`` is a register)."""
        self.pending = False
        self.not_before[self.n] = self.now + 1
        if self.closing_input is not None:
            yield from self.pop(self.closing_input)
            self.closing_input = None

    def forward(self, j: int, token: Any) -> Any:
        if token is DONE:
            yield from self.fork(token, [0], 0)
            for i in range(self.n):
                self.not_before[i] = self.now + 1
            return
        if isinstance(token, Stop) and token.level > self.a:  # the group's closing stop
            while self.now < self.close_from:
                yield ("sleep", self.close_from - self.now)
            yield from self.fork(token, [0], 0)
            yield from self._closed()
            if isinstance(self.held[self.n], Stop):
                yield from self.pop(self.n)
            return
        # a token of a chunk (for chunks of rank >= 1, a stop between chunks)
        i = next(k for k in range(self.n) if self.held[k] is not _NONE)
        yield from self.fork(token, [0], 0)
        yield from self.pop(i)
        if self.a == 0 and self.left == 0:
            self.pending = True
            self.close_from = max(self.close_from, self.now + 1)


class _EagerMerge(_Router):
    """EagerMerge (``step_hw.router.EagerMerge``): when idle, the lowest-indexed input that
    offers a token is granted; its selector is offered from that cycle until taken, and the
    chunk's tokens pass as the data output takes them (independently of the selector). The next
    chunk is granted the cycle after both the selector and the chunk's last token were taken. An
    input's done token is taken in the first cycle it is offered (not being forwarded); the
    outputs' done tokens are offered the cycle after the last was, each taken at its own pace."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.a = node.chunk_rank
        self.done_taken = -math.inf
        self.cur: int | None = None  # the input granted last
        self.idle_from = -math.inf  # the cycle `busy` is clear after the last chunk

    def attach(self, io: Any) -> None:
        super().attach(io)
        from step_lang.arrival import LowestIndexFirst

        io.policy = LowestIndexFirst  # the grant among the inputs offering a token

    def node_recv(self, i: int) -> Any:
        ch = self.io.inputs[i]
        if ch.q and ch.q[0][1] is DONE and self.held[i] is _NONE:
            # taken as soon as offered, unless its input's chunk is still being forwarded: the
            # node looks for done tokens only between chunks
            at = max(ch.q[0][0], self.last_pop[i] + 1)
            if i == self.cur:
                at = max(at, self.idle_from)
            yield from self.take_when_offered(i)
            token = yield from self.pop(i)
            self.done_taken = max(self.done_taken, at)
            return token
        if self.held[i] is not _NONE:  # the node reads a whole chunk: forward what it holds
            token = self.held[i]
            yield from self.fork(token, [0])
            yield from self.pop(i)
        token = yield from self.take_when_offered(i)
        self.held[i] = token
        self.cur = i
        return token

    def forward(self, j: int, token: Any) -> Any:
        if token is DONE:  # the outputs' done tokens, the cycle after the last input's
            t = self.done_taken + 1
            if t > self.now:
                yield ("sleep", t - self.now)
            yield from self.fork(DONE, [0, 1], j)
            return
        if j == 1:  # the selector: offered from the grant, taken whenever the output has room
            self.background.append((1, token))
            yield from self.service()
            return
        yield from self.fork(token, [0], 0)
        yield from self.pop(self.cur)
        if self.a == 0 or (isinstance(token, Stop) and token.level >= self.a):  # chunk passed
            while self.background:
                yield from self.wait()
            self.idle_from = self.now + 1
            yield ("sleep", 1)  # `busy` clears at the end of this cycle: the next grant


class _Parallelize(_Router):
    """Parallelize (``step_hw.router.Parallelize``): each token goes to the output whose turn it
    is as that output takes it (the interpreter reads a chunk of rank >= 1 whole first), a
    dropped stop (rank 0) takes a cycle, the done token goes to every output at its own pace."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.b = node.rank
        self.turn = 0

    def node_recv(self, i: int) -> Any:
        if self.held[0] is not _NONE:  # a chunk read whole: forward the token before
            token = self.held[0]
            yield from self.fork(token, [self.turn])
            yield from self.pop(0)
        token = yield from self.take_when_offered(0)
        if self.b == 0 and isinstance(token, Stop):
            return (yield from self.pop(0))  # dropped
        self.held[0] = token
        return token

    def forward(self, j: int, token: Any) -> Any:
        if token is DONE:
            yield from self.fork(token, range(len(self.node.outputs)), j)
            yield from self.pop(0)
            return
        yield from self.fork(token, [j], j)
        yield from self.pop(0)
        if self.b > 0:
            self.turn = (j + 1) % len(self.node.outputs) if isinstance(token, Stop) else j
