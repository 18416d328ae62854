"""The ``step`` command: metrics, simulation, graphs, sweeps and the paper's experiments."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
from collections.abc import Sequence

from sim.sizing import NUMBER_OPTIONS
from step_hw.cosim.arguments import SEED_MAX, TIERS, WATCHDOG_MIN
from step_hw.memory_model import PRESETS
from step_hw.patterns import PATTERNS
from step_hw.payload import TileSizeError
from step_lang.errors import StepError

from .numbers import int_rule, number_rule, read_int, read_number
from .registry import EXAMPLES, UsageError, example, parse_params
from .userfile import is_graph_file

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are the command's one line, ``step: error: ...``."""

    def error(self, message: str):
        self.exit(2, f"step: error: {message}\n")


def _number(kind: type, low: float, high: float | None = None, note: str = ""):
    """An argparse ``type`` that refuses values of the wrong type or outside ``[low, high]``."""
    what = "an integer" if kind is int else "a number"
    read, rule = (read_int, int_rule) if kind is int else (read_number, number_rule)

    def parse(text: str):
        value = read(text)  # stepcli.numbers
        if value is None:
            raise argparse.ArgumentTypeError(f"must be {rule(text)}, not {text!r}")
        value = kind(value)
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must be {what} {bound}{note}, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


_WORKERS = _number(int, 1, 1024)


def _add_example(p: argparse.ArgumentParser) -> None:
    p.add_argument("example", help=f"one of: {', '.join(EXAMPLES)}; or path/to/file.py:function")
    p.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="set a parameter of the example (repeatable); see `step list`")  # fmt: skip


def _load(args) -> tuple:
    if is_graph_file(args.example) and getattr(args, "param", None):
        raise UsageError(f"{args.example}: a graph file takes no -p parameters")
    ex = example(args.example)
    params = ex.params(parse_params(getattr(args, "param", [])))
    graph = ex.build(params)
    hw_tile = getattr(args, "hw_tile", None)
    if hw_tile is not None:  # hierarchical tiling: the same layer on hardware-size tiles
        from .hardware import hw_tiled

        graph = hw_tiled(graph, hw_tile)
    return ex, params, graph


