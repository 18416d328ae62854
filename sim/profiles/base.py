"""The timing-profile interface.

A :class:`TimingProfile` says how long every operator takes. The engine asks it once per node for
a :class:`NodeTiming`, then calls ``on_recv`` after every token a node receives and ``on_send``
before every token it sends. Each returns what the node spends on that token: a number of cycles
(the node is busy), or a :class:`MemRequest` (the node waits for an off-chip transfer).

To add a profile (the ``rtl`` profile derived from ``step_hw.HwConfig`` is the intended next
one), subclass :class:`TimingProfile`, give it a ``name`` and implement :meth:`node_timing`,
:meth:`memory_config`, :attr:`channel_depth`, :attr:`channel_latency` and
:meth:`counts_against_capacity`; register it in ``sim.profiles.PROFILES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from step_lang.graph import Node

from ..checks import check_int
from ..memory import MemoryConfig

__all__ = ["ElementFlops", "MemRequest", "NodeTiming", "TimingProfile", "WaitFor", "check_int"]


#: Whether a stream's tiles sit in a memory unit: one flag, or one per item of a Zip's tuples.
Residency = bool | tuple["Residency", ...]


@dataclass(frozen=True)
class WaitFor:
    """Returned by :meth:`NodeTiming.before_recv`: take nothing until input ``port`` has a
    visible token (a block that takes all its inputs in one cycle)."""

    port: int


@dataclass(frozen=True)
class MemRequest:
    """An off-chip transfer: ``bus_bytes`` occupy the channels, ``bytes`` count as traffic."""

    bus_bytes: int
    bytes: int
    write: bool


class NodeTiming:
    """Per-node timing state; the default costs nothing."""

    flops = 0  # arithmetic performed so far (for utilisation)
    footprint = 0  # largest on-chip bytes this node has held so far
    # Off-chip bytes read and written so far by a timing that models its memory itself instead
    # of returning MemRequests (counted per tile, as MemRequest.bytes is).
    offchip_read = 0
    offchip_written = 0

    def on_recv(self, port: int, token: Any) -> int | MemRequest:
        return 0

    def on_send(self, port: int, token: Any) -> int | MemRequest:
        return 0

    # Optional hooks for timings that keep their own clock (pipelines modelled in absolute
    # time). The engine calls them only when a subclass overrides them.

    def attach(self, io: Any) -> None:
        """Called once with the node's ``SimIO``: ``io.engine.now`` is the current cycle and
        ``io.visible`` the cycle the last received token became visible."""

    def before_recv(self, port: int) -> int | WaitFor:
        """Cycles to wait before taking the visible head token of ``port`` (0: take it now), or
        :class:`WaitFor` another input first."""
        return 0

    def hold(self, port: int, token: Any) -> int:
        """Cycles beyond the profile's ``slot_release`` that ``token``, just taken from input
        ``port``, keeps its queue slot (a block that holds its input while it works on it)."""
        return 0

    def sent(self, port: int, token: Any) -> None:
        """Called when ``token`` has entered the queue of output ``port`` (at ``io.engine.now``)."""


class TimingProfile:
    """Base class of timing profiles."""

    name = "abstract"
    channel_depth = 2
    channel_latency = 1
    slot_release = 0  # cycles from a token leaving a queue to its slot accepting another
    #: whether a node's timing wraps its ``recv``/``send`` so that queues give up tokens at
    #: other times than the node takes them (then the memory-race check credits a token's clock
    #: when the node takes it, found by identity: ``SimIO._took``)
    acts_on_offered_tokens = False

    def memory_config(self) -> MemoryConfig:  # pragma: no cover - abstract
        raise NotImplementedError

    def node_timing(self, node: Node, resident: list[Residency]) -> NodeTiming:  # pragma: no cover
        """Timing of ``node``; ``resident[i]`` says input ``i``'s tiles sit in a memory unit
        (for a Zip's tuples, item by item)."""
        raise NotImplementedError

    def stream_latency(self, stream: Any, depth: int) -> int:
        """Cycles from a token entering the queue of ``stream`` (capacity ``depth``) to its
        consumer seeing it (default :attr:`channel_latency`)."""
        return self.channel_latency

    def counts_against_capacity(self, token: Any) -> bool:
        """Whether ``token`` occupies a queue slot (and so can block its sender)."""
        return True

    def writes_back(self, node: Node) -> bool:
        """Whether ``node`` writes its results to a memory unit (so its consumers read them there)."""
        return False

    def tiles_in_memory(self, node: Node) -> bool:
        """Whether the tiles ``node`` sends sit in a memory unit, so that its consumers read them
        there: the operator's own placement (``Node.tiles_in_memory``: off-chip loads) or the
        profile's write-back mapping (:meth:`writes_back`)."""
        return node.tiles_in_memory or self.writes_back(node)

    def compute_bw(self, node: Node) -> int:
        """FLOPs per cycle allocated to ``node`` (0 for nodes that do no arithmetic)."""
        return 0

    def check_graph(self, graph: Any) -> None:
        """Reject settings that name what ``graph`` (the lowered graph a run simulates) lacks."""

    def run_cycles(self, graph: Any, finish: dict[str, int], last: int) -> int:
        """The run's cycle count, given the cycle each node of ``graph`` (the lowered graph)
        finished (``finish``, by name) and the last of them (``last``): by default ``last``,
        the whole graph finished (the paper's simulator: the latest of its contexts)."""
        return last


class ElementFlops:
    """FLOPs of a compute node's function on one element, from the shapes its tiles actually
    have (dynamic tiles cost what they hold), cached by shape. Both profiles count with it."""

    def __init__(self, node: Node):
        self.node = node
        self._cache: dict[tuple, int] = {}

    def __call__(self, values: list[Any]) -> int:
        from step_lang.types import Tile

        values = self.node.fn_args(values)  # a zipped input's tuple, taken apart
        key = tuple(tuple(v.shape) if hasattr(v, "shape") else None for v in values)
        hit = self._cache.get(key)
        if hit is None:
            types = []
            for t, v in zip(self.node.arg_types, values, strict=True):
                if isinstance(t, Tile) and hasattr(v, "shape"):
                    t = Tile(t.dtype, int(v.shape[0]), int(v.shape[1]))
                types.append(t)
            hit = self._cache[key] = int(self.node.fn.flops(*types))
        return hit
