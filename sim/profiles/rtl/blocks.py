"""The rtl profile's registered blocks: compute units and shape operators timed from their
hardware-contract entry (``step_hw.contract.BLOCKS``; :class:`_Block`), the expanders that write a
piece per cycle (:class:`_Expander`) and the masked RetileStreamify (:class:`_MaskedRetile`)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from step_hw import contract
from step_hw.contract import BLOCKS, Interval
from step_lang import ops
from step_lang.graph import Node
from step_lang.tokens import Stop, is_data, to_tokens

from ..base import ElementFlops, WaitFor
from .clocked import _Clocked, _cycles_until, _frees_after, recv_early_first

if TYPE_CHECKING:
    from .profile import RtlProfile


def _matmul_steps(node: Node, lanes: int, a: Any, b: Any) -> int:
    """Cycles of a MAC array on tiles ``a`` and ``b`` (``contract.matmul_steps``), with ``M``
    the rows ``a`` actually holds (a dynamic tile's, not its bound)."""
    m, k = a.shape
    n = b.shape[0] if getattr(node.fn, "transpose_b", False) else b.shape[1]
    return contract.matmul_steps(m, k, n, lanes)


class _Block(_Clocked):
    """Compute units and shape operators: registered blocks (see the package docstring,
    :mod:`sim.profiles.rtl`). The combinational blocks (routers, Broadcast) have models of their
    own (:class:`_Router`); a combinational block without one would be timed here, its input
    taken when it passes it on."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        block = BLOCKS.entry(node)
        self.latency = block.latency
        self.group = len(node.inputs) if block.joins_inputs else 1
        self.n_in = 0  # tokens of the current group taken so far
        self.last_take = [-math.inf] * len(node.inputs)
        self.busy_until = -math.inf  # the block takes nothing before this cycle
        self.ready_at = -math.inf  # the result of the last take can leave from this cycle
        self.matmul = block.interval is Interval.MAC and contract.is_matmul(node)
        self.steps = 1
        self.retile = block.interval is Interval.PER_ROW
        self.pieces = 1
        self.repeat = node.count if block.interval is Interval.PER_COPY else 1
        self.count_flops = ElementFlops(node) if node.is_compute else None
        self.args: list[Any] = []
        # An Accum with held accumulators: stops of this level or above close a group, whose
        # accumulators leave contract.HELD_EMIT_DELAY cycles later than a plain Accum's.
        held = isinstance(node, ops.Accum) and node.held
        self.held_group = node.rank + node.held if held else None
        # A plain Accum's stop above its rank leaves a stop of its own after the accumulator
        # (``pending`` in ``compute/_unit.py``): the unit does nothing else until it has
        # written it, in the cycle the accumulator leaves the output register.
        self.pending_after = node.rank if isinstance(node, ops.Accum) and not held else None
        self.pending = False
        self.steps_from = -math.inf  # a MAC array's steps start no earlier (``pending``)
        self.popping = False  # taking inputs whose wait was served (``_fold_while_full``)
        self.take_due = None  # the take its steps started for while its last token waited
        # A Reshape that holds each chunk's closing S1 (contract.held_stop_chunk): elements of
        # the current chunk taken and whether its S1 is held (``_write_before_take``).
        self.chunk = contract.held_stop_chunk(node)
        self.pads = getattr(node, "pad", None) is not None
        self.in_chunk = 0
        self.stop_held = False

    def before_recv(self, port: int) -> int | WaitFor:
        if self.popping:
            return 0
        now = self.now
        if self.take_due is not None and self.n_in == 0:
            return _cycles_until(self.take_due, now)
        t = self.last_take[port] + 1
        if self.n_in == 0:
            t = max(t, self.busy_until)
            # A unit takes all its inputs in one cycle, once all are valid...
            for q in range(1, self.group):
                if not self.io.has(q):
                    return WaitFor(q)
            self.steps = 1
            if self.matmul and is_data(self.io.head(port)):
                # ... a MAC array reads its operands in place from the cycle all are offered
                # (its result register may still hold the last result: only the last step
                # writes it) and takes them in its last step.
                heads = self.node.fn_args([self.io.head(q) for q in range(self.group)])
                self.steps = _matmul_steps(self.node, self.p.config.lanes, heads[0], heads[1])
                offered = max(self.io.inputs[q].q[0][0] for q in range(self.group))
                start = max(t, offered, self.steps_from)
                t = (start if self.held_group is None else max(t, now)) + self.steps - 1
        return _cycles_until(t, now)

    def attach(self, io: Any) -> None:
        super().attach(io)
        if len(self.node.outputs) > 1 and self.latency and type(self) is _Block:
            self._drain_apart(io)
        if isinstance(self.node, ops.Accum):
            self._fold_while_full(io)
        if self.chunk is not None:
            self._write_before_take(io)

    def _fold_while_full(self, io: Any) -> None:
        """An Accum's last token of a group waits in its output register (``step_hw.compute.
        _unit``: ``free``) while the unit folds the next group's data and drops the stops inside
        a group: a plain Accum's result (unless a stop is held after it), the stop held after a
        result (written in the cycle the result left: the unit folds from the next), an Accum
        with held accumulators' final stop after its bank. A plain Accum's stop that closes a
        group, and done, wait for the register; with held accumulators the closing stop is taken
        and the bank's emission waits for it. The interpreter's Accum takes nothing before that
        token has left, so the node's send of it takes those inputs meanwhile (its later ``recv``
        returns them) and waits for room or for the next of them, whichever comes first."""
        recv, send = io.recv, io.send
        held = self.held_group is not None
        inner = self.held_group if held else self.pending_after  # stops below: inside a group
        early: list[deque] = [deque() for _ in self.node.inputs]

        def foldable() -> bool | None:
            """Whether the next input tokens are taken without the register (None: not all
            there yet): data, a stop inside a group, and with held accumulators the stop that
            closes a group (it starts the bank's emission, which then waits for the
            register)."""
            if not all(ch.q for ch in io.inputs):
                return None
            token = io.inputs[0].q[0][1]
            return is_data(token) or (isinstance(token, Stop) and (held or token.level < inner))

        def waits(token: Any) -> bool:
            """Whether sending ``token`` frees the unit to fold on while it waits for room."""
            if any(early):
                return False
            if self.pending:  # the stop held after the result: written as the result left
                return isinstance(token, Stop)
            if held:  # the final stop after the bank
                return isinstance(token, Stop) and token.level >= self.node.held
            return is_data(token)

        def send_folding(j: int, token: Any) -> Any:
            if not waits(token):
                return (yield from send(j, token))
            # the register takes it (and a held unit is done with its bank) the cycle before it
            # can leave, its queue's pace aside
            free_from = max(self.ready_at, self.last_push[j] + 1) if held else -math.inf
            if self.pending:  # the unit is free the cycle after the result left
                free_from = self.steps_from = self.last_push[j] + 1
            t = self.now + self.on_send(j, token)
            ch = io.outputs[j]
            take_at, closed = None, False
            while True:
                now = self.now
                if t <= now and self._room(j):
                    break
                fold = not closed and foldable()
                times = [t] if t > now else _frees_after(ch, now)
                if fold and now < free_from:
                    times.append(free_from)
                elif fold:
                    if take_at is None and max(ch_.q[0][0] for ch_ in io.inputs) <= now:
                        take_at = now + self.before_recv(0)
                    if take_at is not None and take_at <= now:
                        self.popping = True
                        for i in range(len(io.inputs)):
                            early[i].append((yield from recv(i)))
                        self.popping = False
                        take_at = None
                        closed = isinstance(early[0][-1], Stop) and early[0][-1].level >= inner
                        continue
                    times.append(take_at if take_at is not None else
                                 max(ch_.q[0][0] for ch_ in io.inputs))  # fmt: skip
                # an arriving token may be taken; the consumer's next take wakes it
                yield from self._wait_output(
                    ch, times, inputs=fold is None and not closed, taken=t <= now
                )
            self.take_due = take_at  # steps under way go on after the token left
            self.paid = True
            yield from send(j, token)

        io.recv, io.send = recv_early_first(recv, early), send_folding

    def _drain_apart(self, io: Any) -> None:
        """Output registers loaded together drain into their queues each on its own
        (``step_hw.shape.Reshape``'s output and pad flags): the node sends a token's outputs in
        port order, which would keep a later output's token behind an earlier output's full
        queue. So its sends of one token are collected and each is pushed once its queue has
        room; the next token waits for all of them, as the block loads its registers only when
        every one is free."""
        send = io.send
        stash: list[deque] = [deque() for _ in self.node.outputs]  # per output, in order

        def send_apart(j: int, token: Any) -> Any:
            stash[j].append(token)
            while all(stash):  # the next token of every output: loaded together
                yield from send_row([(k, q.popleft()) for k, q in enumerate(stash)])

        def send_row(row: list[tuple[int, Any]]) -> Any:
            now = self.now
            loaded = max(self.last_push) + 1  # a register frees in the cycle its token leaves
            ready = [(k, tok, max(now + self.on_send(k, tok), loaded)) for k, tok in row]
            while ready:
                now = self.now
                for item in [x for x in ready if x[2] <= now and self._room(x[0])]:
                    ready.remove(item)
                    self.paid = True
                    yield from send(item[0], item[1])
                if len(ready) == 1:  # the last one waits as any send does
                    k, tok, t = ready.pop()
                    if t > now:
                        yield ("sleep", math.ceil(t - now))
                    self.paid = True
                    yield from send(k, tok)
                elif ready:
                    soon = [t for _, _, t in ready if t > now]
                    for k, _, t in ready:
                        if t <= now:
                            soon += _frees_after(io.outputs[k], now)
                    yield ("sleep", math.ceil(min(soon) - now) if soon else 1)

        io.send = send_apart

    def _count_pieces(self, token: Any) -> int:
        """Output pieces of an expander's element whose first input is ``token`` (the others
        are the heads of the other inputs)."""
        if self.retile:
            shape = getattr(token, "shape", (1, 1))
            return int(shape[0] if self.node.split == "rows" else shape[1])
        if isinstance(self.node, ops.RepeatStatic):
            return self.node.count
        toks = [token] + [self.io.head(q) for q in range(1, self.group)]
        sub = self.node.fn.apply(self.node.out_types[0].elem, *self.node.fn_args(toks))
        return sum(1 for t in to_tokens(sub, self.node.fn.rank)[:-1] if is_data(t))

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        self.take_due = None
        self.last_take[port] = now
        self.n_in += 1
        if self.count_flops is not None and is_data(token):
            self.args.append(token)
        if self.n_in < self.group:
            return 0
        self.n_in = 0
        data = is_data(token)
        busy = 1
        lat = self.latency
        if self.args:  # a compute node's element: its function's FLOPs, as the paper profile
            self.flops += self.count_flops(self.args)
            self.args = []
        if data and not self.matmul:  # a MAC array took it in the last of its steps
            if self.retile:  # one cycle per row (column) of the tile, masked ones included
                shape = getattr(token, "shape", (1, 1))
                busy = max(1, int(shape[0] if self.node.split == "rows" else shape[1]))
            elif self.repeat > 1:
                busy = self.repeat
        if self.latency:  # routers take each input on its own (per-port spacing only)
            self.busy_until = now + busy
        if (
            self.held_group is not None
            and isinstance(token, Stop)
            and token.level >= self.held_group
        ):
            lat += contract.HELD_EMIT_DELAY
        if (
            self.pending_after is not None
            and isinstance(token, Stop)
            and token.level >= self.pending_after
        ):  # a group's closing stop (one inside a group may be folded while a stop is held)
            self.pending = token.level > self.pending_after
        self.ready_at = now + lat
        if self.chunk is not None:
            self._track_chunk(token)
        return 0

    def _writes_before(self, token: Any) -> tuple[int, bool]:
        """What a held-stop Reshape writes before it takes ``token``
        (``step_hw.shape.Reshape._elaborate_inner``): the pads of a chunk that a stop or done
        ends short, and whether a held S1 goes out (data or done releases it; after padding,
        the S1 closing the padded chunk is held, which a stop absorbs)."""
        short = self.chunk - self.in_chunk if self.in_chunk and self.pads else 0
        if is_data(token):
            return 0, self.stop_held
        if isinstance(token, Stop):
            return short, False
        return short, bool(short) or self.stop_held

    def _write_before_take(self, io: Any) -> None:
        """A held-stop Reshape writes what its next input needs before it takes it: the pads and
        the released S1 (``_writes_before``), each into the output registers as they free, the
        input taken in the cycle the last has left. The interpreter writes them after its take,
        so they are sent here first and the node's own sends of them are dropped."""
        recv, send = io.recv, io.send
        n_out = len(self.node.outputs)
        skip = [0] * n_out

        def recv_after_writes(i: int) -> Any:
            token = yield from io.peek(i)
            wait = self.before_recv(i)
            if wait > 0:
                yield ("sleep", wait)
            pads, s1 = self._writes_before(token)
            rows = [[np.array(self.node.pad, copy=True), np.ones((1, 1), bool)]] if pads else []
            rows = rows * pads + [[Stop(1), Stop(1)]] * s1
            for row in rows:
                self.ready_at = self.now + self.latency
                for j in range(n_out):
                    skip[j] += 1
                    yield from send(j, row[j])
            return (yield from recv(i))

        def send_unless_written(j: int, token: Any) -> Any:
            if skip[j]:
                skip[j] -= 1
                return
            yield from send(j, token)

        io.recv, io.send = recv_after_writes, send_unless_written

    def _track_chunk(self, token: Any) -> None:
        """A held-stop Reshape took ``token``: whether the chunk it closes holds its S1."""
        self.stop_held = False
        if is_data(token):
            self.in_chunk += 1
            if self.in_chunk == self.chunk:
                self.in_chunk, self.stop_held = 0, True
        else:
            self.in_chunk = 0

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        if self.pending and isinstance(token, Stop):  # written as the accumulator left
            self.pending = False
            self.steps_from = self.last_push[port] + 1
        self.last_push[port] = now
        if not self.latency:
            # A combinational block holds its input until the outputs take it: the input queue
            # offers the next token the cycle after.
            self.last_take = [max(t, now) for t in self.last_take]

    def on_send(self, port: int, token: Any) -> int:
        # A registered output leaves one token per cycle. A combinational block passes each
        # token on in the cycle it takes it, so only a slow queue spaces them.
        if self.paid:  # charged by ``_drain_apart`` or ``_fold_while_full`` already
            self.paid = False
            return 0
        gap = self.spacing[port] - (0 if self.latency else 1)
        t = max(self.ready_at, self.last_push[port] + gap)
        return _cycles_until(t, self.now)