def _hw_tile(text: str) -> tuple[int, int]:
    """``--hw-tile ROWSxCOLS``: positive integers (:func:`stepcli.hardware.parse_hw_tile`)."""
    from .hardware import parse_hw_tile

    try:
        return parse_hw_tile(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_hw_tile(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw-tile", type=_hw_tile, metavar="ROWSxCOLS",
                   help="rewrite the graph onto hardware tiles of this size first "
                   "(hierarchical tiling, docs/hierarchical_tiling.md)")  # fmt: skip


def _add_hw(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw", action="append", default=[], metavar="KEY=VALUE",
                   help="a graph file's hardware: set an HwConfig parameter (repeatable; "
                   "lanes=64, queue_depth=2, axi_ports=1, ...; stepcli/hardware.py)")  # fmt: skip


def _file_config(args, graph):
    """The hardware of a graph file: ``--hw`` settings, ``--hw-tile``'s tile, the graph's
    number format (:mod:`stepcli.hardware`)."""
    from .hardware import file_config, hw_settings

    return file_config(graph, hw_settings(args.hw), args.hw_tile)


def _load_on_hardware(args) -> tuple:
    """A graph file, rewritten by ``--hw-tile`` if given, and the hardware it is built for:
    ``(example, params, graph, config)``."""
    if args.schedule:
        raise UsageError("--schedule picks a hardware-size example's schedule, not a file's")
    ex, params, graph = _load(args)
    return ex, params, graph, _file_config(args, graph)


def _no_hardware_options(args, what: str) -> None:
    """A hardware-size example is built for its own fixed hardware: no ``--hw-tile``/``--hw``."""
    if args.hw_tile or args.hw:
        raise UsageError(f"{what}; --hw-tile and --hw set the hardware of a graph file")


def cmd_list(args) -> None:
    for ex in EXAMPLES.values():
        print(f"{ex.name}: {ex.help}")
        print("  " + ", ".join(f"{k}={v!r}" for k, v in ex.defaults.items()))
        for key, why in ex.inapplicable(dict(ex.defaults)).items():
            print(f"  (at these defaults {key} does not apply {why})")


def cmd_metrics(args) -> None:
    from step_lang import metrics

    ex, params, graph = _load(args)
    m = metrics(graph, args.convention)
    if args.evaluate:
        m = m.evaluate(ex.dims(params))
    print(m.table(by_kind=args.by_kind))


def cmd_sim(args) -> None:
    from sim import simulate, write_trace

    if args.hardware:  # the `make rtl` graph with the timing of the generated RTL
        from sim.profiles import RtlProfile

        from .sizing import hardware_case

        if is_graph_file(args.example):  # one's own graph on the hardware it is built for
            ex, params, graph, config = _load_on_hardware(args)
            profile = RtlProfile.for_memory(_memory_model(args.memory), config)
            result = simulate(graph, ex.memory(params, True), profile=profile, inputs=ex.inputs,
                              functional=args.functional, trace=bool(args.trace))  # fmt: skip
        else:
            if args.param or args.hw_tile or args.hw:
                raise UsageError(
                    "--hardware simulates the fixed hardware-size graph; it takes no -p, "
                    "--hw-tile or --hw"
                )
            graph, (memory,) = hardware_case(args.example, args.schedule)
            profile = RtlProfile.for_memory(_memory_model(args.memory))
            result = simulate(graph, memory, profile=profile, functional=args.functional,
                              trace=bool(args.trace))  # fmt: skip
    else:
        if args.schedule:
            raise UsageError("--schedule picks a hardware-size schedule; use -p without --hardware")
        if args.hw:
            raise UsageError("--hw sets the hardware of --hardware; add --hardware")
        if args.memory != "axi_ram":
            raise UsageError(f"--memory {args.memory} is the hardware's memory; add --hardware")
        ex, params, graph = _load(args)
        result = simulate(graph, ex.memory(params, args.functional), profile=ex.profile(params),
                          functional=args.functional, trace=bool(args.trace),
                          inputs=ex.inputs)  # fmt: skip
    print(result.summary())
    if args.trace:
        print(f"trace: {write_trace(result, args.trace)}")
    if args.json:
        row = {"cycles": result.cycles, "offchip_bytes": result.offchip_bytes, "flops": result.flops,
               "compute_utilization": result.compute_utilization}  # fmt: skip
        print(json.dumps(row))


def cmd_graph(args) -> None:
    from step_lang.passes import lower

    from .svg import to_svg

    _, _, graph = _load(args)

    graph = lower(graph)  # the graph the readers run: fan-out as explicit Broadcast nodes
    out = pathlib.Path(args.output or f"build/graphs/{graph.name}.dot")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(graph.to_dot())
    svg = out.with_suffix(".svg")
    svg.write_text(to_svg(graph))
    print(f"wrote {out} and {svg}")


def cmd_rtl(args) -> None:
    from step_hw import rtl

    if is_graph_file(args.example):  # one's own graph, at the size it was written
        from step_hw.elaborate import write

        _, _, graph = _load(args)
        stem = pathlib.Path(args.output) / graph.name
        stem.parent.mkdir(parents=True, exist_ok=True)
        write(graph, str(stem), _file_config(args, graph))
        print(f"wrote {stem}.v and {stem}.json")
        return
    if args.param or args.hw_tile or args.hw:
        raise UsageError(
            "step rtl builds each example at its fixed hardware size; it takes no -p, "
            "--hw-tile or --hw (give a graph file for those)"
        )
    if rtl.main([args.example], out=args.output) != 0:
        raise UsageError(f"no Verilog written for {args.example}")


def _hw_config(graph):
    """The hardware configuration of a graph's number format (``HwConfig()``, or BF16 for a
    graph built with ``numerics.functions(BF16_CONFIG)``)."""
    from step_hw.config import config_for

    try:
        return config_for(graph)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cmd_validate(args) -> int:
    from step_hw.cosim import validate

    if is_graph_file(args.example):
        ex, params, graph, config = _load_on_hardware(args)
        memory, inputs = ex.memory(params, True), ex.inputs
    else:
        from .sizing import hardware_case

        _no_hardware_options(args, f"{args.example} is built for its fixed hardware size")
        graph, (memory,) = hardware_case(args.example, args.schedule)
        inputs, config = None, _hw_config(graph)
    model = None  # the axi tier's RAM
    if args.memory != "axi_ram" or args.tier == "fast":
        if args.tier != "fast":
            raise UsageError(
                f"--memory {args.memory} needs --tier fast (the axi tier's RAM is axi_ram)"
            )
        model = _memory_model(args.memory)  # the fast tier's axi_ram too
    sized = None
    if args.size_queues:  # the depths `step size-queues --hardware` picks, on this memory
        from sim.sizing import queue_bits

        from .sizing import size_for_hardware

        sizing = size_for_hardware(graph, [memory], config, inputs=inputs, memory_model=model,
                                   uniform=False)  # fmt: skip
        graph.queue_depths.update(sizing.depths)  # the graph this command built, not a user's
        sized = sizing.to_json()
        print(f"queues    sized: {queue_bits(sizing.bits, sizing.depths):,} bits (default depths "
              f"{queue_bits(sizing.bits, sizing.default_depths):,}); rtl profile "
              f"{sizing.cycles_sized} cycles (default depths {sizing.cycles_default})")  # fmt: skip
    report = validate(graph, memory, inputs=inputs, config=config, pattern=args.pattern,
                      seed=args.seed, waves=args.waves, watchdog=args.watchdog, tier=args.tier,
                      memory_model=model)  # fmt: skip
    print(report)
    if args.json:
        out = pathlib.Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**report.to_json(), "sizing": sized}, indent=1) + "\n")
        print(f"wrote {out}")
    return 0 if report.ok else 1


