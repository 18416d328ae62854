"""The rtl profile's paper-form Promote of a stream of rank 1 or more (``step_hw.shape.Promote``,
``rank=None``): the token after a held ``S_a`` waits in a skid register while the stop leaves,
and the block goes on taking input meanwhile (:class:`_PromoteOutermost`)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from step_lang import ops
from step_lang.graph import Node
from step_lang.tokens import DONE, Stop

from .blocks import _Block
from .clocked import recv_early_first

if TYPE_CHECKING:
    from .profile import RtlProfile


class _PromoteOutermost(_Block):
    """A paper-form Promote (``rank=None``) of an input of rank ``a >= 1``
    (``step_hw.shape.Promote._elaborate_outermost``): a registered block that holds every
    ``S_a`` in a flag until the next token shows whether it was the last.

    The block takes a token in every cycle its output register is free (empty, or its token
    leaving). A token that releases a held ``S_a`` (anything but done) is taken together with
    the stop's write into the register and waits in a one-token skid register; while the skid
    holds a token, each cycle the register frees writes the skid's token and takes the next
    input into the skid, if that input is offered then (a held ``S_a`` taken so empties the
    skid; with no input offered the skid drains). The output's cycles are those of the
    interpreter's node (``Promote._outermost``, sending the held stop and then the token after
    its take), timed as a registered block; only the takes differ: while the skid is in use the
    RTL takes the next input in the cycle the token before the skid's leaves, while the node
    takes it only once it has sent the skid's. So the node's send of a skid token takes the next
    input first, in that cycle, if it is offered (``attach``); the node's ``recv`` returns it.

    A done that releases a held ``S_a`` is taken by the RTL only once the ``S_{a+1}`` written in
    its place has left; the node takes it at once. No token leaves any later for it (nothing
    follows done), so the model does not hold it back."""

    def __init__(self, profile: RtlProfile, node: Node):
        super().__init__(profile, node)
        self.level = node.inputs[0].rank  # the held stops' level, a
        self.held = False  # an S_a is held (the RTL's ``held``)
        self.skid = False  # the skid register holds a token (the RTL's ``skid_valid``)

    def attach(self, io: Any) -> None:
        super().attach(io)
        recv, send = io.recv, io.send
        early = [deque()]  # the input taken as a skid token is sent

        def send_skid_taking(j: int, token: Any) -> Any:
            if self.skid and not self._releases(token):
                # the skid's token is written into the register as the token before leaves
                # (now): the RTL takes the next input in this cycle, or the skid drains (the
                # node took the last early token before this send, a cycle or more ago)
                if io.has(0):
                    early[0].append((yield from recv(0)))
                else:
                    self.skid = False
            yield from send(j, token)

        io.recv, io.send = recv_early_first(recv, early), send_skid_taking

    def _releases(self, token: Any) -> bool:
        """Whether ``token`` is a held stop going out (``S_a``, or ``S_{a+1}`` before done)."""
        return isinstance(token, Stop) and token.level >= self.level

    def on_recv(self, port: int, token: Any) -> int:
        last_level = isinstance(token, Stop) and token.level == self.level
        if self.skid:  # the skid's token goes out; the taken one takes its place
            self.skid = not last_level
            self.held = last_level
        elif self.held:  # the held stop goes out; the taken one waits in the skid
            self.skid = not last_level and token is not DONE
            self.held = last_level
        else:
            self.held = last_level
        return super().on_recv(port, token)


def promote_timing(profile: RtlProfile, node: Node) -> _Block:
    """A Promote's rtl-profile timing: :class:`_PromoteOutermost` for the paper form on an input
    of rank 1 or more, else the registered block of its hardware-contract entry."""
    if isinstance(node, ops.Promote) and node.rank is None and node.inputs[0].rank >= 1:
        return _PromoteOutermost(profile, node)
    return _Block(profile, node)
