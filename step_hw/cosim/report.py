"""Validate one's own graph: every reader on the same data, compared (:func:`validate`).

The interpreter gives the reference outputs; the simulator runs with the ``rtl`` timing profile
of the hardware and the ``paper`` profile configured with its rates and memory
(``PaperProfile.for_rtl``, as ``make validate`` runs it); the graph is elaborated, verilated
(:func:`step_hw.cosim.design`, cached by Verilog hash) and co-simulated
(:func:`step_hw.cosim.run`, with every queue's handshakes traced).
The :class:`ValidationReport` says whether every output tensor (and every Sink's tokens) is equal
everywhere, or names the first differing element; the cycles of the RTL against each profile;
and the first stream whose handshake cycles differ between the ``rtl`` profile and the RTL, the
place to look when the profile's cycle count is off.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from step_hw.config import HwConfig
from step_hw.memory_model import MemoryModel
from step_lang.graph import Graph

from .harness import CosimError, CosimResult, output_tensors, run, sink_nodes

__all__ = ["Mismatch", "StreamDivergence", "ValidationReport", "validate"]


@dataclass(frozen=True)
class Mismatch:
    """The first element where a reader's output differs from the interpreter's: ``what`` is a
    tensor (``index`` an array index) or a Sink (``sink <node>``, ``index`` the token's position);
    ``reader`` is ``RTL``, ``rtl profile`` or ``paper profile``."""

    what: str
    index: tuple[int, ...]
    interpreter: Any
    got: Any
    reader: str

    def __str__(self) -> str:
        at = ", ".join(map(str, self.index))
        return f"{self.what}[{at}]: interpreter {self.interpreter}, {self.reader} {self.got}"


@dataclass(frozen=True)
class StreamDivergence:
    """The earliest token whose queue-entry cycle differs between the ``rtl`` profile and the RTL:
    token ``index`` of ``stream`` (``producer -> consumer``) entered its queue in ``sim_cycle``
    in the simulator and ``rtl_cycle`` in the RTL (``None``: that side has fewer tokens);
    ``streams`` streams diverge in all, of ``compared``."""

    stream: str
    producer: str
    consumer: str
    index: int
    sim_cycle: int | None
    rtl_cycle: int | None
    streams: int
    compared: int

    def __str__(self) -> str:
        def at(c: int | None) -> str:
            return "never" if c is None else f"cycle {c}"

        return (
            f"'{self.stream}' ({self.producer} -> {self.consumer}), token {self.index}: "
            f"rtl profile {at(self.sim_cycle)}, RTL {at(self.rtl_cycle)} "
            f"({self.streams} of {self.compared} streams diverge)"
        )


@dataclass
class ValidationReport:
    """What :func:`validate` found; ``str(report)`` is a one-screen summary.

    ``ok``: every output equal everywhere and the co-simulation ran without a flag.
    ``mismatch``: the first differing element (RTL first, then the profiles), ``None`` if none.
    ``rtl_error``: why there is no RTL result (no hardware for an operator, a failed build, a
    watchdog or error-flag report), else ``None``.
    """

    graph: str
    config: HwConfig
    pattern: str
    outputs: list[str]
    sinks: list[str]
    paper_cycles: int
    rtl_profile_cycles: int
    rtl_cycles: int | None = None
    mismatch: Mismatch | None = None
    divergence: StreamDivergence | None = None
    compared_streams: int = 0
    rtl_error: str | None = None
    flags: list[tuple[str, str]] = field(default_factory=list)
    cosim: CosimResult | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """Outputs equal and no error flag. Overflow flags are warnings: the outputs still
        equal the interpreter's (which wraps and saturates as the hardware does), but some
        values left the element range (the report names the nodes)."""
        errors = [f for f in self.flags if f[1] != "overflow"]
        return self.rtl_error is None and self.mismatch is None and not errors

    @property
    def folder(self) -> Path | None:
        """The co-simulation run's folder (``sim.log``, and ``dump.fst`` with ``waves=True``)."""
        return self.cosim.folder if self.cosim else None

    def to_json(self) -> dict[str, Any]:
        """The report for programs (``step validate --json``): what ``str(report)`` says, as
        values; each profile's ``error`` is relative to the RTL's cycles (``None`` without an
        RTL result)."""

        def error(c: int) -> float | None:
            return (c - self.rtl_cycles) / self.rtl_cycles if self.rtl_cycles else None

        def plain(v: Any) -> Any:  # a mismatch's values: an element, or a Sink's token
            if isinstance(v, np.generic):
                return v.item()
            if isinstance(v, np.ndarray):  # a tile (BF16 ones as floats)
                return (v if v.dtype.kind in "biu" else v.astype(np.float64)).tolist()
            if isinstance(v, tuple):  # a Zip's pair
                return [plain(x) for x in v]
            return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)

        mismatch = None
        if self.mismatch is not None:
            m = self.mismatch
            mismatch = {"what": m.what, "index": list(m.index), "reader": m.reader,
                        "interpreter": plain(m.interpreter), "got": plain(m.got)}  # fmt: skip
        c = self.cosim
        return {
            "graph": self.graph,
            "ok": self.ok,
            "config": json.loads(json.dumps(dataclasses.asdict(self.config))),  # tuples: lists
            "pattern": self.pattern,
            "outputs": self.outputs,
            "sinks": self.sinks,
            "rtl_cycles": self.rtl_cycles,
            "rtl_profile": {
                "cycles": self.rtl_profile_cycles,
                "error": error(self.rtl_profile_cycles),
            },
            "paper_profile": {"cycles": self.paper_cycles, "error": error(self.paper_cycles)},
            "mismatch": mismatch,
            "divergence": None if self.divergence is None else dataclasses.asdict(self.divergence),
            "compared_streams": self.compared_streams,
            "flags": [list(f) for f in self.flags],
            "rtl_error": self.rtl_error,
            "folder": None if c is None else str(c.folder),
            "build_s": None if c is None else c.build_s,
            "run_s": None if c is None else c.run_s,
        }

    def __str__(self) -> str:
        what = ", ".join([*self.outputs, *(f"sink {s}" for s in self.sinks)]) or "nothing"
        lines = [f"validation of graph '{self.graph}' (AXI pattern {self.pattern})"]
        if self.mismatch is not None:
            lines.append(f"outputs   DIFFER: {self.mismatch}")
        elif self.rtl_cycles is None:
            lines.append(f"outputs   interpreter = paper profile = rtl profile ({what}); no RTL")
        else:
            lines.append(f"outputs   equal: interpreter = paper = rtl profile = RTL ({what})")
        if self.rtl_cycles is None:
            lines.append(
                f"cycles    rtl profile {self.rtl_profile_cycles}, paper profile "
                f"{self.paper_cycles}; RTL: none"
            )
        else:
            rtl = self.rtl_cycles

            def rel(c: int) -> str:
                return f"{(c - rtl) / rtl:+.1%}" if rtl else "n/a"

            lines.append(
                f"cycles    RTL {rtl} | rtl profile {self.rtl_profile_cycles} "
                f"({rel(self.rtl_profile_cycles)}) | paper profile {self.paper_cycles} "
                f"({rel(self.paper_cycles)})"
            )
            if self.pattern != "always":
                lines.append(
                    "          (the rtl profile models memories that never pause; this run paused)"
                )
            if self.divergence is not None:
                lines.append(f"streams   first divergence: {self.divergence}")
            elif self.compared_streams:
                lines.append(
                    f"streams   all {self.compared_streams} queues: the same handshake cycles in "
                    "the rtl profile and the RTL"
                )
            errors = ", ".join(f"{n} ({f})" for n, f in self.flags if f != "overflow")
            over = ", ".join(n for n, f in self.flags if f == "overflow")
            lines.append(f"flags     {errors or 'none'}")
            if over:
                lines.append(
                    f"overflow  {over}: results wrapped or saturated (as the interpreter's "
                    "numerics do; functions(config, overflow='raise') stops at the first)"
                )
            c = self.cosim
            if c is not None:
                built = f"built in {c.build_s:.0f} s" if c.build_s else "cached build"
                lines.append(f"RTL run   {built}, ran in {c.run_s:.1f} s; files: {c.folder}")
        if self.rtl_error is not None:
            lines.append("RTL       " + self.rtl_error.replace("\n", "\n          "))
        lines.append("verdict   " + ("OK" if self.ok else "NOT OK"))
        return "\n".join(lines)


