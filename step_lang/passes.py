"""Passes over the graph IR (``Graph -> Graph``)."""

from __future__ import annotations

from .graph import Graph

__all__ = ["insert_broadcasts"]


def insert_broadcasts(graph: Graph) -> Graph:
    """Give every stream read by more than one input an explicit Broadcast node.

    Idempotent; mutates and returns ``graph``. Broadcast nodes are named ``<producer>_<port>_bc``.
    A Broadcast output's queue gets the read stream's depth (``Graph.queue_depths``) unless it
    already has one (e.g. from queue sizing, which names every stream of the broadcast graph).
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
    return graph
