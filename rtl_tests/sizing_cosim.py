"""Sized queues on the generated RTL.

:func:`cosim_sized` builds one hardware-size graph twice (with the depths of a queue-sizing
report, and with every queue :data:`sim.sizing.DEEP` deep) and co-simulates both on each memory
image against the interpreter.

:func:`confirm_in_cosim` makes the simulator's depths hold on the RTL. The simulator's ``rtl``
profile is within a few cycles of the RTL (``docs/validation.md``), but a few cycles are a few
percent of a 100-cycle run, and its errors at depth 1 and at depth 1024 need not have the same
sign. So the sized design is co-simulated with every queue's push times traced, against the deep
design's; while some image is more than ``tolerance`` slower, the queues where the sized run
falls behind (:func:`fell_behind`: a token enters the queue cycles later than in the deep run
although the producer's inputs were not as late, so the producer found an output queue full)
are grown (below 3 to 3, the depth that sustains one token per cycle, else doubled), and the
design is built and run again.

Used by ``rtl_tests/test_sizing_verilator.py`` (the acceptance test) and by
``python -m bench.queue_sizing --cosim``. Both size with :func:`stepcli.sizing.size_hardware` over the images
:func:`stepcli.sizing.image_counts` gives, so
their designs share Verilator builds (``step_hw.cosim`` caches them by Verilog text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from sim.sizing import DEEP
from step_hw import cosim
from step_lang import interpret
from stepcli.sizing import hardware_case

__all__ = ["CosimSizing", "SizedRun", "confirm_in_cosim", "cosim_sized", "fell_behind"]

#: The depth from which a queue moves one token per cycle (``step_hw.queue.Queue``).
FULL_RATE = 3


@dataclass(frozen=True)
class SizedRun:
    """One memory image co-simulated with sized and with deep queues."""

    image: int
    cycles_sized: int
    cycles_deep: int
    # Names of the output tensors of the sized design that differ from the interpreter's.
    mismatched: tuple[str, ...]

    @property
    def slowdown(self) -> float:
        """Sized cycles over deep cycles, minus one (0.01 is 1% slower)."""
        return self.cycles_sized / self.cycles_deep - 1

    def to_json(self) -> dict:
        return {**asdict(self), "mismatched": list(self.mismatched)}


def cosim_sized(
    example: str,
    schedule: str,
    depths: Mapping[str, int],
    memories: Sequence[Mapping[str, np.ndarray]],
    *,
    traces: list | None = None,
) -> list[SizedRun]:
    """Co-simulate the hardware-size ``example`` under ``schedule`` with queue ``depths`` and
    with every queue ``DEEP`` deep, on every image of ``memories``. With ``traces`` (a list),
    also record every queue's push cycles: one ``(sized, deep, inputs)`` triple per image is
    appended (``{stream: [cycle, ...]}`` twice, and ``{node: [input stream, ...]}``)."""
    sized, _ = hardware_case(example, schedule)
    sized.queue_depths.update(depths)
    deep, _ = hardware_case(example, schedule)
    deep.queue_depths.update(dict.fromkeys(depths, DEEP))
    trace = traces is not None
    runs = []
    for i, memory in enumerate(memories):
        want = interpret(hardware_case(example, schedule)[0], memory).memory
        tag = f"{example}_{schedule}_{i}{'_traced' if trace else ''}"
        got_sized = cosim.run(sized, memory, tag=f"sized_{tag}", trace=trace)
        got_deep = cosim.run(deep, memory, tag=f"deep_{tag}", trace=trace)
        mismatched = tuple(
            name
            for name, tensor in got_sized.outputs.items()
            if not np.array_equal(tensor, want[name])
        )
        runs.append(SizedRun(i, got_sized.cycles, got_deep.cycles, mismatched))
        if trace:
            traces.append(
                (_pushes(got_sized.trace), _pushes(got_deep.trace), _inputs(got_sized.trace))
            )
    return runs


def _pushes(trace: Mapping[str, dict]) -> dict[str, list[int]]:
    return {q["stream"]: q["push"] for q in trace.values() if "stream" in q}


def _inputs(trace: Mapping[str, dict]) -> dict[str, list[str]]:
    """Node name -> the streams it consumes (the traced queues into it)."""
    out: dict[str, list[str]] = {}
    for q in trace.values():
        if "stream" in q:
            out.setdefault(q["consumer"], []).append(q["stream"])
    return out


def _lag_at(sized: list[int], deep: list[int], t: int) -> int:
    """How late the sized run's last push that the deep run made by cycle ``t`` was."""
    j = next((k for k in range(min(len(sized), len(deep)) - 1, -1, -1) if deep[k] <= t), None)
    return 0 if j is None else sized[j] - deep[j]


