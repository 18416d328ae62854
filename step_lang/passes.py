"""Passes over the graph IR (``Graph -> Graph``).

:func:`lower` is the one step every reader (interpreter, metrics, simulator, queue sizing,
elaborator, co-simulation) runs first: it returns a new graph and never changes the user's, so
one graph object can be read any number of times, in any order, and extended in between.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .errors import StepGraphError, StepValueError
from .graph import Graph, Node, OffChipTensor, Stream

__all__ = ["copy_graph", "insert_broadcasts", "lower", "remap_refs"]


def copy_graph(graph: Graph) -> Graph:
    """A copy of ``graph`` that shares nothing mutable with it: new nodes (shallow copies whose
    stream, node and tensor references point into the copy), new tensors, new queue depths.
    Element types, functions and parameters are shared (they are immutable)."""
    new = copy.copy(graph)
    new.nodes, new.queue_depths, new._counters = {}, dict(graph.queue_depths), dict(graph._counters)
    new.queue_scale = dict(graph.queue_scale)
    tensors = {id(t): dataclasses.replace(t, graph=new) for t in graph.tensors.values()}
    new.tensors = {name: tensors[id(t)] for name, t in graph.tensors.items()}
    nodes: dict[int, Node] = {}
    for name, node in graph.nodes.items():
        c = copy.copy(node)
        c.graph = new
        nodes[id(node)] = new.nodes[name] = c

    def stream(v: Stream) -> Stream:
        return Stream(nodes[id(v.node)], v.port) if id(v.node) in nodes else v

    for c in new.nodes.values():
        remap_refs(c, stream, lambda v: nodes.get(id(v), v), lambda v: tensors.get(id(v), v))
    return new


def remap_refs(
    node: Node,
    stream: Callable[[Stream], Stream],
    node_of: Callable[[Node], Node],
    tensor: Callable[[OffChipTensor], OffChipTensor],
) -> None:
    """Point every stream, node and tensor reference among ``node``'s attributes (in lists,
    tuples and dicts too; ``graph`` aside) at what ``stream``, ``node_of`` and ``tensor`` map
    it to: moves a shallow copy of a node into another graph."""

    def remap(v: Any) -> Any:
        if isinstance(v, Stream):
            return stream(v)
        if isinstance(v, Node):
            return node_of(v)
        if isinstance(v, OffChipTensor):
            return tensor(v)
        if isinstance(v, list):
            return [remap(x) for x in v]
        if isinstance(v, tuple) and type(v) is tuple:
            return tuple(remap(x) for x in v)
        if isinstance(v, dict):
            return {k: remap(x) for k, x in v.items()}
        return v

    for k, v in list(vars(node).items()):
        if k != "graph":
            setattr(node, k, remap(v))


def insert_broadcasts(graph: Graph) -> Graph:
    """Give every stream read by more than one input an explicit Broadcast node, in place.

    Readers do not call this on the user's graph: they call :func:`lower`, which applies it to a
    copy. Idempotent; mutates and returns ``graph``. Broadcast nodes are named
    ``<producer>_<port>_bc``. A Broadcast output's queue gets the read stream's depth
    (``Graph.queue_depths``) unless it has one of its own (e.g. from queue sizing, which names
    every stream of the lowered graph), and its ``Graph.queue_scale``.
    """
    from .ops.routing import Broadcast

    readers: dict = {}
    for s, node, i in graph.edges():
        readers.setdefault(s, []).append((node, i))
    for s, uses in readers.items():
        if len(uses) < 2:
            continue
        bc = Broadcast(s, len(uses), name=f"{s.node.name}_{s.node.output_names[s.port]}_bc")
        for k, (node, i) in enumerate(uses):
            node.inputs[i] = bc.outputs[k]
            if s.name in graph.queue_depths:  # unless the output has a depth of its own
                graph.queue_depths.setdefault(bc.outputs[k].name, graph.queue_depths[s.name])
            if s.name in graph.queue_scale:  # the same tokens: the same scale
                graph.queue_scale.setdefault(bc.outputs[k].name, graph.queue_scale[s.name])
    return graph


def _check_linear_stores_alone(graph: Graph) -> None:
    """A LinearOffChipStore writes every tile of its tensor, so another store to that tensor
    would race with it (their order is not defined by the graph). Several RandomOffChipStores
    may share a tensor (parallel regions writing their own rows of a KV cache)."""
    from .ops import LinearOffChipStore, RandomOffChipStore

    writers: dict[str, list[Node]] = {}
    for n in graph.nodes.values():
        if isinstance(n, (LinearOffChipStore, RandomOffChipStore)):
            writers.setdefault(n.tensor.name, []).append(n)
    for tensor, nodes in writers.items():
        if len(nodes) > 1 and any(isinstance(n, LinearOffChipStore) for n in nodes):
            raise StepGraphError(
                f"tensor '{tensor}' is written by {len(nodes)} stores: "
                f"{', '.join(n.name for n in nodes)}; a LinearOffChipStore writes every tile of "
                "its tensor, so it must be the tensor's only store"
            )


def lower(graph: Graph, queue_depths: Mapping[str, int] | None = None) -> Graph:
    """The graph a reader runs: a copy of ``graph`` with every fan-out an explicit Broadcast
    (:func:`insert_broadcasts`), checked (:meth:`Graph.validate`; a LinearOffChipStore is its
    tensor's only store), and its queue depths resolved.

    Queue depths are ``graph.queue_depths`` updated with ``queue_depths``, by stream name: a name
    of the user's graph or of the lowered one (a Broadcast output, ``<producer>_<port>_bc.out<k>``,
    as queue sizing reports them). A Broadcast output without a depth of its own takes its read
    stream's. A name that is no stream of the lowered graph, or a depth that is not a positive
    integer, is a :class:`~step_lang.errors.StepValueError`. ``graph`` itself is never changed. Lowering a lowered graph gives an
    equal copy.
    """
    if not isinstance(graph, Graph):
        raise StepGraphError(f"expected a Graph, not {type(graph).__name__}")
    if queue_depths is not None and not isinstance(queue_depths, Mapping):
        raise StepValueError(
            f"queue_depths must map stream names to depths, not {type(queue_depths).__name__}"
        )
    out = copy_graph(graph)
    if queue_depths:
        out.queue_depths.update(queue_depths)
    insert_broadcasts(out)
    out.validate()
    _check_linear_stores_alone(out)
    streams = {s.name for n in out.nodes.values() for s in n.outputs}
    for name, depth in out.queue_depths.items():
        if name not in streams:
            raise StepValueError(
                f"queue depth of {name}: graph '{graph.name}' has no such stream (nor does its "
                "lowered form, whose Broadcast outputs are named <producer>_<port>_bc.out<k>)"
            )
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise StepValueError(f"queue depth of {name} must be a positive integer, not {depth!r}")
    return out
