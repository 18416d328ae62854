"""Queue sizing guided by the simulator, and deadlock diagnosis.

:func:`diagnose` explains a :class:`~step_lang.errors.SimDeadlock`: a node blocked for *room* on a
full queue whose consumer waits for a token on another input is the classic reconvergent-path
deadlock. It names that queue, the consumer, the two paths from their common ancestor, and — when
given a deep run's high-water marks — the depth that suffices.

:func:`size_queues` runs the graph with very deep queues, takes each queue's high-water mark
(times ``margin``, at least the profile's default depth) and checks the sized graph in a second
run. The static-rate analytic sizing of the queue-sizing issue is not here yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from step_lang.errors import SimDeadlock
from step_lang.graph import Graph, Stream
from step_lang.passes import insert_broadcasts

__all__ = ["Diagnosis", "diagnose", "size_queues"]


@dataclass(frozen=True)
class Diagnosis:
    """One insufficient queue of a deadlock."""

    queue: str  # the full queue
    consumer: str  # the node that does not drain it
    waits_for: str  # the stream that consumer waits on instead
    ancestor: str | None  # where the two paths split (None: no common ancestor found)
    short_path: list[str]  # node names from the ancestor to the consumer through the full queue
    long_path: list[str]  # node names from the ancestor to the consumer through the awaited stream
    suggested_depth: int | None

    def __str__(self) -> str:
        text = f"queue {self.queue} is full while its consumer '{self.consumer}' waits for {self.waits_for}"
        if self.ancestor:
            text += (
                f"; the paths reconverge from '{self.ancestor}': "
                f"{' -> '.join(self.short_path)} and {' -> '.join(self.long_path)}"
            )
        if self.suggested_depth:
            text += f"; a depth of {self.suggested_depth} suffices"
        return text


def _streams(graph: Graph) -> dict[str, Stream]:
    return {s.name: s for n in graph.nodes.values() for s in n.outputs}


def _paths_to(graph: Graph, target: str) -> dict[str, list[str]]:
    """For every ancestor of node ``target``, one path (node names) from it to ``target``."""
    paths = {target: [target]}
    frontier = [target]
    while frontier:
        name = frontier.pop(0)
        for s in graph.nodes[name].inputs:
            up = s.node.name
            if up not in paths:
                paths[up] = [up, *paths[name]]
                frontier.append(up)
    return paths


def diagnose(
    graph: Graph, err: SimDeadlock, high_water: Mapping[str, int] | None = None
) -> list[Diagnosis]:
    """The insufficient queues of a simulator deadlock (see the module docstring)."""
    streams = _streams(graph)
    consumers = {s: n for s, n, _ in ((e[0].name, e[1].name, e[2]) for e in graph.edges())}
    waits: dict[str, tuple[str, str]] = getattr(err, "waits", {})
    found = []
    for kind, queue in waits.values():
        if kind != "room" or queue not in consumers:
            continue
        consumer = consumers[queue]
        if consumer not in waits or waits[consumer][0] != "token":
            continue
        awaited = waits[consumer][1]
        via_full = _paths_to(graph, streams[queue].node.name)
        via_wait = _paths_to(graph, streams[awaited].node.name)
        common = [n for n in via_full if n in via_wait]
        ancestor = common[0] if common else None
        if ancestor:  # the nearest split: the common ancestor with the shortest paths
            ancestor = min(common, key=lambda n: len(via_full[n]) + len(via_wait[n]))
        hwm = (high_water or {}).get(queue)
        found.append(
            Diagnosis(
                queue=queue,
                consumer=consumer,
                waits_for=awaited,
                ancestor=ancestor,
                short_path=[*via_full[ancestor], consumer] if ancestor else [],
                long_path=[*via_wait[ancestor], consumer] if ancestor else [],
                suggested_depth=max(hwm, 1) if hwm else None,
            )
        )
    return found


def size_queues(
    graph: Graph,
    memory: Mapping[str, Any] | None = None,
    *,
    profile: Any = None,
    inputs: Mapping[str, Any] | None = None,
    functional: bool = False,
    margin: float = 1.0,
    deep: int = 1024,
) -> dict[str, Any]:
    """Give every queue of ``graph`` the depth a deep run needed; annotate the graph and report.

    Returns ``{"depths", "cycles_deep", "cycles_sized", "high_water"}``; the graph's
    ``queue_depths`` are set (both backends read them).
    """
    from . import PaperProfile, simulate

    profile = profile or PaperProfile()
    insert_broadcasts(graph)
    names = list(_streams(graph))
    deep_run = simulate(graph, memory, profile=profile, inputs=inputs, functional=functional,
                        queue_depths={n: deep for n in names})  # fmt: skip
    depths = {
        n: max(profile.channel_depth, math.ceil(deep_run.queue_high_water.get(n, 0) * margin))
        for n in names
    }
    graph.queue_depths.update(depths)
    sized = simulate(graph, memory, profile=profile, inputs=inputs, functional=functional)
    return {
        "depths": depths,
        "cycles_deep": deep_run.cycles,
        "cycles_sized": sized.cycles,
        "high_water": dict(deep_run.queue_high_water),
    }
