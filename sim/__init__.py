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
        queue_depths: capacity per stream name, overriding the profile's default depth.
        trace: record busy/stall spans for :func:`write_trace`.
    """
    engine = Engine(
        graph, profile or PaperProfile(), memory, functional=functional, inputs=inputs,
        queue_depths=queue_depths, trace=trace,
    )  # fmt: skip
    return engine.run()
