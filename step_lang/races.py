"""Memory races: off-chip accesses that no stream orders.

A graph may write a tensor that another node reads or writes (a KV cache appended to and read
back, results gathered by request id). The hardware orders two such accesses only through
streams: a load reads a tile a store wrote after the store's ack (or a token that waited for it)
reached the load's address; a store overwrites a tile a load read after the loaded tile (or a
token that waited for it) reached the store. Without such a path the result depends on timing:
the interpreter would give one answer, the simulator and the RTL possibly others.

:class:`RaceCheck` finds such accesses in the run it watches, whichever of the two came first
there, with vector clocks (happens-before, as in dynamic race detectors such as FastTrack):
every token carries its sender's clock, a receiver takes the element-wise maximum, and every
tile access is checked against the last write and the reads since of the same elements. Its
model of a node is the interpreter's: whatever a node took before an access or a send is
ordered before it. The hardware blocks keep that order (a load starts a walk on its reference
token and reads an address once it arrived; a store acknowledges a write after the memory's
write response).

Only tensors that a store writes and another node also accesses are watched, at the largest
grid that all their accessors' tiles align to; a graph without such a tensor pays nothing.
The interpreter and the simulator share this module, so both raise the same
:class:`~step_lang.errors.StepRaceError`.
"""

from __future__ import annotations

import math

from .errors import StepRaceError, StepRuntimeError, op_message
from .graph import Graph, Node, OffChipTensor
from .ops.offchip import LOADS as _LOADS
from .ops.offchip import STORES as _STORES
from .ops.offchip import LinearOffChipStore, tile_index

__all__ = ["RaceCheck", "memory_accessors"]


def memory_accessors(graph: Graph) -> dict[str, list[Node]]:
    """Tensor name to the nodes that load or store it, for tensors that a store writes and
    another node also accesses (the only ones that can race)."""
    by_tensor: dict[str, list[Node]] = {}
    for node in graph.nodes.values():
        if isinstance(node, _LOADS + _STORES):
            by_tensor.setdefault(node.tensor.name, []).append(node)
    return {
        name: nodes
        for name, nodes in by_tensor.items()
        if len(nodes) > 1 and any(isinstance(n, _STORES) for n in nodes)
    }


