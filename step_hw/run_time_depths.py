"""Queue depths as run-time settings (``HwConfig.queue_capacity``): one build of a design serves
the graph at several depth settings.

The elaborated graph (``step_hw.elaborate``) builds the queue of each stream named in
``HwConfig.queue_capacity`` as a :class:`step_hw.queue.LimitedFIFO` of that capacity, whose depth
comes from the top-level input ``queue_limits`` (the fields of :func:`limit_fields`); every other
queue's depth is built in. This module says which queues those are, packs a graph's depths into
the input (:func:`pack_limits`, :func:`run_description`) and checks them
(:func:`check_capacities`), and picks the
capacities that let one build run several graphs (:func:`shared_capacities`). Pure Python on the
lowered graph, no Amaranth: the co-simulation harness and ``make validate`` use it too.
"""

from __future__ import annotations

from typing import Any

from step_lang.graph import Graph, Node, Stream
from step_lang.passes import lower

from . import contract
from .config import HwConfig

__all__ = [
    "built_in_depths",
    "check_capacities",
    "limit_fields",
    "pack_limits",
    "queue_name",
    "queues",
    "run_description",
    "run_time_depths",
    "shared_capacities",
]


def queue_name(s: Stream, consumer: str, port: int) -> str:
    """Instance name of the queue that feeds input ``port`` of ``consumer`` from stream ``s``."""
    return f"q_{s.name.replace('.', '_')}_{consumer}_{port}"


def queues(graph: Graph) -> list[tuple[str, Stream, Node, int]]:
    """Every queue of the lowered ``graph``: (instance name, stream, consumer, input port)."""
    return [
        (queue_name(s, node.name, i), s, node, i)
        for node in graph.nodes.values()
        if not node.is_feedback
        for i, s in enumerate(node.inputs)
    ]


def built_in_depths(graph: Graph, config: HwConfig) -> dict[str, int]:
    """The depth of every queue of the lowered ``graph`` that ``config`` builds in (instance name
    -> depth): what the queues of its hardware are made of besides ``config.queue_capacity``.
    A depth the graph sets to its default and one it leaves unset are the same queue, and a
    stream without a queue (a Feedback's input, carried by a wire) has none."""
    return _depths(graph, config, run_time=False)


def run_time_depths(graph: Graph, config: HwConfig) -> dict[str, int]:
    """The depth the lowered ``graph`` sets each run-time queue of ``config`` to (instance name
    -> depth): what a run on the design adds to the design (:func:`built_in_depths` is the
    rest)."""
    return _depths(graph, config, run_time=True)


def _depths(graph: Graph, config: HwConfig, *, run_time: bool) -> dict[str, int]:
    return {
        name: contract.queue_depth(graph, s, config)
        for name, s, _, _ in queues(graph)
        if (contract.queue_capacity(s, config) is not None) == run_time
    }


def limit_fields(graph: Graph, config: HwConfig) -> dict[str, tuple[int, int, int]]:
    """Queues with a run-time depth (``HwConfig.queue_capacity``) of capacity 2 or more:
    instance name -> (first bit in ``queue_limits``, width, capacity)."""
    fields, at = {}, 0
    for name, s, _, _ in queues(graph):
        capacity = contract.queue_capacity(s, config)
        if capacity is not None and capacity > 1:
            fields[name] = (at, capacity.bit_length(), capacity)
            at += capacity.bit_length()
    return fields


def pack_limits(low: Graph, config: HwConfig, starts: dict[str, int]) -> int:
    """The ``queue_limits`` value holding each queue's depth in the lowered graph ``low`` at
    its first bit, ``starts`` (instance name -> bit). Raises ``ValueError`` when ``low`` lacks
    one of the queues."""
    have = {name: s for name, s, _, _ in queues(low)}
    value = 0
    for name, at in starts.items():
        if name not in have:
            raise ValueError(f"graph '{low.name}' has no queue '{name}' of the design it runs on")
        value |= contract.queue_depth(low, have[name], config) << at
    return value


def _check(low: Graph, config: HwConfig) -> None:
    every = queues(low)
    unknown = sorted(dict(config.queue_capacity).keys() - {s.name for _, s, _, _ in every})
    if unknown:
        raise ValueError(
            f"HwConfig.queue_capacity names stream '{unknown[0]}', which has no queue in graph "
            f"'{low.name}'"
        )
    for _, s, node, _ in every:
        depth = contract.queue_depth(low, s, config)
        capacity = contract.queue_capacity(s, config)
        if capacity is not None and depth > capacity:
            raise ValueError(
                f"queue of stream '{s.name}' into '{node.name}': depth {depth} exceeds its "
                f"capacity {capacity} (HwConfig.queue_capacity)"
            )


def check_capacities(graph: Graph, config: HwConfig) -> None:
    """Raise ``ValueError`` naming the stream if a queue's depth in ``graph`` exceeds the
    capacity ``config.queue_capacity`` gives it, or if that names a stream without a queue."""
    if config.queue_capacity:
        _check(lower(graph), config)


def run_description(graph: Graph, config: HwConfig, desc: dict[str, Any]) -> dict[str, Any]:
    """``desc`` (the design's description) for a run of ``graph``: every queue with its depth
    in ``graph`` (run-time depths included) and, when the design has that input, the value of
    ``queue_limits`` that sets them (:func:`pack_limits`; the depths checked against the
    capacities first, :func:`check_capacities`)."""
    low = lower(graph)
    have = {name: s for name, s, _, _ in queues(low)}
    entries = {
        name: {**q, "depth": contract.queue_depth(low, have[name], config)} if name in have else q
        for name, q in desc.get("queues", {}).items()
    }
    out = {**desc, "queues": entries}
    starts = {name: q["limit"][0] for name, q in entries.items() if "limit" in q}
    if starts:
        if config.queue_capacity:
            _check(low, config)
        out["queue_limits"] = pack_limits(low, config, starts)
    return out


def shared_capacities(graphs: list[Graph], config: HwConfig) -> dict[str, int]:
    """``HwConfig.queue_capacity`` for one build that runs every graph of ``graphs`` (one design
    at several queue-depth settings, e.g. the defaults and the queue-sizing pass's): each stream
    whose depth differs between them, with its largest depth; the others stay built in."""
    depths: dict[str, set[int]] = {}
    for graph in graphs:
        low = lower(graph)
        for _, s, _, _ in queues(low):
            depths.setdefault(s.name, set()).add(contract.queue_depth(low, s, config))
    return {name: max(d) for name, d in sorted(depths.items()) if len(d) > 1}