def fell_behind(
    sized: Mapping[str, list[int]],
    deep: Mapping[str, list[int]],
    inputs: Mapping[str, list[str]],
    *,
    slack: int = 2,
) -> list[str]:
    """The streams where the sized run falls behind the deep one: a token enters the queue at
    least ``slack`` cycles later than in the deep run while the producer's own inputs were
    less late (by at least ``slack``) at that point, so the producer found this queue (or a
    sibling output's) full. A delay that only passes on from upstream does not count."""
    roots = []
    for name, pushes in sized.items():
        ref = deep.get(name, [])
        k = next(
            (k for k in range(min(len(pushes), len(ref))) if pushes[k] - ref[k] >= slack), None
        )
        if k is None:
            continue
        t, lag = ref[k], pushes[k] - ref[k]
        upstream = [
            _lag_at(sized[i], deep[i], t) for i in inputs.get(name.split(".")[0], []) if i in deep
        ]
        if lag - max([0, *upstream]) >= slack:
            roots.append(name)
    return sorted(roots)


@dataclass
class CosimSizing:
    """What :func:`confirm_in_cosim` found: the depths that hold on the RTL, the co-simulated
    runs with them, and the rounds of growth it took (``(grown queues, worst slowdown)``)."""

    depths: dict[str, int]
    runs: list[SizedRun]
    rounds: list[tuple[dict[str, int], float]] = field(default_factory=list)
    tolerance: float = 0.02

    @property
    def holds(self) -> bool:
        """Every image bit-exact and within ``tolerance`` of the deep design."""
        return all(not r.mismatched and r.slowdown <= self.tolerance for r in self.runs)

    def to_json(self) -> dict:
        return {
            "holds": self.holds,
            "tolerance": self.tolerance,
            "runs": [r.to_json() for r in self.runs],
            "rounds": [{"grown": g, "worst_slowdown": round(w, 4)} for g, w in self.rounds],
            "depths": self.depths,
        }


def confirm_in_cosim(
    example: str,
    schedule: str,
    depths: Mapping[str, int],
    memories: Sequence[Mapping[str, np.ndarray]],
    *,
    tolerance: float = 0.02,
    max_rounds: int = 6,
) -> CosimSizing:
    """Co-simulate ``depths`` (every image, against the deep design) and grow the queues that
    fall behind first until every image is within ``tolerance`` (module docstring); at most
    ``max_rounds`` rounds of growth, each one more Verilator build."""
    depths = dict(depths)
    rounds: list[tuple[dict[str, int], float]] = []
    while True:
        traces: list = []
        runs = cosim_sized(example, schedule, depths, memories, traces=traces)
        result = CosimSizing(dict(depths), runs, list(rounds), tolerance)
        worst = max(r.slowdown for r in runs)
        if result.holds or len(rounds) >= max_rounds:
            return result
        grown: dict[str, int] = {}
        for run, (sized, deep, inputs) in zip(runs, traces, strict=True):
            if run.slowdown > tolerance:
                for name in fell_behind(sized, deep, inputs):
                    d = depths.get(name, DEEP)
                    grown[name] = FULL_RATE if d < FULL_RATE else min(DEEP, 2 * d)
        grown = {n: d for n, d in grown.items() if d > depths[n]}
        if not grown:  # nothing fell behind (or it is already deep): more depth will not help
            return result
        depths.update(grown)
        rounds.append((grown, worst))
