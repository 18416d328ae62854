"""Queue sizing: the smallest queue depths that neither deadlock nor stall; deadlock diagnosis.

:func:`diagnose` explains a :class:`~step_lang.errors.SimDeadlock`: a node blocked for *room* on a
full queue whose consumer waits for a token on another input is the classic reconvergent-path
deadlock. It names that queue, the consumer, the two paths from their common ancestor, and — when
given a deep run's high-water marks — the depth that suffices.

:func:`plan_queue_sizes` sizes every queue of a graph in three steps:

1. **Curves.** One run per representative memory image with every queue ``deep`` (1024) gives
   each queue's production/consumption curve (:class:`~sim.result.QueueCurve`: token count, first
   and last production, first consumption) and the reference cycle count. For static rates the
   timing model is deterministic, so these are the exact curves of the hardware model.
2. **Path balancing (LP).** Each node ``v`` gets a start time ``t_v``: when it holds the first
   token of every input (in the deep run: the latest first consumption over its inputs). An edge
   ``u -> v`` whose first token leaves ``u`` ``L`` cycles after ``u`` started must buffer
   ``r · (t_v - t_u - L)`` tokens (``r`` its production rate) and needs ``t_v >= t_u + L``. Minimising the sum over edges of buffered bits (token
   width × tokens) is a linear program over the ``t_v`` (difference constraints; solved with
   HiGHS through ``scipy.optimize.linprog``). Edge depth: ``max(base, ceil(buffer) + 1)``, never
   more than the deep run's high-water mark (a queue that held the deep run's peak never blocks).
   Feedback (loop back) edges take no constraint.
3. **Simulator refinement.** The LP sees first tokens and average rates only; data-dependent
   graphs (routing, ragged dims) and bursty consumers need more. Each memory image is simulated
   with the depths: a deadlock doubles the queues its diagnosis names (else the full ones); a run
   slower than the reference by more than ``tolerance`` doubles the queues whose producers
   waited longest for room. Where growing ends short of the reference (a deadlock whose named
   and full queues cannot grow, no queue waiting for room, or ``max_rounds`` spent), every queue
   goes to the most it can usefully get (the deep run's peak, at least the default depth), which
   ran as the deep run on every design measured (``docs/simulator.md``), and shrinking takes
   back what is not needed. An
   image's reference is the faster of its deep run and its run at the graph's own depths:
   deeper queues can be slower (loads that run ahead on a shared port).
   The LP's estimates are upper bounds, so the grown queues are then given back what the runs show
   they do not need (all at once, else the ``shrink_budget`` widest by halving). Graphs with
   data-dependent rates then get ``margin`` (× depth, default 1.25) for traces not seen, and the
   result is checked once more on every image: if it is slower than the graph's own depths by
   more than ``tolerance`` on an image (growing can end in slower depths, and the margin can slow
   a run), the graph's own depths are returned instead. So sizing
   never returns depths slower than the graph's (with ``min_depth`` applied to them).
4. **Held-out images** (optional): depths sized on some images need not hold on others (a
   wider KV batch, another routing). Each held-out image is checked against its own
   reference; the ones missed are sized on too (refined from the depths so far, worst first;
   then the queues that grew are shrunk again over every image sized on), and the check
   repeats until every held-out image is within ``tolerance``. Checking an image costs three
   runs (deep, own depths, sized); sizing on it costs the refinement's and shrinking's runs.

:func:`size_queues` applies a plan to the graph (``Graph.queue_depths``, which both the simulator
and the hardware elaborator read). The report also finds the smallest *uniform* depth that runs
every image without deadlock and within ``tolerance`` of the reference, so sized and uniform
storage compare at equal performance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import sympy as sp

from step_hw import contract
from step_lang.errors import SimDeadlock, StepValueError
from step_lang.graph import Graph, Stream
from step_lang.passes import lower as lower_graph
from step_lang.types import BufferType, Selector, Tile, TupleType

from .checks import check_int, check_number

__all__ = [
    "NUMBER_OPTIONS",
    "Diagnosis",
    "SizingReport",
    "diagnose",
    "plan_queue_sizes",
    "queue_bits",
    "size_queues",
    "token_bits",
]

DEEP = 1024
# Token kind and stop level, as the hardware's tokens carry them (default level width).
_KIND_AND_LEVEL_BITS = contract.KIND_BITS + contract.HwConfig().level_bits


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
    """The insufficient queues of a simulator deadlock (see the module docstring); ``graph`` is the
    graph that was simulated (lowered here, as the simulator lowers it)."""
    graph = lower_graph(graph)
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


# -- storage ---------------------------------------------------------------------------------------


def _elem_bits(elem: Any, dims: Mapping[str, int]) -> int:
    if isinstance(elem, TupleType):
        return sum(_elem_bits(e, dims) for e in elem.items)
    if isinstance(elem, Selector):
        return elem.n
    if isinstance(elem, (Tile, BufferType)):
        if isinstance(elem, BufferType):  # a buffer token is a reference (an address)
            return 32
        size = sp.sympify(elem.size_bytes)
        if size.free_symbols:
            unknown = {s for s in size.free_symbols if str(s) not in dims}
            if unknown:
                raise StepValueError(
                    f"token width of {elem}: give values for {sorted(map(str, unknown))} (dims=...)"
                )
            size = size.subs({s: dims[str(s)] for s in size.free_symbols})
        return int(size) * 8
    raise StepValueError(f"token width of {elem}: unknown element type")


def token_bits(stream: Stream, hw_config: Any = None, dims: Mapping[str, int] | None = None) -> int:
    """Bits one queue slot of ``stream`` holds.

    With a ``hw_config`` (:class:`step_hw.config.HwConfig`): the width of the stream's hardware
    token (``step_hw.payload.TokenFormat``). Otherwise: the element's data bits plus kind and stop
    level; dynamically sized tiles take their size from ``dims`` (e.g. the largest tile of a run).
    """
    if hw_config is not None:
        return contract.TokenFormat.for_elem(stream.elem, hw_config, where=stream.name).width
    return _elem_bits(stream.elem, dims or {}) + _KIND_AND_LEVEL_BITS


def queue_bits(bits: Mapping[str, int], depths: Mapping[str, int]) -> int:
    """Total queue storage: the sum over streams of depth × token bits."""
    return sum(depths[name] * bits[name] for name in bits)


# -- the plan --------------------------------------------------------------------------------------

#: The sizing options' rules: integers, and finite numbers, of at least a minimum (``margin``:
#: 1 is none; ``tolerance``: 0 is none; ``step size-queues`` reads :data:`NUMBER_OPTIONS` for
#: its own options).
_INT_OPTIONS = {"deep": 1, "max_rounds": 0, "min_depth": 1, "shrink_budget": 0}
NUMBER_OPTIONS = {"tolerance": 0, "margin": 1}


def _check_options(owner: str, options: Mapping[str, Any]) -> None:
    """The sizing options of ``options`` that have rules: a one-line ValueError naming ``owner``,
    the option and its value for the first that breaks its rule (never clamped or rounded)."""
    for key, low in _INT_OPTIONS.items():
        check_int(owner, key, options.get(key, low), low, StepValueError)
    for key, low in NUMBER_OPTIONS.items():
        check_number(owner, key, options.get(key, low), low, StepValueError)


def _within(cycles: int | None, ref: int, tolerance: float) -> bool:
    """A run of ``cycles`` (None: a deadlock) is within ``tolerance`` of its reference."""
    return cycles is not None and cycles <= ref * (1 + tolerance)


@dataclass
class SizingReport:
    """What :func:`plan_queue_sizes` found. Cycle counts are the worst over the memory images."""

    depths: dict[str, int]  # the sized depth of every queue
    analytic: dict[str, int]  # the LP's depths, before simulator refinement
    bits: dict[str, int]  # token bits per queue slot
    base: int  # the smallest depth any queue gets
    cycles_deep: int  # every queue `deep`
    cycles_sized: int  # -1: a sized run deadlocked (``deadlock_free`` False)
    uniform_depth: int | None  # the smallest uniform depth within tolerance of the reference
    # (both None: not searched, ``plan_queue_sizes(uniform=False)``, or no uniform depth up to
    # the deep one is within tolerance of the graph's own depths)
    cycles_uniform: int | None
    default_depths: dict[str, int]  # the graph's depths before sizing
    cycles_default: int | None  # None: the graph deadlocked as built
    data_dependent: bool
    margin: float
    tolerance: float
    images: int  # memory images simulated
    steps: list[str] = field(default_factory=list)  # refinement log
    deadlock_free: bool = True
    simulations: int = 0  # timing runs simulated (each depths-and-image pair once)
    # Held-out images (``plan_queue_sizes(held_out=...)``), by their index there: the ones sized
    # on too (in the order added), and each one's cycles at the sized depths (None: a deadlock)
    # against its reference.
    held_out_added: list[int] = field(default_factory=list)
    held_out_cycles: list[tuple[int | None, int]] = field(default_factory=list)

    @property
    def held_out_missed(self) -> list[int]:
        """The held-out images the sized depths miss by more than the tolerance (none unless a
        sized-on image itself could not be brought within it)."""
        return [
            k
            for k, (c, ref) in enumerate(self.held_out_cycles)
            if not _within(c, ref, self.tolerance)
        ]

    @property
    def bits_sized(self) -> int:
        return queue_bits(self.bits, self.depths)

    @property
    def bits_uniform(self) -> int | None:
        if self.uniform_depth is None:
            return None
        return queue_bits(self.bits, dict.fromkeys(self.bits, self.uniform_depth))

    @property
    def bits_default(self) -> int:
        return queue_bits(self.bits, self.default_depths)

    def summary(self) -> str:
        """A human-readable report: storage and cycles before and after."""
        before = "deadlock" if self.cycles_default is None else str(self.cycles_default)
        sized = str(self.cycles_sized) if self.deadlock_free else "deadlock"
        lines = [
            f"queues            {len(self.depths)}",
            f"bits as built     {self.bits_default}   cycles {before}",
            f"bits sized        {self.bits_sized}   cycles {sized}",
            f"cycles, depth {DEEP} {self.cycles_deep}",
            f"simulator runs    {self.simulations} over {self.images} image(s)",
        ]
        if self.held_out_cycles:
            worst = max(math.inf if c is None else c / ref for c, ref in self.held_out_cycles)
            lines.append(
                f"held out          {len(self.held_out_cycles)} image(s), "
                f"{len(self.held_out_added)} sized on too, worst {worst:.3f} x its reference"
            )
        if self.uniform_depth is not None:
            lines.insert(3, f"bits uniform      {self.bits_uniform} (depth {self.uniform_depth})"
                            f"   cycles {self.cycles_uniform}")  # fmt: skip
        grown = sorted(
            ((d, n) for n, d in self.depths.items() if d > self.base), key=lambda x: (-x[0], x[1])
        )
        if grown:
            lines.append("deeper than " + str(self.base) + ":")
            lines += [f"  {n}: {d} x {self.bits[n]} bits" for d, n in grown]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "depths": self.depths,
            "analytic": self.analytic,
            "bits_default": self.bits_default,
            "bits_sized": self.bits_sized,
            "bits_uniform": self.bits_uniform,
            "uniform_depth": self.uniform_depth,
            "cycles_default": self.cycles_default,
            "cycles_deep": self.cycles_deep,
            "cycles_sized": self.cycles_sized,
            "cycles_uniform": self.cycles_uniform,
            "data_dependent": self.data_dependent,
            "deadlock_free": self.deadlock_free,
            "steps": self.steps,
            "simulations": self.simulations,
            "images": self.images,
            "held_out_added": self.held_out_added,
            "held_out_cycles": [list(p) for p in self.held_out_cycles],
            "held_out_missed": self.held_out_missed,
        }


def _data_dependent(graph: Graph) -> bool:
    """Whether token counts depend on data: some stream or tile has a dim that is not a number."""
    for node in graph.nodes.values():
        for s in node.outputs:
            for d in (*s.shape, *getattr(s.elem, "shape", ())):
                if sp.sympify(d).free_symbols:
                    return True
    return False


def _lp_depths(
    graph: Graph, curves: Mapping[str, Any], bits: Mapping[str, int], base: int
) -> dict[str, float]:
    """Tokens each queue must buffer under the best start times (module docstring, step 2)."""
    from scipy.optimize import linprog

    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    start = {}
    for name, node in graph.nodes.items():
        firsts = [curves[s.name].first_out for s in node.inputs if s.name in curves]
        firsts = [f for f in firsts if f is not None]
        start[name] = max(firsts) if firsts else 0.0
    rows, rhs, cost = [], [], np.zeros(len(nodes))
    edges = []
    for s, consumer, _ in graph.edges():
        c = curves.get(s.name)
        if c is None or c.n == 0 or c.first_in is None or c.first_out is None:
            continue
        if consumer.is_feedback:
            continue  # the back edge of a loop: no ordering constraint
        u, v = index[s.node.name], index[consumer.name]
        lat = max(0.0, c.first_in - start[s.node.name])
        row = np.zeros(len(nodes))
        row[u], row[v] = 1.0, -1.0  # t_u - t_v <= -lat
        rows.append(row)
        rhs.append(-lat)
        weight = bits.get(s.name, 0) * min(c.rate, 1e6)  # unsized streams: order only
        cost[v] += weight
        cost[u] -= weight
        edges.append((s.name, u, v, lat, c.rate))
    if not edges:
        return {}
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - the constraints are acyclic, so always feasible
        raise RuntimeError(f"queue-sizing LP failed: {res.message}")
    t = res.x
    return {
        name: max(0.0, rate * (t[v] - t[u] - lat))
        for name, u, v, lat, rate in edges
        if name in bits
    }


def plan_queue_sizes(
    graph: Graph,
    memories: Sequence[Mapping[str, Any] | None] | None = None,
    *,
    hw_config: Any = None,
    profile: Any = None,
    inputs: Mapping[str, Any] | None = None,
    functional: bool = False,
    tolerance: float = 0.01,
    margin: float = 1.25,
    deep: int = DEEP,
    dims: Mapping[str, int] | None = None,
    max_rounds: int = 40,
    min_depth: int = 1,
    shrink_budget: int = 64,
    uniform: bool = True,
    held_out: Sequence[Mapping[str, Any]] | None = None,
) -> SizingReport:
    """Size every queue of ``graph`` (module docstring); the graph itself is not changed.

    Args:
        memories: representative memory images (e.g. several routing traces); ``None``: one run
            without memory (Source-driven graphs).
        hw_config: size for the hardware: the simulator's ``rtl`` profile of this
            :class:`~step_hw.config.HwConfig` and the hardware's token widths.
        profile: the timing model otherwise (default :class:`~sim.PaperProfile`).
        tolerance: how much slower than the reference (the faster of the deep run and the
            graph's own depths, per image) a sized run may be.
        margin: extra depth factor for graphs whose rates depend on data.
        dims: values of dynamic tile dims for token widths (not needed with ``hw_config``).
        max_rounds: at most this many rounds of growing by stalls per image; then, if the run
            still misses the reference, every queue goes to the deep run's peak.
        min_depth: the smallest depth a queue may get (shrinking goes down to it, so queues that
            need no more than one slot get one).
        shrink_budget: at most this many checks (one run per image each) while shrinking.
        uniform: also find the smallest uniform depth that matches the reference on every
            image, held-out ones included (a search of several runs per image, for comparing
            storage); ``False`` leaves
            ``uniform_depth`` and ``cycles_uniform`` ``None``.
        held_out: more memory images the depths must also hold on (e.g. the rest of a trace
            set, when sizing on all of it costs too much): each is checked against its own
            reference after sizing; the ones missed are sized on too (refined from the depths
            so far, worst first, then the queues that grew shrunk again over every image sized
            on), until every held-out image is within ``tolerance``. The report says which
            were added and each one's cycles against its reference.

    A run with the same depths on the same image is simulated once (the timing model is
    deterministic), so the checks of the last phases reuse the refinement's runs.
    """
    from . import PaperProfile, simulate

    _check_options("plan_queue_sizes", {
        "tolerance": tolerance, "margin": margin, "deep": deep, "max_rounds": max_rounds,
        "min_depth": min_depth, "shrink_budget": shrink_budget,
    })  # fmt: skip
    if hw_config is not None and profile is None:
        from .profiles import PROFILES

        if "rtl" not in PROFILES:
            raise StepValueError("sizing for hardware needs the simulator's 'rtl' profile")
        profile = PROFILES["rtl"](hw_config)
    profile = profile or PaperProfile()
    graph = lower_graph(graph)
    images = list(memories) if memories else [None]
    streams = _streams(graph)
    if hw_config is not None:
        # A Bufferize hands its buffers to the Streamify that reads them through their shared
        # memory (``step_hw.memory.buffer``: two slots): no queue in hardware, nothing to size.
        streams = {n: s for n, s in streams.items() if not isinstance(s.elem, BufferType)}
    base = min_depth
    bits = {n: token_bits(s, hw_config, dims) for n, s in streams.items()}
    default_depths = {n: graph.queue_depth(n, int(profile.channel_depth)) for n in streams}

    runs: dict[tuple[int, tuple[tuple[str, int], ...]], Any] = {}

    def run(depths: Mapping[str, int], image):
        key = (id(image), tuple(sorted(depths.items())))
        if key not in runs:
            try:
                r = simulate(graph, image, profile=profile, inputs=inputs, functional=functional,
                             queue_depths=depths)  # fmt: skip
                # kept for its timing only: a functional run's tensors and tokens are dropped
                runs[key] = replace(r, memory={}, streams={})
            except SimDeadlock as err:
                runs[key] = err
        if isinstance(runs[key], SimDeadlock):
            raise runs[key]
        return runs[key]

    def cycles(depths: Mapping[str, int], image) -> int | None:
        """The run's cycles, ``None`` if it deadlocks."""
        try:
            return run(depths, image).cycles
        except SimDeadlock:
            return None

    def within(cycles: int | None, ref: int) -> bool:
        return _within(cycles, ref, tolerance)

    own = {n: max(base, d) for n, d in default_depths.items()}
    cycles_deep: list[int] = []
    cycles_default_each: list[int | None] = []
    # What a sized run is held to on each image: the faster of the deep run and the graph's own
    # depths (deeper queues can be slower: loads that run ahead on a shared port), so a sized
    # run is held to the graph's own depths where those beat the deep run.
    reference: list[int] = []
    # The most a queue can usefully get: the deep run's peak, and at least the profile's default
    # depth (a queue that never holds more than one token may still need slots for throughput).
    peak = dict.fromkeys(streams, base)
    hwm = dict.fromkeys(streams, max(base, int(profile.channel_depth)))

    def measure(image) -> tuple[Any, int | None, int]:
        """The deep run of ``image``, its cycles at the graph's own depths (None: a deadlock) and
        its reference (both runs cached by :func:`run`)."""
        r = run(dict.fromkeys(streams, deep), image)
        c = cycles(default_depths, image)
        return r, c, r.cycles if c is None else min(r.cycles, c)

    def take(image) -> Any:
        """Size on ``image`` too: its deep run's peaks bound what a queue can usefully get."""
        r, own_cycles, ref = measure(image)
        images_sized.append(image)
        cycles_deep.append(r.cycles)
        cycles_default_each.append(own_cycles)
        reference.append(ref)
        for n in streams:
            peak[n] = max(peak[n], r.queue_high_water.get(n, 0))
            hwm[n] = max(hwm[n], peak[n])
        return r

    images_sized: list[Any] = []
    deep_runs = [take(m) for m in images]

    # Every queue starts at the profile's default depth (what sustains full throughput) or what
    # the LP says it buffers; refinement grows, shrinking then takes back what is not needed.
    start = max(base, int(profile.channel_depth))
    analytic = dict.fromkeys(streams, start)
    for r in deep_runs:
        for name, buffered in _lp_depths(graph, r.queue_curves, bits, base).items():
            want = start if buffered < 0.5 else max(start, math.ceil(buffered - 1e-9) + 1)
            analytic[name] = max(analytic[name], min(want, max(peak[name], start)))

    steps: list[str] = []
    depths = dict(analytic)

    def grow(names, why: str) -> bool:
        grown = []
        for n in names:
            if n in depths and depths[n] < hwm[n]:  # not a queue sizing sees: nothing to grow
                depths[n] = min(hwm[n], max(2 * depths[n], depths[n] + 1))
                grown.append(f"{n}->{depths[n]}")
        if grown:
            steps.append(f"{why}: " + ", ".join(grown))
        return bool(grown)

    def grow_by_stalls(image, ref: int) -> int | None:
        """Grow until the run is within the tolerance or nothing more helps; its cycles, ``None``
        for a deadlock whose named and full queues cannot grow (the peak then takes over)."""
        for _ in range(max_rounds):
            try:
                r = run(depths, image)
            except SimDeadlock as err:
                named = [c.queue for c in getattr(err, "causes", [])]
                full = [q for q, n in err.queues.items() if n and n >= err.capacity.get(q, n + 1)]
                if grow(named, "deadlock") or grow(full, "deadlock (full queues)"):
                    continue
                return None
            if within(r.cycles, ref):
                return r.cycles
            stalls = {
                q: c
                for q, c in r.queue_full_cycles.items()
                if c > 0 and q in depths and depths[q] < hwm[q]
            }
            if not stalls:
                return r.cycles
            top = max(stalls.values())
            if not grow([q for q, c in stalls.items() if c >= top / 2], f"{r.cycles} cycles"):
                return r.cycles
        return cycles(depths, image)

    def refine(image, ref: int) -> None:
        """Grow by stalls; where that misses the reference, every queue goes to the most it can
        usefully get (``hwm``: the deep run's peak, at least the default depth), which ran as
        the deep run on every design measured, and shrinking takes back what is not needed."""
        got = grow_by_stalls(image, ref)
        if within(got, ref):
            return
        short = [n for n in depths if depths[n] < hwm[n]]
        depths.update({n: hwm[n] for n in short})
        if short:
            missed = "a deadlock" if got is None else f"{got} cycles"
            steps.append(f"growing by stalls ends at {missed}: "
                         f"{len(short)} queue(s) to the deep run's peak")  # fmt: skip

    # The image that failed the last check is tried first: a trial that fails usually fails on
    # the same image again, and an answer needs every image only when the trial passes (the
    # order changes how many runs a check costs, never its answer).
    order: list[int] = []

    def passes(trial: Mapping[str, int]) -> bool:
        for i in order:
            c = cycles(trial, images_sized[i])
            if not within(c, reference[i]):
                order.remove(i)
                order.insert(0, i)
                return False
        return True

    checks = [shrink_budget]

    def lower(names: list[str], to: int) -> None:
        """Lower ``names`` to depth ``to`` where the runs allow it: all at once, else by halves."""
        if not names or checks[0] <= 0:
            return
        checks[0] -= 1
        if passes({**depths, **dict.fromkeys(names, to)}):
            depths.update(dict.fromkeys(names, to))
            steps.append(f"shrink: {len(names)} queue(s) to {to}" if len(names) > 1
                         else f"shrink: {names[0]}->{to}")  # fmt: skip
            return
        if len(names) > 1:
            half = len(names) // 2
            lower(names[:half], to)
            lower(names[half:], to)

    def shrink(names: Sequence[str] | None = None) -> None:
        """Give back what the runs show is not needed (the LP's estimates are upper bounds and
        the default depth is more than some queues need), widest tokens first; only ``names``
        when given (the queues a held-out image's refinement grew: the others were shrunk as far
        as fewer images allowed)."""
        checks[0] = shrink_budget
        widest = sorted(
            streams if names is None else names, key=lambda n: (-depths[n] * bits[n], n)
        )
        lower([n for n in widest if depths[n] > start], start)
        for n in [n for n in widest if depths[n] > start]:  # the smallest depth that passes
            lo, hi = start - 1, depths[n]  # below `start` is the last phase's job; hi passes
            while hi - lo > 1 and checks[0] > 0:
                checks[0] -= 1
                mid = (lo + hi) // 2
                if passes({**depths, n: mid}):
                    hi = mid
                else:
                    lo = mid
            if hi < depths[n]:
                depths[n] = hi
                steps.append(f"shrink: {n}->{hi}")
        if start > base:
            lower([n for n in widest if depths[n] == start], base)

    def finish() -> tuple[dict[str, int], list[int | None]]:
        """The margin for data-dependent rates, then never slower than the graph's own depths
        beyond the tolerance on an image: growing can end slower (deeper queues can be slower),
        and the margin can slow a run."""
        dependent = _data_dependent(graph) or len(images_sized) > 1
        final = dict(depths)
        if dependent and margin > 1:
            final = {n: math.ceil(d * margin) if d > start else d for n, d in final.items()}
        sized = [cycles(final, image) for image in images_sized]
        own_cycles = [cycles(own, image) for image in images_sized]
        if None not in own_cycles and any(
            not within(c, o) for c, o in zip(sized, own_cycles, strict=True)
        ):
            final, sized = dict(own), own_cycles
            steps.append("sized slower than the graph's own depths: keeping the graph's own")
        return final, sized

    for k, image in enumerate(images_sized):
        refine(image, reference[k])
        order.append(k)
    shrink()
    final, sized = finish()

    # Held-out images: each is checked against its own reference; the ones the sized depths
    # miss are sized on too (each refined from the depths so far, the worst first; then the
    # queues that grew are shrunk again over every image sized on), until every held-out image
    # is within the tolerance.
    held = dict(enumerate(held_out or []))  # held-out index -> image, not sized on
    added: list[int] = []
    while held:
        missed: dict[int, float] = {}
        for k, image in held.items():
            c = cycles(final, image)
            ref = measure(image)[2]
            if not within(c, ref):
                missed[k] = math.inf if c is None else c / ref
        if not missed:
            break
        before = dict(depths)
        for k in sorted(missed, key=lambda k: (-missed[k], k)):  # the worst first
            how = "a deadlock" if missed[k] == math.inf else f"{missed[k]:.3f} x its reference"
            steps.append(f"held-out image {k}: {how}; sized on it too")
            added.append(k)
            image = held.pop(k)
            take(image)
            refine(image, reference[-1])
            order.insert(0, len(images_sized) - 1)
        shrink([n for n in streams if depths[n] > before[n]])
        final, sized = finish()
    held_out_cycles = [(cycles(final, image), measure(image)[2]) for image in (held_out or [])]
    depths = final
    dependent = _data_dependent(graph) or len(images_sized) > 1
    deadlock_free = None not in sized
    images = images_sized
    # The uniform depth must hold where the sized depths do, on the held-out images too; its
    # cycles are the worst over the images sized on, as ``cycles_sized``.
    checked = [(image, ref, True) for image, ref in zip(images, reference, strict=True)]
    checked += [(image, measure(image)[2], False) for image in held.values()]

    def uniform_ok(d: int) -> int | None:
        worst = 0
        for image, ref, sized_on in checked:
            c = cycles(dict.fromkeys(streams, d), image)
            if not within(c, ref):
                return None
            if sized_on:
                worst = max(worst, c)
        return worst

    def smallest_uniform() -> tuple[int | None, int | None]:
        lo, hi = base - 1, base
        found = uniform_ok(hi)
        while found is None and hi < deep:
            lo, hi = hi, min(deep, hi * 2)
            found = uniform_ok(hi)
        if found is None:  # the graph's own depths are faster than every uniform depth tried
            return None, None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            c = uniform_ok(mid)
            if c is None:
                lo = mid
            else:
                hi, found = mid, c
        return hi, found

    uniform_depth, cycles_uniform = smallest_uniform() if uniform else (None, None)

    cycles_default = None if None in cycles_default_each else max(cycles_default_each)
    return SizingReport(
        depths=depths,
        analytic=analytic,
        bits=bits,
        base=base,
        cycles_deep=max(cycles_deep),
        cycles_sized=-1 if None in sized else max(sized),
        uniform_depth=uniform_depth,
        cycles_uniform=cycles_uniform,
        default_depths=default_depths,
        cycles_default=cycles_default,
        data_dependent=dependent,
        margin=margin,
        tolerance=tolerance,
        images=len(images),
        steps=steps,
        deadlock_free=deadlock_free,
        simulations=len(runs),
        held_out_added=added,
        held_out_cycles=held_out_cycles,
    )


def size_queues(
    graph: Graph,
    hw_config: Any = None,
    memories: Sequence[Mapping[str, Any] | None] | None = None,
    **options: Any,
) -> Graph:
    """Give every queue of ``graph`` its sized depth (:func:`plan_queue_sizes`); returns the graph.

    The depths land in ``graph.queue_depths``, which the simulator and the hardware elaborator
    both read; the report is kept as ``graph.sizing``.
    """
    _check_options("size_queues", options)
    report = plan_queue_sizes(graph, memories, hw_config=hw_config, **options)
    graph.queue_depths.update(report.depths)
    graph.sizing = report
    return graph
