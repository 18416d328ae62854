"""The hardware one's own graph runs on, from the command line: ``--hw-tile`` and ``--hw``.

A graph file (``path/to/file.py:function``) is built for ``HwConfig()`` with the number format
of its functions (:func:`step_hw.config.config_for`) unless the command line says otherwise:

* ``--hw-tile ROWSxCOLS`` rewrites the graph onto hardware tiles of that size (hierarchical
  tiling, ``docs/hierarchical_tiling.md``) and builds the hardware for them: ``tile_rows`` and
  ``tile_cols`` are ``ROWS`` and ``COLS``;
* ``--hw KEY=VALUE`` (repeatable) sets an integer parameter of
  :class:`~step_hw.config.HwConfig`: ``lanes=64``, ``queue_depth=2``, ``axi_ports=1`` (or
  ``none``), ``tile_rows=8``, ... (:data:`HW_SETTINGS`).

The number format is the graph's (``elem_dtype``, ``acc_dtype``, ``frac_bits``: build the
functions with ``numerics.functions(config)``), and ``queue_capacity`` and ``geometry_bounds``
(one build for several depth settings or tilings) are Python-only; ``--hw`` refuses them. A
value ``HwConfig`` refuses is a one-line error naming the setting and the value.

A sweep spec's ``[hardware]`` table gives the same settings, ``hw_tile`` and a ``memory``
preset as lists (:data:`SWEEP_KEYS`); :func:`run_hardware_point` times one point of it with the
``rtl`` profile (``stepcli/sweep.py``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from step_hw.config import HwConfig, config_for

from .numbers import read_int
from .registry import UsageError

__all__ = [
    "HARDWARE_RESULT_COLUMNS",
    "HW_SETTINGS",
    "SWEEP_KEYS",
    "file_config",
    "hardware_point",
    "hw_settings",
    "hw_tiled",
    "parse_hw_tile",
    "run_hardware_point",
]

# Set by the graph's hardware functions (``numerics.functions(config)``), not by ``--hw``.
_FROM_THE_GRAPH = ("elem_dtype", "acc_dtype", "frac_bits")
# Settings of several runs on one build, given in Python (``HwConfig`` docstring).
_PYTHON_ONLY = ("queue_capacity", "geometry_bounds")
# Settings that may be ``None`` (``--hw axi_ports=none``: a port per memory operator).
_NONE_ALLOWED = ("axi_ports",)

#: The ``HwConfig`` parameters ``--hw KEY=VALUE`` sets, each an integer.
HW_SETTINGS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(HwConfig) if f.name not in _FROM_THE_GRAPH + _PYTHON_ONLY
)


#: The keys of a sweep spec's ``[hardware]`` table: the settings, ``hw_tile`` and ``memory``.
SWEEP_KEYS: tuple[str, ...] = (*HW_SETTINGS, "hw_tile", "memory")


#: The most digits of a ``--hw`` or ``--hw-tile`` integer (a guard against a typo's size; the
#: integers themselves are read by :func:`stepcli.numbers.read_int`).
_MAX_DIGITS = 9


def _hw_int(text: str) -> int | None:
    """``text`` as an integer of at most :data:`_MAX_DIGITS` digits, else ``None``."""
    return read_int(text) if len(text.lstrip("-")) <= _MAX_DIGITS else None


def parse_hw_tile(text: str) -> tuple[int, int]:
    """``ROWSxCOLS`` (``--hw-tile``) as two positive integers."""
    rows, sep, cols = text.partition("x") if isinstance(text, str) else ("", "", "")
    r, c = _hw_int(rows), _hw_int(cols)
    if not (sep and r is not None and c is not None and r > 0 < c):
        raise UsageError(
            f"must be ROWSxCOLS of positive integers of at most {_MAX_DIGITS} digits, e.g. "
            f"16x16, not {text!r}"
        )
    return r, c


def hw_tiled(graph: Any, hw_tile: tuple[int, int]) -> Any:
    """``graph`` rewritten onto ``hw_tile`` hardware tiles (``--hw-tile``,
    :func:`step_lang.hier_tiling.hier_tile`); a stream whose tiles it splits into smaller tiles
    than the hardware's (:func:`~step_lang.hier_tiling.uneven_splits`) gets a note line on
    stderr, so that a layer running on part of each hardware tile says so."""
    from step_lang.hier_tiling import hier_tile, uneven_splits

    tiled = hier_tile(graph, *hw_tile)
    for split in uneven_splits(graph, *hw_tile):
        print(f"step: note: --hw-tile {hw_tile[0]}x{hw_tile[1]}: {split.describe()}",
              file=sys.stderr)  # fmt: skip
    return tiled


def hw_settings(texts: Sequence[str], where: str = "--hw") -> dict[str, int | None]:
    """The ``--hw KEY=VALUE`` options as ``{key: value}``, each key a setting of
    :data:`HW_SETTINGS` given once and each value an integer (``none`` where allowed); errors
    start with ``where`` (the option, or a sweep's ``[hardware]``)."""
    settings: dict[str, int | None] = {}
    for text in texts:
        key, sep, raw = (part.strip() for part in text.partition("="))
        if not sep or not key:
            raise UsageError(f"{where} {text!r}: expected KEY=VALUE, e.g. lanes=64")
        if key in _FROM_THE_GRAPH:
            raise UsageError(
                f"{where} {key}: the number format is the graph's; build its functions with "
                "numerics.functions(config)"
            )
        if key in _PYTHON_ONLY:
            raise UsageError(f"{where} {key}: a run-time setting of one build, given in Python")
        if key not in HW_SETTINGS:
            raise UsageError(
                f"{where} {key}: HwConfig has no such setting; settings: {', '.join(HW_SETTINGS)}"
            )
        if key in settings:
            raise UsageError(f"{where} {key} given twice ({settings[key]} and {raw})")
        settings[key] = _value(key, raw, where)
    return settings


def _value(key: str, raw: str, where: str) -> int | None:
    if key in _NONE_ALLOWED and raw.lower() == "none":
        return None
    value = _hw_int(raw)
    if value is None:
        also = " or none" if key in _NONE_ALLOWED else ""
        raise UsageError(
            f"{where} {key} must be an integer of at most {_MAX_DIGITS} digits{also}, not {raw!r}"
        )
    return value


def file_config(
    graph: Any,
    settings: Mapping[str, int | None],
    hw_tile: tuple[int, int] | None,
    where: str = "--hw",
) -> HwConfig:
    """The hardware of a graph file: ``HwConfig(**settings)`` with the tile of ``--hw-tile``
    (``hw_tile``) and the number format of ``graph``'s functions; errors start with ``where``."""
    settings = dict(settings)
    if hw_tile is not None:
        for key, value in zip(("tile_rows", "tile_cols"), hw_tile, strict=True):
            if settings.get(key, value) != value:
                raise UsageError(
                    f"{where} {key}={settings[key]} contradicts "
                    f"{'--hw-tile' if where == '--hw' else 'hw_tile'} {hw_tile[0]}x{hw_tile[1]}"
                )
            settings[key] = value
    try:
        base = HwConfig(**settings)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    try:
        return config_for(graph, base)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def hardware_point(graph: Any, point: Mapping[str, Any]) -> tuple[HwConfig, Any, tuple | None]:
    """One point of a sweep's ``[hardware]`` grid (:data:`SWEEP_KEYS`) for ``graph``: its
    hardware, its memory model (a ``MemoryModel`` preset, default ``axi_ram``) and its
    hardware tile (``hw_tile``, or ``None``); a bad key or value raises :class:`UsageError`."""
    from step_hw.memory_model import PRESETS, MemoryModel

    unknown = sorted(set(point) - set(SWEEP_KEYS))
    if unknown:
        raise UsageError(
            f"[hardware] has no key {', '.join(unknown)}; keys: {', '.join(SWEEP_KEYS)}"
        )
    try:
        hw_tile = parse_hw_tile(point["hw_tile"]) if "hw_tile" in point else None
    except UsageError as exc:
        raise UsageError(f"[hardware] hw_tile {exc}") from None
    memory = point.get("memory", "axi_ram")
    if memory not in PRESETS:
        raise UsageError(f"[hardware] memory must be one of {', '.join(PRESETS)}, not {memory!r}")
    for key, value in point.items():  # TOML's own integers ("64" as text would pass as 64)
        if key in HW_SETTINGS and not (
            (isinstance(value, int) and not isinstance(value, bool))
            or (key in _NONE_ALLOWED and value == "none")
        ):
            also = ' or "none"' if key in _NONE_ALLOWED else ""
            raise UsageError(f"[hardware] {key} must be an integer{also}, not {value!r}")
    texts = [f"{k}={v}" for k, v in point.items() if k in HW_SETTINGS]
    config = file_config(graph, hw_settings(texts, "[hardware]"), hw_tile, "[hardware]")
    return config, getattr(MemoryModel, memory)(), hw_tile


#: The measured figures of a :func:`run_hardware_point` row, after ``example`` and the point
#: (``hw_tile_fill`` with ``hw_tile`` only).
HARDWARE_RESULT_COLUMNS = (
    "cycles", "offchip_bytes", "flops", "compute_util", "sim_wall_s", "hw_tile_fill",
)  # fmt: skip


def run_hardware_point(
    target: str, point: Mapping[str, Any], functional: bool = False
) -> dict[str, Any]:
    """Simulate the graph file ``target`` on one hardware ``point`` (:func:`hardware_point`)
    with the ``rtl`` profile; the row holds the point and the measured figures (with
    ``hw_tile``, ``hw_tile_fill``: the part of a hardware tile the least-filled tiles fill, 1
    unless some stream's tiles are not a whole number of hardware tiles,
    :func:`step_lang.hier_tiling.uneven_splits`)."""
    import time

    from sim import simulate
    from sim.profiles import RtlProfile

    from .registry import example

    ex = example(target)
    graph = ex.build({})
    config, memory_model, hw_tile = hardware_point(graph, point)
    fill = {}
    if hw_tile is not None:  # the note of --hw-tile as a column: the least-filled hardware tile
        from step_lang.hier_tiling import hier_tile, uneven_splits

        fill = {"hw_tile_fill": min([s.use for s in uneven_splits(graph, *hw_tile)], default=1)}
        graph = hier_tile(graph, *hw_tile)
    t0 = time.perf_counter()
    result = simulate(graph, ex.memory({}, True), inputs=ex.inputs, functional=functional,
                      profile=RtlProfile.for_memory(memory_model, config))  # fmt: skip
    return {
        "example": target,
        **point,
        "cycles": result.cycles,
        "offchip_bytes": result.offchip_bytes,
        "flops": result.flops,
        "compute_util": round(result.compute_utilization, 6),
        "sim_wall_s": round(time.perf_counter() - t0, 3),
        **{k: round(v, 6) for k, v in fill.items()},
    }
