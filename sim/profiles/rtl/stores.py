"""The rtl profile's LinearStore and RandomStore (``step_hw/memory/store.py``): a tile's AW, W
beats and B response in absolute time (:class:`_Store`), the order queue of a RandomStore
(:class:`_RandomStore`) and its ``fetch`` blocks (:class:`_BlockStore`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from step_hw import contract
from step_lang.graph import Node
from step_lang.tokens import DONE, Stop, is_data

from ..base import WaitFor
from .axi import _TILE_QUEUE, _Axi, _geometry
from .clocked import _Clocked, _cycles_until, _TakesEarly
from .ports import Port

if TYPE_CHECKING:
    from .profile import RtlProfile


class _Store(_Clocked):
    """LinearStore: AW, W and B of every tile in absolute time (the package docstring)."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.bursts, _ = _geometry(node, profile.config)
        self.tile_bytes = math.prod(node.tile) * node.tensor.dtype.nbytes
        self.axi = _Axi(profile.config.max_outstanding)
        self.k = 0
        self.last_take = -math.inf
        self.w_last: list[float] = []  # last W beat of every tile (its tile-queue slot frees)
        self.last_b = -math.inf

    def before_recv(self, port: int) -> int:
        t = max(self.last_take + 1, self._tile_room(self.io.head(port)))
        return _cycles_until(t, self.now)

    def _tile_room(self, token: Any) -> float | None:
        """The first cycle the tile queue takes ``token`` (None: a write before it that the shared
        port has not simulated yet frees the slot)."""
        if not is_data(token) or self.k < _TILE_QUEUE:
            return -math.inf
        i = self.k - _TILE_QUEUE
        if i >= len(self.w_last) and self.port is not None:
            self.port.advance(self.now)
        return self.w_last[i] + 1 if i < len(self.w_last) else None

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        self.last_take = now
        if token is DONE:
            return _cycles_until(self.last_b + self.p.done_latency, now)
        if not is_data(token):
            return 0
        self._write(self.k % len(self.bursts))
        return 0

    def _write(self, index: int) -> float | None:
        """AW, W and B of tile ``index`` taken now; the cycle of its last B response (None on a
        shared port: the port simulates them later, ``aw_done``)."""
        p, axi = self.p, self.axi
        bursts = self.bursts[index]
        self.offchip_written += self.tile_bytes
        self.k += 1
        if self.port is not None:
            w = len(self.takes)
            self.takes.append(self.now)
            self.burst_of += [(w, b, n, b == len(bursts) - 1) for b, n in enumerate(bursts)]
            return None
        t = self.now + p.store_issue
        last = t
        for i, beats in enumerate(bursts):
            aw = max(t + i, axi.last_issue + 1, axi.slots[0])
            axi.last_issue = aw
            first = max(aw + p.aw_to_w, axi.data_free)
            last = first + beats - 1
            axi.data_free = last + 1
            b = last + p.write_response
            self.last_b = max(self.last_b, b)
            axi.slots.popleft()
            axi.slots.append(b + 1)
        self.w_last.append(last)
        return b

    # -- on a shared write port (``WritePort``) -------------------------------------------------
    #
    # A take registers the tile's bursts (``_write``); the port issues them in time order. The
    # node waits (``attach``) before it takes a tile that needs a slot of the tile queue freed
    # by a write the port has not simulated yet, or its done token while a write is pending.

    data_port = 0

    def share(self, port: Port | None) -> None:
        self.port = port
        if port is None:
            return
        self.mo = self.p.config.max_outstanding
        self.takes: list[float] = []  # per tile: the cycle it was taken
        self.burst_of: list[tuple[int, int, int, bool]] = []  # (tile, index, beats, closes it)
        self.aw: list[int] = []  # per burst: AW handshake
        self.aw_from = (-1, 0)  # (burst, the cycle it is offered from), once that is known
        self.b_resp: list[int] = []  # per burst: B response
        self.tile_b: list[int] = []  # per tile: its last B response

    def attach(self, io: Any) -> None:
        super().attach(io)
        if self.port is not None:
            recv, data = io.recv, self.data_port

            def recv_when_written(i: int) -> Any:
                if i == data:
                    token = yield from io.peek(i)
                    yield from self._wait(lambda: self._written(token), "a write")
                return (yield from recv(i))

            io.recv = recv_when_written

    def _written(self, token: Any) -> bool:
        """Whether the port has simulated the writes that taking ``token`` depends on: the one
        that frees its tile-queue slot, and for done all of them."""
        if token is not DONE:
            return self._tile_room(token) is not None
        if len(self.aw) < len(self.burst_of):
            self.port.advance(self.now)
        return len(self.aw) == len(self.burst_of)

    def aw_valid(self, c: int) -> bool:
        """Whether the store offers its next burst in cycle ``c``."""
        n = len(self.aw)
        if self.aw_from[0] == n:
            return self.aw_from[1] <= c
        if n >= len(self.burst_of):
            return False
        w, b, _, _ = self.burst_of[n]
        t = self.takes[w] + self.p.store_issue + b
        if n:
            t = max(t, self.aw[n - 1] + 1)
        if n >= self.mo:  # a slot frees the cycle after a burst's B response
            t = max(t, self.b_resp[n - self.mo] + 1)
        self.aw_from = (n, t)  # from known cycles only: it stays so
        return t <= c

    def offered_from(self, c: int) -> float:
        """The cycle, ``c`` or later, from which the next burst is offered; infinity while that
        is not known (no tile taken for it yet)."""
        if self.aw_valid(c):
            return c
        n, t = self.aw_from
        return t if n == len(self.aw) else math.inf

    def aw_beats(self) -> int:
        return self.burst_of[len(self.aw)][2]

    def aw_done(self, c: int, w_last: int, b: int) -> None:
        """The next burst's AW was taken in cycle ``c``; its last W beat and its B response."""
        n = len(self.aw)
        self.aw.append(c)
        self.b_resp.append(b)
        self.last_b = max(self.last_b, b)
        if self.burst_of[n][3]:
            self.w_last.append(w_last)
            self.tile_b.append(b)


