"""The rtl profile's LinearLoad and RandomLoad (``step_hw/memory/load.py``): the TileReader
pipeline in absolute time (:class:`_Load`)."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from step_hw import contract
from step_lang.graph import Node
from step_lang.stoprules import grid_tokens
from step_lang.tokens import DONE, Stop, is_data

from .axi import _TILE_QUEUE, _Axi, _geometry
from .clocked import _Clocked, _cycles_until, _frees_after
from .ports import Port
from .sequencer import _Blocks, _walk_tiles

# Cycles from a tile's last beat into the tile queue to the queue offering it.
_TILE_LATENCY = contract.queue_latency(_TILE_QUEUE)

if TYPE_CHECKING:
    from .profile import RtlProfile


class _Load(_Clocked):
    """LinearLoad / RandomLoad: the TileReader pipeline in absolute time (the package docstring).

    On a port of its own: a LinearLoad without a reference, or a RandomLoad without ``fetch``
    blocks (the others are :class:`_BlockLoad`). On a shared port: every load, its entries
    planned from its walk or input tokens (``_more``)."""

    def __init__(self, profile: RtlProfile, node: Node, random: bool = False):
        super().__init__(profile, node)
        self.random = random
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(profile.config.max_outstanding)
        self.order_depth = contract.order_queue_depth(profile.config.max_outstanding)
        # Cycles from a stop's or done's sequencer entry to the output offering it, at the
        # earliest: with an input, the token is an entry of its own through the order queue; a
        # walk's stops leave as the second beat of their tile's entry, a cycle after it.
        self.stop_latency = contract.queue_latency(self.order_depth) if node.inputs else 1
        self.entry = profile.load_start - 1.0  # the sequencer's last entry
        self.walk = 0  # tiles of the current walk (LinearLoad)
        self.out_pops: list[float] = []  # output beats, for the order queue's room
        self.tile_pops: list[float] = []  # tiles taken from the tile queue
        self.tiles_sent = 0
        self.entries = 0
        self.walk_start = None if node.inputs else profile.load_start
        self.idx = None if random else _walk_tiles(node)
        self.rand_k = 0
        self.ahead_entries: deque = deque()  # entries of addresses taken ahead (_take_ahead)
        self.taking_ahead = False
        # Per tile read, in order: its entry and tensor tile once known, and once its bursts are
        # issued (``_issue``) the cycle the burst generator took it and the cycle it is offered.
        self.read_entry: list[float] = []
        self.read_k: list[int] = []
        self.generator_take: list[float] = []
        self.read_ready: list[float] = []
        self.bursts_issued = 0  # of the tile being issued
        self.last_beat = 0.0  # of the last burst issued

    def on_recv(self, port: int, token: Any) -> int:
        if self.port is not None:
            self.refs.append((self.io.visible, token))
            return 0
        if self.taking_ahead:  # its node asks for it later (``_take_ahead``)
            return 0
        # On a port of its own only a RandomLoad without fetch blocks has an input here (the
        # others are ``_BlockLoad``s): an address is a command of the tile reader at once.
        self.walk_start = self.io.visible
        if is_data(token):
            k = int(token.reshape(-1)[0])
            self.rand_k = k if 0 <= k < len(self.bursts) else 0
        return 0

    def _entry_time(self, read: int | None = None) -> float:
        """Cycle of the sequencer's next entry (one per cycle; the order queue bounds it, and
        the address queue a tile ``read``'s); an address taken ahead (``_take_ahead``) has its
        entry already."""
        if self.ahead_entries:
            return self.ahead_entries.popleft()
        t = self._next_entry(self.walk_start, read)
        self.entries += 1
        self.entry = t
        return t

    def _next_entry(self, start: float | None, read: int | None = None) -> float | None:
        """The cycle of the next entry, its command there from ``start`` (None: the order queue
        is full until a token that has not left yet leaves, or the address queue until the
        burst generator takes a tile it cannot take yet). ``read``: the entry reads this tile,
        and needs the slot of the address queue that tile ``read - ADDR_QUEUE_DEPTH`` frees
        in the cycle after the generator takes it."""
        t = self.entry + 1
        if start is not None:
            t = max(t, start)
        j = self.entries - self.order_depth
        if j >= 0:
            if j >= len(self.out_pops):
                return None
            t = max(t, self.out_pops[j] + contract.QUEUE_SLOT_RELEASE)
        w = -1 if read is None else read - contract.ADDR_QUEUE_DEPTH
        if w >= 0:
            while len(self.generator_take) <= w:
                if not self._issue() and len(self.generator_take) <= w:
                    return None
            t = max(t, self.generator_take[w] + contract.QUEUE_SLOT_RELEASE)
        return t

    def _issue(self) -> bool:
        """Issue the bursts of the next tile read whose entry is known, in the cycles the
        hardware does: the burst generator takes the tile (``generator_take``), then its bursts
        leave one a cycle; False if its entry, or the tile-queue slot its last burst waits for,
        is not known yet (then it goes on from there at the next call)."""
        w = len(self.read_ready)
        if w >= len(self.read_entry):
            return False
        p, axi = self.p, self.axi
        t = self.read_entry[w] + p.load_issue
        if len(self.generator_take) == w:
            self.generator_take.append(max(t - 1, axi.last_issue))
            self.bursts_issued = 0
        bursts = self.bursts[self.read_k[w]]
        j = w - _TILE_QUEUE
        while self.bursts_issued < len(bursts):
            i = self.bursts_issued
            ar = max(t + i, axi.last_issue + 1, axi.slots[0])
            if i == len(bursts) - 1 and j >= 0:  # the tile queue will have room for the tile
                if j >= len(self.tile_pops):
                    return False
                ar = max(ar, self.tile_pops[j] + contract.QUEUE_SLOT_RELEASE)
            axi.last_issue = ar
            first = max(ar + p.memory_latency, axi.data_free)
            self.last_beat = first + bursts[i] - 1
            axi.data_free = self.last_beat + 1
            axi.slots.popleft()
            axi.slots.append(self.last_beat + 1)
            self.bursts_issued += 1
        self.read_ready.append(self.last_beat + _TILE_LATENCY)
        return True

    def _read_tile(self, k: int) -> float:
        """The cycle the next tile (tensor tile ``k``) is offered on the output: its entry, then
        its bursts (``_issue``; issued already if a later entry needed its generator take)."""
        self.offchip_read += self.tile_bytes
        w = self.tiles_sent
        entry = self._entry_time(w)
        if w == len(self.read_entry):  # not taken ahead
            self.read_entry.append(entry)
            self.read_k.append(k)
        while len(self.read_ready) <= w:
            if not self._issue():
                raise RuntimeError(f"rtl profile: '{self.node.name}' cannot read tile {w} yet")
        return self.read_ready[w]

    def on_send(self, port: int, token: Any) -> int:
        now = self.now
        if self.paid:  # charged by ``_take_ahead``'s send already
            self.paid = False
            return 0
        if self.port is not None:
            i = len(self.out_pops)  # this token's command (``_more``)
            w = self.cmd_tile[i]
            if w is not None:
                self.offchip_read += self.tile_bytes
                ready = self.tile_r[w] + _TILE_LATENCY  # known: ``attach`` waited for it
            else:  # a stop or done (of a walk without input: with its tile's entry)
                ready = self._entry(self.cmd_entry[i]) + self.stop_latency
            t = max(ready, self.last_push[port] + self.spacing[port])
            return _cycles_until(t, now)
        if is_data(token):
            if self.random:
                ready = self._read_tile(self.rand_k)
            else:
                k = self.idx[self.walk % len(self.idx)]
                self.walk += 1
                ready = self._read_tile(k)
            t = max(ready, self.last_push[port] + self.spacing[port])
        else:
            # Stops and done leave the output stage one per cycle (stops of a walk follow their
            # tile's entry; a reference's stops are entries of their own).
            entry = self.entry
            if not isinstance(token, Stop) or self.node.inputs:
                entry = self._entry_time()
            # A RandomLoad's stop or done is a command of its own, through the order queue.
            t = max(entry + self.stop_latency, self.last_push[port] + self.spacing[port])
        return _cycles_until(t, now)

    # -- on a shared read port (``ReadPort``) ---------------------------------------------------
    #
    # The port is simulated in time order, so a load's requests must be known before its node
    # gets to send the tiles (it reads ahead): its commands (one per output token; ``_more``)
    # come from its walk, and from the reference or address tokens it has taken (``refs``) and
    # those waiting in its input queue, as ``LinearOffChipLoad.execute`` would turn them into
    # tokens; sequencer entries, bursts and R beats follow as above.

    def share(self, port: Port | None) -> None:
        self.port = port
        if port is None:
            return
        self.mo = self.p.config.max_outstanding
        self.refs: list[tuple[float, Any]] = []  # input tokens taken, with their visible cycle
        self.used = 0  # input tokens turned into commands
        self.cmd_tile: list[int | None] = []  # per output token: its tile (number), if any
        self.cmd_entry: list[int] = []  # per output token: the last sequencer entry so far
        self.cmd_last: list[bool] = []  # per output token: the last beat of its entry
        self.entry_start: list[float] = []  # per entry: the cycle its input token allows
        self.entry_gap: list[int] = []  # per entry: cycles at least after the entry before
        self.entry_at: list[float] = []  # per entry: its cycle (a prefix: ``_entry``)
        self.entry_pops: list[float] = []  # per entry: the cycle its last beat left
        # Per input token: when the sequencer takes it (``_take_cycle``): ``(entry, None)`` in
        # the cycle of that entry, ``(entry, visible)`` the cycle after it, once visible.
        self.in_take: list[tuple[int, float | None]] = []
        self.tile_k: list[int] = []  # per tile: the tensor tile it reads
        self.tile_entry: list[int] = []  # per tile: its entry
        self.entry_tile: dict[int, int] = {}  # per entry of a tile read: the tile
        self.tile_last_burst: list[int] = []  # per tile: its last burst (once known)
        self.burst_of: list[tuple[int, int, int, bool]] = []  # (tile, index, beats, closes it)
        self.ar: list[int] = []  # per burst: AR handshake
        self.ar_from = (-1, 0)  # (burst, the cycle it is offered from), once that is known
        self.r_last: list[int] = []  # per burst: last R beat
        self.tile_r: list[int] = []  # per tile: last R beat
        if self.node.inputs and (not self.random or self.node.fetch is not None):
            self.blocks = _Blocks(self.node)

    def attach(self, io: Any) -> None:
        super().attach(io)
        if self.port is not None:
            self._port_take_ahead(io)
        elif self.random:
            self._take_ahead(io)

    # -- a RandomLoad takes its addresses ahead ------------------------------------------------
    #
    # Its node takes an address, sends the tile, then takes the next; the hardware's tile reader
    # takes an address as a command in the cycle of its sequencer entry (one per cycle, while
    # the order queue has room) and reads while earlier tiles wait to leave. The entries were
    # always timed from the cycle each address became visible, but the address queue's slot
    # freed only when the node took it: with a queue of depth 1 the next address then arrived
    # late. So while the node waits to send, its ``send`` takes the next addresses at their
    # entries (their timing kept for the node's ``recv`` of each, in order), also those that
    # arrive while it waits for room.

    def _take_ahead(self, io: Any) -> None:
        recv, send = io.recv, io.send
        self.ahead: deque = deque()  # (token, visible) taken ahead of the node's recv

        def recv_ahead(i: int) -> Any:
            if self.ahead:
                token, io.visible = self.ahead.popleft()
                self.on_recv(i, token)
                return token
            return (yield from recv(i))

        def send_taking(j: int, token: Any) -> Any:
            cost = self.on_send(j, token)
            t, self.paid = self.now + cost, True
            ch = io.inputs[0]
            while True:
                now = self.now
                read = None
                if ch.q and is_data(ch.q[0][1]):
                    read = len(self.read_entry)
                e = self._next_entry(ch.q[0][0], read) if ch.q else None
                if e is not None and e <= now:
                    self.taking_ahead = True
                    self.ahead.append(((yield from recv(0)), io.visible))
                    self.taking_ahead = False
                    if read is not None:
                        k = int(self.ahead[-1][0].reshape(-1)[0])
                        self.read_entry.append(e)
                        self.read_k.append(k if 0 <= k < len(self.bursts) else 0)
                    self.entries += 1
                    self.entry = e
                    self.ahead_entries.append(e)
                    continue
                if now < t:
                    if not ch.q:  # an address that arrives meanwhile wakes the node
                        ch.recv_waiter = (io.proc, io.proc.epoch + 1)
                    yield ("sleep", min(x for x in (e, t) if x is not None) - now)
                    continue
                if self._room(j) or (e is None and ch.q):
                    break  # SimIO.send waits for room from here (the sequencer for a send)
                # no room yet: the next address may be taken meanwhile, or arrive
                out = io.outputs[j]
                frees = _frees_after(out, now)
                if e is None:  # nothing to take: room or an address that arrives wakes it
                    yield from self._wait_output(out, frees, inputs=True, taken=True)
                else:
                    yield ("sleep", min(e, *frees) - now if frees else 1)
            yield from send(j, token)

        io.recv, io.send = recv_ahead, send_taking

    def _port_take_ahead(self, io: Any) -> None:
        """On a shared port: the node's ``send`` waits for the tile's last beat (``_wait``), then
        for the cycle its token is offered and for room; a load with an input takes its next
        input tokens meanwhile, each in the cycle its sequencer takes it (``_take_cycle``), as
        ``_take_ahead`` and ``_BlockLoad`` do for a load on a port of its own."""
        recv, send = io.recv, io.send
        ahead = bool(self.node.inputs)
        taken: deque = deque()  # taken ahead of the node's recv (``on_recv`` has seen them)

        def due() -> bool | None:
            """Whether the next input token's take has come (None: not known yet)."""
            if not ahead or not io.inputs[0].q:
                return None
            e = self._take_cycle(len(self.refs))
            return None if e is None else e <= self.now

        def take_due() -> Any:
            while due():
                taken.append((yield from recv(0)))

        def recv_ahead(i: int) -> Any:
            if taken:
                return taken.popleft()
            return (yield from recv(i))

        def next_take() -> float:
            """When to look again for the next input token's take."""
            if not ahead:
                return math.inf
            if not io.inputs[0].q:  # a token that arrives meanwhile wakes the node
                io.inputs[0].recv_waiter = (io.proc, io.proc.epoch + 1)
                return math.inf
            e = self._take_cycle(len(self.refs))  # None: it may become known any cycle
            return self.now + 1 if e is None else max(e, self.now + 1)

        def next_look() -> float:
            """When to look again for the tile or the next input token's take."""
            return min(self._tile_due(), next_take())

        def send_when_read(j: int, token: Any) -> Any:
            while True:
                yield from take_due()
                yield from self._wait(lambda: due() or self._tile_read(token), "a tile", next_look)
                if not due():
                    break
            t, self.paid = self.now + self.on_send(j, token), True
            while self.now < t:  # until the token is offered: take inputs meanwhile
                yield from take_due()
                yield ("sleep", math.ceil(min(t, next_take()) - self.now))
            yield from take_due()
            yield from wait_for_room(j)
            yield from send(j, token)

        def wait_for_room(j: int) -> Any:
            """Until output ``j`` has room, take input tokens at their cycles (a token that
            arrives meanwhile, a slot that frees or the consumer's take wakes the node)."""
            out, ch = io.outputs[j], io.inputs[0] if ahead else None
            while not self._room(j):
                if ch is None or (not ch.q and self.refs and self.refs[-1][1] is DONE):
                    return  # nothing more to take: SimIO.send waits for room
                out.send_waiter = (io.proc, io.proc.epoch + 1)
                wake = [*_frees_after(out, self.now), next_take()]
                if min(wake) < math.inf:
                    yield ("sleep", math.ceil(min(wake) - self.now))
                else:
                    yield ("park", f"room on {out.name}", ("room", out.name), "stalled_out")
                yield from take_due()

        io.recv, io.send = recv_ahead, send_when_read

    def _tile_read(self, token: Any) -> bool:
        i = len(self.out_pops)
        while i >= len(self.cmd_tile):
            if not self._more():
                raise RuntimeError(f"rtl profile: no command for token {i} of '{self.node.name}'")
        w = self.cmd_tile[i]
        if (w is None) != (not is_data(token)):
            raise RuntimeError(f"rtl profile: token {i} of '{self.node.name}' is not its command's")
        if w is None or w < len(self.tile_r):
            return True
        self.port.advance(self.now)
        return w < len(self.tile_r)

    def _tile_due(self) -> int:
        """A cycle before which the next output token's tile cannot have been read
        (``ReadPort.earliest_last_beat`` of its last burst)."""
        w = self.cmd_tile[len(self.out_pops)]
        bo = self.burst_of
        if bo and bo[-1][0] >= w:  # its bursts are known: the last one
            n = len(bo) - 1
            while bo[n][0] > w:
                n -= 1
            beats = bo[n][2]
        else:  # none requested yet: all its beats still to come
            n, beats = len(bo), sum(self.bursts[self.tile_k[w]])
        return self.port.earliest_last_beat(self.port.managers.index(self), n, beats)

    def _walk(self) -> list[Any]:
        """The tokens of a LinearLoad's one walk (without a reference), tiles as their tensor
        tile numbers."""
        tiles = iter(self.idx)
        return grid_tokens(self.node.out_shape, lambda m: [next(tiles)])

    def _command(self, token: Any, start: float, entry: bool, gap: int = 1) -> None:
        """Output token ``token``: a sequencer entry of its own, earliest at ``start`` and
        ``gap`` cycles after the entry before, or (not ``entry``) the second beat of the last."""
        if entry:
            self.entry_start.append(start)
            self.entry_gap.append(gap)
        else:
            self.cmd_last[-1] = False
        e = len(self.entry_start) - 1
        self.cmd_entry.append(e)
        self.cmd_last.append(True)
        if is_data(token):
            self.cmd_tile.append(len(self.tile_k))
            self.entry_tile[e] = len(self.tile_k)
            self.tile_k.append(token)
            self.tile_entry.append(e)
        else:
            self.cmd_tile.append(None)

    def _more(self) -> bool:
        """Commands for the next input token (without inputs: the walk); False if that token has
        not been sent yet."""
        node = self.node
        if not node.inputs:
            if self.cmd_tile:
                return False
            for t in [*self._walk(), DONE]:  # stops leave with their tile's entry
                self._command(t, self.p.load_start, not isinstance(t, Stop))
            return True
        i, taken = self.used, len(self.refs)
        queue = self.io.inputs[0].q
        if i < taken:
            visible, token = self.refs[i]
        elif i - taken < len(queue):
            visible, token = queue[i - taken]
        else:
            return False
        self.used += 1
        if self.random and node.fetch is None:
            # An address is a command at once; stops and done are commands too.
            if is_data(token):
                k = int(token.reshape(-1)[0])
                token = k if 0 <= k < len(self.bursts) else 0
            self.in_take.append((len(self.entry_start), None))
            self._command(token, visible, True)
            return True
        # The sequencer's steps (``_Blocks.steps``) as commands: a data token is taken the
        # cycle after the entry before (a cycle of its own), its block's entries follow; a stop
        # or done is taken with its entry.
        gap = 1
        for step in self.blocks.steps(token):
            if step[0] == "entry":
                _, stop, takes = step
                if takes:
                    self.in_take.append((len(self.entry_start), None))
                self._command(stop, visible, True)
            elif step[0] == "take":
                self.in_take.append((len(self.entry_start) - 1, visible))
                gap = 1 + contract.SEQUENCER_TAKE
            else:
                _, t, level = step
                # (an address out of range, a zero tile in hardware, fails in the node first)
                self._command(0 if t is None else t, visible + contract.SEQUENCER_TAKE, True, gap)
                gap = 1
                if level:
                    self._command(Stop(level), visible, False)
        return True

    def _take_cycle(self, i: int) -> float | None:
        """The cycle the sequencer takes input token ``i`` from its queue (None: not known
        yet; the port is simulated up to the engine's clock first, for the AR handshakes its
        entries may wait for)."""
        while i >= len(self.in_take):
            if not self._more():
                return None
        e, visible = self.in_take[i]
        if e < 0:
            return visible
        at = self._entry(e)
        if at is None:
            self.port.advance(self.now)
            at = self._entry(e)
        if at is None or visible is None:
            return at
        return max(at + 1, visible)

    def _entry(self, e: int) -> float | None:
        """Cycle of sequencer entry ``e`` (as ``_entry_time``), or None while the token whose
        departure frees its order-queue slot has not left, or, for a tile read, while the burst
        generator has not taken the tile whose address-queue slot it needs (in the cycle of
        the tile before's last AR at the latest, ``_generator_took``)."""
        at = self.entry_at
        while len(at) <= e:
            x = len(at)
            while x >= len(self.entry_start):
                if not self._more():
                    return None
            t = max(at[-1] + self.entry_gap[x] if at else self.p.load_start, self.entry_start[x])
            j = x - self.order_depth
            if j >= 0:
                if j >= len(self.entry_pops):
                    return None
                t = max(t, self.entry_pops[j] + contract.QUEUE_SLOT_RELEASE)
            w = self.entry_tile.get(x, -1) - contract.ADDR_QUEUE_DEPTH
            if w >= 0:
                g = self._generator_took(w)
                if g is None:
                    return None
                t = max(t, g + contract.QUEUE_SLOT_RELEASE)
            at.append(t)
        return at[e]

    def _generator_took(self, w: int) -> float | None:
        """The cycle the burst generator took tile ``w`` (None: not known yet)."""
        g = self.entry_at[self.tile_entry[w]] + self.p.load_issue - 1
        if w:
            if w - 1 >= len(self.tile_last_burst) or self.tile_last_burst[w - 1] >= len(self.ar):
                return None
            g = max(g, self.ar[self.tile_last_burst[w - 1]])
        return g

    def ar_valid(self, c: int) -> bool:
        """Whether the load offers its next burst in cycle ``c``."""
        n = len(self.ar)
        if self.ar_from[0] == n:
            return self.ar_from[1] <= c
        while n >= len(self.burst_of):
            w = self.burst_of[-1][0] + 1 if self.burst_of else 0
            while w >= len(self.tile_k):
                if not self._more():
                    return False
            bursts = self.bursts[self.tile_k[w]]
            for b, beats in enumerate(bursts):
                self.burst_of.append((w, b, beats, b == len(bursts) - 1))
            self.tile_last_burst.append(len(self.burst_of) - 1)
        w, b, _, closes = self.burst_of[n]
        e = self._entry(self.tile_entry[w])
        if e is None:
            return False
        t = e + self.p.load_issue + b
        if n:
            t = max(t, self.ar[n - 1] + 1)
        j = w - _TILE_QUEUE
        if closes and j >= 0:  # a tile's last burst waits for room in the tile queue
            if j >= len(self.tile_pops):
                return False
            t = max(t, self.tile_pops[j] + contract.QUEUE_SLOT_RELEASE)
        if n >= self.mo:  # a slot frees the cycle after a burst's last beat
            if n - self.mo >= len(self.r_last):
                return False
            t = max(t, self.r_last[n - self.mo] + 1)
        self.ar_from = (n, t)  # from known cycles only: it stays so
        return t <= c

    def offered_from(self, c: int) -> float:
        """The cycle, ``c`` or later, from which the next burst is offered; infinity while that
        is not known (it then waits for something after the engine's clock)."""
        if self.ar_valid(c):
            return c
        n, t = self.ar_from
        return t if n == len(self.ar) else math.inf

    def ar_done(self, c: int) -> int:
        """The next burst's AR was taken in cycle ``c``; its beats."""
        self.ar.append(c)
        return self.burst_of[len(self.ar) - 1][2]

    def r_ready(self, n: int, c: int) -> bool:
        """``rready`` for the last beat of burst ``n`` in cycle ``c``: always, since a tile's
        last burst is requested only once the tile queue will have room (``ar_valid``)."""
        return True

    def r_done(self, n: int, c: int) -> None:
        self.r_last.append(c)
        if self.burst_of[n][3]:
            self.tile_r.append(c)

    def sent(self, port: int, token: Any) -> None:
        now = self.now
        self.last_push[port] = now
        if self.port is not None and self.cmd_last[len(self.out_pops)]:
            self.entry_pops.append(now)
        self.out_pops.append(now)
        if is_data(token):
            self.tile_pops.append(now)
            self.tiles_sent += 1