def cmd_sweep(args) -> None:
    from .sweep import load_spec, run_sweep

    spec = load_spec(args.spec)
    if args.output:
        spec = dataclasses.replace(spec, output=pathlib.Path(args.output))
    rows = run_sweep(spec, workers=args.workers, scheduler=args.scheduler, cluster=args.cluster,
                     progress=not args.quiet)  # fmt: skip
    print(f"{len(rows)} points in {spec.output}")


def cmd_size_queues(args) -> None:
    from .sizing import size_example, size_hardware

    options = {"images": args.images, "held_out": args.held_out, "margin": args.margin,
               "tolerance": args.tolerance}  # fmt: skip
    graph = config = None
    model = _memory_model(args.memory)
    if args.memory != "axi_ram" and not args.hardware:
        raise UsageError(f"--memory {args.memory} sizes for the hardware's memory; add --hardware")
    if args.hardware and is_graph_file(args.example):  # one's own graph, for its hardware
        from .sizing import one_image, size_for_hardware

        one_image(args.example, args.images, args.held_out)
        ex, params, graph, config = _load_on_hardware(args)
        report = size_for_hardware(graph, [ex.memory(params, True)], config, inputs=ex.inputs,
                                   memory_model=model, margin=args.margin,
                                   tolerance=args.tolerance)  # fmt: skip
    elif args.hardware:
        if args.param:
            raise UsageError("--hardware sizes the fixed hardware-size graph; it takes no -p")
        _no_hardware_options(args, "--hardware sizes the fixed hardware-size graph")
        report = size_hardware(args.example, args.schedule, memory_model=model, **options)
    else:
        if args.schedule:
            raise UsageError("--schedule picks a hardware-size schedule; use -p without --hardware")
        if args.verilog:
            raise UsageError("--verilog writes the hardware-size graph; add --hardware")
        if args.hw:
            raise UsageError("--hw sets the hardware of --hardware; add --hardware")
        report = size_example(args.example, parse_params(args.param), hw_tile=args.hw_tile,
                              **options)  # fmt: skip
    print(report.summary())
    if args.json:
        out = pathlib.Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report.to_json(), indent=1))
        print(f"wrote {out}")
    if args.verilog:
        if graph is None:
            from .sizing import hardware_case

            graph, _ = hardware_case(args.example, args.schedule)
            config = _hw_config(graph)
        _write_sized_verilog(graph, config, report.depths, pathlib.Path(args.verilog))


def _memory_model(preset: str):
    """The :class:`~step_hw.memory_model.MemoryModel` of a ``--memory`` preset."""
    from step_hw.memory_model import MemoryModel

    return getattr(MemoryModel, preset)()


def _write_sized_verilog(graph, config, depths, stem: pathlib.Path) -> None:
    """Write ``<stem>.v`` and ``<stem>.json`` of ``graph`` on hardware ``config`` with queue
    ``depths``."""
    from step_hw.elaborate import write

    graph.queue_depths.update(depths)
    stem.parent.mkdir(parents=True, exist_ok=True)
    write(graph, str(stem), config)
    print(f"wrote {stem}.v and {stem}.json (sized queues)")