class _Shadow:
    """Who last wrote, and when each node last read, every cell of one tensor's grid.

    The grid's cells are ``rows x cols`` elements, the largest that every accessor's tile
    covers whole; they are numbered row-major over ``(*outer, R / rows, C / cols)``. Only
    touched cells have entries.
    """

    def __init__(self, tensor: OffChipTensor, nodes: list[Node]):
        self.tensor = tensor
        self.rows = math.gcd(*(n.tile[0] for n in nodes))
        self.cols = math.gcd(*(n.tile[1] for n in nodes))
        *outer, r, c = tensor.shape
        self.grid = (*outer, r // self.rows, c // self.cols)
        #: cell to (slot of the last writer, its epoch at that write)
        self.written: dict[int, tuple[int, int]] = {}
        #: cell to {slot of a reader: its epoch at its last read since the last write}
        self.reads: dict[int, dict[int, int]] = {}

    def cells(self, tile: tuple[int, int], k: int) -> list[int]:
        """The cells of tile number ``k`` in ``tile``-shaped tiles (:func:`tile_index`)."""
        *outer, rows, cols = tile_index(self.tensor.shape, tile, k)
        *outer_dims, height, width = self.grid
        plane = 0
        for i, n in zip(outer, outer_dims, strict=True):
            plane = plane * n + i
        first = plane * height * width
        return [
            first + row * width + col
            for row in range(rows.start // self.rows, rows.stop // self.rows)
            for col in range(cols.start // self.cols, cols.stop // self.cols)
        ]


_FIELD = 32  # bits of one epoch in a packed clock
_STRIDE = _FIELD + 1  # and a guard bit above it, for the packed maximum
_EPOCH_MAX = (1 << _FIELD) - 1


class _PackedClocks:
    """Vector clocks of ``n`` slots packed into one int, an epoch per ``_FIELD``-bit field with
    a zero guard bit above it: the element-wise maximum is a few big-integer operations rather
    than a Python loop over the slots (a clock travels with every token)."""

    def __init__(self, n: int):
        self.guards = sum(1 << (i * _STRIDE + _FIELD) for i in range(n))
        self.fields = sum(_EPOCH_MAX << (i * _STRIDE) for i in range(n))

    def maximum(self, a: int, b: int) -> int:
        ge = ((a | self.guards) - b) & self.guards  # a field's guard stays set where a >= b
        keep = ge - (ge >> _FIELD)  # that field all ones
        return (a & keep) | (b & (self.fields ^ keep))

    @staticmethod
    def unit(slot: int) -> int:
        """Epoch 1 in ``slot``."""
        return 1 << (slot * _STRIDE)

    @staticmethod
    def at(clock: int, slot: int) -> int:
        """The epoch in ``slot``."""
        return (clock >> (slot * _STRIDE)) & _EPOCH_MAX


class RaceCheck:
    """Happens-before bookkeeping of one run (see the module docstring).

    A reader creates it with :meth:`for_graph` (``None`` when no tensor can race) and calls
    :meth:`sent` for every token a node sends (the clock it returns travels with the token),
    :meth:`received` for every token a node takes, and :meth:`read` / :meth:`write` for every
    tile access. ``node`` arguments are indices into :attr:`names`. Clocks count the accesses of
    the watched tensors' accessors only (one slot each), packed into ints.
    """

    def __init__(self, graph: Graph, watched: dict[str, list[Node]]):
        self.graph = graph
        self.names = list(graph.nodes)
        self.node_index = {name: i for i, name in enumerate(self.names)}
        accessors = sorted({n.name for nodes in watched.values() for n in nodes})
        #: clock slot of each accessor node
        self.slot = {name: i for i, name in enumerate(accessors)}
        self._slot_of = [self.slot.get(name, -1) for name in self.names]
        self._accessor_names = accessors
        self._packed = _PackedClocks(len(accessors))
        #: each node's clock; an accessor's first epoch is 1
        self.clocks = [0] * len(self.names)
        for name, i in self.slot.items():
            self.clocks[self.node_index[name]] = _PackedClocks.unit(i)
        self._sent_since_access = [False] * len(self.names)
        self.shadows = {
            name: _Shadow(graph.tensors[name], nodes) for name, nodes in watched.items()
        }

    @classmethod
    def for_graph(cls, graph: Graph) -> RaceCheck | None:
        """The check for a lowered ``graph``, or ``None`` if no tensor can race."""
        watched = memory_accessors(graph)
        return cls(graph, watched) if watched else None

    # -- tokens ---------------------------------------------------------------------------------

    def sent(self, node: int) -> int:
        """The clock a token sent now by ``node`` carries."""
        if self._slot_of[node] >= 0:
            self._sent_since_access[node] = True
        return self.clocks[node]

    def join(self, a: int, b: int) -> int:
        """The element-wise maximum of two clocks (what follows both)."""
        return self._packed.maximum(a, b)

    def received(self, node: int, clock: int) -> None:
        """``node`` took a token carrying ``clock``."""
        mine = self.clocks[node]
        if clock != mine:
            self.clocks[node] = self._packed.maximum(mine, clock)

    # -- memory ---------------------------------------------------------------------------------

    def _epoch(self, node: int) -> tuple[int, int]:
        """``node``'s slot and the clock of an access it makes now: a new epoch after a send,
        so that tokens sent before the access do not order anything after it."""
        slot = self._slot_of[node]
        clock = self.clocks[node]
        if self._sent_since_access[node]:
            if _PackedClocks.at(clock, slot) == _EPOCH_MAX:
                me = self.graph.nodes[self.names[node]]
                raise StepRuntimeError(
                    op_message(
                        me.kind,
                        me.name,
                        None,
                        f"{_EPOCH_MAX} accesses after sends: the race check's counter is full",
                    )
                )
            clock += _PackedClocks.unit(slot)
            self.clocks[node] = clock
            self._sent_since_access[node] = False
        return slot, clock

    def read(self, node: int, tensor: OffChipTensor, tile: tuple[int, int], k: int) -> None:
        """``node`` reads tile number ``k`` of ``tensor``; raises if a write to it is unordered."""
        shadow = self.shadows.get(tensor.name)
        if shadow is None:
            return
        slot, clock = self._epoch(node)
        epoch = _PackedClocks.at(clock, slot)
        for cell in shadow.cells(tile, k):
            last = shadow.written.get(cell)
            if last is not None and last[0] != slot and last[1] > _PackedClocks.at(clock, last[0]):
                self._raise(node, tile, k, tensor, "reads", last[0], "writes")
            reads = shadow.reads.get(cell)
            if reads is None:
                shadow.reads[cell] = {slot: epoch}
            else:
                reads[slot] = epoch

    def write(self, node: int, tensor: OffChipTensor, tile: tuple[int, int], k: int) -> None:
        """``node`` writes tile number ``k`` of ``tensor``; raises if an access to it is
        unordered."""
        shadow = self.shadows.get(tensor.name)
        if shadow is None:
            return
        slot, clock = self._epoch(node)
        entry = (slot, _PackedClocks.at(clock, slot))
        for cell in shadow.cells(tile, k):
            last = shadow.written.get(cell)
            if last is not None and last[0] != slot and last[1] > _PackedClocks.at(clock, last[0]):
                self._raise(node, tile, k, tensor, "writes", last[0], "writes")
            # the reads since the last write must precede this one; they then precede whatever
            # follows it too, so they are forgotten
            for reader, epoch in shadow.reads.pop(cell, {}).items():
                if epoch > _PackedClocks.at(clock, reader):  # a store never reads: reader != slot
                    self._raise(node, tile, k, tensor, "writes", reader, "reads")
            shadow.written[cell] = entry

    def _raise(
        self,
        node: int,
        tile: tuple[int, int],
        k: int,
        tensor: OffChipTensor,
        verb: str,
        other_slot: int,
        other_verb: str,
    ) -> None:
        me = self.graph.nodes[self.names[node]]
        other = self.graph.nodes[self._accessor_names[other_slot]]
        if other_verb == "reads":
            why = (
                "no stream carries that read's tile (or a token that waited for it) to this "
                "write: the value read depends on timing"
            )
        elif verb == "reads" and isinstance(other, LinearOffChipStore):
            why = (
                "no stream can order a read after that write (a LinearOffChipStore has no ack "
                "output; a RandomOffChipStore's acks can gate the read): the value read depends "
                "on timing"
            )
        elif verb == "reads":
            why = (
                "no stream carries that write's ack (or a token that waited for it) to this "
                "read: the value read depends on timing"
            )
        else:
            why = "no stream orders the two writes: the tensor's final value depends on timing"
        also = "also " if verb == other_verb else ""
        raise StepRaceError(
            op_message(
                me.kind,
                me.name,
                None,
                f"{verb} tile {k} ({tile[0]}x{tile[1]} tiles) of tensor '{tensor.name}', which "
                f"{other.kind} '{other.name}' {also}{other_verb}, and {why}",
            )
        )
