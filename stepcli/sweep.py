"""Design-space sweeps: a TOML spec of parameter grids, run on a local process pool or on Dask.

Spec::

    example = "moe"            # an example of `step list`
    functional = false          # timing-only by default
    output = "build/sweeps/qwen_tiles.csv"   # optional

    [fixed]                     # parameters common to every point
    model = "qwen"
    batch = 64

    [grid]                      # the cartesian product of these lists
    tiling = ["static"]
    tile_n = [8, 16, 32, 64]

A parameter that applies to some points only (``tile_n`` to static tiling) is swept in a grid
of its own: ``[[grid]]`` tables, whose products are run one after the other::

    [[grid]]
    tiling = ["static"]
    tile_n = [8, 16, 32, 64]

    [[grid]]
    tiling = ["dynamic"]

A graph file (``example = "mylayer.py:build"``) may instead sweep the hardware it runs on, with
the ``rtl`` profile: a ``[hardware]`` table of lists over ``HwConfig``'s integer settings,
``hw_tile`` (``"16x16"``: hierarchical tiling onto that tile) and ``memory`` (a ``MemoryModel``
preset), e.g. ``lanes = [16, 64]``, ``memory = ["axi_ram", "hbm"]``
(:func:`stepcli.hardware.run_hardware_point`).

Results are one CSV row per point. Points already in the output file are skipped, so an
interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import pathlib
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from .hardware import HARDWARE_RESULT_COLUMNS
from .numbers import read_number
from .registry import RESULT_COLUMNS, NotApplicable, UsageError, example, run_point

__all__ = ["SweepSpec", "load_spec", "run_sweep"]


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep specification."""

    example: str
    points: list[dict[str, Any]]
    functional: bool
    output: pathlib.Path
    #: the keys of the ``[hardware]`` grid (a graph file's hardware sweep), in each point too
    hardware_keys: tuple[str, ...] = ()


def load_spec(path: str | pathlib.Path) -> SweepSpec:
    """Read and check a sweep spec; raises :class:`UsageError` with the reason."""
    if not str(path).strip():
        raise UsageError("sweep spec: an empty path names no file")
    path = pathlib.Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read sweep spec {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read sweep spec {path}: not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None  # fmt: skip
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"sweep spec {path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(raw) - {"example", "functional", "output", "fixed", "grid", "hardware"})
    if unknown:
        raise UsageError(f"sweep spec {path}: unknown key(s) {', '.join(unknown)}")
    if "example" not in raw:
        raise UsageError(f"sweep spec {path}: missing 'example'")
    for key, kind, what in (
        ("example", str, "a string"),
        ("functional", bool, "true or false"),
        ("output", str, "a string (a CSV path)"),
        ("fixed", dict, "a table ([fixed])"),
        ("grid", (dict, list), "a table ([grid]) or tables ([[grid]])"),
        ("hardware", dict, "a table ([hardware])"),
    ):
        if key in raw and not isinstance(raw[key], kind):
            raise UsageError(f"sweep spec {path}: '{key}' must be {what}, not {raw[key]!r}")
    ex = example(raw["example"])
    if "hardware" in raw:
        return _hardware_spec(path, raw, ex)
    fixed = raw.get("fixed", {})
    grids = raw.get("grid", {})
    if isinstance(grids, dict):
        grids = [grids]
    elif not grids or not all(isinstance(g, dict) for g in grids):
        raise UsageError(
            f"sweep spec {path}: 'grid' must be a table ([grid]) or tables ([[grid]]), not {grids!r}"
        )
    points: list[dict[str, Any]] = []
    seen: dict[str, tuple[int, dict]] = {}  # a point's full parameters -> its grid and point
    for number, grid in enumerate(grids, start=1):
        table = "grid" if len(grids) == 1 else f"grid {number}"
        both = sorted(set(fixed) & set(grid))
        if both:
            raise UsageError(f"sweep spec {path}: {', '.join(both)} both fixed and in the {table}")
        _check_lists(path, table, grid)
        keys = list(grid)
        for combo in itertools.product(*(grid[k] for k in keys)):
            point = dict(fixed, **dict(zip(keys, combo, strict=True)))
            # unknown parameters and bad values fail here, before anything runs
            key = _key(ex.row(_params(path, ex, point)), ex.defaults)
            if key in seen:
                first_number, first = seen[key]
                raise UsageError(
                    f"sweep spec {path}: {table} lists one point twice: {first} and {point}"
                    if first_number == number
                    else f"sweep spec {path}: {table} repeats a point of grid {first_number}: {point}"
                )
            seen[key] = number, point
            points.append(point)
    return SweepSpec(raw["example"], points, bool(raw.get("functional", False)), _output(path, raw))


def _params(path: pathlib.Path, ex: Any, point: dict[str, Any]) -> dict[str, Any]:
    """The full parameters of ``point``, or a :class:`UsageError` naming the spec."""
    try:
        return ex.params(point)
    except NotApplicable as exc:
        raise UsageError(
            f"sweep spec {path}: {exc}, or sweep it in a [[grid]] table of the points it applies to"
        ) from None
    except UsageError as exc:
        raise UsageError(f"sweep spec {path}: {exc}") from None


def _check_lists(path: pathlib.Path, table: str, lists: dict[str, Any]) -> None:
    """Each entry of ``[table]`` is a non-empty list of distinct values (a value listed twice
    would run its points twice)."""
    for key, values in lists.items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"sweep spec {path}: {table}.{key} must be a non-empty list")
        seen: list[Any] = []
        for v in values:
            if any(v == w and type(v) is type(w) for w in seen):
                raise UsageError(f"sweep spec {path}: {table}.{key} lists {v!r} twice")
            seen.append(v)