def cmd_paper(args) -> None:
    from .paper import run_paper

    summary = run_paper(args.traces, args.output, workers=args.workers, only=args.only or None)
    for h in summary["headlines"]:
        # A headline without a paper figure (None) prints "-" rather than failing to format.
        paper, ours = ("-" if h[k] is None else h[k] for k in ("paper", "ours"))
        print(f"{h['figure']:<9} {h['name']:<95} paper {paper:>6}  ours {ours:>7}")
    print(f"wrote {args.output}/summary.json ({summary['wall_s']} s)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="step", description="Streaming Tensor Programs: cost, simulate, explore.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list the examples and their parameters")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("metrics", help="print the symbolic cost table of an example")
    _add_example(p)
    p.add_argument(
        "--convention", choices=("paper", "artifact"), default="paper", help="on-chip accounting"
    )
    p.add_argument(
        "--evaluate", action="store_true", help="substitute the dims of the example's inputs"
    )
    p.add_argument("--by-kind", action="store_true", help="one row per operator kind")
    _add_hw_tile(p)
    p.set_defaults(fn=cmd_metrics)

    p = sub.add_parser("sim", help="simulate an example and print a summary")
    _add_example(p)
    p.add_argument(
        "--functional", action="store_true", help="carry real data (default: timing only)"
    )
    p.add_argument("--trace", metavar="FILE", help="write a Perfetto/Chrome trace (JSON)")
    p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    p.add_argument(
        "--hardware",
        action="store_true",
        help="simulate the hardware-size graph (`make rtl`) with the rtl timing profile",
    )
    p.add_argument("--schedule", help="with --hardware: the schedule")  # fmt: skip
    p.add_argument("--memory", choices=PRESETS, default="axi_ram",
                   help="with --hardware: the memory (the presets of step validate --tier fast; "
                   "default axi_ram)")  # fmt: skip
    _add_hw_tile(p)
    _add_hw(p)
    p.set_defaults(fn=cmd_sim)

    p = sub.add_parser("graph", help="write an example's graph as DOT and SVG")
    _add_example(p)
    p.add_argument("-o", "--output", metavar="FILE.dot", help="default: build/graphs/<graph>.dot")
    _add_hw_tile(p)
    p.set_defaults(fn=cmd_graph)

    p = sub.add_parser(
        "rtl", help="write Verilog and a JSON description of an example at hardware size"
    )
    _add_example(p)
    p.add_argument("-o", "--output", default="build/rtl", help="output folder (default build/rtl)")
    _add_hw_tile(p)
    _add_hw(p)
    p.set_defaults(fn=cmd_rtl)

    p = sub.add_parser(
        "validate",
        help="interpret, simulate (paper and rtl profiles), co-simulate on Verilator and compare",
    )
    p.add_argument(
        "example",
        help="path/to/file.py:function (one's own graph), or a hardware-size example: "
        "swiglu, moe, attention",
    )
    p.add_argument("--schedule", help="a hardware-size example's schedule (see docs/simulator.md)")
    p.add_argument("--pattern", choices=PATTERNS, default="always",
                   help="AXI memories' back-pressure in co-simulation (default always)")  # fmt: skip
    p.add_argument("--seed", type=_number(int, 0, SEED_MAX), default=0, help="pause seed")
    p.add_argument("--waves", action="store_true", help="also write a waveform (dump.fst)")
    p.add_argument("--watchdog", type=_number(int, WATCHDOG_MIN), default=20000, metavar="CYCLES",
                   help="fail after this many cycles without progress (default 20000)")  # fmt: skip
    p.add_argument("--tier", choices=TIERS, default="axi",
                   help="co-simulation tier: cocotbext-axi memories (default) or the fast tier, "
                   "memory and streams inside the simulation (docs/cosim.md)")  # fmt: skip
    p.add_argument("--memory", choices=PRESETS, default="axi_ram",
                   help="the fast tier's memory model preset (default axi_ram)")  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--size-queues", action="store_true",
                   help="size every queue first (the rtl profile on this memory, as step "
                   "size-queues --hardware) and co-simulate with those depths")  # fmt: skip
    _add_hw_tile(p)
    _add_hw(p)
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("sweep", help="run a design-space sweep from a TOML spec")
    p.add_argument("spec", help="sweep spec (TOML); see stepcli/sweep.py")
    p.add_argument(
        "-o", "--output", help="CSV file (default: the spec's, or build/sweeps/<spec>.csv)"
    )
    p.add_argument(
        "-j",
        "--workers",
        type=_WORKERS,
        default=2,
        help="local processes or Dask workers (default 2)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="run on the Dask scheduler at ADDRESS"
    )
    where.add_argument("--cluster", choices=("local",), help="start a local Dask cluster")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser(
        "size-queues",
        help="size every queue of an example: the smallest depths that neither deadlock nor stall",
    )
    _add_example(p)
    p.add_argument(
        "--hardware",
        action="store_true",
        help="size the hardware-size graph (`make rtl`) with the rtl timing profile",
    )
    p.add_argument("--schedule", help="with --hardware: the schedule (see docs/simulator.md)")
    p.add_argument(
        "--images",
        type=_number(int, 1, 1024),
        default=1,
        metavar="N",
        help="representative memory images (seeds seed..seed+N-1; e.g. routings)",
    )
    p.add_argument(
        "--held-out",
        type=_number(int, 0, 1024),
        default=0,
        metavar="N",
        help="check the depths on N more images (the next seeds); those they miss are sized on too",
    )
    p.add_argument(
        "--margin",
        type=_number(float, NUMBER_OPTIONS["margin"], note=" (1: no margin)"),
        default=1.25,
        help="extra depth factor for data-dependent rates (default 1.25)",
    )
    p.add_argument(
        "--tolerance",
        type=_number(float, NUMBER_OPTIONS["tolerance"]),
        default=0.01,
        help="allowed slowdown against depth-1024 queues (default 0.01)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")  # fmt: skip
    p.add_argument(
        "--verilog",
        metavar="STEM",
        help="with --hardware: write STEM.v and STEM.json of the design with the sized queues",
    )
    p.add_argument("--memory", choices=PRESETS, default="axi_ram",
                   help="with --hardware: the memory to size for (the presets of step validate "
                   "--tier fast; default axi_ram)")  # fmt: skip
    _add_hw_tile(p)
    _add_hw(p)
    p.set_defaults(fn=cmd_size_queues)

    p = sub.add_parser("paper", help="run the paper's experiments (figures 9-15, 21)")
    p.add_argument(
        "--traces",
        metavar="DIR",
        help="trace folder (layout of ../shared/traces); default synthetic",
    )
    p.add_argument("-o", "--output", default="build/experiments", help="output folder")
    p.add_argument(
        "-j", "--workers", type=_WORKERS, default=2, help="parallel processes (default 2)"
    )
    from .paper import EXPERIMENTS

    p.add_argument("--only", action="append", choices=tuple(EXPERIMENTS),
                   help="run only this experiment (repeatable)")  # fmt: skip
    p.set_defaults(fn=cmd_paper)
    return parser


