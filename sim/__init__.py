"""The fast cycle-approximate simulator of STeP graphs.

``simulate(graph, memory, profile=PaperProfile())`` runs a graph in simulated time and returns a
:class:`SimResult`. Functional mode carries real data (outputs equal the interpreter's);
timing-only mode carries shape-only tiles for float tensors, so full-size models run in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from step_lang.errors import SimDeadlock
from step_lang.graph import Graph

from .engine import Engine
from .memory import FluidMemory, MemoryConfig
from .profiles import PROFILES, PaperProfile, TimingProfile
from .result import NodeStats, SimResult
from .trace import to_trace_events, write_trace

__all__ = [
    "PROFILES",
    "FluidMemory",
    "MemoryConfig",
    "NodeStats",
    "PaperProfile",
    "SimDeadlock",
    "SimResult",
    "TimingProfile",
    "simulate",
    "to_trace_events",
    "write_trace",
]


def simulate(
    graph: Graph,
    memory: Mapping[str, np.ndarray] | None = None,
    *,
    profile: TimingProfile | None = None,
    functional: bool = True,
    inputs: Mapping[str, Any] | None = None,
    queue_depths: Mapping[str, int] | None = None,
    trace: bool = False,
) -> SimResult:
    """Simulate ``graph``.

    Args:
        memory: off-chip tensors by name. In timing-only mode (``functional=False``) float tensors
            may be omitted (they become shape-only); integer and bool tensors that are read must
            be given, because they steer routing.
        profile: the timing model (default :class:`PaperProfile`).
        inputs: tokens for Source nodes, as for ``interpret``.
        queue_depths: capacity per stream name, over ``graph.queue_depths`` and the profile's
            default depth: a name of the graph (a stream read by several inputs passes its depth
            on to the Broadcast outputs inserted for it) or of its lowered form
            (``<producer>_<port>_bc.out<k>``, as queue sizing reports them); any other name is a
            :class:`~step_lang.errors.StepValueError`. The graph itself is not changed.
        trace: record busy/stall spans for :func:`write_trace`, and the cycle each token entered
            each queue (``SimResult.sends``).

    Raises :class:`~step_lang.errors.SimDeadlock` when the graph deadlocks and
    :class:`~step_lang.errors.StepRaceError` when two off-chip accesses of the same elements,
    one a write, are not ordered by any stream (:mod:`step_lang.races`).
    """
    if profile is not None and not isinstance(profile, TimingProfile):
        raise TypeError(
            f"profile must be a TimingProfile (PaperProfile or RtlProfile), not {profile!r}"
        )
    if memory is not None and not isinstance(memory, Mapping):
        raise TypeError(f"memory must map tensor names to arrays, not {type(memory).__name__}")
    for flag, value in (("functional", functional), ("trace", trace)):
        if not isinstance(value, bool):  # read for truth, None would mean False and "no" True
            raise TypeError(f"simulate: {flag} must be True or False, not {value!r}")
    engine = Engine(
        graph, profile or PaperProfile(), memory, functional=functional, inputs=inputs,
        queue_depths=queue_depths, trace=trace,
    )  # fmt: skip
    return engine.run()