def _output(path: pathlib.Path, raw: dict[str, Any]) -> pathlib.Path:
    """The spec's CSV (default ``build/sweeps/<spec name>.csv``)."""
    from .outputs import output_file

    text = raw.get("output", f"build/sweeps/{path.stem}.csv")
    if not text.strip():
        raise UsageError(f"sweep spec {path}: 'output' must name a CSV file, not {text!r}")
    return output_file(text, f"sweep spec {path}: output")


def _hardware_spec(path: pathlib.Path, raw: dict[str, Any], ex: Any) -> SweepSpec:
    """A graph file's hardware sweep: the product of the ``[hardware]`` lists, each point
    checked (:func:`stepcli.hardware.hardware_point`) before anything runs."""
    from .hardware import hardware_point
    from .userfile import is_graph_file

    if not is_graph_file(raw["example"]):
        raise UsageError(
            f"sweep spec {path}: [hardware] sweeps a graph file's hardware (example = "
            f"'path/to/file.py:function'); example '{raw['example']}' is built for its own"
        )
    if raw.get("fixed") or raw.get("grid"):
        raise UsageError(f"sweep spec {path}: a graph file has no parameters for [fixed] or [grid]")
    grid = raw["hardware"]
    if not grid:
        raise UsageError(
            f"sweep spec {path}: [hardware] is empty; list HwConfig settings, hw_tile or memory "
            'to sweep (e.g. memory = ["axi_ram"])'
        )
    _check_lists(path, "hardware", grid)
    keys = list(grid)
    points = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]
    graph = ex.build({})
    seen: dict[str, dict] = {}  # a point's hardware -> the point (16x16 and 016x16 are one)
    for p in points:
        try:
            config, memory, hw_tile = hardware_point(graph, p)
        except UsageError as exc:
            raise UsageError(f"sweep spec {path}: {exc}") from None
        key = repr((config, memory, hw_tile))
        if key in seen:
            raise UsageError(
                f"sweep spec {path}: [hardware] lists one point twice: {seen[key]} and {p}"
            )
        seen[key] = p
    return SweepSpec(raw["example"], points, bool(raw.get("functional", False)),
                     _output(path, raw), tuple(keys))  # fmt: skip


def _run_point(
    name: str, point: dict[str, Any], functional: bool, hardware_keys: tuple[str, ...]
) -> dict[str, Any]:
    """One point: an example's parameters (``run_point``), or a graph file's hardware."""
    if hardware_keys:
        from .hardware import run_hardware_point

        return run_hardware_point(name, point, functional)
    return run_point(name, point, functional)


def _key(row: dict[str, Any], params: Iterable[str]) -> str:
    """A point's identity: its parameters' values, a number by its value (``1``, ``1.0`` and a
    CSV's ``"1.0"`` are one point)."""
    return json.dumps({k: _canonical(row[k]) for k in sorted(params)})