def _check_outputs(args) -> None:
    """Every file and folder the command will write, checked before any work
    (:mod:`stepcli.outputs`)."""
    from .outputs import output_file, output_folder, verilog_stem

    if isinstance(getattr(args, "json", None), str):  # `sim --json` is a flag
        output_file(args.json, "--json")
    if getattr(args, "trace", None) is not None:
        output_file(args.trace, "--trace")
    if getattr(args, "verilog", None) is not None:
        stem = verilog_stem(args.verilog, "--verilog")
        if isinstance(args.json, str) and os.path.abspath(args.json) == os.path.abspath(
            f"{stem}.json"
        ):
            raise UsageError(
                f"--json {args.json!r} is the description --verilog {args.verilog!r} writes; "
                "give another --json"
            )
    output = getattr(args, "output", None)
    if output is None:
        return
    if args.command in ("rtl", "paper"):
        output_folder(output, "-o")
    elif args.command == "graph":
        output_file(str(output_file(output, "-o", ".dot").with_suffix(".svg")), "-o")
    else:  # sweep: its CSV
        output_file(output, "-o")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    try:
        _check_outputs(args)
        rc = args.fn(args)  # None, or a command's own status (`validate`: 1 when not OK)
    except TileSizeError as exc:
        hint = " (--hw-tile ROWSxCOLS rewrites a graph file onto hardware tiles of that size)"
        print(
            f"step: error: {exc}{hint if is_graph_file(getattr(args, 'example', '')) else ''}",
            file=sys.stderr,
        )
        return 2
    except (UsageError, StepError, ValueError, OSError) as exc:
        print(f"step: error: {exc}", file=sys.stderr)
        return 2
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