class _Expander(_Block):
    """A FlatMap generator, an unmasked RetileStreamify or a RepeatStatic (``step_hw.addrgen``,
    ``compute/retile.py``, ``shape.py``): an element is read in place while its pieces (copies)
    are written into the output register, each in the cycle the register frees (the token before
    leaves it), and its inputs are taken with the last piece's write: in the cycle the token
    before the last piece leaves the register (at once for an element of no pieces). Without
    back-pressure that is ``pieces - 1`` cycles after the take (as ``_Block.hold``); with it,
    later. The node's ``recv`` of an element's inputs is wrapped to leave them in their queues
    until then (``attach``). An element of no pieces needs no register: the unit takes it in
    the cycle it is offered after the take before, also while the last piece or a stop waits in
    the register to leave (``_push_taking_empty``)."""

    #: Whether an element may have no pieces: a FlatMap's may (its function says how many), a
    #: RepeatStatic's or an unmasked RetileStreamify's never.
    may_be_empty = False

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send = io.recv, io.send
        self.in_place: list[int] = []  # inputs of the element in hand, still in their queues
        self.to_write = 0  # pieces of it not written into the output register yet
        self.popping = False
        self.early: list[deque] = [deque() for _ in self.node.inputs]
        self.taken = -math.inf  # the cycle of the last element's take
        self.may_be_empty = self.may_be_empty or isinstance(self.node, ops.FlatMap)
        self.empty_memo: tuple[Any, bool] = (None, False)  # (head, whether it has no pieces)

        def take_in_place(i: int) -> Any:
            if self.early[i]:  # taken while the node still sent the element before
                return self.early[i].popleft()
            token = yield from io.peek(i)
            if not is_data(token):
                return (yield from recv(i))
            # as SimIO.recv waits for this block to take it (only this node takes from input i)
            wait = self.before_recv(i)
            while isinstance(wait, WaitFor):
                yield from io.peek(wait.port)
                wait = self.before_recv(i)
            if wait > 0:
                yield ("sleep", wait)
            if self.n_in == 0:
                self.pieces = self._count_pieces(token)
            self.in_place.append(i)
            self.on_recv(i, token)
            if self.n_in == 0:  # the element is in hand
                self.to_write = self.pieces
                if self.to_write <= 0:  # no piece
                    yield from self._take_empty()
            return token

        def send_piece(j: int, token: Any) -> Any:
            if is_data(token) and self.in_place:
                yield from self._send_piece(j, token)
            else:
                yield from self._send_other(j, token)
            if is_data(token) and self.to_write > 0:
                self.to_write -= 1

        self._recv_now, self._send_now = recv, send
        io.recv, io.send = take_in_place, send_piece

    def _take_empty(self) -> Any:
        """An element of no pieces: taken at once."""
        yield from self._take()

    def _send_other(self, j: int, token: Any) -> Any:
        """Send a stop or done token (taken as it is written)."""
        yield from self._push_taking_empty(j, token)

    def _send_piece(self, j: int, token: Any) -> Any:
        """Send a piece of the element in hand; the last is written as the token before it
        leaves the register (the node sends each token once the one before has left), the
        element taken with it."""
        if self.to_write != 1:
            return (yield from self._send_now(j, token))
        yield from self._take()
        yield from self._push_taking_empty(j, token)

    def _take(self) -> Any:
        """Take the element's inputs from their queues, now."""
        self.taken = self.now
        self.popping = True
        for i in self.in_place:
            yield from self._recv_now(i)
        self.popping = False
        self.in_place = []

    def _push_taking_empty(self, j: int, token: Any) -> Any:
        """Push a token written into the output register (an element's last piece, a stop);
        meanwhile the unit takes the elements after it that have no pieces (they need no
        register), each in its cycle (``_empty_due``). The node's ``recv`` returns them
        later."""
        if not self.may_be_empty:
            return (yield from self._send_now(j, token))
        ch = self.io.outputs[j]
        gap = self.spacing[j] - (0 if self.latency else 1)
        while True:
            now = self.now
            beat = max(self.ready_at, self.last_push[j] + gap)
            if beat <= now and self._room(j):
                break
            due = self._empty_due()
            if due is not None and due <= now:
                self.taken = now
                self.popping = True
                for i in range(self.group):
                    self.last_take[i] = now
                    self.early[i].append((yield from self._recv_now(i)))
                self.popping = False
                continue
            soon = [beat] if beat > now else _frees_after(ch, now)
            if due is not None:
                soon.append(due)
            # an arriving element may have no pieces; the consumer's next take wakes it
            arriving = due is None and not all(c.q for c in self.io.inputs)
            yield from self._wait_output(ch, soon, inputs=arriving, taken=beat <= now)
        yield from self._send_now(j, token)

    def _empty_due(self) -> float | None:
        """When the element at the heads of the inputs is taken, if it has no pieces: the
        cycle all its inputs are offered, after the last take."""
        if not all(c.q for c in self.io.inputs):
            return None
        token = self.io.inputs[0].q[0][1]
        if not is_data(token):
            return None
        if self.empty_memo[0] is not token:
            self.empty_memo = (token, self._count_pieces(token) <= 0)
        if not self.empty_memo[1]:
            return None
        return self._offered_after_take()

    def _offered_after_take(self) -> float:
        """The cycle the unit has the element at the heads of the inputs: once all are offered,
        the cycle after the last take (an element's, or a stop's)."""
        offered = max(c.q[0][0] for c in self.io.inputs)
        return max(offered, max(self.taken, *self.last_take) + 1)

    def before_recv(self, port: int) -> int | WaitFor:
        return 0 if self.popping else super().before_recv(port)

    def on_recv(self, port: int, token: Any) -> int:
        return 0 if self.popping else super().on_recv(port, token)