class _RandomStore(_TakesEarly, _Store):
    """RandomStore: LinearStore's write path for the tile at each address, and its ack stream.

    The hardware takes an address with its tile (or stop, or done) in one cycle, at most one
    take per cycle, while earlier writes are still under way. Every take is an entry of the
    writer's order queue (``contract.order_queue_depth`` entries): a take waits for the slot of
    the entry that many takes back, free the cycle after that entry's token left. The entries
    leave in order as the ack stream, one per cycle (every other cycle into a queue of depth 1
    or 2), room permitting: an ack ``ACK_AFTER_B`` cycles after its tile's last B response at
    the earliest, a stop or done ``queue_latency`` of the order queue after its take. The node
    sends each ack before it takes the next tile, so it takes the hardware's tiles while it
    waits to send (:class:`_TakesEarly`): whoever reads the acks sees them when the
    hardware's reader would.
    """

    # The next take depends on the input queues only, except for the tile queue's room on a
    # shared port, which the port knows once it has simulated the writes (``share``).
    input_driven = True

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.addr = 0
        self.order_depth = contract.order_queue_depth(profile.config.max_outstanding)
        self.order_latency = contract.queue_latency(self.order_depth)
        # Per order entry (ack-stream token), the earliest cycle the hardware offers it:
        # (None, cycle), or (tile, None) for an ack ``ACK_AFTER_B`` after the last B response of
        # this store's ``tile``-th tile on a shared port (known once the port has simulated it).
        self.marks: list[tuple[int | None, float | None]] = []
        self.pops: list[float] = []  # per entry that left: the cycle its token did
        self.half = False  # an address was taken; its wdata token goes in the same cycle
        self.ended = False  # done was taken
        self.waits_on = ""  # why the next take is not known ("inputs", "port", "order")

    def share(self, port: Port | None) -> None:
        super().share(port)
        self.input_driven = port is None

    # -- the takes -------------------------------------------------------------------------------

    def before_recv(self, port: int) -> int | WaitFor:
        if port == 0 and not self.offered(1):
            return WaitFor(1)  # address and data are taken together
        return super().before_recv(1) if port == 1 else 0

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 0:
            self.half = True
            if is_data(token):
                k = int(token.reshape(-1)[0])
                self.addr = k if 0 <= k < len(self.bursts) else 0
            return 0
        self.half = False
        self.last_take = now
        if is_data(token):
            tile = self.k
            b = self._write(self.addr)
            self._enter(now, tile, b)
        else:
            self.ended = token is DONE
            self._enter(now)
        return 0

    def _enter(self, now: float, tile: int | None = None, b: float | None = None) -> None:
        """An order entry taken ``now``: a write's ack (its ``tile`` and last B response, None
        while a shared port has not simulated it), or without ``tile`` a token that waits for
        no write."""
        if tile is None:
            self.marks.append((None, now + self.order_latency))
        else:
            self.marks.append((tile, None) if b is None else (None, b + contract.ACK_AFTER_B))

    def _order_room(self) -> float | None:
        """The first cycle the next order entry finds a slot (None: its slot's token has not
        left yet)."""
        i = len(self.marks) - self.order_depth
        if i < 0:
            return -math.inf
        return self.pops[i] + contract.QUEUE_SLOT_RELEASE if i < len(self.pops) else None

    def _written(self, token: Any) -> bool:
        return self._tile_room(token) is not None  # done waits for no write

    def _next_take(self) -> tuple[int, int | None]:
        if self.half:
            return 1, math.ceil(self.now)
        self.waits_on = ""
        if self.ended:
            return 0, None
        q0, q1 = (ch.q for ch in self.io.inputs)
        if not q0 or not q1:
            self.waits_on = "inputs"
            return 0, None
        _, t = self._take_cycle(
            0, (self._order_room(), "order"), (self._tile_room(q1[0][1]), "port")
        )
        return 0, None if t is None else math.ceil(max(t, q0[0][0], q1[0][0]))

    def _take_cycle(self, port: int, *after: tuple[float | None, str]) -> tuple[int, float | None]:
        """``port`` and the first cycle after the last take and every cycle of ``after``, pairs
        of a cycle and what ``waits_on`` says while that cycle is not known (None)."""
        t = self.last_take + 1
        for at, why in after:
            if at is None:
                self.waits_on = why
                return port, None
            t = max(t, at)
        return port, t

    def _more_inputs(self) -> bool:
        return self.waits_on in ("inputs", "port")

    # -- the acks --------------------------------------------------------------------------------

    def _beat_time(self, port: int, token: Any) -> float | None:
        tile, at = self.marks[len(self.pops)]
        if tile is not None:
            if tile >= len(self.tile_b):
                self.port.advance(self.now)
            if tile >= len(self.tile_b):
                return None
            at = self.tile_b[tile] + contract.ACK_AFTER_B
        return max(at, self.last_push[port] + self.spacing[port])

    def sent(self, port: int, token: Any) -> None:
        super().sent(port, token)
        self.pops.append(self.now)

    data_port = 1