def _canonical(value: Any) -> str:
    number = read_number(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return str(value)
    if isinstance(number, int) or number.is_integer():
        return str(int(number))
    return repr(float(number))


def _read_done(
    path: pathlib.Path, name: str, params: Iterable[str], ex: Any, results: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """The rows of an earlier run of this sweep in ``path``, by point. A file of another sweep
    (another example or graph file, a parameter column this sweep lacks or sets that the file
    lacks) is refused: its rows are not this sweep's points. A parameter that does not apply
    to a row's point is blanked as a new row would show it (a file written before such
    parameters were blanked holds e.g. ``tile_n=32`` on a dynamic row); the file is rewritten
    so if any was."""
    if not path.exists():
        return {}
    params = list(params)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except UnicodeDecodeError as exc:
        raise UsageError(f"sweep output {path} is not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start}); give another 'output' or remove the file") from None  # fmt: skip
    missing = [k for k in ["example", *params] if k not in header]
    extra = [k for k in header if k not in {"example", *params, *results}]
    other = sorted({r["example"] for r in rows} - {name}) if "example" in header else []
    for what, names in (("no column", missing), ("column", extra), ("rows of example", other)):
        if names:
            raise UsageError(
                f"sweep output {path} holds another sweep: it has {what} {', '.join(names)}; "
                "give another 'output' or remove the file"
            )
    blanked = False
    for row in rows:
        for key in ex.inapplicable({k: row[k] for k in ex.defaults}):
            blanked |= row[key] != ""
            row[key] = ""
    if blanked:
        _write_all(path, header, rows)
    return {_key(r, ["example", *params]): r for r in rows}


def _progress(done: int, total: int, started: float, stream=sys.stderr) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    rate = done / (time.perf_counter() - started + 1e-9)
    stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {rate:5.2f} points/s")
    if done == total:
        stream.write("\n")
    stream.flush()


def run_sweep(
    spec: SweepSpec,
    *,
    workers: int = 2,
    scheduler: str | None = None,
    cluster: str | None = None,
    progress: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every point not yet in ``spec.output``; return all rows in spec order.

    Runs on a local process pool of ``workers``, or on Dask: ``scheduler`` is the address of a
    running scheduler, ``cluster="local"`` starts a ``LocalCluster`` of ``workers`` workers.
    """
    ex = example(spec.example)
    hw = spec.hardware_keys
    params = [*ex.defaults, *hw]
    names = ["example", *params]
    # each point as its result row shows it (every parameter; those that do not apply empty)
    full = [{"example": spec.example, **ex.row(ex.params({k: v for k, v in p.items() if k not in hw})),
             **{k: p[k] for k in hw}} for p in spec.points]  # fmt: skip
    results = HARDWARE_RESULT_COLUMNS if hw else RESULT_COLUMNS
    done = _read_done(spec.output, spec.example, params, ex, results)
    todo = [p for p, f in zip(spec.points, full, strict=True) if _key(f, names) not in done]
    rows: dict[str, dict[str, Any]] = dict(done)
    started = time.perf_counter()
    if progress and todo:
        _progress(0, len(todo), started)

    def collect(results: Iterable[dict[str, Any]]) -> None:
        for i, row in enumerate(results, start=1):
            rows[_key(row, names)] = row
            _append(spec.output, row)
            if on_row:
                on_row(row)
            if progress:
                _progress(i, len(todo), started)

    if todo:
        if scheduler or cluster:
            collect(_dask(spec, todo, workers, scheduler, cluster))
        else:
            collect(_pool(spec, todo, workers))
    return [rows[_key(p, names)] for p in full]


def _pool(spec: SweepSpec, todo: list[dict], workers: int) -> Iterable[dict]:
    if workers <= 1:
        for p in todo:
            yield _run_point(spec.example, p, spec.functional, spec.hardware_keys)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(_run_point, spec.example, p, spec.functional, spec.hardware_keys)
            for p in todo
        ]
        for fut in as_completed(futures):
            yield fut.result()


def _dask(
    spec: SweepSpec, todo: list[dict], workers: int, scheduler: str | None, cluster: str | None
) -> Iterable[dict]:
    from dask.distributed import Client, LocalCluster
    from dask.distributed import as_completed as dask_completed

    if cluster not in (None, "local"):
        raise UsageError(
            f"--cluster takes 'local', not {cluster!r}; give a scheduler address with --scheduler"
        )
    local = (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        if cluster
        else None
    )
    try:
        with Client(local if local else scheduler) as client:
            futures = [
                client.submit(_run_point, spec.example, p, spec.functional, spec.hardware_keys,
                              pure=False)
                for p in todo
            ]  # fmt: skip
            for fut in dask_completed(futures):
                yield fut.result()
    finally:
        if local:
            local.close()


def _append(path: pathlib.Path, row: dict[str, Any]) -> None:
    """Add ``row`` to the CSV ``path``. A row with a column the file lacks (a file written
    before the column existed) rewrites the file with it, earlier rows empty there, so no value
    lands under another column's name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            if set(row) - set(header):
                rows = [*reader, row]
                _write_all(path, [*header, *(k for k in row if k not in header)], rows)
                return
        with path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=header).writerow(row)
        return
    _write_all(path, list(row), [row])


def _write_all(path: pathlib.Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    """``rows`` as the whole CSV ``path`` (a cell a row lacks is empty), written atomically."""
    from step_hw.paths import write_atomically

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=header, restval="")
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue())
