"""The rtl profile's on-chip buffers (``step_hw/memory/buffer.py``): Bufferize
(:class:`_Bufferize`) and the Streamify that reads it (:class:`_Streamify`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from step_hw import contract
from step_lang import ops
from step_lang.graph import Node
from step_lang.stoprules import grid_tokens
from step_lang.tokens import DONE, Stop, is_data

from ..base import NodeTiming
from .blocks import _Block
from .clocked import _cycles_until, _TakesEarly

if TYPE_CHECKING:
    from .profile import RtlProfile


def _static_shape(shape: Any) -> tuple[int, ...] | None:
    shape = tuple(shape)
    return shape if all(isinstance(d, int) and not isinstance(d, bool) for d in shape) else None


#: An element of a walk whose value does not matter (only the stops do).
_CELL = 0


def _cell(index: tuple[int, ...]) -> list[Any]:
    return [_CELL]


def _buffer_words(profile: RtlProfile, node: Node) -> int:
    """Memory words per element of the buffers ``node`` (a Bufferize or Streamify) moves."""
    elem = node.inputs[0].elem if isinstance(node, ops.Bufferize) else node.inputs[0].elem.tile
    fmt = contract.TokenFormat.for_elem(elem, profile.config)
    return contract.buffer_words(fmt, profile.config.mem_port_elems)


class _Streamify(_TakesEarly):
    """Streamify: its sequencer, memory reads and credit-managed output queue in absolute time.

    The sequencer (``memory/sequence.py``) is replayed as the hardware runs it, one action per
    cycle at most: taking a driving token that starts a block (a cycle of its own), and entries
    (``ELEM``, ``STOP``, ``DONE``), each taken (committed) when the output queue has credit,
    an element after its ``words`` memory reads (the reads before the last need no credit). A
    committed entry enters the output queue ``BUFFER_READ_LATENCY`` cycles later and leaves as
    one beat, or two (an element and the stop after it). The replay goes as far as what is known:
    the input tokens sent so far (with the cycles they became visible) and the beats that left
    (credit). The output beats are the node's tokens; the slot of a buffer is released when the
    last entry of its reads commits (``release``), which Bufferize waits for.
    """

    input_driven = True

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.words = _buffer_words(profile, node)
        self.ref = len(node.inputs) > 1
        read = tuple(node.read_shape) if node.affine else tuple(node.read_dims)
        if self.ref:
            self.c = node.ref_inner
            self.repeat, self.eager = (), node.inputs[1].rank == 0
        else:
            self.c = None
            self.repeat, self.eager = tuple(node.repeat), node.inputs[0].rank == 0
        self.k = len(self.repeat) + len(read)
        shape = _static_shape((*self.repeat, *read))
        # A static buffer's reads are the same for every buffer; a dynamic one's per buffer.
        self.static_walk = None if shape is None else self._walk_of(grid_tokens(shape, _cell))
        self.depth = contract.STREAMIFY_QUEUE_DEPTH
        self.queue_latency = contract.BUFFER_READ_LATENCY + contract.queue_latency(self.depth)
        # the replay: the sequencer's state and the cycle of its next action
        self.state, self.t, self.pos, self.pending = "IDLE", 0, 0, False
        self.walk: list[tuple[str, int]] | None = None  # the block being walked
        self.buffer_walk: list[tuple[str, int]] | None = None  # with a reference: the buffer's
        self.walks: dict[int, list[tuple[str, int]]] = {}  # per buffer-stream token
        self.taken = [0] * len(node.inputs)  # input tokens the hardware has taken, per port
        self.takes: list[list[int]] = [[] for _ in node.inputs]  # their cycles
        self.got: list[list[tuple[float, Any]]] = [[] for _ in node.inputs]  # the node's takes
        self.commit: list[int] = []  # per entry
        self.beats: list[int] = []  # per entry: 1, or 2 for an element with a stop after it
        self.pops: list[float] = []  # per entry: the cycle its last beat left
        self.releases: list[int] = []
        self.entry_of: list[tuple[int, int]] = []  # per output token: (entry, beat)
        self.sent_tokens = 0
        # The Bufferize waiting for a release this replay does not know yet: woken when the
        # replay learns more (``sent``; with a reference stream it looks every cycle instead).
        self.watcher: tuple[Any, int] | None = None

    # -- what is known ---------------------------------------------------------------------------

    def _input(self, port: int) -> tuple[float, Any] | None:
        """The next input token the hardware takes on ``port`` with its visible cycle, if sent."""
        k, got = self.taken[port], self.got[port]
        if k < len(got):
            return got[k]
        q = self.io.inputs[port].q
        return q[k - len(got)] if k - len(got) < len(q) else None

    def _credit(self, j: int) -> float | None:
        """The first cycle entry ``j`` may commit for credit (None: not known yet)."""
        if j < self.depth:
            return -math.inf
        i = j - self.depth
        return self.pops[i] + contract.QUEUE_SLOT_RELEASE if i < len(self.pops) else None

    # -- the blocks --------------------------------------------------------------------------------

    def _walk_of(self, tokens: list[Any]) -> list[tuple[str, int]]:
        """The sequencer's steps for one block's tokens: ``("elem", level)`` (an element and the
        stop after it, 0 for none), ``("stop", level)``, and for the block's closing ``S_k``
        held back (``pending``; not with an eager, rank-0 driving stream) either the level 0
        of the last element or, after stops alone, ``("held", 0)``: a cycle without an entry.
        A block is never empty: a read of an empty buffer is its stops
        (``Streamify.read_tokens``)."""
        steps: list[tuple[str, int]] = []
        for t in tokens:
            if isinstance(t, Stop):
                if steps and steps[-1] == ("elem", 0):
                    steps[-1] = ("elem", t.level)
                else:
                    steps.append(("stop", t.level))
            else:
                steps.append(("elem", 0))
        if self.k and not self.eager:
            kind, _ = steps[-1]
            steps[-1] = ("elem", 0) if kind == "elem" else ("held", 0)
        return steps

    def _block(self, buffer: int, value: Any) -> list[tuple[str, int]]:
        """The steps of one read (with ``repeat``, all the reads) of buffer number ``buffer``
        of the buffer stream (``value`` its reference): the interpreter's read of the buffer
        (``Streamify.read_tokens``: in ``order``, or its stored order), repeated."""
        if self.static_walk is not None:
            return self.static_walk
        if buffer not in self.walks:
            node = self.node
            read = [_CELL if is_data(t) else t for t in node.read_tokens(self.io, value)]
            tokens = grid_tokens(self.repeat, lambda m: read, sub=len(node.read_dims))
            self.walks[buffer] = self._walk_of(tokens)
        return self.walks[buffer]

    # -- the replay ------------------------------------------------------------------------------

    def _take(self, port: int, cycle: int) -> None:
        self.taken[port] += 1
        self.takes[port].append(cycle)

    def _entry(self, at: float, level: int = 0, elem: bool = False, limit: float = math.inf):
        """Commit the next entry at ``at`` or when it has credit; its cycle, or None if that is
        not known or beyond ``limit``."""
        credit = self._credit(len(self.commit))
        if credit is None:
            return None
        c = int(max(at, credit))
        if c > limit:
            return None
        self.commit.append(c)
        beats = 2 if elem and level else 1
        self.beats.append(beats)
        self.entry_of += [(len(self.commit) - 1, b) for b in range(beats)]
        self.t = c + 1
        return c

    def _step(self, limit: float) -> bool:
        """One action of the sequencer, if it is known and no later than ``limit``."""
        s, c, k = self.state, self.c, self.k
        if s == "END":
            return False
        if s == "WALK":
            kind, level = self.walk[self.pos]
            if kind == "held":  # the held S_k after stops alone: a cycle without an entry
                if self.t > limit:
                    return False
                done, self.t = self.t, self.t + 1
            else:
                at = self.t + self.words - 1 if kind == "elem" else self.t
                done = self._entry(at, level, elem=kind == "elem", limit=limit)
                if done is None:
                    return False
            self.pos += 1
            if self.pos == len(self.walk):
                self.pos = 0
                self.pending = k > 0 and not self.eager
                if c is None or c == 0:
                    self.releases.append(done)
                    self.state = "IDLE"
                else:
                    self.state = "BUF"
            return True
        port = 1 if s == "BUF" else 0
        head = self._input(port)
        if head is None:
            return False
        x = max(self.t, int(head[0]))
        if x > limit:
            return False
        tok = head[1]
        if s == "SKIP":  # the buffer stream's stop that a reference stop above c pairs with
            self._take(0, x)
            self.state, self.t = "IDLE", x + 1
            return True
        walk = None
        if s == "BUF":
            walk = self.buffer_walk
        elif is_data(tok):
            walk = self._block(self.taken[0], tok)
        if self.pending and (is_data(tok) or tok is DONE):  # write S_k first
            if self._entry(x, k, limit=limit) is None:
                return False
            self.pending = False
            return True
        if s == "BUF":
            if is_data(tok):  # a read of the buffer
                self._take(1, x)
                self.walk = walk
                self.state, self.t = "WALK", x + contract.SEQUENCER_TAKE
                return True
            if isinstance(tok, Stop):
                at = self._entry(x, tok.level + k, limit=limit)
                if at is None:
                    return False
                self._take(1, at)
                self.pending = False  # merged into this stop
                if tok.level >= c:
                    self.releases.append(at)
                    self.state = "SKIP" if tok.level > c else "IDLE"
                return True
            self._take(1, x)  # the reference ended inside a buffer (an error in hardware)
            self.releases.append(x)
            self.state, self.t = "IDLE", x + 1
            return True
        # IDLE: a buffer reference, a stop or done of the buffer stream
        if isinstance(tok, Stop) and c is not None and c > 0:  # an error: consumed at once
            self._take(0, x)
            self.t = x + 1
            return True
        both = c == 0 or (tok is DONE and self.ref)
        if both:  # taken together with the reference stream's token
            ref = self._input(1)
            if ref is None:
                return False
            x = max(x, int(ref[0]))
            if x > limit:
                return False
        if is_data(tok):
            self._take(0, x)
            if both:
                self._take(1, x)
            self.t = x + contract.SEQUENCER_TAKE
            if c is not None and c > 0:
                self.buffer_walk, self.state = walk, "BUF"
            else:
                self.walk, self.state = walk, "WALK"
            return True
        at = self._entry(x, tok.level + k if isinstance(tok, Stop) else 0, limit=limit)
        if at is None:
            return False
        self._take(0, at)
        if both:
            self._take(1, at)
        self.pending = False  # merged into this stop
        if tok is DONE:
            self.state = "END"
        return True

    def advance(self, limit: float) -> None:
        """Replay the sequencer up to cycle ``limit`` (or as far as is known)."""
        while self._step(limit):
            pass

    def released(self, n: int, limit: float) -> int | None:
        """The cycle buffer ``n`` was released, if known by cycle ``limit``."""
        if n >= len(self.releases):
            self.advance(limit)
        return self.releases[n] if n < len(self.releases) else None

    # -- the node (``_TakesEarly``) -------------------------------------------------------------

    def _next_take(self) -> tuple[int, int | None]:
        while self._step(math.inf):
            pass
        best: tuple[int, int | None] = (0, None)
        for port, takes in enumerate(self.takes):
            n = len(self.got[port])
            if n < len(takes) and (best[1] is None or takes[n] < best[1]):
                best = (port, takes[n])
        return best

    def _more_inputs(self) -> bool:
        return self.state != "END"

    def _beat_time(self, port: int, token: Any) -> float:
        i = self.sent_tokens
        while len(self.entry_of) <= i and self._step(math.inf):
            pass
        if len(self.entry_of) <= i:
            raise RuntimeError(f"rtl profile: no entry for token {i} of '{self.node.name}'")
        j, beat = self.entry_of[i]
        t = self.last_push[port] + self.spacing[port]
        if beat == 0:
            t = max(t, self.commit[j] + self.queue_latency)
        return t

    def before_recv(self, port: int) -> int:
        n = len(self.got[port])
        while len(self.takes[port]) <= n and self._step(math.inf):
            pass
        if len(self.takes[port]) <= n:
            return 0
        t = self.takes[port][n]
        return _cycles_until(t, self.now)

    def on_recv(self, port: int, token: Any) -> int:
        self.got[port].append((self.io.visible, token))
        return 0

    def on_send(self, port: int, token: Any) -> int:
        return self._beat_cost(port, token)

    def sent(self, port: int, token: Any) -> None:
        super().sent(port, token)
        j, beat = self.entry_of[self.sent_tokens]
        self.sent_tokens += 1
        if beat == self.beats[j] - 1:
            self.pops.append(self.now)
            if self.watcher is not None:  # credit: the replay may go on
                proc, epoch = self.watcher
                self.watcher = None
                self.io.engine.push(self.now, proc, epoch)


class _Bufferize(_TakesEarly):
    """Bufferize: ``words`` cycles per element written; the stop that closes a buffer (and the
    done token) is taken once the output register is empty, and the buffer reference leaves
    ``BUFFER_REF_LATENCY`` cycles later, a stop after it the cycle after its take; elements of
    buffer ``n`` wait until ``BUFFER_SLOTS`` buffers ago was released by the Streamify that reads
    this one (:class:`_Streamify`), plus ``BUFFER_RELEASE``."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.words = _buffer_words(profile, node)
        self.slots = contract.BUFFER_SLOTS
        self.rank = node.rank
        # A buffer with a dynamic dim may be empty: its closing stop waits for a slot too.
        self.dynamic = _static_shape(node.out_types[0].elem.shape) is None
        self.closed = 0  # buffers closed (their closing stops taken)
        self.last_take = -math.inf
        self.last_close = -math.inf  # the take of the last closing stop or done token
        self.reader: _Streamify | None = None

    def _reader(self) -> _Streamify | None:
        """The Streamify of this run that reads the buffers (the hardware's ``rd`` port)."""
        if self.reader is None:
            reader = self.p._buffer_readers.get(self.node.name)
            if reader is not None and reader.io is not None and reader.io.engine is self.io.engine:
                self.reader = reader
        return self.reader

    def _release(self) -> float | None:
        """When the slot for the next buffer's elements is free (None: not known yet)."""
        n = self.closed - self.slots
        if n < 0:
            return -math.inf
        reader = self._reader()
        if reader is None:
            return None  # nothing releases the slot: the hardware stalls
        r = reader.released(n, self.now - 1)
        return None if r is None else r + contract.BUFFER_RELEASE

    def attach(self, io: Any) -> None:
        super().attach(io)  # ``_TakesEarly``
        recv = io.recv

        def recv_when_free(i: int) -> Any:
            if not self.early[i]:
                token = yield from io.peek(i)
                if self._needs_slot(token) and self._release() is None:
                    yield from self._wait_release()
            return (yield from recv(i))

        io.recv = recv_when_free

    def _wait_release(self) -> Any:
        """Wait until the reader's release of the slot is known. The reader's replay is taken as
        far as what is known (it does so itself whenever it runs; a release it has committed to
        is final); if that is not enough, the replay waits for credit, which comes with the
        reader's next output beat (``_Streamify.sent``), and this node sleeps until then. A
        reader with a reference stream also learns from that stream: this node then looks a
        cycle at a time (the engine cannot wake a node on another node's state), a deadlock
        when only such waiting nodes are left for ``settle`` cycles and no shared port moves."""
        engine, proc = self.io.engine, self.io.proc
        reader = self._reader()
        if reader is not None and not reader.ref:
            while self._release() is None:
                reader.advance(math.inf)
                if self._release() is not None:
                    break
                reader.watcher = (proc, proc.epoch + 1)
                yield ("park", "the release of a buffer slot by its Streamify", None)
            return
        waiting = self.p._buffer_waiting
        waiting.add(proc.idx)
        since = self.now
        try:
            while self._release() is None:
                run = self.p._axi[4]
                ports = run.waiting if run is not None else set()
                if self.p.quiet_since(since, self.now) and engine.only_waiting(waiting | ports):
                    proc.waiting = "the release of a buffer slot by its Streamify"
                    engine._deadlock()
                yield ("sleep", 1)
        finally:
            waiting.discard(proc.idx)

    def _closes(self, token: Any) -> bool:
        """Whether ``token`` closes a buffer (a stop of level ``rank`` or above) or is done."""
        return not is_data(token) and not (isinstance(token, Stop) and token.level < self.rank)

    def _needs_slot(self, token: Any) -> bool:
        """Whether ``token`` waits for a free slot: an element, or a dynamic buffer's closing
        stop (an empty buffer takes a slot without an element)."""
        return is_data(token) or (
            self.dynamic and isinstance(token, Stop) and token.level >= self.rank
        )

    def _take_time(self, visible: float, token: Any) -> float | None:
        """The cycle the hardware takes ``token`` (None: the release it waits for is not known):
        an element after its ``words`` writes, once its slot is free; a stop inside a buffer at
        once; a closing stop or done once the output register is empty (a dynamic buffer's
        closing stop, once it has a slot)."""
        t = max(visible, self.last_take + 1)
        if self._needs_slot(token):
            release = self._release()
            if release is None:
                return None
            if is_data(token):
                return max(t, release) + self.words - 1
            t = max(t, release)
        if self._closes(token):
            t = max(t, self.last_push[0] + 1)
        return t

    def _next_take(self) -> tuple[int, int | None]:
        q = self.io.inputs[0].q
        if not q or self._closes(q[0][1]):  # not while the output register is full
            return 0, None
        t = self._take_time(*q[0])
        return 0, None if t is None else math.ceil(t)

    def _more_inputs(self) -> bool:
        q = self.io.inputs[0].q
        return not q or not self._closes(q[0][1])

    def before_recv(self, port: int) -> int:
        now = self.now
        visible, token = self.io.inputs[port].q[0]
        t = self._take_time(visible, token)
        t = now if t is None else t
        return _cycles_until(t, now)

    def on_recv(self, port: int, token: Any) -> int:
        self.last_take = self.now
        if self._closes(token):
            self.last_close = self.now
            self.closed += isinstance(token, Stop)  # the buffer's slot is full from now on
        return 0

    def _beat_time(self, port: int, token: Any) -> float:
        t = self.last_push[port] + self.spacing[port]
        if not isinstance(token, Stop):  # a reference or done: from the closing take
            t = max(t, self.last_close + contract.BUFFER_REF_LATENCY)
        return t

    def on_send(self, port: int, token: Any) -> int:
        return self._beat_cost(port, token)


def _buffer_pair(kind: type) -> Any:
    """The timing of a Bufferize (``_Bufferize``) or Streamify (``_Streamify``) that the
    hardware builds: a buffer with at most one dynamic dim (the hardware sizes it by the dim's
    bound), read by one Streamify straight from its Bufferize (``step_hw.elaborate``).
    Anything else has no hardware: timed as a plain block."""

    def make(profile: RtlProfile, node: Node) -> NodeTiming:
        if kind is _Bufferize:
            buffers = node.outputs[0]
            readers = [
                n
                for n in node.graph.nodes.values()
                if isinstance(n, ops.Streamify) and contract.feedback_input(n.inputs[0]) == buffers
            ]
            paired = len(readers) == 1
        else:
            buffers = node.inputs[0]
            paired = isinstance(contract.feedback_input(buffers).node, ops.Bufferize)
        dynamic = [d for d in buffers.elem.shape if not isinstance(d, int)]
        if not paired or len(dynamic) > 1:
            return _Block(profile, node)
        timing = kind(profile, node)
        if kind is _Streamify:
            profile._buffer_readers[contract.feedback_input(buffers).node.name] = timing
        return timing

    return make
