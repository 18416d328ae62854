"""The rtl profile's Expand (``step_hw/shape.py``): it walks its reference from the cycle after
it loads an element, dropping the element's stop meanwhile (:class:`_Expand`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from step_lang.graph import Node
from step_lang.stoprules import partition_closes_chunk
from step_lang.tokens import DONE, Stop, is_data

from ..base import WaitFor
from .clocked import _cycles_until, _TakesEarly

if TYPE_CHECKING:
    from .profile import RtlProfile


class _Expand(_TakesEarly):
    """Expand (``step_hw.shape.Expand``): an element register, a walk of the reference into the
    output register, and the element's closing stop dropped meanwhile.

    The block loads an element (``load``) once its last closing stop was dropped and the walk
    before has ended (in the walk's last cycle at the earliest); it drops the element's closing
    stop from the cycle after the load (``dropped``), in parallel with the walk; it walks a
    reference token per cycle from the cycle after the load, each when the output register is
    free (the cycle its last token left), the walk ending with a stop that closes a chunk
    (``walk_end``); done takes both done tokens together, after the walk and the drop, into a
    free register. A token written into the register leaves the cycle after, room permitting.
    The interpreter's node takes the element's closing stop whenever it is there while it walks
    (``before_recv`` holds it to the cycle the RTL drops it), and the next element only once it
    has sent the walk's last token: that one is taken early, in the cycle the RTL loads it, and
    so is a stop that arrives while the node waits to send (:class:`_TakesEarly`)."""

    input_driven = True

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.rank = node.rank
        self.load = -math.inf  # the cycle the current element was loaded
        self.dropped = -math.inf  # the cycle its closing stop was dropped (inf: not yet)
        self.walk_end = -math.inf  # the cycle the last walk's closing stop was taken
        self.walking = False  # a walk is under way (``have``)
        self.last_walk = -math.inf  # the cycle of the last reference token's take
        self.freed = -math.inf  # the cycle the output register last freed (its token left)
        self.done_at = None  # the cycle both done tokens are taken

    def _take_time(self, port: int) -> float | WaitFor | None:
        """The cycle the RTL takes the head of input ``port`` (None: nothing there)."""
        q = self.io.inputs[port].q
        if not q:
            return None
        visible, token = q[0]
        if port == 1:
            if token is DONE and self.done_at is not None:
                return self.done_at
            return max(visible, self.load + 1, self.freed, self.last_walk + 1)
        if is_data(token):
            return max(visible, self.dropped + 1, self.walk_end)
        if token is not DONE:  # the element's closing stop
            return max(visible, self.load + 1)
        ref = self.io.inputs[1].q
        if not ref:
            return WaitFor(1)
        return max(visible, ref[0][0], self.dropped + 1, self.walk_end + 1, self.freed)

    def _next_take(self) -> tuple[int, int | None]:
        """The next element once the walk before has ended, and its closing stop once it is
        loaded: the RTL takes them while the walk's last tokens still leave."""
        q = self.io.inputs[0].q
        if not q or q[0][1] is DONE:
            return 0, None
        if is_data(q[0][1]) and (self.walking or self.dropped == math.inf):
            return 0, None  # the walk goes on, or the element's stop is still to be dropped
        if not is_data(q[0][1]) and self.dropped < math.inf:
            return 0, None  # no element loaded whose stop it could be
        t = self._take_time(0)
        return 0, None if isinstance(t, WaitFor) or t is None else math.ceil(t)

    def _more_inputs(self) -> bool:
        return self.done_at is None

    def _beat_time(self, port: int, token: Any) -> float:
        source = self.done_at if token is DONE else self.last_walk
        return max(source + 1, self.last_push[port] + self.spacing[port])

    def before_recv(self, port: int) -> int | WaitFor:
        t = self._take_time(port)
        if isinstance(t, WaitFor):
            return t
        return _cycles_until(t, self.now)

    def on_recv(self, port: int, token: Any) -> int:
        now = self.now
        if port == 1:
            if token is not DONE:
                self.last_walk = now
                if isinstance(token, Stop) and partition_closes_chunk(token.level, self.rank):
                    self.walk_end, self.walking = now, False
        elif is_data(token):
            self.load, self.dropped, self.walking = now, math.inf, True
        elif token is DONE:
            self.done_at = now
        else:
            self.dropped = now
        return 0

    def on_send(self, port: int, token: Any) -> int:
        return self._beat_cost(port, token)

    def sent(self, port: int, token: Any) -> None:
        super().sent(port, token)
        self.freed = self.now