class _MaskedRetile(_Expander):
    """A RetileStreamify that drops padding rows (``compute/retile.py``, ``masked``): it steps
    through a tile's rows one per cycle from the cycle the tile and its mask are offered; a kept
    row is written into the output register when the register frees (the row before it left), a
    padding row takes its cycle without the register, and the tile is taken in the cycle of its
    last row. So a kept row is written ``max(w + d, p)`` for the kept row before it written at
    ``w``, ``d`` rows earlier, and pushed at ``p``; the first in the cycle its rows reach it
    (the element offered at ``s``: ``s + i`` for row ``i``), once the register is free; the
    tile is taken its trailing padding rows after its last kept row's write, whether or not that
    row has left the register (``s + R - 1`` for a tile of padding only). The node sends only
    the kept rows, so their sends are timed here (``_send_piece``)."""

    may_be_empty = True  # a tile of padding rows only

    def attach(self, io: Any) -> None:
        super().attach(io)
        self.kept: list[int] = []  # the element's kept rows
        self.rows = 0
        self.start = -math.inf  # the cycle its rows start (row i in start + i)
        self.written = -math.inf  # when the element's last kept row so far was written

    def _count_pieces(self, token: Any) -> int:
        mask = np.asarray(self.io.head(1))
        self.rows = int(mask.shape[0])
        self.kept = [i for i in range(self.rows) if not mask[i, 0]]
        self.start = self._offered_after_take()  # its first row
        return len(self.kept)

    def _take(self) -> Any:
        self.busy_until = self.now + 1
        yield from super()._take()

    def on_recv(self, port: int, token: Any) -> int:
        out = super().on_recv(port, token)
        if is_data(token) and not self.popping:  # its rows, not the cycle it came in hand
            self.busy_until = self.start + self.rows
        return out

    def _take_empty(self) -> Any:
        # a tile of padding rows only: taken in the cycle of its last row
        wait = self.start + self.rows - 1 - self.now
        if wait > 0:
            yield ("sleep", math.ceil(wait))
        yield from self._take()

    def _send_piece(self, j: int, token: Any) -> Any:
        k = len(self.kept) - self.to_write  # which kept row
        row = self.kept[k]
        free = self.last_push[j]  # the register frees in the cycle its token leaves
        if k == 0:
            write = max(self.start + row, free)
        else:
            write = max(self.written + row - self.kept[k - 1], free)
        self.written = write
        self.ready_at = write + self.latency
        if k < len(self.kept) - 1:
            return (yield from self._send_now(j, token))
        take_at = write + self.rows - 1 - row  # the tile's last row
        ch, proc = self.io.outputs[j], self.io.proc
        while self.in_place:  # the take and the push, each at its own cycle
            now = self.now
            if take_at <= now:
                yield from self._take()
                break
            if self.ready_at <= now and self._room(j):
                yield from self._send_now(j, token)
                token = None
                break
            soon = [take_at, self.ready_at] if self.ready_at > now else [take_at]
            if self.ready_at <= now:  # the consumer's next take wakes it
                soon += _frees_after(ch, now)
                ch.send_waiter = (proc, proc.epoch + 1)
            yield ("sleep", math.ceil(min(soon) - now))
        if token is None:  # pushed first: the take is due
            wait = take_at - self.now
            if wait > 0:
                yield ("sleep", math.ceil(wait))
            yield from self._take()
        else:
            yield from self._push_taking_empty(j, token)

    def _empty_due(self) -> float | None:
        """When the element at the heads of the inputs is taken, if it is all padding rows: in
        the cycle of its last row."""
        if not all(c.q for c in self.io.inputs):
            return None
        token, mask = (c.q[0][1] for c in self.io.inputs)
        if not is_data(token) or not np.asarray(mask).all():
            return None
        return self._offered_after_take() + np.asarray(mask).shape[0] - 1