def _first_difference(want: np.ndarray, got: np.ndarray) -> tuple[tuple[int, ...], Any, Any]:
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape:
        return (), f"shape {list(want.shape)}", f"shape {list(got.shape)}"
    diff = np.argwhere(_bits(want) != _bits(got))
    index = tuple(int(i) for i in diff[0])
    return index, want[index].item(), got[index].item()


def _bits(x: Any) -> np.ndarray:
    """Floating-point arrays as their bit patterns (bit-exact comparison, NaNs included)."""
    x = np.asarray(x)
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        return x.view(f"uint{x.dtype.itemsize * 8}")
    return x


def same_values(a: Any, b: Any) -> bool:
    """Arrays equal bit for bit (shape, dtype kind and every element's bits)."""
    a, b = np.asarray(a), np.asarray(b)
    if (a.dtype.name == "bfloat16") != (b.dtype.name == "bfloat16"):
        return False
    return np.array_equal(_bits(a), _bits(b))


def _tokens_equal(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):  # a Zip's pairs, item by item
        return (
            isinstance(a, tuple)
            and isinstance(b, tuple)
            and len(a) == len(b)
            and all(_tokens_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if hasattr(a, "shape") or hasattr(b, "shape"):
        return same_values(a, b)
    return a == b


class _References:
    """The interpreter's runs a reader is compared with: with no EagerMerge, the one run; where
    EagerMerges choose by arrival, the run that replays the order the reader's own merges chose
    (``FixedOrder.from_selectors`` of each merge's ``sel`` stream), one run per distinct order.
    The simulators record every stream; the RTL shows a merge's order where its ``sel`` stream
    goes to a Sink, and is otherwise held to the rtl profile's order, which its queue trace is
    compared with (:func:`_divergence`). An order the interpreter cannot replay (a selector that
    is not one-hot, more chunks from an input than it has) gives the plain run, from which the
    reader's tokens then differ."""

    def __init__(
        self,
        graph: Graph,
        memory: Mapping[str, np.ndarray],
        inputs: Mapping[str, Any] | None,
        lowered: Graph,
        sink_streams: Mapping[str, str],
    ):
        from step_lang import ops

        self._run = (graph, memory, inputs)
        self._sink_streams = sink_streams
        self._sels = {
            n.name: n.outputs[1].name
            for n in lowered.nodes.values()
            if isinstance(n, ops.EagerMerge)
        }
        self._runs: dict[tuple, Any] = {}
        self.of({})  # the interpreter's run first: errors of the graph's data raise from it

    def of(self, streams: Mapping[str, list]) -> tuple[dict[str, np.ndarray], dict[str, list]]:
        """The reference tensors and Sink tokens for a reader whose run recorded ``streams``
        (stream name to tokens)."""
        from step_lang import interpret
        from step_lang.arrival import FixedOrder
        from step_lang.errors import StepError

        graph, memory, inputs = self._run
        try:
            orders = {
                merge: FixedOrder.from_selectors(streams[sel])
                for merge, sel in self._sels.items()
                if sel in streams
            }
            key = tuple((merge, tuple(o.order)) for merge, o in sorted(orders.items()))
            if key not in self._runs:
                self._runs[key] = interpret(graph, memory, inputs=inputs, merge_policy=orders)
        except StepError:
            if not streams:  # the plain run: the graph's or its data's error
                raise
            key = ()
        ref = self._runs[key]
        sinks = {s: list(ref.streams[name]) for s, name in self._sink_streams.items()}
        return ref.memory, sinks


def _compare(
    reader: str,
    outputs: list[str],
    want: Mapping[str, np.ndarray],
    want_sinks: Mapping[str, list],
    got: Mapping[str, np.ndarray],
    sinks: Mapping[str, list] | None = None,
) -> Mismatch | None:
    for name in outputs:
        if not same_values(want[name], got[name]):
            index, w, g = _first_difference(want[name], got[name])
            return Mismatch(name, index, w, g, reader)
    for name, toks in (sinks or {}).items():
        ref = want_sinks.get(name, [])
        for i in range(max(len(ref), len(toks))):
            w = ref[i] if i < len(ref) else "no token"
            g = toks[i] if i < len(toks) else "no token"
            if i >= len(ref) or i >= len(toks) or not _tokens_equal(w, g):
                return Mismatch(f"sink {name}", (i,), w, g, reader)
    return None


def _divergence(
    graph: Graph, sends: Mapping[str, list[float]], trace: Mapping[str, Any]
) -> tuple[StreamDivergence | None, int]:
    """The earliest differing queue entry between the simulator's ``sends`` and the RTL's
    per-queue handshake ``trace``, and how many streams were compared."""
    from step_lang.passes import lower

    lowered = lower(graph)
    producer = {s.name: n.name for n in lowered.nodes.values() for s in n.outputs}
    order = {s: i for i, s in enumerate(producer)}
    rtl = {
        info["stream"]: (info["consumer"], info["push"])
        for info in trace.values()
        if isinstance(info, dict) and "stream" in info
    }
    found = []
    for stream, (consumer, pushes) in rtl.items():
        if stream not in sends:
            continue
        sim = [round(t) for t in sends[stream]]
        for i in range(max(len(sim), len(pushes))):
            a = sim[i] if i < len(sim) else None
            b = pushes[i] if i < len(pushes) else None
            if a != b:
                when = min(c for c in (a, b) if c is not None)
                found.append((when, order.get(stream, 0), stream, consumer, i, a, b))
                break
    compared = sum(1 for s in rtl if s in sends)
    if not found:
        return None, compared
    _, _, stream, consumer, i, a, b = min(found)
    return (
        StreamDivergence(
            stream, producer.get(stream, "?"), consumer, i, a, b, len(found), compared
        ),
        compared,
    )


def validate(
    graph: Graph,
    memory: Mapping[str, np.ndarray] | None = None,
    *,
    inputs: Mapping[str, Any] | None = None,
    config: HwConfig | None = None,
    pattern: str = "always",
    seed: int = 0,
    waves: bool = False,
    watchdog: int = 20000,
    tag: str = "validate",
    quiet: bool = False,
    tier: str = "axi",
    memory_model: MemoryModel | None = None,
) -> ValidationReport:
    """Run ``graph`` on ``memory`` (off-chip tensors by name) and ``inputs`` (Source tokens) in
    the interpreter, the simulator (``paper`` and ``rtl`` profiles) and a Verilator
    co-simulation, and compare them (module docstring).

    ``config`` is the hardware's (``HwConfig``: element type, tile size, queue depth, ...;
    default ``HwConfig()`` in the graph's number format, :func:`step_hw.config.config_for`);
    ``pattern`` and ``seed`` the co-simulation's AXI back-pressure (``always``, ``periodic``,
    ``random``); ``waves=True`` also writes a waveform (``report.folder / "dump.fst"``);
    ``watchdog``, ``tag``, ``tier`` (``axi`` or ``fast``) and ``memory_model`` (a
    :class:`~step_hw.memory_model.MemoryModel`, fast tier; the rtl profile is configured with
    it) as for :func:`step_hw.cosim.run`; ``quiet=True`` prints nothing
    while it builds and runs. Every argument is checked first, as :func:`~step_hw.cosim.run`
    checks its own (:mod:`.arguments`), before the interpreter runs. Errors of the graph or its
    data (a ``StepError``) raise; a graph without hardware, or a co-simulation that fails, gives
    a report with ``rtl_error`` set.
    """
    from .arguments import check_arguments

    # every argument before any work (the interpreter, two simulations, a build)
    checked = check_arguments(
        "validate", graph, memory, inputs=inputs, config=config, pattern=pattern, seed=seed,
        watchdog=watchdog, tag=tag, tier=tier, memory_model=memory_model,
        flags={"waves": waves, "quiet": quiet},
    )  # fmt: skip
    memory = checked.memory

    from sim import PaperProfile, simulate
    from sim.profiles import RtlProfile
    from step_hw.config import config_for
    from step_lang.errors import StepTypeError, StepValueError
    from step_lang.passes import lower

    config = config or config_for(graph)
    outputs = output_tensors(graph)
    sinks = sink_nodes(graph)
    lowered = lower(graph)
    sink_streams = {s: lowered.nodes[s].inputs[0].name for s in sinks}
    reference = _References(graph, memory, inputs, lowered, sink_streams)
    # The paper's model with this hardware's rates and memory, as `make validate` runs it.
    model = memory_model or MemoryModel.axi_ram()
    paper_profile = PaperProfile.for_rtl(config, model, graph=graph)
    paper = simulate(graph, memory, profile=paper_profile, inputs=inputs)
    profile = RtlProfile.for_memory(model, config)
    rtlsim = simulate(graph, memory, profile=profile, inputs=inputs, trace=True)
    report = ValidationReport(
        graph=graph.name,
        config=config,
        pattern=pattern,
        outputs=outputs,
        sinks=sinks,
        paper_cycles=paper.cycles,
        rtl_profile_cycles=rtlsim.cycles,
    )

    def sinks_of(result: Any) -> dict[str, list]:
        return {s: list(result.streams.get(name, [])) for s, name in sink_streams.items()}

    report.mismatch = _compare(
        "paper profile", outputs, *reference.of(paper.streams), paper.memory, sinks_of(paper)
    ) or _compare(
        "rtl profile", outputs, *reference.of(rtlsim.streams), rtlsim.memory, sinks_of(rtlsim)
    )
    try:
        got = run(graph, memory, inputs=inputs, config=config, pattern=pattern, seed=seed,
                  waves=waves, watchdog=watchdog, trace=True, tag=tag, quiet=quiet, tier=tier,
                  memory_model=memory_model)  # fmt: skip
    except (StepTypeError, StepValueError) as exc:  # an operator or a type without hardware
        report.rtl_error = f"not elaborated: {exc}"
        return report
    except CosimError as exc:
        report.rtl_error = exc.report or str(exc)
        return report
    report.cosim = got
    report.rtl_cycles = got.cycles
    report.flags = list(got.flags)
    # The RTL's merge orders where a Sink shows them, else the rtl profile's (see _References).
    seen = {**rtlsim.streams, **{sink_streams[s]: toks for s, toks in got.sinks.items()}}
    report.mismatch = (
        _compare("RTL", outputs, *reference.of(seen), got.outputs, got.sinks) or report.mismatch
    )
    report.divergence, report.compared_streams = _divergence(graph, rtlsim.sends, got.trace or {})
    return report
