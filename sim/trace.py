"""Timelines in the Chrome/Perfetto trace-event JSON format (open in ui.perfetto.dev)."""

from __future__ import annotations

import json
import math
import pathlib

from .result import SimResult

__all__ = ["to_trace_events", "write_trace"]


def to_trace_events(result: SimResult, *, clock_mhz: float = 1000.0) -> dict:
    """Trace events: one thread per node, a complete event (``ph: X``) per busy or stall span.

    Timestamps are microseconds at ``clock_mhz`` (1 GHz by default: 1 cycle = 1 ns). The run
    must be ``simulate(..., trace=True)``: an untraced run has no spans, and is refused rather
    than written as an empty timeline.
    """
    if not result.traced:
        raise ValueError("to_trace_events: the run has no spans; simulate it with trace=True")
    if (
        isinstance(clock_mhz, bool)
        or not isinstance(clock_mhz, (int, float))
        or not math.isfinite(clock_mhz)
        or clock_mhz <= 0
    ):
        raise ValueError(
            f"to_trace_events: clock_mhz must be a positive finite number, not {clock_mhz!r}"
        )
    tids = {name: i for i, name in enumerate(result.nodes)}
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "STeP graph"}}]
    for name, tid in tids.items():
        events.append(
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
        )
    scale = 1.0 / clock_mhz
    for name, state, start, end in result.spans:
        if state == "idle":
            continue
        events.append(
            {"name": state, "cat": result.nodes[name].kind, "ph": "X", "pid": 0, "tid": tids[name],
             "ts": start * scale, "dur": (end - start) * scale}
        )  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"cycles": result.cycles}}


def write_trace(result: SimResult, path: str | pathlib.Path) -> pathlib.Path:
    """Write :func:`to_trace_events` to ``path`` (the run needs ``simulate(..., trace=True)``)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_trace_events(result)))
    return path