class _BlockStore(_RandomStore):
    """RandomStore with ``fetch`` blocks: the address alone, then the block's tokens from
    ``wdata``, one take per cycle (stores as :class:`_Store`; an out-of-range block writes
    nothing); ``waddr``'s stop announced by the block's closing stop is taken alone, another
    with ``wdata``'s. The order entries and acks are :class:`_RandomStore`'s, one per block (at
    the take of its last tile: after the block's last B response, or a false ack through the
    order queue) and one per ``waddr`` stop and done; the block's other tiles and stops take
    no entry.
    """

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.nr = node.fetch[0]
        self.n = node.fetch[0] * node.fetch[1]
        self.first: int | None = None  # the current block's first tile (None: out of range)
        self.k_in = 0  # tiles of the current block taken
        self.left = 0  # wdata tokens of the current block not taken yet (tiles, S1s, its close)
        self.merged = 0  # the closing stop stood for waddr's S_merged (0: none)
        self.pair: float | None = None  # the cycle a waddr stop or done was taken (with wdata's)

    def _take_at(self, port: int, token: Any) -> tuple[int, float | None]:
        """The first cycle the hardware takes ``token``, the head of ``port`` (visibility
        aside), as ``_take_cycle``."""
        if port == 0:
            if is_data(token):
                return self._take_cycle(0)
            return self._take_cycle(0, (self._order_room(), "order"))  # a stop's entry
        if self.pair is not None:
            return 1, self.pair  # with waddr's stop or done
        after = []
        if is_data(token):
            after.append((self._tile_room(token), "port"))
            if self.k_in == self.n - 1:  # the block's last tile: its ack's entry
                after.append((self._order_room(), "order"))
        return self._take_cycle(1, *after)

    def before_recv(self, port: int) -> int | WaitFor:
        head = self.io.head(port)
        if port == 0 and not is_data(head) and not self.merged and not self.offered(1):
            return WaitFor(1)  # taken with wdata's stop or done
        _, t = self._take_at(port, head)
        if t is None:  # the node takes a token only once what it waits for is known
            raise RuntimeError(f"rtl profile: '{self.node.name}' takes before {self.waits_on}")
        return _cycles_until(t, self.now)

    def _next_take(self) -> tuple[int, int | None]:
        self.waits_on = ""
        if self.ended:
            return 0, None
        port = 1 if self.left or self.pair is not None else 0
        q = self.io.inputs[port].q
        visible = q[0][0] if q else None
        if q and port == 0 and not is_data(q[0][1]) and not self.merged:
            q1 = self.io.inputs[1].q
            visible = max(visible, q1[0][0]) if q1 else None
        if visible is None:
            self.waits_on = "inputs"
            return port, None
        port, t = self._take_at(port, q[0][1])
        return port, None if t is None else math.ceil(max(t, visible))

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 0:
            if is_data(token):
                self.last_take = now
                a = int(token.reshape(-1)[0])
                self.first = a * self.n if 0 <= a < self.node.n_addresses else None
                self.k_in = 0
                self.left = self.n + self.nr  # the tiles, the S1s between rows, the close
            elif self.merged:
                self.last_take = now
                self.merged = 0
                self._enter(now)
            else:
                self.pair = now
            return 0
        self.last_take = now
        if self.left:
            self.left -= 1
        if self.pair is not None:
            self.pair = None
            self.ended = token is DONE
            self._enter(now)
        elif is_data(token):
            b = None
            if self.first is not None:
                b = self._write(self.first + self.k_in)
            self.k_in += 1
            if self.k_in == self.n:
                if self.first is None:  # a false ack, through the order queue
                    self._enter(now)
                else:  # after the block's last B (on a shared port: once the port knows it)
                    self._enter(now, self.k - 1, b)
        elif isinstance(token, Stop) and token.level >= 2:
            self.merged = token.level - 2
        return 0

    def _tile_room(self, token: Any) -> float | None:
        if self.first is None:
            return -math.inf  # an out-of-range block writes nothing
        return super()._tile_room(token)
