"""The rtl profile's loads whose sequencer walks a block per input token on a port of their own:
a RandomLoad with ``fetch`` blocks and a LinearLoad with a reference (:class:`_BlockLoad`)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from step_hw import contract
from step_lang.graph import Node

from .axi import _TILE_QUEUE, _Axi, _geometry
from .clocked import _Clocked, _cycles_until, _frees_after
from .sequencer import _Blocks

if TYPE_CHECKING:
    from .profile import RtlProfile


class _BlockLoad(_Clocked):
    """A load whose sequencer walks a block per input token, on a port of its own: a
    RandomLoad with ``fetch`` blocks (the block of each address) or a LinearLoad with a
    reference (its walk per reference element). Its sequencer, TileReader and output stage in
    absolute time.

    The sequencer (``memory/sequence.py``) acts at most once a cycle: the take of a data token
    that starts a block (a cycle of its own, :data:`~step_hw.contract.SEQUENCER_TAKE`), then
    one ``ELEM`` entry per tile of the block; a ``STOP`` entry for an input stop (merging
    the held closing ``S_k``), for a held ``S_k`` that a data token or done releases, and a
    ``DONE`` entry. An entry waits for room in the order queue (``contract.order_queue_depth``; a
    slot frees the cycle after its entry's last beat left) and, for a read, in the address queue
    (``contract.ADDR_QUEUE_DEPTH``; a slot frees the cycle after the burst generator took it).
    The burst generator takes a tile ``LOAD_ISSUE - 1`` cycles after its entry, or in the cycle
    of the previous tile's last AR; bursts, R beats and the tile queue as :class:`_Load`. An
    entry's tile (a zero tile: no read) or stop is offered when the order queue offers it
    (``queue_latency``) or its tile was assembled; the stop after a tile in the same entry (a
    stop inside the block, the closing ``S_k`` of a block driven by a rank-0 stream) the cycle
    after the tile.

    The sequencer runs ahead of the outputs: it takes the next input token from its queue in
    the cycle it gets to it, while the block before still leaves. So the input tokens are
    planned as they become visible (``_plan``), the entries worked out as far as the beats
    already sent allow (``_advance``), and each token taken from its queue in its cycle, also
    while the node still sends the block before (``attach``: the node's ``recv`` then returns
    it).
    """

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        mo = profile.config.max_outstanding
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(mo)
        self.order_depth = contract.order_queue_depth(mo)
        self.order_latency = contract.queue_latency(self.order_depth)
        self.tile_latency = contract.queue_latency(_TILE_QUEUE)
        self.blocks = _Blocks(node)
        self.seq_t = 0.0  # the first cycle the sequencer may act
        self.plan: deque[tuple] = deque()  # per output beat (and take): what the hardware does
        self.beats: deque[tuple] = deque()  # per output beat worked out: (ready, pops, read)
        self.takes: deque[float | None] = deque()  # the token planned, not taken: its take
        self.entries = 0
        self.order_pop: list[float] = []  # per entry: the cycle its last beat left
        self.read_entry: list[float] = []  # per read tile: its entry
        self.read_k: list[int] = []  # per read tile: the tensor tile
        self.gen_take: list[float] = []  # per read tile: the burst generator's take
        self.gen_free = -math.inf  # the previous tile's last AR: the generator takes the next
        self.ar = -math.inf  # the last AR issued
        self.bursts_issued = 0  # of the tile being issued
        self.last_beat = -math.inf
        self.read_ready: list[float] = []  # per read tile: the cycle it is offered
        self.tile_pops: list[float] = []  # per read tile: its departure from the tile queue
        self.pops: bool = False  # the beat being sent completes an entry
        self.read = False  # the beat being sent is a tile read from memory

    # -- the sequencer -------------------------------------------------------------------------

    def _plan(self, token: Any, v: float) -> None:
        """The sequencer's steps for input token ``token``, visible from cycle ``v``; the step
        that takes it from its queue is marked."""
        plan = self.plan
        self.takes.append(None)
        for step in self.blocks.steps(token):  # (``_Blocks.steps``)
            if step[0] == "entry":
                plan.append(("entry", v, False, None, False, step[2]))
            elif step[0] == "take":
                plan.append(("take", v))
            else:
                _, k, level = step
                plan.append(("entry", v, True, k, level > 0, False))
                if level:
                    plan.append(("beat2",))

    def _took(self, t: float) -> None:
        self.takes[self.takes.index(None)] = t

    def _advance(self) -> None:
        """Work out the plan's steps in order, as far as the beats sent so far allow."""
        plan = self.plan
        while plan:
            step = plan[0]
            if step[0] == "take":
                self._took(max(step[1], self.seq_t))
                self.seq_t = max(step[1], self.seq_t) + contract.SEQUENCER_TAKE
            elif step[0] == "beat2":
                self.beats.append((-math.inf, True, None))
            else:
                _, v, elem, k, two, takes = step
                x = self.entries - self.order_depth
                if x >= 0 and x >= len(self.order_pop):
                    return  # the order queue is full until a beat not sent yet leaves
                w = len(self.read_entry) - contract.ADDR_QUEUE_DEPTH
                if k is not None and w >= 0:
                    while len(self.gen_take) <= w and self._issue():
                        pass
                    if len(self.gen_take) <= w:
                        return  # the address queue is full until the generator takes a tile
                c = self._emit(v, k is not None)
                if takes:
                    self._took(c)
                if k is None:
                    self.beats.append((c + self.order_latency, not (elem and two), None))
                else:
                    self.offchip_read += self.tile_bytes
                    self.beats.append((None, not (elem and two), len(self.read_entry)))
                    self.read_entry.append(c)
                    self.read_k.append(k)
            plan.popleft()

    def _emit(self, earliest: float, read: bool) -> float:
        """The cycle of the sequencer's next entry (``read``: a tile read, which needs room in
        the address queue)."""
        c = max(earliest, self.seq_t)
        x, w = self.entries, len(self.read_entry)
        if x >= self.order_depth:
            c = max(c, self.order_pop[x - self.order_depth] + contract.QUEUE_SLOT_RELEASE)
        if read and w >= contract.ADDR_QUEUE_DEPTH:
            c = max(c, self.gen_take[w - contract.ADDR_QUEUE_DEPTH] + contract.QUEUE_SLOT_RELEASE)
        self.entries += 1
        self.seq_t = c + 1
        return c

    def _issue(self) -> bool:
        """Issue the bursts of the next tile read whose entry is known: the burst generator
        takes the tile ``LOAD_ISSUE - 1`` cycles after its entry or in the cycle of the previous
        tile's last AR (``gen_take``), then its bursts leave one a cycle; False if its entry, or
        the tile-queue slot its last burst waits for, is not known yet (it goes on from there at
        the next call)."""
        w = len(self.read_ready)
        if w >= len(self.read_entry):
            return False
        p, axi = self.p, self.axi
        if len(self.gen_take) == w:
            self.gen_take.append(max(self.read_entry[w] + p.load_issue - 1, self.gen_free))
            self.ar, self.bursts_issued = self.gen_take[w], 0
        bursts = self.bursts[self.read_k[w]]
        while self.bursts_issued < len(bursts):
            i = self.bursts_issued
            ar = max(self.ar + 1, axi.slots[0])
            if i == len(bursts) - 1 and w >= _TILE_QUEUE:  # room in the tile queue
                if w - _TILE_QUEUE >= len(self.tile_pops):
                    return False
                ar = max(ar, self.tile_pops[w - _TILE_QUEUE] + 1)
            first = max(ar + p.memory_latency, axi.data_free)
            self.last_beat = first + bursts[i] - 1
            axi.data_free = self.last_beat + 1
            axi.slots.popleft()
            axi.slots.append(self.last_beat + 1)
            self.ar = ar
            self.bursts_issued += 1
        self.gen_free = self.ar
        self.read_ready.append(self.last_beat + self.tile_latency)
        return True

    # -- the node ------------------------------------------------------------------------------

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send = io.recv, io.send
        ahead: deque = deque()  # (token, visible) taken while the node sent the block before

        def take_due() -> float | None:
            """The cycle the head of the input queue is taken (None: not known yet); plans it
            once it is visible."""
            ch = io.inputs[0]
            if not self.takes and ch.q and ch.q[0][0] <= self.now:
                self._plan(ch.q[0][1], ch.q[0][0])
            if not self.takes:
                return None
            self._advance()
            return self.takes[0]

        def take() -> Any:
            self.takes.popleft()
            ahead.append(((yield from recv(0)), io.visible))

        def recv_planned(i: int) -> Any:
            if not ahead:
                yield from io.peek(0)
                t = take_due()
                if t > self.now:
                    yield ("sleep", math.ceil(t - self.now))
                yield from take()
            token, io.visible = ahead.popleft()
            return token

        def send_taking(j: int, token: Any) -> Any:
            t, self.paid = self.now + self.on_send(j, token), True
            ch = io.inputs[0]
            while True:
                now = self.now
                due = take_due()
                if due is not None and due <= now:
                    yield from take()
                    continue
                # an address that becomes visible meanwhile is planned then
                soon = [x for x in (due, ch.q[0][0] if ch.q and not self.takes else None)
                        if x is not None and x > now]  # fmt: skip
                if now >= t and (self._room(j) or not (soon or not ch.q)):
                    break  # SimIO.send waits for room from here
                if not ch.q:  # an address that arrives meanwhile wakes the node
                    ch.recv_waiter = (io.proc, io.proc.epoch + 1)
                if now < t:
                    yield ("sleep", math.ceil(min([t, *soon]) - now))
                    continue
                out = io.outputs[j]
                out.send_waiter = (io.proc, io.proc.epoch + 1)  # the consumer's take wakes it
                wake = [*soon, *_frees_after(out, now)]
                if wake:
                    yield ("sleep", math.ceil(min(wake) - now))
                else:
                    yield ("park", f"room on {out.name}", ("room", out.name), "stalled_out")
            yield from send(j, token)

        io.recv, io.send = recv_planned, send_taking

    def on_send(self, port: int, token: Any) -> int:
        if self.paid:  # charged by ``send_taking`` already
            self.paid = False
            return 0
        self._advance()
        ready, self.pops, w = self.beats.popleft()
        self.read = w is not None
        if self.read:
            while len(self.read_ready) <= w:
                if not self._issue():
                    raise RuntimeError(f"rtl profile: '{self.node.name}' cannot read tile {w} yet")
            ready = self.read_ready[w]
        t = max(ready, self.last_push[port] + self.spacing[port])
        return _cycles_until(t, self.now)

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        self.last_push[port] = now
        if self.pops:
            self.order_pop.append(now)
        if self.read:
            self.tile_pops.append(now)
            self.read = False
